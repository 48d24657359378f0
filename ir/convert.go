package ir

import (
	"fmt"
	"math"
)

// ConvertExact returns t as a tensor of dtype dt when every element of t
// is a value of dt (t itself when it already has dt): an i32 as i64, an
// f32 as bf16 when each value is one, a float as an integer when each is
// a whole number in range, an integer or float as bool when each is 0 or
// 1. A NaN or infinity converts between float dtypes only. The error
// names the first element that does not convert, with its value.
//
// Why exact only: tensors a user brings (a PyTorch model's inputs) are
// the truth a program is checked against; a conversion that rounds would
// check another input than the one given, and say nothing about it.
func (t *Tensor) ConvertExact(dt DType) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("convert %s%v to an invalid dtype", t.DType, t.Shape)
	}
	if t.DType == dt {
		return t, nil
	}
	out := NewTensor(dt, t.Shape)
	for i := range t.Len() {
		if t.DType.IsInt() || t.DType == Bool {
			v := t.Int(i)
			if !intFits(dt, v) {
				return nil, fmt.Errorf("%s%v element %d is %d, which %s does not hold exactly", t.DType, t.Shape, i, v, dt)
			}
			out.SetInt(i, v)
			continue
		}
		x := t.At(i)
		if !floatFits(dt, x) {
			return nil, fmt.Errorf("%s%v element %d is %v, which %s does not hold exactly", t.DType, t.Shape, i, x, dt)
		}
		if dt.IsInt() || dt == Bool {
			out.SetInt(i, int64(x))
		} else {
			out.Set(i, x)
		}
	}
	return out, nil
}

// intFits says whether dtype dt holds the integer v exactly.
func intFits(dt DType, v int64) bool {
	if dt.IsInt() || dt == Bool {
		return v >= dt.MinInt() && v <= dt.MaxInt()
	}
	// Through float64 only when float64 holds v, so that the rounding
	// checked is dt's alone.
	return v >= -1<<53 && v <= 1<<53 && dt.Round(float64(v)) == float64(v)
}

// floatFits says whether dtype dt holds the float x exactly.
func floatFits(dt DType, x float64) bool {
	if dt.IsFloat() {
		return math.IsNaN(x) || dt.Round(x) == x
	}
	if x != math.Trunc(x) || math.IsInf(x, 0) {
		return false
	}
	if dt == Bool {
		return x == 0 || x == 1
	}
	// 2^63 itself is beyond int64: the bound is exclusive above.
	return x >= float64(dt.MinInt()) && x < -float64(dt.MinInt())
}
