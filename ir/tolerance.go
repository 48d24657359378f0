package ir

import (
	"fmt"
	"math"
)

// Tolerance is the relative error allowed when a program's result of dtype
// dt, made by combining reductionLength terms, is compared with the float64
// truth. It is the one tolerance every comparison in the project uses, and
// it is relative to the magnitude of the terms combined (see
// EvalOptions.Magnitude), not to the result alone.
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
	n := float64(max(reductionLength, 1))
	const f32 = 0x1p-24
	return 8 * (dt.Eps() + f32*(4+math.Sqrt(n)))
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
// magnitudes; nil means |want|) and tol from Tolerance. NaNs must match
// NaNs, infinities must match exactly. It returns the worst element when
// the check fails.
func Compare(got, want, mag *Tensor, reductionLength int) (*Mismatch, error) {
	if !got.Shape.Equal(want.Shape) {
		return nil, fmt.Errorf("compare: shapes %v and %v differ", got.Shape, want.Shape)
	}
	tol := Tolerance(got.DType, reductionLength)
	var worst *Mismatch
	worstRatio := 1.0
	for i := range want.Len() {
		g, w := got.At(i), want.At(i)
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
