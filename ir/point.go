package ir

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
)

// EvalAt evaluates only some elements of g's outputs: the reference for
// checking a large kernel at its real shapes on a sample of its thread
// blocks, where evaluating whole tensors would cost what the model costs.
// want maps an output name (or the name of a state buffer that g updates,
// as Result.States names them) to linear, row-major element indices of that
// value; where an output and an updated state share a name, the name is
// the output's. It returns, per name, the values at those indices in the same
// order, and when opt.Magnitude their magnitudes, as Eval's
// Result.Magnitudes would give them at those indices.
//
// The work scales with the elements asked for, not with the tensors: a
// first pass walks the graph backwards from the wanted elements and finds
// which elements of every node they need (a row of A and a column of B for
// an element of a matmul, the whole reduced extent of a reduction, a row
// of a softmax or a norm, the keys and values a query attends to); a
// second pass computes only those, forwards, keeping each node's elements
// in a sorted sparse form until its last reader is done. Feeds are read in
// place. The semantics are Eval's, through the same per-element and per-row
// rules: results agree with Eval's to rounding (sums may run in another
// order), and magnitudes follow the same rules.
//
// Errors name the graph and the node: an unknown name, an index outside
// its value, a missing or mistyped feed, an index out of range in a
// gather, an integer division by zero, a cancelled ctx.
func EvalAt(ctx context.Context, g *Graph, feeds map[string]*Tensor, want map[string][]int64, opt EvalOptions) (vals, mags map[string][]float64, err error) {
	return evalAt(ctx, g, feeds, want, opt, &pointStats{})
}

// pointStats counts EvalAt's work, so that tests can check that it scales
// with the elements asked for without timing anything.
type pointStats struct {
	elements int64 // elements computed, over all nodes but leaves
	macs     int64 // multiply-adds of matmul and attention dot products
}

func evalAt(ctx context.Context, g *Graph, feeds map[string]*Tensor, want map[string][]int64, opt EvalOptions, stats *pointStats) (map[string][]float64, map[string][]float64, error) {
	targets := map[string]Value{}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names) // the first error reported does not depend on map order
	pe := newPointEval(ctx, g, feeds, opt.Magnitude, stats)
	keep := make([]bool, len(g.Nodes))
	for _, name := range names {
		v, err := pointTarget(g, name)
		if err != nil {
			return nil, nil, err
		}
		n := g.Nodes[v].Shape.NumElements()
		for p, j := range want[name] {
			if j < 0 || j >= n {
				return nil, nil, fmt.Errorf("eval at %s: %q: index %d (position %d) outside its %d elements %v", g.Name, name, j, p, n, g.Nodes[v].Shape)
			}
		}
		targets[name] = v
		keep[v] = true
		pe.add(v, want[name])
	}
	if err := pe.run(keep); err != nil {
		return nil, nil, err
	}
	vals := map[string][]float64{}
	var mags map[string][]float64
	if opt.Magnitude {
		mags = map[string][]float64{}
	}
	for _, name := range names {
		s := pe.store[targets[name]]
		vs := make([]float64, len(want[name]))
		var ms []float64
		if opt.Magnitude {
			ms = make([]float64, len(want[name]))
		}
		for p, j := range want[name] {
			v, m := s.at(j)
			vs[p] = v
			if ms != nil {
				ms[p] = m
			}
		}
		if s.missing >= 0 {
			return nil, nil, fmt.Errorf("eval at %s: %q: internal error: element %d was not computed", g.Name, name, s.missing)
		}
		vals[name] = vs
		if mags != nil {
			mags[name] = ms
		}
	}
	return vals, mags, nil
}

// pointTarget finds the value a name of want stands for: an output, or a
// state buffer's update. An output wins over a state of the same name.
func pointTarget(g *Graph, name string) (Value, error) {
	v := NoValue
	for _, o := range g.Outputs {
		if o.Name == name {
			v = o.Value
			break
		}
	}
	for _, u := range g.Updates {
		if v != NoValue {
			break
		}
		if u.State >= 0 && int(u.State) < len(g.Nodes) && g.Nodes[u.State].Name == name {
			v = u.Value
		}
	}
	if v == NoValue {
		return NoValue, fmt.Errorf("eval at %s: no output or updated state named %q", g.Name, name)
	}
	if v < 0 || int(v) >= len(g.Nodes) {
		return NoValue, fmt.Errorf("eval at %s: %q names no node", g.Name, name)
	}
	return v, nil
}

// pointEval is one demand-driven evaluation.
type pointEval struct {
	ctx       context.Context
	g         *Graph
	feeds     map[string]*Tensor
	magnitude bool
	stats     *pointStats
	// need holds, per node, the elements wanted of it: appended to by its
	// readers, then sorted and deduplicated when the backward pass reaches
	// it. Leaves need no list: they are read in place.
	need [][]int64
	// inPlace marks the leaves, and the views of leaves (a transposed
	// weight, a broadcast constant), which are read where they are: they
	// need no list and hold nothing.
	inPlace []bool
	used    []bool // an in-place node is read
	store   []*pointStore
	work    int64 // elements and multiply-adds since ctx was last checked
}

func newPointEval(ctx context.Context, g *Graph, feeds map[string]*Tensor, magnitude bool, stats *pointStats) *pointEval {
	pe := &pointEval{
		ctx: ctx, g: g, feeds: feeds, magnitude: magnitude, stats: stats,
		need: make([][]int64, len(g.Nodes)), inPlace: make([]bool, len(g.Nodes)),
		used: make([]bool, len(g.Nodes)), store: make([]*pointStore, len(g.Nodes)),
	}
	for i, n := range g.Nodes {
		switch n.Op.Class() {
		case ClassLeaf:
			pe.inPlace[i] = true
		case ClassView:
			pe.inPlace[i] = pe.inPlace[n.Inputs[0]]
		}
	}
	return pe
}

// add records that elements js of v are needed.
func (pe *pointEval) add(v Value, js []int64) {
	if len(js) == 0 {
		return
	}
	if pe.inPlace[v] {
		pe.used[v] = true
		return
	}
	pe.need[v] = append(pe.need[v], js...)
}

// add1 records that element j of v is needed.
func (pe *pointEval) add1(v Value, j int64) {
	if pe.inPlace[v] {
		pe.used[v] = true
		return
	}
	pe.need[v] = append(pe.need[v], j)
}

// tick counts work and checks ctx every so often, so that long loops stop
// soon after a cancellation without paying for a check per element.
func (pe *pointEval) tick(n int64) error {
	pe.work += n
	if pe.work < 1<<20 {
		return nil
	}
	pe.work = 0
	return pe.ctx.Err()
}

func (pe *pointEval) run(keep []bool) error {
	g := pe.g
	// Backwards: every reader of a node comes after it, so when the pass
	// reaches a node, all that is wanted of it is known.
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if len(pe.need[i]) == 0 {
			continue
		}
		if err := pe.ctx.Err(); err != nil {
			return fmt.Errorf("eval at %s: %w", g.Name, err)
		}
		pe.need[i] = sortUnique(pe.need[i])
		if err := pe.demand(Value(i)); err != nil {
			return fmt.Errorf("eval at %s: node %%%d (%s): %w", g.Name, i, g.Nodes[i].Op, err)
		}
	}
	// An in-place view reads its input in place.
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if pe.inPlace[i] && pe.used[i] && g.Nodes[i].Op.Class() == ClassView {
			pe.used[g.Nodes[i].Inputs[0]] = true
		}
	}
	// Forwards: compute what is needed, and drop each node's elements
	// after their last reader.
	lastUse := make([]int, len(g.Nodes))
	for i, n := range g.Nodes {
		if len(pe.need[i]) > 0 || (pe.inPlace[i] && pe.used[i]) {
			for _, in := range n.Inputs {
				lastUse[in] = i
			}
		}
	}
	for i, n := range g.Nodes {
		if err := pe.ctx.Err(); err != nil {
			return fmt.Errorf("eval at %s: %w", g.Name, err)
		}
		var err error
		switch {
		case n.Op.Class() == ClassLeaf:
			pe.store[i], err = pe.leaf(n)
		case pe.inPlace[i]:
			if !pe.used[i] {
				continue
			}
			pe.store[i] = pe.view(n)
		case len(pe.need[i]) > 0:
			pe.store[i], err = pe.compute(n, pe.need[i])
			pe.stats.elements += int64(len(pe.need[i]))
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("eval at %s: node %%%d (%s): %w", g.Name, i, n.Op, err)
		}
		for _, in := range n.Inputs {
			if s := pe.store[in]; s != nil && s.missing >= 0 {
				return fmt.Errorf("eval at %s: node %%%d (%s): internal error: element %d of %%%d was not computed", g.Name, i, n.Op, s.missing, in)
			}
		}
		pe.need[i] = nil // the store holds the list now
		for _, in := range n.Inputs {
			if lastUse[in] == i && !keep[in] {
				pe.store[in] = nil
			}
		}
	}
	return nil
}

// sortUnique sorts js and drops repeats, in place.
func sortUnique(js []int64) []int64 {
	slices.Sort(js)
	return slices.Compact(js)
}

// unflattenInto writes the multi-index of element flat of shape into idx.
func unflattenInto(flat int64, shape Shape, idx []int64) {
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = flat % int64(shape[d])
			flat /= int64(shape[d])
		}
	}
}

func (pe *pointEval) inputTypes(n *Node) []ValueType {
	ins := make([]ValueType, len(n.Inputs))
	for k, x := range n.Inputs {
		ins[k] = ValueType{pe.g.Nodes[x].Shape, pe.g.Nodes[x].DType}
	}
	return ins
}

// demand adds to v's inputs the elements that v's needed elements read.
func (pe *pointEval) demand(v Value) error {
	n := pe.g.Nodes[v]
	idx := pe.need[v]
	in := func(k int) Value { return n.Inputs[k] }
	switch n.Op.Class() {
	case ClassUnary, ClassBinary, ClassCompare, ClassSelect:
		for k := range n.Inputs {
			pe.add(in(k), idx)
		}
		return nil
	case ClassReduce:
		_, length, stride, first := rowsAlong(pe.g.Nodes[in(0)].Shape, n.Axis)
		for _, r := range idx { // element r of the result reduces row r of the input
			base := first(int(r))
			for j := range int64(length) {
				pe.add1(in(0), base+j*stride)
			}
			if err := pe.tick(int64(length)); err != nil {
				return err
			}
		}
		return nil
	case ClassView, ClassMove:
		if n.Op == OpCast {
			pe.add(in(0), idx)
			return nil
		}
		return pe.demandMove(n, idx)
	}
	switch n.Op {
	case OpMatMul:
		return pe.demandMatMul(n, idx)
	case OpSoftmax:
		_, length, stride, first := rowsAlong(n.Shape, n.Axis)
		for _, r := range softmaxRows(idx, length, stride) {
			base := first(int(r))
			for j := range int64(length) {
				pe.add1(in(0), base+j*stride)
			}
		}
		return nil
	case OpLayerNorm, OpRMSNorm:
		L := int64(n.Shape[len(n.Shape)-1])
		for _, r := range distinctDiv(idx, L) {
			for j := range L {
				pe.add1(in(0), r*L+j)
			}
		}
		// The row rule reads the whole scale and bias; they are as long as
		// one row of x, which is needed anyway.
		for k := 1; k < len(n.Inputs); k++ {
			for j := range L {
				pe.add1(in(k), j)
			}
		}
		return nil
	case OpAttention:
		return pe.demandAttention(n, idx)
	}
	return fmt.Errorf("no evaluation rule")
}

// distinctDiv is the distinct values of j / d over sorted js, in order.
func distinctDiv(js []int64, d int64) []int64 {
	var out []int64
	for _, j := range js {
		if r := j / d; len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return out
}

// rowOf is the row, as rowsAlong numbers them, that element j of a tensor
// split into rows of length elements at stride belongs to.
func rowOf(j int64, length int, stride int64) int64 {
	return j/(int64(length)*stride)*stride + j%stride
}

// softmaxRows is the distinct rows that elements js belong to, sorted.
func softmaxRows(js []int64, length int, stride int64) []int64 {
	rows := make([]int64, len(js))
	for p, j := range js {
		rows[p] = rowOf(j, length, stride)
	}
	return sortUnique(rows)
}

func (pe *pointEval) demandMove(n *Node, idx []int64) error {
	ins := pe.inputTypes(n)
	mp := newMover(n, ins)
	get := func(int, int64) float64 { return 0 }
	if n.Op == OpGather {
		// Which data elements a gather reads depends on its indices'
		// values: compute the indices it reads first, by a nested
		// evaluation of just those (usually a leaf, read in place).
		ir := len(ins[1].Shape)
		pos := make([]int64, len(idx))
		buf := make([]int64, len(n.Shape))
		for p, j := range idx {
			unflattenInto(j, n.Shape, buf)
			pos[p] = flatIndex(buf[mp.ax:mp.ax+ir], mp.strides[1])
		}
		pos = sortUnique(pos)
		vals, err := pe.valuesAt(n.Inputs[1], pos)
		if err != nil {
			return err
		}
		pe.add(n.Inputs[1], pos)
		get = func(_ int, j int64) float64 {
			if p, ok := slices.BinarySearch(pos, j); ok {
				return vals[p]
			}
			return math.NaN() // cannot happen: pos holds every index read
		}
	}
	buf := make([]int64, len(n.Shape))
	for _, j := range idx {
		unflattenInto(j, n.Shape, buf)
		k, src, err := mp.source(buf, get)
		if err != nil {
			return err
		}
		if k >= 0 {
			pe.add1(n.Inputs[k], src)
		}
	}
	return pe.tick(int64(len(idx)))
}

// valuesAt evaluates elements js (sorted) of v on their own, without
// magnitudes: the indices a gather reads, needed before the backward pass
// can go on.
func (pe *pointEval) valuesAt(v Value, js []int64) ([]float64, error) {
	if pe.inPlace[v] { // a leaf, or a view of one: read it where it is
		s, err := pe.inPlaceStore(v)
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(js))
		for p, j := range js {
			out[p], _ = s.at(j)
		}
		return out, nil
	}
	sub := newPointEval(pe.ctx, pe.g, pe.feeds, false, pe.stats)
	sub.add(v, js)
	keep := make([]bool, len(pe.g.Nodes))
	keep[v] = true
	if err := sub.run(keep); err != nil {
		return nil, err
	}
	out := make([]float64, len(js))
	for p, j := range js {
		out[p], _ = sub.store[v].at(j)
	}
	return out, nil
}

// matmulGeometry names the parts of a matmul's element: batch s, row i,
// column j of [batch, M, N], with inner extent K.
type matmulGeometry struct{ M, N, K int64 }

func newMatmulGeometry(pe *pointEval, n *Node) matmulGeometry {
	r := len(n.Shape)
	return matmulGeometry{M: int64(n.Shape[r-2]), N: int64(n.Shape[r-1]), K: int64(pe.g.Nodes[n.Inputs[0]].Shape[r-1])}
}

// split returns the row of A (s*M+i) and the column of B (s*N+j) that
// element f of the result combines.
func (mg matmulGeometry) split(f int64) (row, col int64) {
	s := f / (mg.M * mg.N)
	return f / mg.N, s*mg.N + f%mg.N
}

// aAt and bAt are the flat elements k of A's row and B's column.
func (mg matmulGeometry) aAt(row, k int64) int64 { return row*mg.K + k }
func (mg matmulGeometry) bAt(col, k int64) int64 {
	s, j := col/mg.N, col%mg.N
	return (s*mg.K+k)*mg.N + j
}

func (pe *pointEval) demandMatMul(n *Node, idx []int64) error {
	mg := newMatmulGeometry(pe, n)
	rows, cols := matmulRowsCols(mg, idx)
	for _, r := range rows {
		for k := range mg.K {
			pe.add1(n.Inputs[0], mg.aAt(r, k))
		}
	}
	for _, c := range cols {
		for k := range mg.K {
			pe.add1(n.Inputs[1], mg.bAt(c, k))
		}
	}
	return pe.tick(int64(len(rows)+len(cols)) * mg.K)
}

// matmulRowsCols is the distinct rows of A and columns of B that elements
// idx of a matmul read, sorted.
func matmulRowsCols(mg matmulGeometry, idx []int64) (rows, cols []int64) {
	rows, cols = make([]int64, len(idx)), make([]int64, len(idx))
	for p, f := range idx {
		rows[p], cols[p] = mg.split(f)
	}
	return sortUnique(rows), sortUnique(cols)
}

// attentionGeometry names attention's extents.
type attentionGeometry struct {
	Hq, S, D, Hkv, T int64
}

func newAttentionGeometry(pe *pointEval, n *Node) attentionGeometry {
	qs, ks := pe.g.Nodes[n.Inputs[0]].Shape, pe.g.Nodes[n.Inputs[1]].Shape
	return attentionGeometry{Hq: int64(qs[1]), S: int64(qs[2]), D: int64(qs[3]), Hkv: int64(ks[1]), T: int64(ks[2])}
}

// query splits query row r (b*Hq*S + h*S + i) into the key-value head it
// reads (b*Hkv + kh) and the number of keys it attends to.
func (ag attentionGeometry) query(n *Node, r int64) (kvHead, limit int64) {
	i := r % ag.S
	h := r / ag.S % ag.Hq
	b := r / (ag.S * ag.Hq)
	kvHead = b*ag.Hkv + h/(ag.Hq/ag.Hkv)
	limit = ag.T
	if n.Causal {
		limit = n.Offset + i + 1
	}
	return kvHead, limit
}

func (pe *pointEval) demandAttention(n *Node, idx []int64) error {
	ag := newAttentionGeometry(pe, n)
	keys := map[int64]int64{}   // key-value head: keys read
	values := map[int64]int64{} // key-value head * D + d: values read
	for _, r := range distinctDiv(idx, ag.D) {
		for c := range ag.D {
			pe.add1(n.Inputs[0], r*ag.D+c)
		}
		kv, limit := ag.query(n, r)
		keys[kv] = max(keys[kv], limit)
	}
	for _, f := range idx {
		kv, limit := ag.query(n, f/ag.D)
		c := kv*ag.D + f%ag.D
		values[c] = max(values[c], limit)
	}
	for _, kv := range sortedKeys(keys) {
		for j := range keys[kv] {
			for c := range ag.D {
				pe.add1(n.Inputs[1], (kv*ag.T+j)*ag.D+c)
			}
		}
	}
	for _, c := range sortedKeys(values) {
		kv, d := c/ag.D, c%ag.D
		for j := range values[c] {
			pe.add1(n.Inputs[2], (kv*ag.T+j)*ag.D+d)
		}
	}
	return nil
}

func sortedKeys(m map[int64]int64) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// pointStore holds the computed elements of one node, or reads a leaf in
// place.
type pointStore struct {
	kind storeKind
	// Computed nodes: the elements held, sorted, and their values and
	// magnitudes (nil without magnitudes), by position in idx, or by
	// element when dense (most of the tensor is needed: lookups are then
	// direct, for at most twice the memory).
	idx      []int64
	dense    bool
	val, mag []float64
	// Leaves.
	t              *Tensor   // input, weight, state
	data           []float64 // const
	dt             DType     // iota
	stride, extent int64     // iota: along its axis
	// Views of leaves: the input's store, read through the view's mover.
	// buf makes at unsafe for concurrent use, which nothing needs.
	view  *mover
	from  *pointStore
	shape Shape
	buf   []int64
	pad   float64
	// missing is an element asked for but not held (-1 if none): a bug in
	// the backward pass, reported as an error rather than a panic.
	missing int64
}

type storeKind uint8

const (
	storeHeld storeKind = iota
	storeTensor
	storeConst
	storeIota
	storeView
)

// at returns element j's value and magnitude (0 without magnitudes, except
// for leaves, whose magnitude is their absolute value).
func (s *pointStore) at(j int64) (float64, float64) {
	switch s.kind {
	case storeTensor:
		v := s.t.At(j)
		return v, math.Abs(v)
	case storeConst:
		v := s.data[0]
		if len(s.data) > 1 {
			v = s.data[j]
		}
		return v, math.Abs(v)
	case storeIota:
		v := s.dt.Round(float64(j / s.stride % s.extent))
		return v, math.Abs(v)
	case storeView:
		unflattenInto(j, s.shape, s.buf)
		k, src, err := s.view.source(s.buf, nil)
		switch {
		case err != nil: // only gather fails, and it is not a view
			return math.NaN(), math.NaN()
		case k < 0:
			return s.pad, math.Abs(s.pad)
		}
		return s.from.at(src)
	}
	p := int(j)
	if !s.dense {
		var ok bool
		p, ok = slices.BinarySearch(s.idx, j)
		if !ok {
			if s.missing < 0 {
				s.missing = j
			}
			return math.NaN(), math.NaN()
		}
	}
	if s.mag == nil {
		return s.val[p], 0
	}
	return s.val[p], s.mag[p]
}

// put sets the element at position p of idx.
func (s *pointStore) put(p int, v, m float64) {
	if s.dense {
		p = int(s.idx[p])
	}
	s.val[p] = v
	if s.mag != nil {
		s.mag[p] = m
	}
}

// newStore makes the store for elements idx of n.
func (pe *pointEval) newStore(n *Node, idx []int64) *pointStore {
	s := &pointStore{kind: storeHeld, idx: idx, missing: -1}
	size := int64(len(idx))
	if total := n.Shape.NumElements(); 2*size >= total {
		s.dense, size = true, total
	}
	s.val = make([]float64, size)
	if pe.magnitude {
		s.mag = make([]float64, size)
	}
	return s
}

func (pe *pointEval) leaf(n *Node) (*pointStore, error) {
	s := &pointStore{missing: -1}
	switch n.Op {
	case OpInput, OpWeight, OpState:
		t, ok := pe.feeds[n.Name]
		if !ok {
			return nil, fmt.Errorf("no %s named %q was fed", n.Op, n.Name)
		}
		if err := t.check(n.DType, n.Shape); err != nil {
			return nil, fmt.Errorf("%s %q: %w", n.Op, n.Name, err)
		}
		s.kind, s.t = storeTensor, t
	case OpConst:
		s.kind, s.data = storeConst, n.Data
	case OpIota:
		ax, _ := normAxis(n.Axis, len(n.Shape))
		s.kind, s.dt = storeIota, n.DType
		s.stride, s.extent = n.Shape.Strides()[ax], int64(n.Shape[ax])
	default:
		return nil, fmt.Errorf("no evaluation rule")
	}
	return s, nil
}

// inPlaceStore makes the store of in-place node v, and of the views and
// leaf below it, out of turn.
func (pe *pointEval) inPlaceStore(v Value) (*pointStore, error) {
	n := pe.g.Nodes[v]
	if n.Op.Class() == ClassLeaf {
		s, err := pe.leaf(n)
		if err != nil {
			return nil, fmt.Errorf("node %%%d (%s): %w", v, n.Op, err)
		}
		return s, nil
	}
	from, err := pe.inPlaceStore(n.Inputs[0])
	if err != nil {
		return nil, err
	}
	s := pe.view(n)
	s.from = from
	return s, nil
}

// view makes the store of an in-place view.
func (pe *pointEval) view(n *Node) *pointStore {
	return &pointStore{
		kind: storeView, view: newMover(n, pe.inputTypes(n)), from: pe.store[n.Inputs[0]],
		shape: n.Shape, buf: make([]int64, len(n.Shape)), pad: n.Value, missing: -1,
	}
}

// compute evaluates elements idx of n from its inputs' stores.
func (pe *pointEval) compute(n *Node, idx []int64) (*pointStore, error) {
	out := pe.newStore(n, idx)
	in := func(k int) *pointStore { return pe.store[n.Inputs[k]] }
	switch n.Op.Class() {
	case ClassUnary:
		f := unaryFn(n.Op)
		x := in(0)
		for p, j := range idx {
			xv, xm := x.at(j)
			y := n.DType.roundInt(f(xv))
			out.put(p, y, unaryMagnitude(n.Op, xv, y, xm))
		}
		return out, pe.tick(int64(len(idx)))
	case ClassBinary, ClassCompare:
		dt := pe.g.Nodes[n.Inputs[0]].DType
		f := binaryFn(n.Op, dt)
		a, b := in(0), in(1)
		for p, j := range idx {
			av, am := a.at(j)
			bv, bm := b.at(j)
			if divisionByZero(n.Op, dt, bv) {
				return nil, fmt.Errorf("integer division by zero at element %d", j)
			}
			y := n.DType.roundInt(f(av, bv))
			out.put(p, y, binaryMagnitude(n.Op, av, bv, am, bm, y))
		}
		return out, pe.tick(int64(len(idx)))
	case ClassSelect:
		c := in(0)
		for p, j := range idx {
			cv, _ := c.at(j)
			y, m := in(selectBranch(cv)).at(j)
			out.put(p, y, m)
		}
		return out, pe.tick(int64(len(idx)))
	case ClassReduce:
		x := in(0)
		_, length, stride, first := rowsAlong(pe.g.Nodes[n.Inputs[0]].Shape, n.Axis)
		for p, r := range idx {
			base := first(int(r))
			red := newReducer(n.Op)
			for j := range int64(length) {
				xv, xm := x.at(base + j*stride)
				red.add(j, xv, xm)
			}
			out.put(p, n.DType.roundInt(red.v), red.magnitude())
			if err := pe.tick(int64(length)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case ClassView, ClassMove:
		return out, pe.computeMove(n, idx, out)
	}
	switch n.Op {
	case OpMatMul:
		return out, pe.computeMatMul(n, idx, out)
	case OpSoftmax:
		return out, pe.computeSoftmax(n, idx, out)
	case OpLayerNorm, OpRMSNorm:
		return out, pe.computeNorm(n, idx, out)
	case OpAttention:
		return out, pe.computeAttention(n, idx, out)
	}
	return nil, fmt.Errorf("no evaluation rule")
}

func (pe *pointEval) computeMove(n *Node, idx []int64, out *pointStore) error {
	if n.Op == OpCast {
		x := pe.store[n.Inputs[0]]
		for p, j := range idx {
			xv, xm := x.at(j)
			y := n.DType.Round(xv)
			out.put(p, y, castMagnitude(n.DType, y, xm))
		}
		return pe.tick(int64(len(idx)))
	}
	mp := newMover(n, pe.inputTypes(n))
	get := func(k int, j int64) float64 {
		v, _ := pe.store[n.Inputs[k]].at(j)
		return v
	}
	buf := make([]int64, len(n.Shape))
	for p, j := range idx {
		unflattenInto(j, n.Shape, buf)
		k, src, err := mp.source(buf, get)
		if err != nil {
			return err
		}
		if k < 0 {
			out.put(p, n.Value, math.Abs(n.Value))
			continue
		}
		v, m := pe.store[n.Inputs[k]].at(src)
		out.put(p, v, m)
	}
	return pe.tick(int64(len(idx)))
}

// computeMatMul gathers the distinct rows of A and columns of B that the
// needed elements read into contiguous buffers (as much memory as those
// inputs' needed elements), then takes one dot product per element, in
// parallel when there are many.
func (pe *pointEval) computeMatMul(n *Node, idx []int64, out *pointStore) error {
	mg := newMatmulGeometry(pe, n)
	rows, cols := matmulRowsCols(mg, idx)
	K := int(mg.K)
	gather := func(s *pointStore, lines []int64, at func(line, k int64) int64) (vals, mags []float64) {
		vals = make([]float64, len(lines)*K)
		if pe.magnitude {
			mags = make([]float64, len(lines)*K)
		}
		for l, line := range lines {
			for k := range K {
				v, m := s.at(at(line, int64(k)))
				vals[l*K+k] = v
				if mags != nil {
					mags[l*K+k] = m
				}
			}
		}
		return vals, mags
	}
	av, am := gather(pe.store[n.Inputs[0]], rows, mg.aAt)
	bv, bm := gather(pe.store[n.Inputs[1]], cols, mg.bAt)
	if err := pe.tick(int64(len(rows)+len(cols)) * mg.K); err != nil {
		return err
	}
	one := func(p int) {
		row, col := mg.split(idx[p])
		r, _ := slices.BinarySearch(rows, row)
		c, _ := slices.BinarySearch(cols, col)
		a, b := av[r*K:(r+1)*K], bv[c*K:(c+1)*K]
		m := 0.0
		if am != nil {
			m = matmulMagnitude(a, am[r*K:(r+1)*K], b, bm[c*K:(c+1)*K])
		}
		out.put(p, dot(a, b), m)
	}
	pe.stats.macs += int64(len(idx)) * mg.K
	return pe.parallel(len(idx), K, one)
}

// parallel runs one(p) for p in [0, count), each costing about cost
// multiply-adds, spread over the processors when the total is large. The
// results do not depend on the split: each p writes only its own element.
func (pe *pointEval) parallel(count, cost int, one func(p int)) error {
	const chunk = 1 << 16 // multiply-adds between ctx checks
	per := max(1, chunk/max(cost, 1))
	workers := min(runtime.GOMAXPROCS(0), (count+per-1)/per)
	if workers <= 1 {
		for p := range count {
			one(p)
			if (p+1)%per == 0 {
				if err := pe.ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				lo := next
				next += per
				mu.Unlock()
				if lo >= count || pe.ctx.Err() != nil {
					return
				}
				for p := lo; p < min(lo+per, count); p++ {
					one(p)
				}
			}
		})
	}
	wg.Wait()
	return pe.ctx.Err()
}

// rowGroups splits positions of idx by the row key(idx[p]) they belong to,
// in order of first appearance.
func rowGroups(idx []int64, key func(int64) int64) (keys []int64, groups [][]int) {
	at := map[int64]int{}
	for p, j := range idx {
		k := key(j)
		g, ok := at[k]
		if !ok {
			g = len(keys)
			at[k] = g
			keys = append(keys, k)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], p)
	}
	return keys, groups
}

// gatherRow reads length elements of s from base at stride into rb's x
// and xm.
func gatherRow(s *pointStore, base, stride int64, rb rowBuffers) {
	for j := range rb.x {
		v, m := s.at(base + int64(j)*stride)
		rb.x[j] = v
		if rb.xm != nil {
			rb.xm[j] = m
		}
	}
}

func (pe *pointEval) computeSoftmax(n *Node, idx []int64, out *pointStore) error {
	_, length, stride, first := rowsAlong(n.Shape, n.Axis)
	rb := newRowBuffers(length, pe.magnitude)
	rows, groups := rowGroups(idx, func(j int64) int64 { return rowOf(j, length, stride) })
	for g, r := range rows {
		gatherRow(pe.store[n.Inputs[0]], first(int(r)), stride, rb)
		softmaxRow(rb.x, rb.xm, rb.y, rb.ym)
		for _, p := range groups[g] {
			j := idx[p] / stride % int64(length)
			out.put(p, rb.y[j], orZero(rb.ym, j))
		}
		if err := pe.tick(int64(length)); err != nil {
			return err
		}
	}
	return nil
}

// orZero is s[j], or 0 when s is nil (no magnitudes).
func orZero(s []float64, j int64) float64 {
	if s == nil {
		return 0
	}
	return s[j]
}

func (pe *pointEval) computeNorm(n *Node, idx []int64, out *pointStore) error {
	L := int64(n.Shape[len(n.Shape)-1])
	rb := newRowBuffers(int(L), pe.magnitude)
	// The scale and bias, whole.
	params := make([]rowBuffers, len(n.Inputs))
	for k := 1; k < len(n.Inputs); k++ {
		params[k] = newRowBuffers(int(L), pe.magnitude)
		gatherRow(pe.store[n.Inputs[k]], 0, 1, params[k])
	}
	var b, bm []float64
	if n.Op == OpLayerNorm {
		b, bm = params[2].x, params[2].xm
	}
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / L })
	for g, r := range rows {
		gatherRow(pe.store[n.Inputs[0]], r*L, 1, rb)
		normRow(n.Op, n.Eps, rb.x, rb.xm, params[1].x, params[1].xm, b, bm, rb.y, rb.ym)
		for _, p := range groups[g] {
			j := idx[p] % L
			out.put(p, rb.y[j], orZero(rb.ym, j))
		}
		if err := pe.tick(L); err != nil {
			return err
		}
	}
	return nil
}

// computeAttention works query row by query row: the row's attention
// weights from its query and the keys it sees, then, for each needed
// element of the row, the weighted sum of one column of the values.
func (pe *pointEval) computeAttention(n *Node, idx []int64, out *pointStore) error {
	ag := newAttentionGeometry(pe, n)
	D := int(ag.D)
	qs, ks, vs := pe.store[n.Inputs[0]], pe.store[n.Inputs[1]], pe.store[n.Inputs[2]]
	q := newRowBuffers(D, pe.magnitude)
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / ag.D })
	for g, r := range rows {
		kv, limit := ag.query(n, r)
		gatherRow(qs, r*ag.D, 1, q)
		k := newRowBuffers(int(limit)*D, pe.magnitude)
		gatherRow(ks, kv*ag.T*ag.D, 1, k)
		p := make([]float64, limit)
		var pm []float64
		if pe.magnitude {
			pm = make([]float64, limit)
		}
		avg := attentionProbs(q.x, q.xm, k.x, k.xm, n.Scale, p, pm)
		col := newRowBuffers(int(limit), pe.magnitude)
		for _, pos := range groups[g] {
			d := idx[pos] % ag.D
			gatherRow(vs, kv*ag.T*ag.D+d, ag.D, col)
			v, m := attentionOut(p, pm, avg, col.x, col.xm)
			out.put(pos, v, m)
		}
		work := limit*ag.D + int64(len(groups[g]))*limit
		pe.stats.macs += work
		if err := pe.tick(work); err != nil {
			return err
		}
	}
	return nil
}
