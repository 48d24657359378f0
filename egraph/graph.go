package egraph

import (
	"fmt"
	"slices"
)

// Graph is the structure of an e-graph without its analysis data: the
// union-find, the node arena, the hash-cons and the classes. EGraph embeds
// it; code that only reads structure (extraction, matching, serialization)
// takes a *Graph and so works on every e-graph whatever its analysis.
//
// After Rebuild, every stored node's children are canonical, every class
// lists each of its distinct nodes once, sorted by operator, and no two
// classes hold congruent nodes. Between a mutation and the next Rebuild the
// structure is valid but not congruence-closed, and the per-operator index is
// stale.
type Graph struct {
	parent []ClassID // union-find; parent[i] == i for canonical ids
	nodes  []nodeRec
	kids   []ClassID // children of nodes with more than inlineKids, addressed by nodeRec.kid[0]
	table  hashcons
	// Classes live in a pool whose slots are reused when a class is merged
	// away: most classes a saturation run creates are merged soon after,
	// and a record per id ever handed out would cost more than the nodes.
	slot  []uint32 // indexed by ClassID; meaningful for canonical ids
	pool  []eclass
	free  []uint32
	live  int // canonical classes
	alive int // nodes not dropped as duplicates

	pending []NodeID  // nodes whose children may have stopped being canonical
	dirty   []ClassID // classes whose node lists need sorting
	byOp    [][]ClassID
	clean   bool   // no mutation since the last Rebuild
	stamp   uint32 // count of rebuilds that changed something
	// moved[n] is the stamp of the rebuild after which node n last moved
	// into another class because its class was merged into that one.
	moved []uint32

	prov provenance

	// singles hands out the one-element node lists of new classes from
	// shared chunks, so that adding a node does not allocate a list of its
	// own; a list that grows past one element moves out by append.
	singles []NodeID
}

type eclass struct {
	nodes   []NodeID
	parents []NodeID // nodes that have this class as a child (may hold stale or dead ids)
	// stamp is the Graph.stamp of the rebuild after which the class's node
	// list last changed (a node added, merged in or recanonicalized), for
	// incremental matching.
	stamp uint32
	dirty bool
}

// Find returns the canonical id of the class id belongs to.
func (g *Graph) Find(id ClassID) ClassID {
	p := g.parent
	for p[id] != id {
		p[id] = p[p[id]] // path halving
		id = p[id]
	}
	return id
}

// find is Find without path compression: it does not write, so concurrent
// searches may call it.
func (g *Graph) find(id ClassID) ClassID {
	for g.parent[id] != id {
		id = g.parent[id]
	}
	return id
}

// NumClasses is the number of distinct e-classes.
func (g *Graph) NumClasses() int { return g.live }

// NumNodes is the number of distinct e-nodes. Between a mutation and the
// next Rebuild it can count nodes that rebuilding will find congruent.
func (g *Graph) NumNodes() int { return g.alive }

// NumIDs is one more than the largest ClassID handed out, for callers that
// index arrays by class id.
func (g *Graph) NumIDs() int { return len(g.parent) }

// NumNodeIDs is one more than the largest NodeID handed out.
func (g *Graph) NumNodeIDs() int { return len(g.nodes) }

// Classes returns the canonical class ids in increasing order.
func (g *Graph) Classes() []ClassID {
	out := make([]ClassID, 0, g.live)
	for id, p := range g.parent {
		if p == ClassID(id) {
			out = append(out, ClassID(id))
		}
	}
	return out
}

// ClassNodes returns the nodes of a class. The slice belongs to the e-graph:
// read it, do not keep it past the next mutation.
func (g *Graph) ClassNodes(id ClassID) []NodeID {
	return g.cls(g.find(id)).nodes
}

// cls is the record of a canonical class.
func (g *Graph) cls(c ClassID) *eclass { return &g.pool[g.slot[c]] }

// Node returns a stored node. Its Children alias the e-graph's arena: read
// them, do not modify or keep them past the next mutation.
func (g *Graph) Node(id NodeID) Node {
	r := &g.nodes[id]
	return Node{Op: r.op, Payload: r.payload, Children: r.kidsIn(g.kids)}
}

// NodeClass returns the canonical class a node belongs to.
func (g *Graph) NodeClass(id NodeID) ClassID { return g.find(g.nodes[id].class) }

// NodeOrigin returns the class id a node was added with, before any union:
// Explain(NodeOrigin(a), NodeOrigin(b)) lists the unions that made two
// nodes of one class equal.
func (g *Graph) NodeOrigin(id NodeID) ClassID { return g.nodes[id].class }

// Lookup returns the class that holds a node equal to n once n's children
// are canonicalized. Between a mutation and the next Rebuild it can miss a
// node that is only congruent to a stored one.
func (g *Graph) Lookup(n Node) (ClassID, bool) {
	var buf [4]ClassID
	kids := buf[:0]
	if len(n.Children) > len(buf) {
		kids = make([]ClassID, 0, len(n.Children))
	}
	kids = kids[:len(n.Children)]
	for i, c := range n.Children {
		if int(c) >= len(g.parent) {
			return 0, false
		}
		kids[i] = g.find(c)
	}
	id, ok := g.table.lookup(g, hashNode(n.Op, n.Payload, kids), n.Op, n.Payload, kids)
	if !ok {
		return 0, false
	}
	return g.find(g.nodes[id].class), true
}

// ClassesWithOp returns, in increasing order, the classes that hold a node
// with operator op, as of the last Rebuild. The slice belongs to the e-graph.
func (g *Graph) ClassesWithOp(op Symbol) []ClassID {
	if int(op) >= len(g.byOp) {
		return nil
	}
	return g.byOp[op]
}

// opRange returns the nodes of a canonical class with operator op; class
// nodes are sorted by operator after Rebuild.
func (g *Graph) opRange(cl *eclass, op Symbol) []NodeID {
	ns := cl.nodes
	if len(ns) == 0 {
		return nil
	}
	// Most classes hold one operator; answering them from the two ends
	// saves the binary search's scattered reads.
	first, last := g.nodes[ns[0]].op, g.nodes[ns[len(ns)-1]].op
	if first == op && last == op {
		return ns
	}
	if op < first || op > last {
		return nil
	}
	lo, hi := 0, len(ns)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if g.nodes[ns[mid]].op < op {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	end := lo
	for end < len(ns) && g.nodes[ns[end]].op == op {
		end++
	}
	return ns[lo:end]
}

func (g *Graph) kidsOf(id NodeID) []ClassID { return g.nodes[id].kidsIn(g.kids) }

func (g *Graph) sameContent(id NodeID, op Symbol, p Payload, kids []ClassID) bool {
	r := &g.nodes[id]
	if r.op != op || r.payload != p || int(r.arity) != len(kids) {
		return false
	}
	stored := r.kidsIn(g.kids)
	for i, k := range kids {
		if stored[i] != k {
			return false
		}
	}
	return true
}

// newClass makes an empty class and returns it with its pool slot, which
// the analysis layer uses to index its data.
func (g *Graph) newClass() (ClassID, uint32) {
	id := ClassID(len(g.parent))
	g.parent = append(g.parent, id)
	var s uint32
	if n := len(g.free); n > 0 {
		s = g.free[n-1]
		g.free = g.free[:n-1]
	} else {
		s = uint32(len(g.pool))
		g.pool = append(g.pool, eclass{})
	}
	g.slot = append(g.slot, s)
	g.live++
	return id, s
}

// release returns a merged-away class's slot to the pool.
func (g *Graph) release(c ClassID) {
	s := g.slot[c]
	g.pool[s] = eclass{}
	g.free = append(g.free, s)
}

// addNode stores a node whose children are canonical and which the
// hash-cons does not hold, in a new class of its own.
func (g *Graph) addNode(h uint64, op Symbol, p Payload, kids []ClassID) (ClassID, uint32, NodeID) {
	g.clean = false
	c, slot := g.newClass()
	id := NodeID(len(g.nodes))
	rec := nodeRec{op: op, class: c, arity: uint16(len(kids)), payload: p, stamp: g.stamp + 1}
	if len(kids) <= inlineKids {
		copy(rec.kid[:], kids)
	} else {
		rec.kid[0] = ClassID(len(g.kids))
		g.kids = append(g.kids, kids...)
	}
	g.nodes = append(g.nodes, rec)
	g.moved = append(g.moved, 0)
	if len(g.singles) == cap(g.singles) {
		g.singles = make([]NodeID, 0, 1024)
	}
	g.singles = append(g.singles, id)
	n := len(g.singles)
	g.pool[slot].nodes = g.singles[n-1 : n : n]
	g.pool[slot].stamp = g.stamp + 1
	for i, k := range kids {
		if !slices.Contains(kids[:i], k) {
			kc := g.cls(k)
			kc.parents = append(kc.parents, id)
		}
	}
	g.table.insert(h, id)
	g.alive++
	return c, slot, id
}

// canonicalKids writes n's children, canonicalized, into buf.
func (g *Graph) canonicalKids(n Node, buf []ClassID) ([]ClassID, error) {
	if len(n.Children) > maxArity {
		return nil, fmt.Errorf("node %s has %d children; at most %d are supported", n.Op, len(n.Children), maxArity)
	}
	buf = buf[:0]
	for _, c := range n.Children {
		if int(c) >= len(g.parent) {
			return nil, fmt.Errorf("node %s: child class %d does not exist", n.Op, c)
		}
		buf = append(buf, g.Find(c))
	}
	return buf, nil
}

// link makes the class with fewer parents point to the other and merges
// their lists. It returns the root, the merged child, and how many of the
// root's parents it had before the child's were appended. Ties go to the
// smaller id so that the choice never depends on anything but the sequence
// of operations. The child's record is emptied but its slot is not yet
// released: the caller still merges its analysis data.
func (g *Graph) link(a, b ClassID) (root, child ClassID, split int) {
	ca, cb := g.cls(a), g.cls(b)
	if len(ca.parents) < len(cb.parents) || (len(ca.parents) == len(cb.parents) && b < a) {
		a, b = b, a
		ca, cb = cb, ca
	}
	g.clean = false
	g.parent[b] = a
	split = len(ca.parents)
	g.pending = append(g.pending, cb.parents...)
	for _, n := range cb.nodes {
		g.moved[n] = g.stamp + 1
	}
	ca.nodes = append(ca.nodes, cb.nodes...)
	ca.parents = append(ca.parents, cb.parents...)
	*cb = eclass{}
	g.live--
	g.markDirty(a)
	return a, b, split
}

func (g *Graph) markDirty(c ClassID) {
	cl := g.cls(c)
	if !cl.dirty {
		cl.dirty = true
		g.dirty = append(g.dirty, c)
	}
}

// recanonicalize brings one pending node's children up to date. It returns
// the node whose content it now duplicates, if any; the caller unions their
// classes.
func (g *Graph) recanonicalize(id NodeID) (dup NodeID, found bool) {
	r := &g.nodes[id]
	if r.dead {
		return 0, false
	}
	kids := r.kidsIn(g.kids)
	stale := false
	for _, k := range kids {
		if g.parent[k] != k {
			stale = true
			break
		}
	}
	if !stale {
		return 0, false
	}
	g.table.remove(hashNode(r.op, r.payload, kids), id)
	for i, k := range kids {
		kids[i] = g.Find(k)
	}
	r.stamp = g.stamp + 1
	g.markDirty(g.Find(r.class))
	h := hashNode(r.op, r.payload, kids)
	if other, ok := g.table.lookup(g, h, r.op, r.payload, kids); ok {
		r.dead = true
		g.alive--
		return other, true
	}
	g.table.insert(h, id)
	return 0, false
}

// tidy sorts the node lists of the classes that changed, drops dead nodes
// from them and from their parent lists, and rebuilds the operator index.
func (g *Graph) tidy() {
	for _, c := range g.dirty {
		if g.parent[c] != c { // merged away after being marked
			continue
		}
		cl := g.cls(c)
		cl.dirty = false
		cl.stamp = g.stamp + 1
		cl.nodes = slices.DeleteFunc(cl.nodes, func(n NodeID) bool { return g.nodes[n].dead })
		slices.SortFunc(cl.nodes, func(x, y NodeID) int {
			if ox, oy := g.nodes[x].op, g.nodes[y].op; ox != oy {
				return int(ox) - int(oy)
			}
			return int(x) - int(y)
		})
		slices.Sort(cl.parents)
		cl.parents = slices.Compact(cl.parents)
		cl.parents = slices.DeleteFunc(cl.parents, func(n NodeID) bool { return g.nodes[n].dead })
		cl.nodes = slices.Clip(cl.nodes)
	}
	g.dirty = g.dirty[:0]

	n := symbolCount()
	if cap(g.byOp) < n {
		g.byOp = slices.Grow(g.byOp[:0], n)
	}
	g.byOp = g.byOp[:n]
	for i := range g.byOp {
		g.byOp[i] = g.byOp[i][:0]
	}
	for id, p := range g.parent {
		if p != ClassID(id) {
			continue
		}
		cl := g.cls(p)
		last := Symbol(0)
		for i, nid := range cl.nodes {
			op := g.nodes[nid].op
			if i == 0 || op != last {
				g.byOp[op] = append(g.byOp[op], ClassID(id))
				last = op
			}
		}
	}
	g.stamp++
	g.clean = true
}
