package ir

import "math"

// A constant's values live in one of two attributes. Integer dtypes keep
// them in Ints, exactly: torch exports 2^63-1 as the end of every open
// slice, which float64 rounds to 2^63. Every other dtype keeps them in
// Data. Op.Normalize moves an integer constant's Data into Ints, so that
// one constant has one form in the e-graph and in hashes; Builder.Const
// does the same. The accessors below read either form.

// ConstLen is the number of values a constant carries: 1 for a splat
// (one value broadcast), or one per element.
func (a *Attrs) ConstLen() int {
	if a.Ints != nil {
		return len(a.Ints)
	}
	return len(a.Data)
}

// ConstAt returns the value of element i of a constant as float64 (the
// nearest float64 for integers beyond 2^53); a splat has the same value
// everywhere.
func (a *Attrs) ConstAt(i int64) float64 {
	if a.Ints != nil {
		if len(a.Ints) == 1 {
			return float64(a.Ints[0])
		}
		return float64(a.Ints[i])
	}
	if len(a.Data) == 1 {
		return a.Data[0]
	}
	return a.Data[i]
}

// ConstInt returns the value of element i of a constant as an integer:
// exact for Ints, and truncated and saturated (as DType.IntOf) for Data.
func (a *Attrs) ConstInt(i int64) int64 {
	if a.Ints != nil {
		if len(a.Ints) == 1 {
			return a.Ints[0]
		}
		return a.Ints[i]
	}
	return I64.IntOf(a.ConstAt(i))
}

// ConstSplat reports whether every value of a constant is the same one
// (NaNs count as equal) and, for an integer constant, whether that value
// is exact in float64, returning it. Callers that fold constants in
// float64 use it, so that they never fold an integer they cannot hold.
func (a *Attrs) ConstSplat() (float64, bool) {
	if a.Ints != nil {
		if len(a.Ints) == 0 {
			return 0, false
		}
		for _, x := range a.Ints[1:] {
			if x != a.Ints[0] {
				return 0, false
			}
		}
		if v := a.Ints[0]; v > 1<<53 || v < -(1<<53) {
			return 0, false
		}
		return float64(a.Ints[0]), true
	}
	if len(a.Data) == 0 {
		return 0, false
	}
	for _, x := range a.Data[1:] {
		if x != a.Data[0] && !(math.IsNaN(x) && math.IsNaN(a.Data[0])) {
			return 0, false
		}
	}
	return a.Data[0], true
}

// intConstData converts an integer constant's float values to Ints, the
// normal form; a value that is not an integer of the dtype is left in
// Data, for Infer to refuse.
func intConstData(dt DType, a *Attrs) {
	if !dt.IsInt() || a.Data == nil || a.Ints != nil {
		return
	}
	ints := make([]int64, len(a.Data))
	for i, x := range a.Data {
		if dt.Round(x) != x || x >= 0x1p63 {
			return
		}
		ints[i] = int64(x)
	}
	a.Data, a.Ints = nil, ints
}
