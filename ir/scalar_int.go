package ir

import "fmt"

// The integer meaning of the elementwise ops. Integer tensors are exact
// (int64 storage), so their arithmetic is done in int64 rather than
// through float64, which cannot hold the 2^63-1 that torch writes for an
// open slice end: results wrap to the dtype (two's complement), division
// truncates toward zero and the remainder takes the dividend's sign, as C,
// ONNX Runtime and torch compute them.

// intUnary is the integer meaning of a unary op (neg and abs; infer allows
// no other on integers). Both wrap: -(-2^63) and |-2^63| are -2^63.
func intUnary(op Op, x int64) (int64, error) {
	switch op {
	case OpNeg:
		return -x, nil
	case OpAbs:
		if x < 0 {
			return -x, nil
		}
		return x, nil
	}
	return 0, fmt.Errorf("%s has no integer meaning", op)
}

// intBinary is the integer meaning of a binary op or comparison, before
// wrapping to the dtype. Division or remainder by zero is an error, not an
// invented value.
func intBinary(op Op, a, b int64) (int64, error) {
	switch op {
	case OpAdd:
		return a + b, nil
	case OpSub:
		return a - b, nil
	case OpMul:
		return a * b, nil
	case OpDiv, OpMod:
		if b == 0 {
			return 0, fmt.Errorf("integer division by zero")
		}
		if b == -1 {
			// Go defines MinInt64 / -1 as MinInt64 (wrapped) and
			// MinInt64 % -1 as 0; spelled out for the reader.
			if op == OpDiv {
				return -a, nil
			}
			return 0, nil
		}
		if op == OpDiv {
			return a / b, nil
		}
		return a % b, nil
	case OpMax:
		return max(a, b), nil
	case OpMin:
		return min(a, b), nil
	case OpAnd:
		return i2b(a != 0 && b != 0), nil
	case OpOr:
		return i2b(a != 0 || b != 0), nil
	case OpEq:
		return i2b(a == b), nil
	case OpNe:
		return i2b(a != b), nil
	case OpLt:
		return i2b(a < b), nil
	case OpLe:
		return i2b(a <= b), nil
	case OpGt:
		return i2b(a > b), nil
	case OpGe:
		return i2b(a >= b), nil
	}
	return 0, fmt.Errorf("%s has no integer meaning", op)
}

func i2b(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// castValue copies element i of x into element i of v, converting to v's
// dtype: exactly between integers (wrapping), by DType.IntOf from floats
// to integers, and to the nearest float otherwise.
func castValue(v *Tensor, i int64, x *Tensor, j int64) {
	if x.DType.IsInt() && (v.DType.IsInt() || v.DType == Bool) {
		v.SetInt(i, x.Int(j))
		return
	}
	v.Set(i, x.At(j))
}

// copyElem copies element j of x into element i of v, which has x's dtype,
// exactly: a float intermediate keeps its float64 value unrounded, as the
// truth does.
func copyElem(v *Tensor, i int64, x *Tensor, j int64) {
	if v.intStorage() {
		v.setInt(i, x.Int(j))
		return
	}
	v.F64[i] = x.At(j)
}
