package rules

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// How the verifier judges a rewrite's precision. Both sides are evaluated
// with every value a kernel would materialize rounded to its declared
// dtype (ir.EvalOptions.RoundEach), and the rounded right side is
// compared with the float64 truth of the left side, within an allowance
// derived from the left side only: the term as given, whose roundings a
// faithful rewrite may keep but never add to.
//
// The allowance is docs/precision.md's, with the roundings on the path
// split in two:
//
//   - the value's own last rounding (to its dtype when computed or cast)
//     is an error relative to the value itself: 8 u_own |want|;
//   - the roundings before it (PathEps of its operands) and the f32
//     accumulation are relative to the magnitude of the terms combined:
//     ir.ToleranceOf(u_before, n) * magnitude.
//
// The verifier allows the smaller of this sum and ir.Graph.Allowance,
// never more than a program of the term is allowed. It has to be sharper
// for a rule check: a bf16 matmul's allowance, 8 bf16 roundings of the
// terms' magnitude, holds any number of extra bf16 roundings of partial
// sums (each is at most a bf16 rounding of the same magnitude), so split-K
// with bf16 partials passed within a hundredth of it. With the split, the
// matmul's own rounding is against the result, which random signs make
// much smaller than the partials it cancels from, and the partials'
// roundings show.

// roundings holds, for every value of a reference graph, the unit
// roundoff of its own last rounding and the largest one before it on its
// path.
type roundings struct {
	own, before []float64
	path        []float64 // ir.PathEps
}

// roundingsOf splits ir.PathEps of g. Ops that copy or select elements of
// their operands (views, data movement, max, where, neg, abs, relu) keep
// their operands' roundings: their result is an operand's value, rounded
// where the operand was. A cast adds its dtype's rounding to the value's
// own. Every other op computes a new value: its own rounding is its
// dtype's, and everything on its operands' paths (and the tensor cores'
// rounding of attention's probabilities, which PathEps adds for the op
// itself) comes before.
func roundingsOf(g *ir.Graph) roundings {
	path := ir.PathEps(g)
	r := roundings{own: make([]float64, len(g.Nodes)), before: make([]float64, len(g.Nodes)), path: path}
	for i, n := range g.Nodes {
		if n.Op.Class() == ir.ClassLeaf {
			continue
		}
		own, before := 0.0, 0.0
		switch {
		case copiesOperands(n.Op):
			for _, in := range n.Inputs {
				own, before = max(own, r.own[in]), max(before, r.before[in])
			}
		case n.Op == ir.OpCast:
			own, before = max(n.DType.Eps(), r.own[n.Inputs[0]]), r.before[n.Inputs[0]]
		default:
			own = n.DType.Eps()
			for _, in := range n.Inputs {
				before = max(before, path[in])
			}
			if n.Op == ir.OpExperts && (n.DType == ir.F16 || n.DType == ir.BF16) {
				// The gated activations an expert's down projection
				// reads are in the op's dtype (they pass from one
				// kernel to the next, as the model's framework keeps
				// them): a rounding before the result.
				before = max(before, n.DType.Eps())
			}
			if n.Op == ir.OpAttention {
				// PathEps's rounding the tensor cores force on any kernel:
				// the probabilities, in the operands' dtype, before the
				// product with v.
				for _, in := range n.Inputs {
					if dt := g.Node(in).DType; dt == ir.F16 || dt == ir.BF16 {
						before = max(before, dt.Eps())
					}
				}
			}
		}
		r.own[i], r.before[i] = own, before
	}
	return r
}

// copiesOperands reports whether every element op computes is an element
// of an operand (or its negation, absolute value or zero), never rounded
// anew.
func copiesOperands(op ir.Op) bool {
	switch op.Class() {
	case ir.ClassView, ir.ClassSelect:
		return true
	case ir.ClassMove:
		return op != ir.OpCast
	}
	switch op {
	case ir.OpMax, ir.OpMin, ir.OpMaxReduce, ir.OpNeg, ir.OpAbs, ir.OpRelu:
		return true
	}
	return false
}

// within reports, element by element, whether got (value v of g computed
// with every value rounded) meets the truth want within the allowance
// judge applies.
func (r roundings) within(g *ir.Graph, v ir.Value, got, want, mag *ir.Tensor, n int) ([]bool, error) {
	ok := make([]bool, want.Len())
	if mm, err := r.judge(g, v, got, want, mag, n, nil); err != nil || mm == nil {
		for i := range ok {
			ok[i] = true
		}
		return ok, err
	}
	one := func(t *ir.Tensor, i int64) *ir.Tensor {
		return &ir.Tensor{DType: t.DType, Shape: ir.Shape{1}, F64: []float64{t.At(i)}}
	}
	for i := range want.Len() {
		var m *ir.Tensor
		if mag != nil {
			m = one(mag, i)
		}
		mm, err := r.judge(g, v, one(got, i), one(want, i), m, n, nil)
		if err != nil {
			return nil, err
		}
		ok[i] = mm == nil
	}
	return ok, nil
}

// judge compares got, value v of g computed by a program with every value
// rounded, with the truth want (g's float64 value of v) and its magnitudes
// mag, combining n terms. Elements where excused says so are not judged.
// It returns the worst element out of the allowance (its Magnitude is the
// effective one: the allowance divided by the tolerance Allowed was
// computed with).
func (r roundings) judge(g *ir.Graph, v ir.Value, got, want, mag *ir.Tensor, n int, excused func(i int64) bool) (*ir.Mismatch, error) {
	dt := g.Node(v).DType
	if !dt.IsFloat() {
		return ir.CompareWithin(got, want, mag, 0)
	}
	tolMag := ir.ToleranceOf(r.before[v], n)
	tolOwn := 8 * r.own[v]
	tolPath := g.Allowance(v, r.path, n)
	// The allowance of an element is min(tolMag m + tolOwn |want|, tolPath
	// m), m its magnitude (at least |want|). CompareWithin allows tol *
	// max(|want|, e): with tol the smaller of the two tolerances, both
	// terms are at least tol |want|, so e = allowance / tol is too and the
	// product is the allowance. An excused element gets the truth as its
	// value.
	tol := min(tolMag+tolOwn, tolPath)
	eff := &ir.Tensor{DType: got.DType, Shape: got.Shape.Clone(), F64: make([]float64, want.Len())}
	judged := &ir.Tensor{DType: got.DType, Shape: got.Shape.Clone(), F64: make([]float64, want.Len())}
	for i := range want.Len() {
		w := math.Abs(want.At(i))
		m := w
		if mag != nil {
			m = math.Max(m, mag.At(i))
		}
		eff.F64[i] = min(tolMag*m+tolOwn*w, tolPath*m) / tol
		judged.F64[i] = got.At(i)
		if excused != nil && excused(i) {
			judged.F64[i] = want.At(i)
		}
	}
	return ir.CompareWithin(judged, want, eff, tol)
}

// nonFinite reports whether element i of t is an infinity or NaN.
func nonFinite(t *ir.Tensor, i int64) bool {
	x := t.At(i)
	return math.IsInf(x, 0) || math.IsNaN(x)
}
