package ir

import (
	"math"

	"github.com/lumsearch/lumsearch/quant"
)

// unaryFn is the float64 meaning of a unary op.
func unaryFn(op Op) func(float64) float64 {
	switch op {
	case OpNeg:
		return func(x float64) float64 { return -x }
	case OpAbs:
		return math.Abs
	case OpExp:
		return math.Exp
	case OpLog:
		return math.Log
	case OpSqrt:
		return math.Sqrt
	case OpRsqrt:
		return func(x float64) float64 { return 1 / math.Sqrt(x) }
	case OpRecip:
		return func(x float64) float64 { return 1 / x }
	case OpSin:
		return math.Sin
	case OpCos:
		return math.Cos
	case OpTanh:
		return math.Tanh
	case OpSigmoid:
		return sigmoid
	case OpErf:
		return math.Erf
	case OpRelu:
		return func(x float64) float64 {
			if x > 0 {
				return x
			}
			if x != x {
				return x
			}
			return 0
		}
	case OpFloor:
		return math.Floor
	case OpCeil:
		return math.Ceil
	case OpNot:
		return func(x float64) float64 { return b2f(x == 0) }
	case OpRoundE4M3:
		return quant.SaturateE4M3
	}
	return nil
}

func sigmoid(x float64) float64 {
	// The two forms keep exp from overflowing on either side.
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// unaryDeriv is the derivative of a unary op at x, for magnitudes.
func unaryDeriv(op Op, x, y float64) float64 {
	switch op {
	case OpNeg:
		return -1
	case OpAbs:
		return 1
	case OpExp:
		return y
	case OpLog, OpRecip:
		if op == OpLog {
			return 1 / x
		}
		return -1 / (x * x)
	case OpSqrt:
		return 0.5 / y
	case OpRsqrt:
		return -0.5 * y / x
	case OpSin:
		return math.Cos(x)
	case OpCos:
		return -math.Sin(x)
	case OpTanh:
		return 1 - y*y
	case OpSigmoid:
		return y * (1 - y)
	case OpErf:
		return 2 / math.SqrtPi * math.Exp(-x*x)
	case OpRelu:
		return b2f(x > 0)
	}
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// binaryFn is the float64 meaning of a binary op or comparison on operands
// of dtype dt.
func binaryFn(op Op, dt DType) func(a, b float64) float64 {
	switch op {
	case OpAdd:
		return func(a, b float64) float64 { return a + b }
	case OpSub:
		return func(a, b float64) float64 { return a - b }
	case OpMul:
		return func(a, b float64) float64 { return a * b }
	case OpDiv:
		if dt.IsInt() {
			return func(a, b float64) float64 {
				if b == 0 {
					return 0 // the interpreter reports integer division by zero separately
				}
				return math.Trunc(a / b)
			}
		}
		return func(a, b float64) float64 { return a / b }
	case OpPow:
		return math.Pow
	case OpMax:
		return func(a, b float64) float64 {
			if a != a || b != b {
				return math.NaN()
			}
			return math.Max(a, b)
		}
	case OpMin:
		return func(a, b float64) float64 {
			if a != a || b != b {
				return math.NaN()
			}
			return math.Min(a, b)
		}
	case OpMod:
		return func(a, b float64) float64 {
			if dt.IsInt() && b == 0 {
				return 0
			}
			return math.Mod(a, b)
		}
	case OpAnd:
		return func(a, b float64) float64 { return b2f(a != 0 && b != 0) }
	case OpOr:
		return func(a, b float64) float64 { return b2f(a != 0 || b != 0) }
	case OpEq:
		return func(a, b float64) float64 { return b2f(a == b) }
	case OpNe:
		return func(a, b float64) float64 { return b2f(a != b) }
	case OpLt:
		return func(a, b float64) float64 { return b2f(a < b) }
	case OpLe:
		return func(a, b float64) float64 { return b2f(a <= b) }
	case OpGt:
		return func(a, b float64) float64 { return b2f(a > b) }
	case OpGe:
		return func(a, b float64) float64 { return b2f(a >= b) }
	}
	return nil
}
