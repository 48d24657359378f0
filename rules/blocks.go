package rules

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// Repeated blocks. A model's decoder layers are copies of one block that
// differ only in their weights (and, in a decode step, their KV caches).
// Finding them before saturation lets the search run on one copy and
// replay its result on the others, which keeps the e-graph a layer's size
// instead of a model's (DESIGN.md, "Keeping the e-graph small").
//
// Detection is structural: weight and state names are never looked at,
// so that it works for any exporter's naming. It goes in three steps.
//
//  1. Every node gets a local hash: its op, normalized attributes and
//     result type, combined with its inputs' local hashes a few levels
//     deep. A weight or state leaf hashes by its type only, so that
//     corresponding nodes of two layers hash alike. The hash is local
//     (depth-bounded) rather than a full Merkle hash because layer i+1
//     reads layer i: a full hash would differ in every layer.
//  2. A class of k nodes with equal local hashes that form a chain (each
//     an ancestor of the next) is an anchor: one node per layer. The
//     values that every path between consecutive anchors crosses are the
//     candidate seams (the residual stream between two layers is one).
//     For each candidate seam the copies are grown in lockstep from the
//     anchors, copy j confined to the nodes after seam j-1 and up to seam
//     j, and a tuple of nodes joins only when its nodes correspond (same
//     op, attributes and types, each read by corresponding nodes). Values
//     all copies read alike (the rotary tables, the causal mask) stay
//     outside as shared inputs.
//  3. Each grown set of copies is verified independently by walking the
//     copies in parallel (verifyCopies), which also derives their inputs,
//     weights and outputs. Among verified candidates the one covering the
//     most nodes wins, and on a tie the one with the fewest values crossing
//     its boundary: that prefers the residual add as the seam over a
//     rotation of the layer that would also take the next layer's norm
//     (the final norm looks just like a layer's input norm).
//
// The search then repeats on the nodes not yet taken, so a graph with
// two different stacks gives two Repeats.

// Block is one copy of a repeated region of a graph. Slices of
// corresponding copies correspond element by element: copy k's Nodes[i],
// Inputs[i], Outputs[i] and Weights[i] play the role of copy 0's.
type Block struct {
	// Nodes are the copy's nodes, excluding its weight and state leaves,
	// in copy 0's graph order (a topological order of every copy).
	Nodes []ir.Value
	// Inputs are the values from outside the copy that it reads, excluding
	// its own weights, in order of first use. Values every copy reads (a
	// shared table) appear in every copy's Inputs.
	Inputs []ir.Value
	// Outputs are the copy's values read outside it, by a node, a graph
	// output or a state update, in Nodes order; a value read outside any
	// one copy is an output of every copy, so that they stay aligned.
	Outputs []ir.Value
	// Weights are the weight and state leaves read by this copy alone, in
	// order of first use.
	Weights []ir.Value
}

// Repeats is a set of copies of one block, in graph order.
type Repeats struct{ Copies []Block }

// localDepth is how many levels of inputs the local hash sees: enough to
// tell most nodes of a layer apart, few enough that only the first nodes
// of the first layer see past its start.
const localDepth = 4

// FindRepeats finds the repeated blocks of g: sets of at least two
// disjoint copies, each of at least minNodes nodes, that are isomorphic up
// to their weight and state leaves and that form a chain (each copy reads
// the one before it, as a model's layers do). It uses no leaf names.
// Repeats come in the order of their first node; they are disjoint.
func FindRepeats(g *ir.Graph, minNodes int) []Repeats {
	minNodes = max(minNodes, 1)
	f := newRepeatFinder(g)
	var out []Repeats
	for {
		c, ok := f.best(minNodes)
		if !ok {
			break
		}
		out = append(out, Repeats{Copies: c.blocks})
		for _, b := range c.blocks {
			for _, v := range b.Nodes {
				f.taken[v] = true
			}
		}
	}
	slices.SortFunc(out, func(a, b Repeats) int { return int(a.Copies[0].Nodes[0] - b.Copies[0].Nodes[0]) })
	return out
}

// use is one input slot of a node: node's input idx.
type use struct {
	node ir.Value
	idx  int
}

// repeatFinder holds what the search computes once per graph, and scratch
// arrays reused across candidates (stamped, so that they need no
// clearing).
type repeatFinder struct {
	g     *ir.Graph
	users [][]use
	attrs []ir.Attrs // normalized, without per-copy leaf names
	sig   []uint64   // hash of op, attributes and type
	local []uint64   // sig combined with inputs' to localDepth levels
	taken []bool     // nodes of repeats already returned

	stamp    int32
	ownStamp []int32
	ownSlot  []int32
	mark     []int32 // scratch for gaps
	mark2    []int32
	after    []int32
	before   []int32
	cutIdx   []int32
}

func newRepeatFinder(g *ir.Graph) *repeatFinder {
	n := len(g.Nodes)
	f := &repeatFinder{
		g: g, users: make([][]use, n), attrs: make([]ir.Attrs, n), sig: make([]uint64, n), local: make([]uint64, n),
		taken: make([]bool, n), ownStamp: make([]int32, n), ownSlot: make([]int32, n), mark: make([]int32, n),
		mark2: make([]int32, n), after: make([]int32, n), before: make([]int32, n), cutIdx: make([]int32, n),
	}
	for i, nd := range g.Nodes {
		for k, in := range nd.Inputs {
			f.users[in] = append(f.users[in], use{ir.Value(i), k})
		}
		f.attrs[i] = normAttrs(nd)
		f.sig[i] = nodeSig(nd, f.attrs[i])
	}
	copy(f.local, f.sig)
	next := make([]uint64, n)
	for range localDepth {
		for i, nd := range g.Nodes {
			h := f.sig[i]
			for _, in := range nd.Inputs {
				h = mix(h, f.local[in])
			}
			next[i] = h
		}
		f.local, next = next, f.local
	}
	return f
}

// perCopyLeaf reports whether leaves of op belong to one copy: weights,
// and state buffers (each layer's KV cache).
func perCopyLeaf(op ir.Op) bool { return op == ir.OpWeight || op == ir.OpState }

// normAttrs is n's normalized attributes; a per-copy leaf's name is
// dropped because corresponding leaves of two copies differ only there.
func normAttrs(n *ir.Node) ir.Attrs {
	a := n.Op.Normalize(n.Attrs)
	if perCopyLeaf(n.Op) {
		a.Name = ""
	}
	return a
}

func mix(h, x uint64) uint64 {
	h ^= x + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

func mixString(h uint64, s string) uint64 {
	h = mix(h, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		h = mix(h, uint64(s[i]))
	}
	return h
}

func mixInts[T ~int | ~int64](h uint64, xs []T) uint64 {
	h = mix(h, uint64(len(xs)))
	for _, x := range xs {
		h = mix(h, uint64(x))
	}
	return h
}

// nodeSig hashes what sameNode compares.
func nodeSig(n *ir.Node, a ir.Attrs) uint64 {
	h := mix(uint64(n.Op), uint64(n.DType))
	h = mixInts(h, n.Shape)
	h = mix(h, uint64(len(n.Inputs)))
	h = mixString(h, a.Name)
	h = mix(h, uint64(len(a.Data)))
	for _, d := range a.Data {
		h = mix(h, math.Float64bits(d))
	}
	h = mix(h, uint64(a.Axis))
	h = mixInts(h, a.To)
	h = mixInts(h, a.Perm)
	h = mixInts(h, a.Starts)
	h = mixInts(h, a.Ends)
	h = mixInts(h, a.Steps)
	h = mixInts(h, a.Before)
	h = mixInts(h, a.After)
	h = mix(h, math.Float64bits(a.Value))
	h = mix(h, uint64(a.DType))
	h = mix(h, math.Float64bits(a.Eps))
	h = mix(h, math.Float64bits(a.Scale))
	if a.Causal {
		h = mix(h, 1)
	}
	h = mix(h, uint64(a.Block))
	h = mix(h, uint64(a.Window))
	h = mix(h, uint64(a.TopK))
	h = mix(h, uint64(a.Gating))
	h = mix(h, math.Float64bits(a.Limit))
	return mix(h, uint64(a.Offset))
}

func floatsEqual(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

func sameFloat(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }

// sameNode reports whether u and v compute alike given corresponding
// inputs: same op, normalized attributes (bit for bit) and result type.
func (f *repeatFinder) sameNode(u, v ir.Value) bool {
	if f.sig[u] != f.sig[v] {
		return false
	}
	m, n := f.g.Nodes[u], f.g.Nodes[v]
	a, b := &f.attrs[u], &f.attrs[v]
	return m.Op == n.Op && m.DType == n.DType && m.Shape.Equal(n.Shape) && len(m.Inputs) == len(n.Inputs) &&
		a.Name == b.Name && floatsEqual(a.Data, b.Data) && a.Axis == b.Axis && a.To.Equal(b.To) &&
		slices.Equal(a.Perm, b.Perm) && slices.Equal(a.Starts, b.Starts) && slices.Equal(a.Ends, b.Ends) &&
		slices.Equal(a.Steps, b.Steps) && slices.Equal(a.Before, b.Before) && slices.Equal(a.After, b.After) &&
		sameFloat(a.Value, b.Value) && a.DType == b.DType && sameFloat(a.Eps, b.Eps) && sameFloat(a.Scale, b.Scale) &&
		a.Causal == b.Causal && a.Offset == b.Offset && a.Block == b.Block && a.Window == b.Window &&
		a.TopK == b.TopK && a.Gating == b.Gating && sameFloat(a.Limit, b.Limit)
}

// candidate is one verified set of copies.
type candidate struct {
	blocks   []Block
	boundary int // per copy: inputs that differ between copies, plus outputs
}

func (c *candidate) coverage() int { return len(c.blocks) * len(c.blocks[0].Nodes) }

// better reports whether c beats d: more nodes covered, then a narrower
// boundary.
func (c *candidate) better(d *candidate) bool {
	if d == nil {
		return true
	}
	if c.coverage() != d.coverage() {
		return c.coverage() > d.coverage()
	}
	return c.boundary < d.boundary
}

// best finds the best verified repeat among the nodes not taken.
func (f *repeatFinder) best(minNodes int) (*candidate, bool) {
	// Anchor classes: equal local hashes among untaken non-leaf nodes,
	// each class's members in graph order, classes in order of their
	// first member so that the search does not depend on map order.
	classes := map[uint64][]ir.Value{}
	var order []uint64
	for i, n := range f.g.Nodes {
		if f.taken[i] || n.Op.Class() == ir.ClassLeaf {
			continue
		}
		h := f.local[i]
		if _, ok := classes[h]; !ok {
			order = append(order, h)
		}
		classes[h] = append(classes[h], ir.Value(i))
	}
	// covered[v] is the number of copies of a verified candidate that
	// holds v, and v's copy: an anchor inside an earlier candidate's
	// copies, member j in copy j, would find the same seams again.
	type cover struct{ k, j int }
	covered := map[ir.Value]cover{}
	var best *candidate
	for _, h := range order {
		anchor := classes[h]
		k := len(anchor)
		if k < 2 {
			continue
		}
		seen := true
		for j, a := range anchor {
			if c, ok := covered[a]; !ok || c != (cover{k, j}) {
				seen = false
				break
			}
		}
		if seen {
			continue
		}
		for _, c := range f.tryAnchor(anchor, minNodes, best) {
			for j, b := range c.blocks {
				for _, v := range b.Nodes {
					covered[v] = cover{k, j}
				}
			}
			if c.better(best) {
				best = c
			}
		}
	}
	return best, best != nil
}

// tryAnchor returns the verified candidates seeded by anchor, one per
// candidate seam; it skips verifying copies that cover fewer nodes than
// best.
func (f *repeatFinder) tryAnchor(anchor []ir.Value, minNodes int, best *candidate) []*candidate {
	k := len(anchor)
	gaps := make([][]ir.Value, k-1)
	for j := range k - 1 {
		gaps[j] = f.seams(anchor[j], anchor[j+1])
		if gaps[j] == nil {
			return nil // not a chain
		}
	}
	var out []*candidate
	cuts := make([]ir.Value, k-1)
	for m := range gaps[0] {
		ok := true
		for j := range k - 1 {
			if m >= len(gaps[j]) || !f.sameNode(gaps[j][m], gaps[0][m]) {
				ok = false
				break
			}
			cuts[j] = gaps[j][m]
		}
		if !ok {
			continue
		}
		copies := f.grow(anchor, cuts)
		if len(copies) == 0 || len(copies[0]) < minNodes || (best != nil && k*len(copies[0]) < best.coverage()) {
			continue
		}
		blocks, err := f.verifyCopies(copies)
		if err != nil {
			continue
		}
		out = append(out, &candidate{blocks: blocks, boundary: boundary(blocks)})
	}
	return out
}

// boundary counts one copy's inputs that are not the same value in every
// copy, plus its outputs.
func boundary(blocks []Block) int {
	n := len(blocks[0].Outputs)
	for i, v := range blocks[0].Inputs {
		if blocks[1].Inputs[i] != v {
			n++
		}
	}
	return n
}

// seams lists the values, from a up to but excluding b, that every path
// from a to b goes through, in graph order; nil when b does not depend on
// a. The list starts with a.
func (f *repeatFinder) seams(a, b ir.Value) []ir.Value {
	if a >= b {
		return nil
	}
	f.stamp++
	s := f.stamp
	// mark: reachable from a; mark2: reaches b. Only nodes between a and
	// b in graph order can be on a path, since the order is topological.
	f.mark[a] = s
	for v := a + 1; v <= b; v++ {
		for _, in := range f.g.Nodes[v].Inputs {
			if in >= a && f.mark[in] == s {
				f.mark[v] = s
				break
			}
		}
	}
	if f.mark[b] != s {
		return nil
	}
	f.mark2[b] = s
	for v := b - 1; v >= a; v-- {
		if f.mark[v] != s {
			continue
		}
		for _, u := range f.users[v] {
			if u.node <= b && f.mark2[u.node] == s {
				f.mark2[v] = s
				break
			}
		}
	}
	// A node on the paths is a seam when no edge between path nodes jumps
	// over it in graph order.
	var out []ir.Value
	reach := a
	for v := a; v < b; v++ {
		if f.mark[v] != s || f.mark2[v] != s {
			continue
		}
		if reach <= v {
			out = append(out, v)
		}
		for _, u := range f.users[v] {
			if u.node <= b && f.mark[u.node] == s && f.mark2[u.node] == s {
				reach = max(reach, u.node)
			}
		}
	}
	return out
}

// grow grows k copies in lockstep from the anchors, copy j confined to
// the nodes that depend on cut j-1 (strictly) and do not depend on cut j
// (strictly): copy j ends with cut j. It returns the copies' nodes,
// copies[j][i] corresponding to copies[0][i], in copy 0's graph order.
func (f *repeatFinder) grow(anchor, cuts []ir.Value) [][]ir.Value {
	k := len(anchor)
	g := f.g
	const none = math.MaxInt32
	for i := range f.cutIdx {
		f.cutIdx[i] = -1
	}
	for j, c := range cuts {
		f.cutIdx[c] = int32(j)
	}
	// after[v]: the last cut v strictly depends on (cuts form a chain, so
	// it depends on all earlier ones too), -1 if none. before[v]: the
	// first cut that v is or feeds, none if none.
	for i, n := range g.Nodes {
		a := int32(-1)
		for _, in := range n.Inputs {
			a = max(a, f.after[in], f.cutIdx[in])
		}
		f.after[i] = a
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		b := int32(none)
		if f.cutIdx[i] >= 0 {
			b = f.cutIdx[i]
		}
		for _, u := range f.users[i] {
			b = min(b, f.before[u.node])
		}
		f.before[i] = b
	}
	allowed := func(j int, v ir.Value) bool { return int(f.after[v]) < j && j <= int(f.before[v]) }

	f.stamp++
	s := f.stamp
	var slots [][]ir.Value
	// add claims tuple as a new slot when its nodes correspond and are
	// free: inner nodes of one copy each, not leaves that are inputs or
	// per-copy leaves (those are the copies' inputs and weights).
	add := func(tuple []ir.Value) {
		var claimed []ir.Value
		ok := true
		for j, v := range tuple {
			if v < 0 {
				ok = false
				break
			}
			n := g.Nodes[v]
			if f.taken[v] || f.ownStamp[v] == s || n.Op == ir.OpInput || perCopyLeaf(n.Op) ||
				!allowed(j, v) || !f.sameNode(v, tuple[0]) {
				ok = false
				break
			}
			f.ownStamp[v] = s
			f.ownSlot[v] = int32(len(slots))
			claimed = append(claimed, v)
		}
		if !ok {
			for _, v := range claimed {
				f.ownStamp[v] = 0
			}
			return
		}
		slots = append(slots, slices.Clone(tuple))
	}
	add(anchor)
	tuple := make([]ir.Value, k)
	for q := 0; q < len(slots); q++ {
		cur := slots[q]
		// Inputs correspond by position.
		for idx := range g.Nodes[cur[0]].Inputs {
			for j, v := range cur {
				tuple[j] = g.Nodes[v].Inputs[idx]
			}
			add(tuple)
		}
		// Users correspond by input slot and signature; several alike
		// (q, k and v projections of one view) pair up in graph order.
		// Not by local hash: that of the first layer's residual adds sees
		// the embedding, which the other layers' do not.
		for r, u := range f.users[cur[0]] {
			rank := 0
			for _, w := range f.users[cur[0]][:r] {
				if w.idx == u.idx && f.sig[w.node] == f.sig[u.node] {
					rank++
				}
			}
			ok := true
			for j, v := range cur {
				tuple[j] = -1
				n := 0
				for _, w := range f.users[v] {
					if w.idx == u.idx && f.sig[w.node] == f.sig[u.node] {
						if n == rank {
							tuple[j] = w.node
							break
						}
						n++
					}
				}
				if tuple[j] < 0 {
					ok = false
					break
				}
			}
			if ok {
				add(tuple)
			}
		}
	}
	slices.SortFunc(slots, func(a, b []ir.Value) int { return int(a[0] - b[0]) })
	copies := make([][]ir.Value, k)
	for j := range copies {
		copies[j] = make([]ir.Value, len(slots))
		for i, t := range slots {
			copies[j][i] = t[j]
		}
	}
	return copies
}

// verifyCopies checks that copies (copies[j][i] corresponding to
// copies[0][i], each copy in a topological order) are isomorphic up to
// their per-copy leaves, walking them in parallel, and returns them as
// Blocks. Corresponding nodes must compute alike, and each input of a
// node must be the corresponding node of its own copy, or, in every copy,
// a value from outside it; outside values must follow the same pattern
// of first uses in every copy, and per-copy leaves (read by one copy
// only) must have equal types. A copy must also be convex: no path may
// leave it and come back, or it could not be computed as one unit.
func (f *repeatFinder) verifyCopies(copies [][]ir.Value) ([]Block, error) {
	g := f.g
	k := len(copies)
	if k < 2 || len(copies[0]) == 0 {
		return nil, errors.New("want at least two non-empty copies")
	}
	n := len(copies[0])
	owner := make(map[ir.Value]int, k*n) // copy j and index i as j*n+i
	for j, c := range copies {
		if len(c) != n {
			return nil, fmt.Errorf("copy %d has %d nodes, copy 0 has %d", j, len(c), n)
		}
		for i, v := range c {
			if v < 0 || int(v) >= len(g.Nodes) {
				return nil, fmt.Errorf("copy %d: %d is not a node", j, v)
			}
			if _, dup := owner[v]; dup {
				return nil, fmt.Errorf("node %%%d is in two copies", v)
			}
			if op := g.Nodes[v].Op; op == ir.OpInput || perCopyLeaf(op) {
				return nil, fmt.Errorf("copy %d: node %%%d is a %s leaf", j, v, op)
			}
			owner[v] = j*n + i
		}
	}
	local := func(j int, v ir.Value) int { // index in copy j, or -1
		if o, ok := owner[v]; ok && o/n == j {
			return o % n
		}
		return -1
	}
	// Leaves read by exactly one copy are that copy's weights.
	readers := map[ir.Value]int{}
	readBy := map[ir.Value]int{}
	for j, c := range copies {
		for _, v := range c {
			for _, in := range g.Nodes[v].Inputs {
				if local(j, in) >= 0 || !perCopyLeaf(g.Nodes[in].Op) {
					continue
				}
				if r, ok := readBy[in]; !ok || r != j {
					readers[in]++
					readBy[in] = j
				}
			}
		}
	}
	blocks := make([]Block, k)
	// pattern[j] lists, for each outside read of copy j in walk order,
	// the index of the value among its Inputs (>= 0) or Weights (< 0).
	patterns := make([][]int, k)
	for j, c := range copies {
		b := &blocks[j]
		b.Nodes = slices.Clone(c)
		index := map[ir.Value]int{}
		for i, v := range c {
			if i > 0 && v <= c[i-1] && !f.topo(c, i) {
				return nil, fmt.Errorf("copy %d is not in topological order at %%%d", j, v)
			}
			w := copies[0][i]
			if !f.sameNode(v, w) {
				return nil, fmt.Errorf("copy %d: %%%d (%s) does not match copy 0's %%%d (%s)", j, v, g.Nodes[v].Op, w, g.Nodes[w].Op)
			}
			for idx, in := range g.Nodes[v].Inputs {
				in0 := g.Nodes[w].Inputs[idx]
				li, l0 := local(j, in), local(0, in0)
				if li != l0 {
					return nil, fmt.Errorf("copy %d: input %d of %%%d does not correspond to copy 0's", j, idx, v)
				}
				if li >= 0 {
					continue
				}
				x, seen := index[in]
				if !seen {
					if perCopyLeaf(g.Nodes[in].Op) && readers[in] == 1 {
						x = -1 - len(b.Weights)
						b.Weights = append(b.Weights, in)
					} else {
						x = len(b.Inputs)
						b.Inputs = append(b.Inputs, in)
					}
					index[in] = x
				}
				patterns[j] = append(patterns[j], x)
			}
		}
	}
	for j := 1; j < k; j++ {
		if !slices.Equal(patterns[j], patterns[0]) {
			return nil, fmt.Errorf("copy %d reads its inputs and weights in a different pattern from copy 0", j)
		}
		for i, w := range blocks[j].Weights {
			if !f.sameNode(w, blocks[0].Weights[i]) {
				return nil, fmt.Errorf("copy %d: weight %%%d does not match copy 0's %%%d", j, w, blocks[0].Weights[i])
			}
		}
	}
	// Outputs: indices whose value is read outside its copy in any copy.
	out := make([]bool, n)
	readOutside := func(v ir.Value) {
		if o, ok := owner[v]; ok {
			out[o%n] = true
		}
	}
	for j, c := range copies {
		for _, v := range c {
			for _, u := range f.users[v] {
				if local(j, u.node) < 0 {
					readOutside(v)
				}
			}
		}
	}
	for _, o := range g.Outputs {
		readOutside(o.Value)
	}
	for _, u := range g.Updates {
		readOutside(u.Value)
	}
	for j, c := range copies {
		for i, v := range c {
			if out[i] {
				blocks[j].Outputs = append(blocks[j].Outputs, v)
			}
		}
		if err := f.convex(j, c, local); err != nil {
			return nil, err
		}
	}
	return blocks, nil
}

// topo reports whether c[i] reads no later element of c: corresponding
// order need not be graph order, only topological.
func (f *repeatFinder) topo(c []ir.Value, i int) bool {
	later := map[ir.Value]bool{}
	for _, v := range c[i+1:] {
		later[v] = true
	}
	for _, in := range f.g.Nodes[c[i]].Inputs {
		if later[in] {
			return false
		}
	}
	return true
}

// convex checks that no path leaves copy j and re-enters it.
func (f *repeatFinder) convex(j int, c []ir.Value, local func(int, ir.Value) int) error {
	f.stamp++
	s := f.stamp
	lo := slices.Min(c)
	hi := slices.Max(c)
	// mark: outside nodes that depend on the copy.
	for v := lo; v <= hi; v++ {
		inside := local(j, v) >= 0
		for _, in := range f.g.Nodes[v].Inputs {
			if in < lo {
				continue
			}
			if f.mark[in] == s || (!inside && local(j, in) >= 0) {
				if inside {
					return fmt.Errorf("copy %d: %%%d reads a value computed from the copy outside it", j, v)
				}
				f.mark[v] = s
			}
		}
	}
	return nil
}
