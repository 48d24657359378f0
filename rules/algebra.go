package rules

import (
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The Go appliers of the algebra rule set (builtin/algebra.rules): the
// rewrites whose right side needs attributes computed from the match
// (composed permutations, reduced shapes, slice bounds, splat constants)
// or facts a condition cannot state. The verifier checks them by applying
// them in an e-graph (VerifyRewrite); each also has a test in
// algebra_test.go that applies it to a small e-graph and evaluates
// extractions with the reference interpreter.

func init() {
	RegisterApplier("sum_of_expand", sumOfExpand)
	RegisterApplier("sum_of_scaled", sumOfScaled)
	RegisterApplier("permute_compose", permuteCompose)
	RegisterApplier("view_identity", viewIdentity)
	RegisterApplier("merge_matmuls", mergeMatmuls)
	RegisterApplier("softmax_decompose", softmaxDecompose)
	RegisterApplier("softmax_online", softmaxOnline)
	RegisterApplier("rms_norm_decompose", rmsNormDecompose)
	RegisterApplier("layer_norm_decompose", layerNormDecompose)
	RegisterApplier("rms_norm_recognize", rmsNormRecognize)
}

// termBuilder adds tensor terms to an e-graph from an applier. Every node
// is type-checked against the analysis before it is added, so a build
// that fails part way adds nothing ill-typed; after the first failure
// every call is a no-op and done reports false.
type termBuilder struct {
	g      *egraph.EGraph[Data]
	failed bool
}

func (b *termBuilder) data(c egraph.ClassID) Data { return b.g.Data(c) }

func (b *termBuilder) shape(c egraph.ClassID) ir.Shape { return b.g.Data(c).Shape }

// op adds (op[a] kids...) and returns its class.
func (b *termBuilder) op(op ir.Op, a ir.Attrs, kids ...egraph.ClassID) egraph.ClassID {
	if b.failed {
		return 0
	}
	types := make([]ir.ValueType, len(kids))
	for i, k := range kids {
		d := b.g.Data(k)
		if !d.Valid() {
			b.failed = true
			return 0
		}
		types[i] = ir.ValueType{Shape: d.Shape, DType: d.DType}
	}
	if _, _, err := ir.Infer(op, op.Normalize(a), types); err != nil {
		b.failed = true
		return 0
	}
	c, err := b.g.Add(egraph.Node{Op: Symbol(op), Payload: AttrPayload(op, a), Children: slices.Clone(kids)})
	if err != nil {
		b.failed = true
		return 0
	}
	return c
}

func (b *termBuilder) unary(op ir.Op, x egraph.ClassID) egraph.ClassID {
	return b.op(op, ir.Attrs{}, x)
}

func (b *termBuilder) binary(op ir.Op, x, y egraph.ClassID) egraph.ClassID {
	return b.op(op, ir.Attrs{}, x, y)
}

// expand broadcasts x to shape (x itself when it has that shape).
func (b *termBuilder) expand(x egraph.ClassID, to ir.Shape) egraph.ClassID {
	if b.failed || b.shape(x).Equal(to) {
		return x
	}
	return b.op(ir.OpExpand, ir.Attrs{To: to.Clone()}, x)
}

// splat is the constant v of shape, built as ir.Builder broadcasts a
// scalar (a rank-0 constant, reshaped to all ones, expanded), so that it
// shares nodes with the constants of built graphs. v must be exact in dt.
func (b *termBuilder) splat(dt ir.DType, shape ir.Shape, v float64) egraph.ClassID {
	if dt.Round(v) != v {
		b.failed = true
		return 0
	}
	c := b.op(ir.OpConst, ir.Attrs{DType: dt, Data: []float64{v}})
	if len(shape) == 0 {
		return c
	}
	ones := make(ir.Shape, len(shape))
	for i := range ones {
		ones[i] = 1
	}
	return b.expand(b.op(ir.OpReshape, ir.Attrs{To: ones}, c), shape)
}

// cast converts x to dt (x itself when it has dt).
func (b *termBuilder) cast(x egraph.ClassID, dt ir.DType) egraph.ClassID {
	if b.failed || b.data(x).DType == dt {
		return x
	}
	return b.op(ir.OpCast, ir.Attrs{DType: dt}, x)
}

// lastSlice is x[..., start:end].
func (b *termBuilder) lastSlice(x egraph.ClassID, start, end int64) egraph.ClassID {
	s := b.shape(x)
	a := ir.Attrs{Starts: make([]int64, len(s)), Ends: make([]int64, len(s)), Steps: make([]int64, len(s))}
	for i, d := range s {
		a.Ends[i], a.Steps[i] = int64(d), 1
	}
	if len(s) == 0 {
		b.failed = true
		return 0
	}
	a.Starts[len(s)-1], a.Ends[len(s)-1] = start, end
	return b.op(ir.OpSlice, a, x)
}

func (b *termBuilder) done(c egraph.ClassID) (egraph.ClassID, bool) {
	return c, !b.failed
}

// axisOf normalizes a payload's axis for rank r.
func axisOf(p egraph.Payload, r int) (int, bool) {
	a, ok := Attrs(p)
	if !ok || a.Axis < -r || a.Axis >= r {
		return 0, false
	}
	if a.Axis < 0 {
		return a.Axis + r, true
	}
	return a.Axis, true
}

// withDim is s with axis ax set to d.
func withDim(s ir.Shape, ax int, d ir.Dim) ir.Shape {
	out := s.Clone()
	out[ax] = d
	return out
}

// sumOfExpand: (sum[?p] (expand[?q] ?x)). Where the expand repeats ?x
// along the summed axis, the sum is ?x times that axis's extent; where it
// does not, the sum moves inside the expand.
func sumOfExpand(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	b := &termBuilder{g: g}
	x := m.Get("?x")
	xd := g.Data(x)
	q, ok := Attrs(m.GetPayload("?q"))
	if !ok || !xd.Valid() || len(q.To) != len(xd.Shape) {
		return 0, false
	}
	ax, ok := axisOf(m.GetPayload("?p"), len(xd.Shape))
	if !ok {
		return 0, false
	}
	out := withDim(q.To, ax, 1)
	switch n := q.To[ax]; {
	case xd.Shape[ax] == n: // not broadcast on this axis (or an extent-1 sum)
		if n == 1 {
			return b.done(b.expand(x, out))
		}
		return b.done(b.expand(b.op(ir.OpSum, ir.Attrs{Axis: ax}, x), out))
	default: // ?x has extent 1 there: each output element sums n copies
		return b.done(b.binary(ir.OpMul, b.expand(x, out), b.splat(xd.DType, out, float64(n))))
	}
}

// sumOfScaled: (sum[?p] (mul ?c ?x)) with ?c a known finite splat
// constant is ?c (at the sum's shape) times (sum[?p] ?x).
func sumOfScaled(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	cd, rd := g.Data(m.Get("?c")), g.Data(m.Root())
	if !cd.IsConst || math.IsInf(cd.Const, 0) || math.IsNaN(cd.Const) || !rd.Valid() {
		return 0, false
	}
	p, ok := Attrs(m.GetPayload("?p"))
	if !ok {
		return 0, false
	}
	b := &termBuilder{g: g}
	return b.done(b.binary(ir.OpMul, b.splat(rd.DType, rd.Shape, cd.Const), b.op(ir.OpSum, ir.Attrs{Axis: p.Axis}, m.Get("?x"))))
}

// permuteCompose: (permute[?p] (permute[?q] ?x)) is one permute: output
// axis i is inner axis p[i], which is ?x's axis q[p[i]]. The identity
// gives ?x itself.
func permuteCompose(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	p, ok1 := Attrs(m.GetPayload("?p"))
	q, ok2 := Attrs(m.GetPayload("?q"))
	if !ok1 || !ok2 || len(p.Perm) != len(q.Perm) {
		return 0, false
	}
	r := make([]int, len(p.Perm))
	identity := true
	for i, pi := range p.Perm {
		if pi < 0 || pi >= len(q.Perm) {
			return 0, false
		}
		r[i] = q.Perm[pi]
		identity = identity && r[i] == i
	}
	x := m.Get("?x")
	if identity {
		return x, true
	}
	b := &termBuilder{g: g}
	return b.done(b.op(ir.OpPermute, ir.Attrs{Perm: r}, x))
}

// viewIdentity: (permute[?p] ?x), (reshape[?p] ?x) or (expand[?p] ?x)
// that does nothing is ?x: a permute by the identity, or a reshape or
// expand to ?x's own shape.
func viewIdentity(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	a, ok := Attrs(m.GetPayload("?p"))
	x := m.Get("?x")
	xd, rd := g.Data(x), g.Data(m.Root())
	if !ok || !xd.Valid() || !rd.Valid() || !xd.Shape.Equal(rd.Shape) {
		return 0, false
	}
	for i, p := range a.Perm {
		if p != i {
			return 0, false
		}
	}
	return x, true
}

// maxMergedMatmuls bounds how many matmuls merge into one (the arity of
// concats that lowering has kernels for): Q, K and V are three.
const maxMergedMatmuls = 4

// concatParts returns the operands of a concat along the last axis in
// class c, or c alone.
func concatParts(g *egraph.EGraph[Data], c egraph.ClassID) []egraph.ClassID {
	c = g.Find(c)
	r := len(g.Data(c).Shape)
	for _, nid := range g.ClassNodes(c) {
		n := g.Node(nid)
		if op, ok := OpOf(n.Op); !ok || op != ir.OpConcat {
			continue
		}
		if ax, ok := axisOf(n.Payload, r); ok && ax == r-1 {
			out := make([]egraph.ClassID, len(n.Children))
			for i, k := range n.Children {
				out[i] = g.Find(k)
			}
			return out
		}
	}
	return []egraph.ClassID{c}
}

// mergeMatmuls: (matmul ?x ?a), (matmul ?x ?b) with weight-only ?a and ?b
// are two slices of one matmul of ?x with concat(?a, ?b) along the last
// axis, a weight prepared at load time; with quantized ?a and ?b (dequant
// chains of weights, mergedWeight) the concat is never prepared: the
// matmul's kernel reads each part's packed operands in place
// (OneOpKernel). ?a's parts and ?b are of one kind. To build each set of
// merged weights once, in one order, ?b must be a single weight (no concat) whose
// class id is above those of ?a's parts, and the new concat lists ?a's
// parts flat: merging Q with K and then QK with V gives concat(Q, K, V),
// and Q, K, V give 4 merged matmuls (QK, QV, KV, QKV), not an unbounded
// number.
func mergeMatmuls(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	if len(m.Roots) != 2 {
		return 0, false
	}
	x, a, bw := m.Get("?x"), g.Find(m.Get("?a")), g.Find(m.Get("?b"))
	if a == bw {
		return 0, false
	}
	parts := concatParts(g, a)
	if len(parts) >= maxMergedMatmuls {
		return 0, false
	}
	if bp := concatParts(g, bw); len(bp) != 1 {
		return 0, false
	}
	kind, ok := mergedWeight(g, bw)
	if !ok {
		return 0, false
	}
	for _, p := range parts {
		if k, ok := mergedWeight(g, p); p >= bw || !ok || k != kind {
			return 0, false
		}
	}
	ad, bd := g.Data(a), g.Data(bw)
	if !ad.Valid() || !bd.Valid() || len(ad.Shape) < 2 {
		return 0, false
	}
	r := len(ad.Shape)
	na, nb := int64(ad.Shape[r-1]), int64(bd.Shape[r-1])
	b := &termBuilder{g: g}
	w := b.op(ir.OpConcat, ir.Attrs{Axis: r - 1}, append(parts, bw)...)
	mm := b.op(ir.OpMatMul, ir.Attrs{}, x, w)
	first := b.lastSlice(mm, 0, na)
	second := b.lastSlice(mm, na, na+nb)
	// Each of ?a's parts' own product is a slice of the new one too, so
	// that extraction can move Q, K and V to the merged matmul in one
	// step (extract.Improve adopts a class for all its direct readers;
	// through QK's slice, Q would only reach QKV in two).
	var own []egraph.ClassID
	if len(parts) > 1 {
		off := int64(0)
		for _, p := range parts {
			n := int64(g.Data(p).Shape[r-1])
			own = append(own, b.op(ir.OpMatMul, ir.Attrs{}, x, p), b.lastSlice(mm, off, off+n))
			off += n
		}
	}
	if b.failed {
		return 0, false
	}
	g.Union(m.Roots[1], second, "merge-matmuls")
	for i := 0; i < len(own); i += 2 {
		g.Union(own[i], own[i+1], "merge-matmuls")
	}
	return first, true
}

// mergedWeight reports whether class c is a weight a merged matmul can
// multiply by, and whether it is quantized: weight-only (prepared, with
// the others, into one weight at load time), or a quantized weight, a
// dequant chain whose packed operands are weight-only (read in place).
func mergedWeight(g *egraph.EGraph[Data], c egraph.ClassID) (quantized, ok bool) {
	if g.Data(c).WeightOnly {
		return false, true
	}
	n, found := dequantNode(g, c, 0)
	for depth := 0; found && depth <= 8; depth++ {
		if op, _ := OpOf(n.Op); op == ir.OpDequant {
			for _, k := range n.Children {
				if !g.Data(k).WeightOnly {
					return false, false
				}
			}
			return true, true
		}
		n, found = dequantNode(g, n.Children[0], depth+1)
	}
	return false, false
}

// upcast computes a norm or softmax in f32, as Hugging Face's models do
// for f16 and bf16 (and as the corpus builders decompose them): it returns
// the f32 value of x and a function bringing a result back to x's dtype.
func (b *termBuilder) upcast(x egraph.ClassID) (egraph.ClassID, func(egraph.ClassID) egraph.ClassID) {
	dt := b.data(x).DType
	return b.cast(x, ir.F32), func(y egraph.ClassID) egraph.ClassID { return b.cast(y, dt) }
}

// softmaxDecompose: (softmax[?p] ?x) is exp(x - max) / sum(exp(x - max))
// along the axis, in f32, as aten decomposes it.
func softmaxDecompose(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	x := m.Get("?x")
	xd := g.Data(x)
	if !xd.Valid() {
		return 0, false
	}
	ax, ok := axisOf(m.GetPayload("?p"), len(xd.Shape))
	if !ok {
		return 0, false
	}
	b := &termBuilder{g: g}
	h, down := b.upcast(x)
	e := b.unary(ir.OpExp, b.binary(ir.OpSub, h, b.expand(b.op(ir.OpMaxReduce, ir.Attrs{Axis: ax}, h), xd.Shape)))
	y := b.binary(ir.OpDiv, e, b.expand(b.op(ir.OpSum, ir.Attrs{Axis: ax}, e), xd.Shape))
	return b.done(down(y))
}

// softmaxOnline: (softmax[?p] ?x) along the last axis, of even extent 2k,
// computed the way flash attention does over two blocks of k: each block
// keeps its own running max m_i and sum l_i = sum(exp(x_i - m_i)); the
// max of both, m, rescales them: l = l_1 exp(m_1 - m) + l_2 exp(m_2 - m),
// and block i's result is exp(x_i - m_i) * exp(m_i - m) / l.
func softmaxOnline(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	x := m.Get("?x")
	xd := g.Data(x)
	if !xd.Valid() || len(xd.Shape) == 0 {
		return 0, false
	}
	r := len(xd.Shape)
	ax, ok := axisOf(m.GetPayload("?p"), r)
	n := int64(xd.Shape[r-1])
	if !ok || ax != r-1 || n < 2 || n%2 != 0 {
		return 0, false
	}
	k := n / 2
	half := withDim(xd.Shape, ax, ir.Dim(k))
	b := &termBuilder{g: g}
	h, down := b.upcast(x)
	red := ir.Attrs{Axis: ax}
	var mx, e, l [2]egraph.ClassID
	for i := range 2 {
		xi := b.lastSlice(h, int64(i)*k, int64(i+1)*k)
		mx[i] = b.op(ir.OpMaxReduce, red, xi)
		e[i] = b.unary(ir.OpExp, b.binary(ir.OpSub, xi, b.expand(mx[i], half)))
		l[i] = b.op(ir.OpSum, red, e[i])
	}
	mm := b.binary(ir.OpMax, mx[0], mx[1])
	var scale [2]egraph.ClassID
	for i := range 2 {
		scale[i] = b.unary(ir.OpExp, b.binary(ir.OpSub, mx[i], mm))
	}
	total := b.binary(ir.OpAdd, b.binary(ir.OpMul, l[0], scale[0]), b.binary(ir.OpMul, l[1], scale[1]))
	var p [2]egraph.ClassID
	for i := range 2 {
		p[i] = b.binary(ir.OpMul, e[i], b.expand(b.binary(ir.OpDiv, scale[i], total), half))
	}
	return b.done(down(b.op(ir.OpConcat, ir.Attrs{Axis: ax}, p[0], p[1])))
}

// normParts checks a norm's operands and returns its input's shape, the
// normalized extent and the f32 constants 1/n and eps the decomposition
// uses.
func normParts(g *egraph.EGraph[Data], m egraph.Match) (xs ir.Shape, inv, eps float64, ok bool) {
	xd := g.Data(m.Get("?x"))
	a, aok := Attrs(m.GetPayload("?p"))
	if !aok || !xd.Valid() || len(xd.Shape) == 0 || xd.Shape[len(xd.Shape)-1] == 0 {
		return nil, 0, 0, false
	}
	inv = ir.F32.Round(1 / float64(xd.Shape[len(xd.Shape)-1]))
	eps = ir.F32.Round(a.Eps)
	return xd.Shape, inv, eps, eps > 0
}

// perChannel broadcasts a norm's [n] scale or bias to shape.
func (b *termBuilder) perChannel(w egraph.ClassID, shape ir.Shape) egraph.ClassID {
	to := make(ir.Shape, len(shape))
	for i := range to {
		to[i] = 1
	}
	to[len(to)-1] = shape[len(shape)-1]
	if len(shape) > 1 {
		w = b.op(ir.OpReshape, ir.Attrs{To: to}, w)
	}
	return b.expand(w, shape)
}

// rmsNormDecompose: (rms_norm[?p] ?x ?w) is, in f32 as Llama computes it,
// x * rsqrt(mean(x*x) + eps), cast back, times the broadcast scale.
func rmsNormDecompose(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	xs, inv, eps, ok := normParts(g, m)
	if !ok {
		return 0, false
	}
	ax := len(xs) - 1
	row := withDim(xs, ax, 1)
	b := &termBuilder{g: g}
	h, down := b.upcast(m.Get("?x"))
	v := b.binary(ir.OpMul, b.op(ir.OpSum, ir.Attrs{Axis: ax}, b.binary(ir.OpMul, h, h)), b.splat(ir.F32, row, inv))
	rs := b.unary(ir.OpRsqrt, b.binary(ir.OpAdd, v, b.splat(ir.F32, row, eps)))
	y := down(b.binary(ir.OpMul, h, b.expand(rs, xs)))
	return b.done(b.binary(ir.OpMul, b.perChannel(m.Get("?w"), xs), y))
}

// layerNormDecompose: (layer_norm[?p] ?x ?w ?c) is, in f32,
// (x - mean) * rsqrt(mean((x - mean)^2) + eps) times the scale plus the
// bias, cast back. The affine part stays in f32 as in the op's kernel: the
// product rounded to bf16 before the bias cancels part of it is a rounding
// the op does not make (the rule verifier's bf16 counterexample).
func layerNormDecompose(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	xs, inv, eps, ok := normParts(g, m)
	if !ok {
		return 0, false
	}
	ax := len(xs) - 1
	row := withDim(xs, ax, 1)
	b := &termBuilder{g: g}
	h, down := b.upcast(m.Get("?x"))
	mean := b.binary(ir.OpMul, b.op(ir.OpSum, ir.Attrs{Axis: ax}, h), b.splat(ir.F32, row, inv))
	c := b.binary(ir.OpSub, h, b.expand(mean, xs))
	v := b.binary(ir.OpMul, b.op(ir.OpSum, ir.Attrs{Axis: ax}, b.binary(ir.OpMul, c, c)), b.splat(ir.F32, row, inv))
	rs := b.unary(ir.OpRsqrt, b.binary(ir.OpAdd, v, b.splat(ir.F32, row, eps)))
	y := b.binary(ir.OpMul, c, b.expand(rs, xs))
	w, bias := b.perChannel(b.cast(m.Get("?w"), ir.F32), xs), b.perChannel(b.cast(m.Get("?c"), ir.F32), xs)
	return b.done(down(b.binary(ir.OpAdd, b.binary(ir.OpMul, y, w), bias)))
}

// rmsNormRecognize: the f32 decomposition of an RMS norm,
//
//	(mul (expand[?we] (reshape[?wr] ?w))
//	     (mul ?x (expand[?re] (rsqrt (add (mul (sum[?p] (mul ?x ?x)) ?inv) ?eps)))))
//
// is (rms_norm ?x ?w) when the sum is over the last axis, ?inv is the
// constant 1/n of that axis's extent n, ?eps a positive constant and ?w a
// vector of n scales broadcast along the last axis.
func rmsNormRecognize(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	x, w := m.Get("?x"), m.Get("?w")
	xd, wd := g.Data(x), g.Data(w)
	id, ed := g.Data(m.Get("?inv")), g.Data(m.Get("?eps"))
	if !xd.Valid() || !wd.Valid() || len(xd.Shape) == 0 || !id.IsConst || !ed.IsConst || !(ed.Const > 0) || math.IsInf(ed.Const, 0) {
		return 0, false
	}
	r := len(xd.Shape)
	n := xd.Shape[r-1]
	ax, ok := axisOf(m.GetPayload("?p"), r)
	if !ok || ax != r-1 || len(wd.Shape) != 1 || wd.Shape[0] != n || xd.DType != wd.DType || id.Const != xd.DType.Round(1/float64(n)) {
		return 0, false
	}
	wr, ok := Attrs(m.GetPayload("?wr"))
	if !ok || len(wr.To) != r || wr.To[r-1] != n {
		return 0, false
	}
	b := &termBuilder{g: g}
	return b.done(b.op(ir.OpRMSNorm, ir.Attrs{Eps: ed.Const}, x, w))
}
