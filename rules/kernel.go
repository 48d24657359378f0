package rules

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// KernelSymbol is the operator of kernel terms (kernel SPEC x1 ... xn): one
// GPU launch computing its class from the classes x1..xn, which are
// materialized in memory. SPEC is the fused body, an ir graph over inputs
// $0..$n-1 in canonical form, interned into the payload.
var KernelSymbol = egraph.Intern("kernel")

// ProjSymbol is the operator of (proj K) with payload i: output i of the
// multi-output kernel whose class is K. It moves nothing: consumers read
// the output the kernel wrote.
var ProjSymbol = egraph.Intern("proj")

var specTable = struct {
	sync.RWMutex
	ids    map[string]egraph.Payload
	bodies []*ir.Graph // index = payload - 1
}{ids: map[string]egraph.Payload{}}

// SpecPayload interns a canonical kernel body (see ir.Canonical).
func SpecPayload(body *ir.Graph) egraph.Payload {
	key := body.String()
	specTable.RLock()
	p, ok := specTable.ids[key]
	specTable.RUnlock()
	if ok {
		return p
	}
	specTable.Lock()
	defer specTable.Unlock()
	if p, ok := specTable.ids[key]; ok {
		return p
	}
	specTable.bodies = append(specTable.bodies, body)
	p = egraph.Payload(len(specTable.bodies))
	specTable.ids[key] = p
	return p
}

// Spec returns the body a kernel payload stands for.
func Spec(p egraph.Payload) (*ir.Graph, bool) {
	specTable.RLock()
	defer specTable.RUnlock()
	if p == 0 || uint64(p) > uint64(len(specTable.bodies)) {
		return nil, false
	}
	return specTable.bodies[p-1], true
}

// kernelData types a kernel term from its body and its arguments' data.
func kernelData(n egraph.Node, kids []Data) Data {
	body, ok := Spec(n.Payload)
	if !ok {
		return Data{Err: fmt.Sprintf("kernel with unknown body %d", n.Payload)}
	}
	ins := body.Inputs()
	if len(ins) != len(kids) {
		return Data{Err: fmt.Sprintf("kernel body takes %d arguments, got %d", len(ins), len(kids))}
	}
	weightOnly := true
	for i, v := range ins {
		in := body.Node(v)
		if !kids[i].Shape.Equal(in.Shape) || kids[i].DType != in.DType {
			return Data{Err: fmt.Sprintf("kernel argument $%d is %s%v, its body wants %s%v", i, kids[i].DType, kids[i].Shape, in.DType, in.Shape)}
		}
		weightOnly = weightOnly && kids[i].WeightOnly
	}
	if holdsDequant(body) {
		// As Make says of a dequant: what decodes a quantized weight is
		// never weight-only, so that no class holding such a kernel is
		// taken for a value prepared at load time.
		weightOnly = false
	}
	switch len(body.Outputs) {
	case 0:
		return Data{Err: "kernel without outputs"}
	case 1:
		out := body.Node(body.Outputs[0].Value)
		return Data{Shape: out.Shape.Clone(), DType: out.DType, WeightOnly: weightOnly}
	}
	d := Data{WeightOnly: weightOnly}
	for _, o := range body.Outputs {
		n := body.Node(o.Value)
		d.Outputs = append(d.Outputs, ir.ValueType{Shape: n.Shape.Clone(), DType: n.DType})
	}
	return d
}

// projData types (proj i K) from K's outputs.
func projData(n egraph.Node, k Data) Data {
	switch {
	case k.Err != "":
		return Data{Err: k.Err}
	case !k.IsTuple():
		return Data{Err: "proj of a class that is not a multi-output kernel"}
	case uint64(n.Payload) >= uint64(len(k.Outputs)):
		return Data{Err: fmt.Sprintf("proj %d of a kernel with %d outputs", n.Payload, len(k.Outputs))}
	}
	t := k.Outputs[n.Payload]
	return Data{Shape: t.Shape.Clone(), DType: t.DType, WeightOnly: k.WeightOnly}
}

// dataBytes is the size of a class's value: a tensor, or all of a
// multi-output kernel's outputs.
func dataBytes(d Data) int64 {
	if d.IsTuple() {
		var n int64
		for _, t := range d.Outputs {
			n += t.Shape.NumElements() * int64(t.DType.Size())
		}
		return n
	}
	return d.Shape.NumElements() * int64(d.DType.Size())
}

// OneOpKernel builds the kernel term computing one tensor op over the given
// argument classes, and returns its class. It is the applier of the lower
// rules.
func OneOpKernel(g *egraph.EGraph[Data], op ir.Op, attrs ir.Attrs, args []egraph.ClassID) (egraph.ClassID, bool) {
	b := ir.NewBuilder("kernel")
	ins := make([]ir.Value, len(args))
	var leaves []egraph.ClassID
	merged := false // a merged projection's weights inlined
	for i, a := range args {
		d := g.Data(a)
		if !d.Valid() {
			return 0, false
		}
		if dequantChain(g, a) {
			// A quantized weight (through views) is read through its
			// dequant: the kernel's arguments are the packed operands.
			v, ok := inlineDequant(g, b, a, &leaves)
			if !ok {
				return 0, false
			}
			ins[i] = v
			continue
		}
		if cat, ok := dequantConcat(g, a); ok {
			// Quantized weights side by side (a merged projection's):
			// each part read through its dequant, in place.
			attrs, ok := Attrs(cat.Payload)
			if !ok {
				return 0, false
			}
			parts := make([]ir.Value, len(cat.Children))
			for j, c := range cat.Children {
				if parts[j], ok = inlineDequant(g, b, c, &leaves); !ok {
					return 0, false
				}
			}
			ins[i] = b.Apply(ir.OpConcat, attrs, parts...)
			merged = true
			continue
		}
		ins[i] = b.Input(fmt.Sprintf("$%d", len(leaves)), d.DType, d.Shape...)
		leaves = append(leaves, a)
	}
	args = leaves
	b.Output("out", b.Apply(op, attrs, ins...))
	body, err := b.Build()
	if err != nil {
		return 0, false
	}
	canon, order, err := ir.Canonical(body)
	if err != nil || merged && !Legal(canon) {
		// A merged projection's packed operands past the argument
		// bound (three awq or gptq weights are nine): its pairs merge.
		return 0, false
	}
	kids := make([]egraph.ClassID, len(order))
	for i, o := range order {
		kids[i] = args[o]
	}
	c, err := g.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(canon), Children: kids})
	return c, err == nil
}

// opRewrites makes one Go rewrite per computing tensor op and arity
// (variadic ops at 2, 3 and 4 operands), matching (op[?attrs] ?x0 ...),
// named prefix-op-arity; apply builds each one's applier.
func opRewrites(prefix string, apply func(op ir.Op, name string) egraph.ApplyFunc[Data]) []*egraph.Rewrite[Data] {
	var out []*egraph.Rewrite[Data]
	for _, op := range ir.Ops() {
		if op.Class() == ir.ClassLeaf {
			continue
		}
		arities := []int{op.Arity()}
		if op.Arity() < 0 {
			arities = []int{2, 3, 4}
		}
		if op.MaxArity() > op.Arity() {
			arities = append(arities, op.MaxArity()) // with the runtime position, or paged attention's sinks
		}
		for _, n := range arities {
			kids := make([]egraph.PatternTerm, n)
			for i := range kids {
				kids[i] = egraph.PatternTerm{Var: fmt.Sprintf("?x%d", i)}
			}
			p, err := egraph.NewPattern(egraph.PatternTerm{Op: Symbol(op), PayloadVar: "?attrs", Children: kids})
			if err != nil {
				panic(err) // the patterns are built here, from valid parts
			}
			name := fmt.Sprintf("%s-%s-%d", prefix, op, n)
			rw, err := egraph.NewFuncRewrite(name, egraph.Searcher(p), apply(op, name))
			if err != nil {
				panic(err)
			}
			out = append(out, rw)
		}
	}
	return out
}

// LowerRewrites are the lower rule set: every tensor op that computes
// something (not a leaf) gets a one-op kernel. They are written in Go
// because one rule per op and arity says it more plainly than a file.
func LowerRewrites() []*egraph.Rewrite[Data] {
	return opRewrites("lower", func(op ir.Op, _ string) egraph.ApplyFunc[Data] {
		return func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
			attrs, ok := Attrs(m.GetPayload("?attrs"))
			if !ok {
				return 0, false
			}
			switch {
			case op == ir.OpExperts:
				// No kernel computes experts whole: its lowering is its
				// split form, whose ops have kernels.
				return splitExperts(g, attrs, m.Subst)
			case op == ir.OpDequant:
				// No kernel writes a dequantized weight out: its readers
				// decode it as they load it (OneOpKernel inlines it).
				return 0, false
			case copiesDequant(g, op, m.Subst):
				// Nor a view, a cast or a concatenation of them (a
				// transposed or merged copy of the weights).
				return 0, false
			}
			return OneOpKernel(g, op, attrs, m.Subst)
		}
	})
}

// SimpleCost is the cost estimate extraction uses until the cost model
// exists (cost.DefaultSimple): a kernel costs the bytes it moves (its
// arguments and its result) at memory bandwidth plus a launch, and a
// kernel that depends on weights only runs once at load time and is
// charged a share of that; leaves and views (which consumers read through
// strided indexes) are free; every other tensor op cannot execute on its
// own (+Inf), so only kernel programs are extracted.
func SimpleCost(eg *egraph.EGraph[Data]) extract.CostFunc {
	est := cost.DefaultSimple
	return func(g *egraph.Graph, id egraph.NodeID) float64 {
		n := g.Node(id)
		d := eg.Data(g.NodeClass(id))
		if !d.Valid() && !d.IsTuple() {
			return math.Inf(1)
		}
		if n.Op == ProjSymbol {
			return 0
		}
		if n.Op == KernelSymbol {
			if writesDequantized(eg, n) {
				return math.Inf(1)
			}
			out := dataBytes(d)
			var in int64
			for _, k := range n.Children {
				in += dataBytes(eg.Data(k))
			}
			if d.WeightOnly {
				return est.Prep(in, out)
			}
			return est.Kernel(in, out)
		}
		op, ok := OpOf(n.Op)
		switch {
		case !ok:
			return math.Inf(1)
		case op.Class() == ir.ClassLeaf, op.Class() == ir.ClassView:
			return 0
		}
		return math.Inf(1)
	}
}

// ModelCost prices kernels with the cost model m, each body with its
// arguments' views folded in as lowering folds them (viewFolder): a kernel costs its best
// schedule's time (measured where the model has measurements), a kernel
// that depends on weights only a share of it (it runs once at load time,
// cost.DefaultSimple.PrepShare), views, leaves and projections nothing,
// and every other tensor op cannot execute on its own (+Inf). A kernel the
// model cannot price (no schedule fits the device) is +Inf too.
func ModelCost(eg *egraph.EGraph[Data], m *cost.Model) extract.CostFunc {
	folder := newViewFolder(eg)
	return func(g *egraph.Graph, id egraph.NodeID) float64 {
		n := g.Node(id)
		d := eg.Data(g.NodeClass(id))
		if !d.Valid() && !d.IsTuple() {
			return math.Inf(1)
		}
		switch n.Op {
		case ProjSymbol:
			return 0
		case KernelSymbol:
			body, ok := Spec(n.Payload)
			if !ok || writesDequantized(eg, n) {
				return math.Inf(1)
			}
			if rows, ok := inPlaceRows(eg, n, body); ok {
				body = rows
			} else {
				body = folder.fold(n, body)
			}
			e, err := m.Kernel(body)
			if err != nil {
				return math.Inf(1)
			}
			if d.WeightOnly {
				return e.Seconds * cost.DefaultSimple.PrepShare
			}
			return e.Seconds
		}
		op, ok := OpOf(n.Op)
		if ok && (op.Class() == ir.ClassLeaf || op.Class() == ir.ClassView) {
			return 0
		}
		return math.Inf(1)
	}
}

// inPlaceRows is, for a kernel writing a state's new content
// (slice_update(state, rows), or scatter(state, rows, slots) with the
// slots an input, over the state's class read whole there and nowhere
// else, rows computed by the elementwise form), the body lowering runs
// instead: the rows alone (and the slots they are written at), written
// into the state buffer in place (lower's updateInPlace). Pricing the
// whole state's copy would make a decode step's KV cache write, or a
// serving step's write into its paged pool, look like a copy of the
// cache.
func inPlaceRows(eg *egraph.EGraph[Data], n egraph.Node, body *ir.Graph) (*ir.Graph, bool) {
	if len(body.Outputs) != 1 {
		return nil, false
	}
	out := body.Outputs[0].Value
	for body.Node(out).Op == ir.OpCast && body.Node(body.Node(out).Inputs[0]).DType == body.Node(out).DType {
		out = body.Node(out).Inputs[0]
	}
	su := body.Node(out)
	if su.Op != ir.OpSliceUpdate && su.Op != ir.OpScatter {
		return nil, false
	}
	base := su.Inputs[0]
	if body.Node(base).Op != ir.OpInput {
		return nil, false
	}
	k := slices.Index(body.Inputs(), base)
	if k < 0 || k >= len(n.Children) || !isState(eg, n.Children[k]) {
		return nil, false
	}
	rows, last := su.Inputs[1], su.Inputs[1]
	need := make([]bool, len(body.Nodes))
	need[rows] = true
	if su.Op == ir.OpScatter {
		// The kernel reads the slots as they are (lowering writes through
		// them only when they are one of the body's inputs); the priced
		// body reads them too.
		slots := su.Inputs[2]
		if body.Node(slots).Op != ir.OpInput {
			return nil, false
		}
		need[slots], last = true, max(rows, slots)
	}
	for i := int(last); i >= 0; i-- {
		if !need[i] {
			continue
		}
		nd := body.Nodes[i]
		switch c := nd.Op.Class(); {
		case ir.Value(i) == base:
			return nil, false // the rows read the old content
		case c == ir.ClassLeaf || c == ir.ClassUnary || c == ir.ClassBinary || c == ir.ClassCompare || c == ir.ClassSelect || c == ir.ClassView || c == ir.ClassMove:
		case nd.Op == ir.OpSum && !rowReduce(body, nd):
		default:
			return nil, false
		}
		for _, in := range nd.Inputs {
			need[in] = true
		}
	}
	b := ir.NewBuilder(body.Name)
	vals := make([]ir.Value, len(body.Nodes))
	for i, nd := range body.Nodes[:last+1] {
		if !need[i] {
			continue
		}
		if nd.Op == ir.OpInput {
			vals[i] = b.Input(nd.Name, nd.DType, nd.Shape...)
			continue
		}
		kids := make([]ir.Value, len(nd.Inputs))
		for j, in := range nd.Inputs {
			kids[j] = vals[in]
		}
		vals[i] = b.Apply(nd.Op, nd.Attrs, kids...)
	}
	b.Output("rows", vals[rows])
	g, err := b.Build()
	if err != nil {
		return nil, false
	}
	return g, true
}

// isState reports whether class c holds a state leaf (a KV cache).
func isState(eg *egraph.EGraph[Data], c egraph.ClassID) bool {
	for _, id := range eg.ClassNodes(eg.Find(c)) {
		if op, ok := OpOf(eg.Node(id).Op); ok && op == ir.OpState {
			return true
		}
	}
	return false
}

// dequantChain reports whether class c holds a dequant, or a view or cast
// of one (a chain of them down to a dequant): a quantized weight as its
// readers see it.
func dequantChain(g *egraph.EGraph[Data], c egraph.ClassID) bool {
	_, ok := dequantNode(g, c, 0)
	return ok
}

// dequantNode is the node of class c that inlineDequant follows: its
// dequant, or else a view or cast whose operand is a dequant chain.
func dequantNode(g *egraph.EGraph[Data], c egraph.ClassID, depth int) (egraph.Node, bool) {
	if depth > 8 {
		return egraph.Node{}, false
	}
	var view egraph.Node
	found := false
	for _, nid := range g.ClassNodes(c) {
		n := g.Node(nid)
		op, ok := OpOf(n.Op)
		if !ok {
			continue
		}
		if op == ir.OpDequant {
			return n, true
		}
		if !found && (op.Class() == ir.ClassView || op == ir.OpCast) && len(n.Children) == 1 {
			if _, ok := dequantNode(g, n.Children[0], depth+1); ok {
				view, found = n, true
			}
		}
	}
	return view, found
}

// copiesDequant reports whether op over classes args only rearranges
// quantized weights: a view of a dequant chain (a transposed copy of the
// weight), or a concat of them (a merged projection's weights side by
// side). No kernel computes those (it would write a dequantized copy):
// their readers decode each weight in place, and a kernel rooted there
// would make the class weight-only, which region fusion then reads as a
// prepared argument instead of inlining its dequants.
func copiesDequant(g *egraph.EGraph[Data], op ir.Op, args []egraph.ClassID) bool {
	switch {
	case op.Class() == ir.ClassView || op == ir.OpCast:
		return len(args) > 0 && dequantChain(g, args[0])
	case op == ir.OpConcat:
		return dequantParts(g, args)
	}
	return false
}

// dequantConcat is class c's concatenation along its last axis of
// quantized weights (each a dequant chain: a merged projection's Q, K and
// V), which the kernels that read it inline part by part.
func dequantConcat(g *egraph.EGraph[Data], c egraph.ClassID) (egraph.Node, bool) {
	r := len(g.Data(c).Shape)
	for _, nid := range g.ClassNodes(c) {
		n := g.Node(nid)
		if op, ok := OpOf(n.Op); !ok || op != ir.OpConcat || len(n.Children) < 2 {
			continue
		}
		if ax, ok := axisOf(n.Payload, r); ok && ax == r-1 && dequantParts(g, n.Children) {
			return n, true
		}
	}
	return egraph.Node{}, false
}

// dequantParts reports whether every class of cs is a dequant chain.
func dequantParts(g *egraph.EGraph[Data], cs []egraph.ClassID) bool {
	for _, c := range cs {
		if !dequantChain(g, c) {
			return false
		}
	}
	return len(cs) > 0
}

// inlineDequant adds class c's dequant chain to b, its dequant's operands
// as inputs named for their places in leaves (appended to), and returns
// the chain's value.
func inlineDequant(g *egraph.EGraph[Data], b *ir.Builder, c egraph.ClassID, leaves *[]egraph.ClassID) (ir.Value, bool) {
	n, ok := dequantNode(g, c, 0)
	if !ok {
		return ir.NoValue, false
	}
	op, _ := OpOf(n.Op)
	attrs, ok := Attrs(n.Payload)
	if !ok {
		return ir.NoValue, false
	}
	if op != ir.OpDequant {
		x, ok := inlineDequant(g, b, n.Children[0], leaves)
		if !ok {
			return ir.NoValue, false
		}
		return b.Apply(op, attrs, x), true
	}
	ins := make([]ir.Value, len(n.Children))
	for i, k := range n.Children {
		d := g.Data(k)
		if !d.Valid() {
			return ir.NoValue, false
		}
		ins[i] = b.Input(fmt.Sprintf("$%d", len(*leaves)), d.DType, d.Shape...)
		*leaves = append(*leaves, k)
	}
	return b.Apply(op, attrs, ins...), true
}

// writesDequantized reports whether kernel n writes decoded weights: a
// value computed from weights alone that decodes a quantized weight (a
// dequantized copy of it, at load time or in every run), or an output
// that is a dequant seen through views and casts (a second output of a
// fused kernel). No program holds one: a quantized weight is decoded by
// the kernels that read it, as they load it, so that the packed bytes are
// what runs move and memory holds. Such a kernel costs +Inf.
func writesDequantized(eg *egraph.EGraph[Data], n egraph.Node) bool {
	body, ok := Spec(n.Payload)
	if !ok || !holdsDequant(body) {
		return false
	}
	for _, o := range body.Outputs {
		if _, ok := ir.DequantUnder(body, o.Value); ok {
			return true
		}
	}
	for _, k := range n.Children {
		if !eg.Data(k).WeightOnly {
			return false
		}
	}
	return true
}

// holdsDequant reports whether a kernel body decodes a quantized weight.
func holdsDequant(body *ir.Graph) bool {
	for _, n := range body.Nodes {
		if n.Op == ir.OpDequant {
			return true
		}
	}
	return false
}
