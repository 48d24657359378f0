package ir

import (
	"fmt"
	"math"
)

// intElementwise computes a unary, binary or comparison op on integer
// operands exactly, in int64, wrapping the result to the node's dtype. A
// magnitude is the result's absolute value: integer results are exact.
func (e *evaluator) intElementwise() (*Tensor, *Tensor, error) {
	n := e.n
	v, m := e.out()
	for i := range v.Len() {
		var y int64
		var err error
		if n.Op.Class() == ClassUnary {
			y, err = intUnary(n.Op, e.in(0).Int(i))
		} else {
			y, err = intBinary(n.Op, e.in(0).Int(i), e.in(1).Int(i))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w at element %d", err, i)
		}
		v.SetInt(i, y)
		if m != nil {
			m.F64[i] = math.Abs(v.At(i))
		}
	}
	return v, m, nil
}

// intReduce computes sum (wrapping) and reduce_max of an integer tensor
// exactly. The max over an empty axis is the dtype's least value, as the
// float max over one is -inf (ONNX ReduceMax, opset 18).
func (e *evaluator) intReduce() (*Tensor, *Tensor, error) {
	n := e.n
	x := e.in(0)
	count, length, stride, first := rowsAlong(x.Shape, n.Axis)
	v, m := e.out()
	if length == 0 {
		// No rows to fold: every result is the empty fold.
		for i := range v.Len() {
			if n.Op == OpMaxReduce {
				v.SetInt(i, n.DType.MinInt())
			}
			if m != nil {
				m.F64[i] = math.Abs(v.At(i))
			}
		}
		return v, m, nil
	}
	for r := range count {
		base := first(r)
		acc := int64(0)
		if n.Op == OpMaxReduce {
			acc = n.DType.MinInt()
		}
		for j := range int64(length) {
			xj := x.Int(base + j*stride)
			if n.Op == OpMaxReduce {
				acc = max(acc, xj)
			} else {
				acc += xj
			}
		}
		// Row r of the input is element r of the result, whose reduced
		// axis has extent 1.
		v.SetInt(int64(r), acc)
		if m != nil {
			m.F64[r] = math.Abs(v.At(int64(r)))
		}
	}
	return v, m, nil
}
