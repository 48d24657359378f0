package ir

import (
	"fmt"
	"math"
)

// Tolerance is the relative error allowed when a program's result of dtype
// dt, made by combining reductionLength terms, is compared with the float64
// truth, when nothing narrower than dt lies on the result's path (see
// Allowance for the general case). It is relative to the magnitude of the
// terms combined (see EvalOptions.Magnitude), not to the result alone.
//
// Kernels accumulate in f32 and round once when they store, so the error is
// one rounding to dt plus the f32 accumulation error, which grows like the
// square root of the reduction length for the random-signed rounding errors
// of real data; fast-math intrinsics add a few f32 ulps. The constants keep
// a margin of about 8 over those estimates. Exact dtypes get 0.
func Tolerance(dt DType, reductionLength int) float64 {
	if !dt.IsFloat() {
		return 0
	}
	return toleranceOf(dt.Eps(), reductionLength)
}

// ToleranceOf is Tolerance for a result whose path rounds at most to unit
// roundoff eps (0: nothing but the f32 accumulation), for a caller that
// splits a result's roundings (the rule verifier weighs a value's own last
// rounding against the value itself, the others against the magnitude).
func ToleranceOf(eps float64, reductionLength int) float64 {
	return toleranceOf(eps, reductionLength)
}

// toleranceOf is Tolerance for a result whose path rounds at most to unit
// roundoff eps.
func toleranceOf(eps float64, reductionLength int) float64 {
	n := float64(max(reductionLength, 1))
	const f32 = 0x1p-24
	return 8 * (eps + f32*(4+math.Sqrt(n)))
}

// Allowance is the relative tolerance of value v of g, made by combining
// reductionLength terms, against the float64 truth of g: Tolerance with
// the unit roundoff of the narrowest rounding on v's path (PathEps) in
// place of v's own dtype's, and 0 for an exact dtype. See PathEps for
// which roundings count, and why none that a rewrite introduces does.
func (g *Graph) Allowance(v Value, eps []float64, reductionLength int) float64 {
	dt := g.Node(v).DType
	if !dt.IsFloat() {
		return 0
	}
	return toleranceOf(max(dt.Eps(), eps[v]), reductionLength)
}

// PathEps returns, for every value of g, the largest unit roundoff of a
// rounding on its path from the leaves: the precision the truth of a value
// is defined to. The roundings that count are
//
//   - every float value of g rounded to its declared dtype: g is the model
//     as given (or a kernel's body, which holds the model's values), and a
//     value the model declares bf16 may be stored as bf16 by any program of
//     it, since the model itself stores it so;
//   - the roundings the hardware forces on any kernel: an attention op on
//     f16 or bf16 operands feeds its probabilities to the tensor cores in
//     the operand dtype (a matmul's operands already have the tensor
//     cores' dtype in g, since the ir's matmul takes one dtype).
//
// Leaves count nothing: the truth starts from their values. A rounding a
// rewrite introduces never counts, because the allowance of a program is
// derived from the reference graph it is compared with, not from the
// program: a rewritten program that rounds a partial sum to bf16 where the
// model keeps it in f32 is judged by the model's path and fails. For the
// same reason the rewrites keep every partial accumulation in f32 (see
// package rules), so that a kernel body's narrow values are all the
// model's.
func PathEps(g *Graph) []float64 {
	eps := make([]float64, len(g.Nodes))
	for i, n := range g.Nodes {
		if n.Op.Class() == ClassLeaf {
			continue
		}
		e := 0.0
		for _, in := range n.Inputs {
			e = max(e, eps[in])
		}
		if n.DType.IsFloat() {
			e = max(e, n.DType.Eps())
		}
		if n.Op == OpAttention {
			for _, in := range n.Inputs {
				if dt := g.Node(in).DType; dt == F16 || dt == BF16 {
					e = max(e, dt.Eps())
				}
			}
		}
		eps[i] = e
	}
	return eps
}

// Mismatch describes the worst element of a comparison.
type Mismatch struct {
	Index     int64
	Got, Want float64
	Magnitude float64
	Allowed   float64
}

func (m Mismatch) String() string {
	return fmt.Sprintf("element %d: got %v, want %v (error %.3g, allowed %.3g of magnitude %.3g)",
		m.Index, m.Got, m.Want, math.Abs(m.Got-m.Want), m.Allowed, m.Magnitude)
}

// Compare checks got against the truth want, element by element: |got -
// want| <= tol * magnitude, where magnitude comes from mag (the truth's
// magnitudes; nil means |want|) and tol is Tolerance(got's dtype,
// reductionLength). It returns the worst element when the check fails (see
// CompareWithin).
func Compare(got, want, mag *Tensor, reductionLength int) (*Mismatch, error) {
	return CompareWithin(got, want, mag, Tolerance(got.DType, reductionLength))
}

// CompareWithin checks got against the truth want with relative tolerance
// tol: |got - want| <= tol * magnitude, where magnitude comes from mag (nil
// means |want|). NaNs must match NaNs and infinities must match exactly. A
// value (the truth, or an unrounded interpreter's result) beyond the
// largest finite value of got's dtype is that dtype's infinity of its
// sign: overflow is the model's semantics (a value the
// model stores in f16 overflows there), not a kernel's error. It returns
// the worst element when the check fails.
func CompareWithin(got, want, mag *Tensor, tol float64) (*Mismatch, error) {
	if !got.Shape.Equal(want.Shape) {
		return nil, fmt.Errorf("compare: shapes %v and %v differ", got.Shape, want.Shape)
	}
	var worst *Mismatch
	worstRatio := 1.0
	for i := range want.Len() {
		g, w := OverflowTo(got.DType, got.At(i)), OverflowTo(got.DType, want.At(i))
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				return &Mismatch{Index: i, Got: g, Want: w, Allowed: 0}, nil
			}
			continue
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				return &Mismatch{Index: i, Got: g, Want: w, Allowed: 0}, nil
			}
			continue
		}
		mg := math.Abs(w)
		if mag != nil {
			mg = math.Max(mg, mag.At(i))
		}
		allowed := tol * mg
		if tol > 0 {
			allowed = math.Max(allowed, AbsoluteFloor(got.DType, tol))
		}
		d := math.Abs(g - w)
		if d > allowed {
			ratio := math.Inf(1)
			if allowed > 0 {
				ratio = d / allowed
			}
			if ratio > worstRatio {
				worstRatio = ratio
				worst = &Mismatch{Index: i, Got: g, Want: w, Magnitude: mg, Allowed: allowed}
			}
		}
	}
	return worst, nil
}

// OverflowTo is the truth x as a value of float dtype dt compares: x
// itself, or dt's infinity of x's sign when x rounds beyond dt's largest
// finite value. Exact dtypes keep x.
func OverflowTo(dt DType, x float64) float64 {
	if dt.IsFloat() && !math.IsInf(x, 0) && math.IsInf(dt.Round(x), 0) {
		return math.Inf(int(math.Copysign(1, x)))
	}
	return x
}

// smallestSubnormal is the least positive value of a float dtype.
// AbsoluteFloor is the error Compare allows any result of dtype dt at
// tolerance tol (tol > 0), however small the result. Results that underflow
// lose relative precision. An f32 or bf16 result below the smallest normal
// (2^-126) may be flushed to zero by a GPU (FTZ) and its subnormal
// arithmetic keeps no relative precision, so differences under 2^-126 are
// no error. An f16 result's subnormals are ordinary values (down to 6e-8):
// it gets f32's smallest normal scaled by the tolerance, or half its
// smallest subnormal (below which it rounds to zero).
func AbsoluteFloor(dt DType, tol float64) float64 {
	switch dt {
	case F32, BF16:
		return 0x1p-126
	}
	return math.Max(tol*0x1p-126, dt.smallestSubnormal()/2)
}

func (d DType) smallestSubnormal() float64 {
	switch d {
	case F16:
		return 0x1p-24
	case BF16:
		return 0x1p-133
	case F32:
		return 0x1p-149
	}
	return 0
}
