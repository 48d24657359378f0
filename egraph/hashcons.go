package egraph

// hashcons maps canonical node content to the one stored node that has it.
// It is an open-addressing table with linear probing over node ids; the node
// content lives in the graph's arena, so a slot is eight bytes. Deletion
// shifts later entries back instead of leaving tombstones, because rebuilding
// deletes and reinserts every node whose children change.
type hashcons struct {
	slots []slot
	n     int
}

type slot struct {
	hash uint32 // low bits of the node hash; also gives the home slot
	node uint32 // NodeID+1; zero marks an empty slot
}

func (t *hashcons) mask() uint32 { return uint32(len(t.slots) - 1) }

// lookup returns the node with the given content, or false.
func (t *hashcons) lookup(g *Graph, h uint64, op Symbol, p Payload, kids []ClassID) (NodeID, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	m := t.mask()
	h32 := uint32(h)
	for i := h32 & m; ; i = (i + 1) & m {
		s := t.slots[i]
		if s.node == 0 {
			return 0, false
		}
		if s.hash == h32 && g.sameContent(NodeID(s.node-1), op, p, kids) {
			return NodeID(s.node - 1), true
		}
	}
}

// insert adds a node known to be absent.
func (t *hashcons) insert(h uint64, id NodeID) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.put(uint32(h), id)
	t.n++
}

func (t *hashcons) put(h32 uint32, id NodeID) {
	m := t.mask()
	i := h32 & m
	for t.slots[i].node != 0 {
		i = (i + 1) & m
	}
	t.slots[i] = slot{hash: h32, node: uint32(id) + 1}
}

func (t *hashcons) grow() {
	old := t.slots
	size := 2 * len(old)
	if size < 64 {
		size = 64
	}
	t.slots = make([]slot, size)
	for _, s := range old {
		if s.node != 0 {
			t.put(s.hash, NodeID(s.node-1))
		}
	}
}

// remove deletes the entry for node id, whose content hashes to h. It reports
// whether the entry was there.
func (t *hashcons) remove(h uint64, id NodeID) bool {
	if len(t.slots) == 0 {
		return false
	}
	m := t.mask()
	i := uint32(h) & m
	for {
		s := t.slots[i]
		if s.node == 0 {
			return false
		}
		if s.node == uint32(id)+1 {
			break
		}
		i = (i + 1) & m
	}
	// Backward-shift deletion: move each later entry of the probe run into
	// the hole unless its home slot lies cyclically after the hole.
	j := i
	for {
		j = (j + 1) & m
		s := t.slots[j]
		if s.node == 0 {
			break
		}
		home := s.hash & m
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
	return true
}
