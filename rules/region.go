package rules

import (
	"fmt"
	"slices"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// Region fusion builds whole kernels in one step: from a tensor node, it
// grows a body over the node's producers for as long as the body stays
// Legal, and adds the kernel computing the node's class from the classes
// left at the body's edge. Pairwise fusion (fuse.go) reaches the same
// kernels one merge at a time, which takes many iterations and an e-node
// per intermediate step; a region is built once per node.
//
// One body per node would pick for the program where every shared value
// is materialized, so a node gets a few, grown under different policies
// (regionPolicy); extraction chooses among them.

// regionPolicy says how a region grows.
type regionPolicy struct {
	// first is the root operand explored first: growth is depth first,
	// and when two operands lead to matmuls, the one explored first gets
	// the kernel's matmul (a residual add's epilogue belongs to either
	// operand's matmul).
	first int
	// stopAtMatMuls leaves as arguments the values computed from a matmul
	// through elementwise ops and views, once the body holds a matmul: a
	// norm prologue then reads a residual sum materialized by the matmul
	// kernel that produced it, instead of recomputing its matmul.
	stopAtMatMuls bool
	// noMatMuls grows through everything but matmuls: a row kernel
	// normalizing a residual sum reads the matmul's result instead of
	// taking the matmul in (which would leave the norm's reduction out).
	noMatMuls bool
	// noPrologue leaves a matmul's operands as arguments: the matmul
	// reads them as they are (a tensor-core tile loads them directly)
	// and the body grows on its epilogue side only.
	noPrologue bool
	// elementwise grows through elementwise ops and views only.
	elementwise bool
}

// regionPolicies lists the policies tried on a node with arity operands.
func regionPolicies(arity int) []regionPolicy {
	var out []regionPolicy
	for first := range max(arity, 1) {
		out = append(out, regionPolicy{first: first}, regionPolicy{first: first, stopAtMatMuls: true},
			regionPolicy{first: first, noPrologue: true})
	}
	out = append(out, regionPolicy{noMatMuls: true})
	return append(out, regionPolicy{elementwise: true})
}

// RegionRewrites are the region fusion rules: one per tensor op and arity,
// each adding to a node's class the kernels grown from it, and the rules
// that sum split-K partials inside the kernels reading them
// (CrossSumRewrites).
func RegionRewrites() []*egraph.Rewrite[Data] {
	memo := &regionMemo{}
	return append(CrossSumRewrites(), opRewrites("region", func(op ir.Op, name string) egraph.ApplyFunc[Data] {
		return func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
			if copiesDequant(g, op, m.Subst) {
				return 0, false // a dequantized copy (see LowerRewrites)
			}
			root := egraph.Node{Op: Symbol(op), Payload: m.GetPayload("?attrs"), Children: slices.Clone(m.Subst)}
			return growRegions(g, memo, name, root, m.Root())
		}
	})...)
}

// regionMemo remembers the nodes whose regions were grown, per e-graph: the
// rules are Go appliers, so every iteration sees every match again. One
// rule set serves several e-graphs at once (SaturateModel searches the
// pair of blocks and the model's own e-graph in parallel with the same
// rewrites), so each e-graph keeps its own record; the oldest is dropped
// past maxMemoGraphs.
type regionMemo struct {
	mu     sync.Mutex
	graphs []*egraph.EGraph[Data] // oldest first
	done   map[*egraph.EGraph[Data]]map[string]bool
}

// maxMemoGraphs bounds the e-graphs a regionMemo keeps records for.
const maxMemoGraphs = 8

// first reports whether key is new for g, and records it.
func (m *regionMemo) first(g *egraph.EGraph[Data], key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	done, ok := m.done[g]
	if !ok {
		if m.done == nil {
			m.done = map[*egraph.EGraph[Data]]map[string]bool{}
		}
		if len(m.graphs) == maxMemoGraphs {
			delete(m.done, m.graphs[0])
			m.graphs = m.graphs[1:]
		}
		done = map[string]bool{}
		m.graphs = append(m.graphs, g)
		m.done[g] = done
	}
	if done[key] {
		return false
	}
	done[key] = true
	return true
}

// growRegions adds the kernels grown from root (a node of class c) under
// every policy and returns the first one's class for the engine to union
// with c; it unions the others itself, in the rule's name.
func growRegions(g *egraph.EGraph[Data], memo *regionMemo, rule string, root egraph.Node, c egraph.ClassID) (egraph.ClassID, bool) {
	for i, k := range root.Children {
		root.Children[i] = g.Find(k)
	}
	if !memo.first(g, fmt.Sprint(root.Op, root.Payload, root.Children)) {
		return 0, false
	}
	if !g.Data(c).Valid() || slices.Contains(root.Children, g.Find(c)) {
		return 0, false // a node reading its own class (x*1 in x's class) computes nothing
	}
	// A class keeps at most maxAlternatives kernels: algebra gives a class
	// many nodes, and the first ones grown (the model's own node's
	// regions come in the first iteration) are the ones a fusion needs.
	// Kernels summing split-K partials as they read them
	// (CrossSumRewrites) are variants of others and do not count.
	kernels := 0
	for _, id := range g.ClassNodes(c) {
		if n := g.Node(id); n.Op == KernelSymbol && !readsCrossSum(n.Payload) {
			kernels++
		}
	}
	if kernels >= maxAlternatives {
		return 0, false
	}
	first, added := egraph.ClassID(0), false
	for _, pol := range regionPolicies(len(root.Children)) {
		r := newRegion(g, c, pol)
		if !r.grow(c, root) {
			continue
		}
		body, args, ok := r.body()
		if !ok {
			continue
		}
		k, err := g.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(body), Children: args})
		if err != nil {
			continue
		}
		if !added {
			first, added = k, true
		} else if g.Find(k) != g.Find(first) {
			g.Union(k, first, rule)
		}
		if second, ok := r.secondOutput(); ok {
			r.addTwoOutputs(rule, c, second)
		}
	}
	return first, added
}

// secondOutput picks the value a row kernel computes first from its
// arguments, to write it as well: the residual sum a norm kernel adds
// before normalizing it, which the next residual add reads again.
// Extraction takes the two-output kernel where that saves the sum's own
// kernel.
func (r *region) secondOutput() (egraph.ClassID, bool) {
	if r.matmuls > 0 {
		return 0, false
	}
	rows := false
	for _, f := range r.forms() {
		rows = rows || f.kind == formRow || f.kind == formSoftmax
	}
	if !rows {
		return 0, false
	}
	root := r.g.Data(r.classes[0])
	for i, n := range r.nodes[1:] {
		c := r.classes[i+1]
		op, _ := OpOf(n.Op)
		if op.Class() == ir.ClassView || !r.g.Data(c).Shape.Equal(root.Shape) {
			continue
		}
		direct := true
		for _, k := range n.Children {
			direct = direct && r.readsArgs(k)
		}
		if direct {
			return c, true
		}
	}
	return r.statisticsInput()
}

// statisticsInput picks, for a row kernel whose root is a statistic of
// each row (a norm's sum of squares, split from the matmul that applies
// it), the row-shaped value the statistic is taken of when the body reads
// it more than once and computes it before any reduction: the residual
// sum that a decode step's next kernels read again. The row kernel writes
// it beside the statistic, so that the residual add needs no launch of
// its own.
func (r *region) statisticsInput() (egraph.ClassID, bool) {
	rowElems := int64(-1)
	for _, n := range r.nodes {
		op, _ := OpOf(n.Op)
		if op.Class() != ir.ClassReduce {
			continue
		}
		in := r.g.Data(n.Children[0]).Shape
		attrs, _ := Attrs(n.Payload)
		if attrs.Axis != len(in)-1 {
			continue
		}
		if rowElems >= 0 && rowElems != in.NumElements() {
			return 0, false
		}
		rowElems = in.NumElements()
	}
	if rowElems < 0 || r.g.Data(r.classes[0]).Shape.NumElements() == rowElems {
		return 0, false
	}
	refs := map[egraph.ClassID]int{}
	for _, n := range r.nodes {
		for _, k := range n.Children {
			refs[r.g.Find(k)]++
		}
	}
	reduced := map[egraph.ClassID]bool{}
	var afterReduction func(c egraph.ClassID) bool
	afterReduction = func(c egraph.ClassID) bool {
		c = r.g.Find(c)
		at, inside := r.at[c]
		if !inside {
			return false
		}
		if v, ok := reduced[c]; ok {
			return v
		}
		reduced[c] = false
		n := r.nodes[at]
		op, _ := OpOf(n.Op)
		v := op.Class() == ir.ClassReduce
		for _, k := range n.Children {
			v = v || afterReduction(k)
		}
		reduced[c] = v
		return v
	}
	for i, n := range r.nodes[1:] {
		c := r.classes[i+1]
		op, _ := OpOf(n.Op)
		if op.Class() == ir.ClassView || refs[c] < 2 || r.g.Data(c).Shape.NumElements() != rowElems || afterReduction(c) {
			continue
		}
		return c, true
	}
	return 0, false
}

// readsArgs reports whether class c is, inside the region, an argument, a
// folded constant, or a view of such.
func (r *region) readsArgs(c egraph.ClassID) bool {
	c = r.g.Find(c)
	if _, ok := r.argAt[c]; ok || r.consts[c] {
		return true
	}
	at, ok := r.at[c]
	if !ok {
		return false
	}
	n := r.nodes[at]
	if op, _ := OpOf(n.Op); op.Class() != ir.ClassView {
		return false
	}
	for _, k := range n.Children {
		if !r.readsArgs(k) {
			return false
		}
	}
	return true
}

// addTwoOutputs adds the region's kernel writing its root (class c) and
// class second, and the projections that take its outputs apart.
func (r *region) addTwoOutputs(rule string, c, second egraph.ClassID) {
	body, args, ok := r.bodyOf(r.classes[0], second)
	if !ok {
		return
	}
	k, err := r.g.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(body), Children: args})
	if err != nil || !r.g.Data(k).IsTuple() {
		return
	}
	for i, want := range []egraph.ClassID{c, second} {
		p, err := r.g.Add(egraph.Node{Op: ProjSymbol, Payload: egraph.Payload(i), Children: []egraph.ClassID{k}})
		if err != nil {
			return
		}
		if r.g.Find(p) != r.g.Find(want) {
			r.g.Union(p, want, rule)
		}
	}
}

// region is a kernel body being grown: nodes chosen for the classes it
// computes, the classes it reads as arguments, and constants it folds in.
type region struct {
	g    *egraph.EGraph[Data]
	pol  regionPolicy
	prep bool // the root depends on weights only: grow through weight-only values

	// nodes[i] computes class classes[i]; kids index nodes when
	// inlined, args when not (see ref).
	classes []egraph.ClassID
	nodes   []egraph.Node
	at      map[egraph.ClassID]int
	args    []egraph.ClassID
	argAt   map[egraph.ClassID]int
	consts  map[egraph.ClassID]bool
	matmuls int
	derived map[egraph.ClassID]bool // memo of matmulDerived
}

func newRegion(g *egraph.EGraph[Data], root egraph.ClassID, pol regionPolicy) *region {
	return &region{
		g: g, pol: pol, prep: g.Data(root).WeightOnly,
		at: map[egraph.ClassID]int{}, argAt: map[egraph.ClassID]int{},
		consts: map[egraph.ClassID]bool{}, derived: map[egraph.ClassID]bool{},
	}
}

// grow builds the region from root, depth first, and reports whether it
// holds anything besides the root (a one-op kernel is the lower rules').
func (r *region) grow(rootClass egraph.ClassID, root egraph.Node) bool {
	if !r.try(r.g.Find(rootClass), root) {
		return false
	}
	order := slices.Clone(root.Children)
	if r.pol.first > 0 && r.pol.first < len(order) {
		order = append(order[r.pol.first:], order[:r.pol.first]...)
	}
	root.Children = order
	r.visitOperands(root)
	return len(r.nodes) > 1 || len(r.consts) > 0
}

// visit decides what class c is to the region: folded constant, argument,
// or computed inside (then its operands are visited in turn).
func (r *region) visit(c egraph.ClassID) {
	c = r.g.Find(c)
	if _, ok := r.at[c]; ok {
		return
	}
	if _, ok := r.argAt[c]; ok {
		return
	}
	if r.consts[c] {
		return
	}
	d := r.g.Data(c)
	if d.IsConst && d.Valid() {
		r.consts[c] = true
		return
	}
	n, ok := r.pick(c)
	switch {
	case !ok, d.WeightOnly && !r.prep, r.pol.stopAtMatMuls && r.matmuls > 0 && r.matmulDerived(c, 0):
		r.arg(c)
		return
	}
	if !r.try(c, n) {
		r.arg(c)
		return
	}
	r.visitOperands(n)
}

// visitOperands visits the operands of node n, just added: a matmul's
// are arguments under noPrologue.
func (r *region) visitOperands(n egraph.Node) {
	if op, _ := OpOf(n.Op); r.pol.noPrologue && op == ir.OpMatMul {
		for _, k := range n.Children {
			k = r.g.Find(k)
			_, inside := r.at[k]
			_, isArg := r.argAt[k]
			if !inside && !isArg && !r.consts[k] {
				r.arg(k)
			}
		}
		return
	}
	for _, k := range n.Children {
		r.visit(k)
	}
}

func (r *region) arg(c egraph.ClassID) {
	r.argAt[c] = len(r.args)
	r.args = append(r.args, c)
}

// pick chooses the node a class is computed by inside a body: the oldest
// tensor op (the model's own, or the earliest rewrite of it) that does not
// read a class the region computes from this one (a cycle). Classes with
// a leaf are arguments.
func (r *region) pick(c egraph.ClassID) (egraph.Node, bool) {
	best, found := egraph.NodeID(0), false
	for _, id := range r.g.ClassNodes(c) {
		n := r.g.Node(id)
		if n.Op == KernelSymbol {
			continue
		}
		op, ok := OpOf(n.Op)
		if !ok {
			continue
		}
		if op.Class() == ir.ClassLeaf {
			return egraph.Node{}, false
		}
		if found && id >= best {
			continue
		}
		cyclic := false
		for _, k := range n.Children {
			if r.g.Find(k) == c || r.reaches(r.g.Find(k), c) {
				cyclic = true
				break
			}
		}
		if !cyclic {
			best, found = id, true
		}
	}
	if !found {
		return egraph.Node{}, false
	}
	n := r.g.Node(best)
	n.Children = slices.Clone(n.Children)
	for i, k := range n.Children {
		n.Children[i] = r.g.Find(k)
	}
	return n, true
}

// reaches reports whether the region computes class to from class from.
func (r *region) reaches(from, to egraph.ClassID) bool {
	i, ok := r.at[from]
	if !ok {
		return false
	}
	seen := map[int]bool{}
	stack := []int{i}
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[j] {
			continue
		}
		seen[j] = true
		for _, k := range r.nodes[j].Children {
			k = r.g.Find(k)
			if k == to {
				return true
			}
			if at, ok := r.at[k]; ok {
				stack = append(stack, at)
			}
		}
	}
	return false
}

// matmulDerived reports whether class c is what a matmul kernel with an
// epilogue produces: a matmul's result, possibly through elementwise ops
// and views whose other operands are anything but a reduction's result
// (a bias, a residual stream, a gated product). A value that also reads a
// reduction (a norm of the matmul's result) is not.
func (r *region) matmulDerived(c egraph.ClassID, depth int) bool {
	c = r.g.Find(c)
	if v, ok := r.derived[c]; ok {
		return v
	}
	r.derived[c] = false // cycles read as not derived
	n, ok := r.pick(c)
	if !ok || depth > 64 {
		return false
	}
	op, _ := OpOf(n.Op)
	v := false
	switch op.Class() {
	case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView:
		for _, k := range n.Children {
			switch d := r.g.Data(k); {
			case d.WeightOnly || d.IsConst || r.isLeaf(k):
			case r.matmulDerived(k, depth+1):
				v = true
			case r.reduces(k, 0):
				return false
			}
		}
	default:
		v = op == ir.OpMatMul
	}
	r.derived[c] = v
	return v
}

// reduces reports whether class c is a reduction's result, possibly
// through elementwise ops and views.
func (r *region) reduces(c egraph.ClassID, depth int) bool {
	n, ok := r.pick(r.g.Find(c))
	if !ok || depth > 16 {
		return false
	}
	op, _ := OpOf(n.Op)
	switch op.Class() {
	case ir.ClassReduce:
		return true
	case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView:
		for _, k := range n.Children {
			if !r.g.Data(k).WeightOnly && r.reduces(k, depth+1) {
				return true
			}
		}
		return false
	}
	return op == ir.OpSoftmax || op == ir.OpRMSNorm || op == ir.OpLayerNorm
}

// isLeaf reports whether class c holds a leaf (an input, weight or state).
func (r *region) isLeaf(c egraph.ClassID) bool {
	for _, id := range r.g.ClassNodes(r.g.Find(c)) {
		if op, ok := OpOf(r.g.Node(id).Op); ok && op.Class() == ir.ClassLeaf {
			return true
		}
	}
	return false
}

// try adds node n computing class c when the body stays Legal with it,
// its operands not yet decided counting as arguments.
func (r *region) try(c egraph.ClassID, n egraph.Node) bool {
	op, ok := OpOf(n.Op)
	if !ok {
		return false
	}
	if r.pol.noMatMuls && op == ir.OpMatMul {
		return false
	}
	if r.pol.elementwise && len(r.nodes) > 0 {
		switch op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView:
		default:
			if op != ir.OpCast && op != ir.OpConcat {
				return false
			}
		}
	}
	if len(r.nodes)+len(r.args)+len(n.Children)+1 > maxBodyNodes {
		return false
	}
	r.at[c] = len(r.nodes)
	r.classes = append(r.classes, c)
	r.nodes = append(r.nodes, n)
	if !legalForm(r.forms(), true, false) {
		delete(r.at, c)
		r.classes = r.classes[:len(r.classes)-1]
		r.nodes = r.nodes[:len(r.nodes)-1]
		return false
	}
	if op == ir.OpMatMul {
		r.matmuls++
	}
	return true
}

// forms lists the region's nodes as legalForm wants them: producers
// before consumers. The region was grown consumers first, so reversed
// discovery order is topological once each node's inlined operands are
// placed before it.
func (r *region) forms() []formNode {
	order := r.topo()
	pos := make(map[int]int32, len(order))
	for i, j := range order {
		pos[j] = int32(i)
	}
	out := make([]formNode, len(order))
	for i, j := range order {
		n := r.nodes[j]
		op, _ := OpOf(n.Op)
		attrs, _ := Attrs(n.Payload)
		out[i] = formOf(op, attrs.Axis, n.Children, func(k egraph.ClassID) ir.Shape { return r.g.Data(k).Shape }, func(k egraph.ClassID) ir.DType { return r.g.Data(k).DType })
		for _, k := range n.Children {
			if at, ok := r.at[r.g.Find(k)]; ok {
				out[i].kids = append(out[i].kids, pos[at])
			}
		}
	}
	return out
}

// topo orders the region's nodes producers first.
func (r *region) topo() []int {
	order := make([]int, 0, len(r.nodes))
	state := make([]uint8, len(r.nodes))
	var walk func(int)
	walk = func(j int) {
		if state[j] != 0 {
			return
		}
		state[j] = 1
		for _, k := range r.nodes[j].Children {
			if at, ok := r.at[r.g.Find(k)]; ok {
				walk(at)
			}
		}
		state[j] = 2
		order = append(order, j)
	}
	for j := range r.nodes {
		walk(j)
	}
	return order
}

// body builds the region's kernel body in canonical form and the argument
// classes in the body's input order.
func (r *region) body() (*ir.Graph, []egraph.ClassID, bool) {
	return r.bodyOf(r.classes[0])
}

// bodyOf builds the region's body writing the given classes.
func (r *region) bodyOf(outs ...egraph.ClassID) (*ir.Graph, []egraph.ClassID, bool) {
	b := ir.NewBuilder("kernel")
	vals := map[egraph.ClassID]ir.Value{}
	var inputs []egraph.ClassID
	var value func(c egraph.ClassID) ir.Value
	value = func(c egraph.ClassID) ir.Value {
		c = r.g.Find(c)
		if v, ok := vals[c]; ok {
			return v
		}
		d := r.g.Data(c)
		var v ir.Value
		switch at, inside := r.at[c]; {
		case r.consts[c]:
			v = b.BroadcastTo(b.Scalar(d.DType, d.Const), d.Shape)
		case inside:
			n := r.nodes[at]
			op, _ := OpOf(n.Op)
			attrs, _ := Attrs(n.Payload)
			ins := make([]ir.Value, len(n.Children))
			for i, k := range n.Children {
				ins[i] = value(k)
			}
			v = b.Apply(op, attrs, ins...)
		default:
			v = b.Input(fmt.Sprintf("$%d", len(inputs)), d.DType, d.Shape...)
			inputs = append(inputs, c)
		}
		vals[c] = v
		return v
	}
	for i, c := range outs {
		b.Output(fmt.Sprintf("out%d", i), value(c))
	}
	body, err := b.Build()
	if err != nil || !Legal(body) {
		return nil, nil, false
	}
	canon, order, err := ir.Canonical(body)
	if err != nil {
		return nil, nil, false
	}
	kids := make([]egraph.ClassID, len(order))
	for i, o := range order {
		kids[i] = inputs[o]
	}
	return canon, kids, true
}
