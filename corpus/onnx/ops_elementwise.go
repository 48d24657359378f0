package onnx

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// Elementwise operators: unary math, activations, binary arithmetic with
// numpy broadcasting, comparisons and logic, and the variadic reductions
// (Max, Min, Sum, Mean).

func init() {
	// Unary ops the IR has. Version 1 differs only by a legacy
	// consumed_inputs attribute, version 6 by dropping it, later versions
	// by admitting more element types.
	for _, u := range []struct {
		op    string
		irOp  ir.Op
		float bool // float types only
		since []int64
	}{
		{"Neg", ir.OpNeg, false, []int64{1, 6, 13}},
		{"Abs", ir.OpAbs, false, []int64{1, 6, 13}},
		{"Exp", ir.OpExp, true, []int64{1, 6, 13}},
		{"Log", ir.OpLog, true, []int64{1, 6, 13}},
		{"Sqrt", ir.OpSqrt, true, []int64{1, 6, 13}},
		{"Reciprocal", ir.OpRecip, true, []int64{1, 6, 13}},
		{"Sigmoid", ir.OpSigmoid, true, []int64{1, 6, 13}},
		{"Tanh", ir.OpTanh, true, []int64{1, 6, 13}},
		{"Floor", ir.OpFloor, true, []int64{1, 6, 13}},
		{"Ceil", ir.OpCeil, true, []int64{1, 6, 13}},
		{"Erf", ir.OpErf, true, []int64{9, 13}},
		{"Sin", ir.OpSin, true, []int64{7, 22}},
		{"Cos", ir.OpCos, true, []int64{7, 22}},
		{"Not", ir.OpNot, false, []int64{1}},
	} {
		register(u.op, func(c *nodeCtx) ([]ir.Value, error) {
			c.ignore("consumed_inputs")
			x := c.in(0)
			if u.float && !c.needFloat(x) {
				return nil, c.err
			}
			if x >= 0 && c.dtype(x) == ir.Bool && u.irOp != ir.OpNot {
				c.unsupportedf("%s of bool", c.op)
				return nil, c.err
			}
			return c.outs(c.b.Unary(u.irOp, x))
		}, u.since...)
	}
	register("Relu", func(c *nodeCtx) ([]ir.Value, error) {
		c.ignore("consumed_inputs")
		x := c.in(0)
		if x < 0 {
			return nil, c.err
		}
		if c.dtype(x).IsFloat() {
			return c.outs(c.b.Relu(x))
		}
		return c.outs(c.b.Max(x, c.scalar(c.dtype(x), 0)))
	}, 1, 6, 13, 14)
	register("Sign", func(c *nodeCtx) ([]ir.Value, error) {
		x := c.in(0)
		if x < 0 {
			return nil, c.err
		}
		dt := c.dtype(x)
		zero := c.scalar(dt, 0)
		// x*0 keeps NaN as NaN and is 0 for every other value that
		// compares neither above nor below zero.
		rest := c.b.Where(c.b.Binary(ir.OpLt, x, zero), c.scalar(dt, -1), c.b.Mul(x, zero))
		return c.outs(c.b.Where(c.b.Binary(ir.OpGt, x, zero), c.scalar(dt, 1), rest))
	}, 9, 13)

	// Binary arithmetic and logic with numpy broadcasting (version 7 on;
	// versions 1 and 6 broadcast by a legacy attribute, not implemented).
	for _, bin := range []struct {
		op    string
		irOp  ir.Op
		since []int64
	}{
		{"Add", ir.OpAdd, []int64{7, 13, 14}},
		{"Sub", ir.OpSub, []int64{7, 13, 14}},
		{"Mul", ir.OpMul, []int64{7, 13, 14}},
		{"Div", ir.OpDiv, []int64{7, 13, 14}},
		{"And", ir.OpAnd, []int64{7}},
		{"Or", ir.OpOr, []int64{7}},
		{"Xor", ir.OpNe, []int64{7}},
		{"Equal", ir.OpEq, []int64{7, 11, 13, 19}},
		{"Less", ir.OpLt, []int64{7, 9, 13}},
		{"Greater", ir.OpGt, []int64{7, 9, 13}},
		{"LessOrEqual", ir.OpLe, []int64{12, 16}},
		{"GreaterOrEqual", ir.OpGe, []int64{12, 16}},
	} {
		register(bin.op, func(c *nodeCtx) ([]ir.Value, error) {
			x, y := c.in(0), c.in(1)
			if x < 0 || y < 0 {
				return nil, c.err
			}
			if c.dtype(x) != c.dtype(y) {
				return nil, errorf("operand types %s and %s differ", c.dtype(x), c.dtype(y))
			}
			if bin.op == "Xor" && c.dtype(x) != ir.Bool {
				return nil, errorf("Xor of %s; want bool", c.dtype(x))
			}
			return c.outs(c.b.Binary(bin.irOp, x, y))
		}, bin.since...)
	}
	register("Pow", opPow, 7, 12, 13, 15)
	register("Mod", opMod, 10, 13)

	// Variadic ops with broadcasting (version 8 on; earlier versions
	// required equal shapes and are not implemented).
	for _, v := range []struct {
		op    string
		since []int64
	}{
		{"Max", []int64{8, 12, 13}},
		{"Min", []int64{8, 12, 13}},
		{"Sum", []int64{8, 13}},
		{"Mean", []int64{8, 13}},
	} {
		register(v.op, func(c *nodeCtx) ([]ir.Value, error) {
			if c.n() == 0 {
				return nil, errorf("needs at least one input")
			}
			acc := c.in(0)
			for i := 1; i < c.n(); i++ {
				x := c.in(i)
				if acc < 0 || x < 0 {
					return nil, c.err
				}
				if c.dtype(x) != c.dtype(acc) {
					return nil, errorf("operand types %s and %s differ", c.dtype(acc), c.dtype(x))
				}
				switch v.op {
				case "Max":
					acc = c.b.Max(acc, x)
				case "Min":
					acc = c.b.Min(acc, x)
				default:
					acc = c.b.Add(acc, x)
				}
			}
			if v.op == "Mean" && c.n() > 1 && acc >= 0 {
				acc = c.b.Div(acc, c.scalar(c.dtype(acc), float64(c.n())))
			}
			return c.outs(acc)
		}, v.since...)
	}

	register("Clip", opClip, 6, 11, 12, 13)
	register("Gelu", opGelu, 20)
	register("LeakyRelu", func(c *nodeCtx) ([]ir.Value, error) {
		alpha := c.attrFloat("alpha", 0.01)
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return c.b.Where(c.b.Binary(ir.OpLt, x, k(0)), c.b.Mul(x, k(alpha)), x)
		})
	}, 6, 16)
	register("Elu", func(c *nodeCtx) ([]ir.Value, error) {
		alpha := c.attrFloat("alpha", 1)
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			neg := c.b.Mul(k(alpha), c.b.Sub(c.b.Exp(x), k(1)))
			return c.b.Where(c.b.Binary(ir.OpLt, x, k(0)), neg, x)
		})
	}, 6, 22)
	register("Selu", func(c *nodeCtx) ([]ir.Value, error) {
		alpha := c.attrFloat("alpha", 1.67326319217681884765625)
		gamma := c.attrFloat("gamma", 1.05070102214813232421875)
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			neg := c.b.Sub(c.b.Mul(k(alpha), c.b.Exp(x)), k(alpha))
			return c.b.Mul(k(gamma), c.b.Where(c.b.Binary(ir.OpLe, x, k(0)), neg, x))
		})
	}, 6, 22)
	register("Celu", func(c *nodeCtx) ([]ir.Value, error) {
		alpha := c.attrFloat("alpha", 1)
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			neg := c.b.Mul(k(alpha), c.b.Sub(c.b.Exp(c.b.Div(x, k(alpha))), k(1)))
			return c.b.Add(c.b.Max(x, k(0)), c.b.Min(neg, k(0)))
		})
	}, 12)
	register("Softplus", func(c *nodeCtx) ([]ir.Value, error) {
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return softplus(c, x, k)
		})
	}, 1, 22)
	register("Softsign", func(c *nodeCtx) ([]ir.Value, error) {
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return c.b.Div(x, c.b.Add(k(1), c.b.Unary(ir.OpAbs, x)))
		})
	}, 1, 22)
	register("HardSigmoid", func(c *nodeCtx) ([]ir.Value, error) {
		alpha := c.attrFloat("alpha", 0.2)
		beta := c.attrFloat("beta", 0.5)
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return hardSigmoid(c, x, k(alpha), k(beta), k)
		})
	}, 6, 22)
	register("HardSwish", func(c *nodeCtx) ([]ir.Value, error) {
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return c.b.Mul(x, hardSigmoid(c, x, c.b.Recip(k(6)), k(0.5), k))
		})
	}, 14, 22)
	register("Mish", func(c *nodeCtx) ([]ir.Value, error) {
		return activation(c, func(x ir.Value, k func(float64) ir.Value) ir.Value {
			return c.b.Mul(x, c.b.Tanh(softplus(c, x, k)))
		})
	}, 18, 22)
}

// activation applies f to the float input x; k makes scalar constants of
// x's dtype.
func activation(c *nodeCtx, f func(x ir.Value, k func(float64) ir.Value) ir.Value) ([]ir.Value, error) {
	x := c.in(0)
	if !c.needFloat(x) {
		return nil, c.err
	}
	dt := c.dtype(x)
	return c.outs(f(x, func(v float64) ir.Value { return c.scalar(dt, v) }))
}

// softplus is log(1 + exp(x)).
func softplus(c *nodeCtx, x ir.Value, k func(float64) ir.Value) ir.Value {
	return c.b.Log(c.b.Add(c.b.Exp(x), k(1)))
}

// hardSigmoid is max(0, min(1, alpha*x + beta)).
func hardSigmoid(c *nodeCtx, x, alpha, beta ir.Value, k func(float64) ir.Value) ir.Value {
	return c.b.Max(k(0), c.b.Min(k(1), c.b.Add(c.b.Mul(alpha, x), beta)))
}

// opPow: the result has the base's type. Version 7 requires both operands
// to share a float type; from 12 the exponent may be any numeric type and
// is converted to the base's. Integer bases are not supported (the IR's
// pow is a float operation).
func opPow(c *nodeCtx) ([]ir.Value, error) {
	x, y := c.in(0), c.in(1)
	if x < 0 || y < 0 {
		return nil, c.err
	}
	if !c.dtype(x).IsFloat() {
		return nil, unsupported("Pow of an integer base (%s) is not supported", c.dtype(x))
	}
	if c.dtype(y) != c.dtype(x) {
		if c.version < 12 {
			return nil, errorf("operand types %s and %s differ", c.dtype(x), c.dtype(y))
		}
		y = c.b.Cast(y, c.dtype(x))
	}
	return c.outs(c.b.Pow(x, y))
}

// opMod: fmod=1 is C's fmod (the sign of the dividend); fmod=0, for
// integers only, is Python's mod (the sign of the divisor), built from
// fmod by adding the divisor where the signs disagree.
func opMod(c *nodeCtx) ([]ir.Value, error) {
	fmod := c.attrInt("fmod", 0)
	x, y := c.in(0), c.in(1)
	if x < 0 || y < 0 {
		return nil, c.err
	}
	dt := c.dtype(x)
	if dt != c.dtype(y) {
		return nil, errorf("operand types %s and %s differ", dt, c.dtype(y))
	}
	switch {
	case fmod != 0 && fmod != 1:
		return nil, errorf("fmod = %d; want 0 or 1", fmod)
	case dt == ir.Bool:
		return nil, errorf("Mod of bool")
	case fmod == 0 && dt.IsFloat():
		return nil, errorf("Mod of %s needs fmod=1", dt)
	}
	r := c.b.Binary(ir.OpMod, x, y)
	if fmod == 1 {
		return c.outs(r)
	}
	zero := c.scalar(dt, 0)
	yb := c.b.BroadcastTo(y, c.shape(r))
	differ := c.b.Binary(ir.OpNe, c.b.Binary(ir.OpLt, r, zero), c.b.Binary(ir.OpLt, yb, zero))
	fix := c.b.Apply(ir.OpAnd, ir.Attrs{}, c.b.Binary(ir.OpNe, r, zero), differ)
	return c.outs(c.b.Where(fix, c.b.Add(r, yb), r))
}

// opClip bounds x by min and max: attributes in version 6, optional
// inputs from 11 on. min > max gives max everywhere, as in ONNX.
func opClip(c *nodeCtx) ([]ir.Value, error) {
	x := c.in(0)
	if x < 0 {
		return nil, c.err
	}
	dt := c.dtype(x)
	lo, hi := ir.NoValue, ir.NoValue
	if c.version < 11 {
		lo = c.scalar(dt, c.attrFloat("min", -math.MaxFloat32))
		hi = c.scalar(dt, c.attrFloat("max", math.MaxFloat32))
	} else {
		if c.has(1) {
			lo = c.in(1)
		}
		if c.has(2) {
			hi = c.in(2)
		}
	}
	y := x
	for _, bound := range []struct {
		v  ir.Value
		op ir.Op
	}{{lo, ir.OpMax}, {hi, ir.OpMin}} {
		if bound.v < 0 {
			continue
		}
		if c.dtype(bound.v) != dt {
			return nil, errorf("bound of type %s for input of type %s", c.dtype(bound.v), dt)
		}
		if s := c.shape(bound.v); s.NumElements() != 1 {
			return nil, errorf("bound of shape %v; want a scalar", s)
		}
		y = c.b.Binary(bound.op, y, c.b.Reshape(bound.v))
	}
	return c.outs(y)
}

// opGelu: approximate "none" is x/2 (1 + erf(x/sqrt 2)), "tanh" is
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
func opGelu(c *nodeCtx) ([]ir.Value, error) {
	approx := c.attrString("approximate", "none")
	x := c.in(0)
	if !c.needFloat(x) {
		return nil, c.err
	}
	dt := c.dtype(x)
	k := func(v float64) ir.Value { return c.scalar(dt, v) }
	var inner ir.Value
	switch approx {
	case "none":
		inner = c.b.Erf(c.b.Div(x, c.b.Sqrt(k(2))))
	case "tanh":
		cube := c.b.Mul(c.b.Mul(x, x), x)
		arg := c.b.Add(x, c.b.Mul(k(0.044715), cube))
		inner = c.b.Tanh(c.b.Mul(c.b.Sqrt(c.b.Div(k(2), k(math.Pi))), arg))
	default:
		return nil, unsupported("approximate = %q is not supported", approx)
	}
	return c.outs(c.b.Mul(c.b.Mul(k(0.5), x), c.b.Add(k(1), inner)))
}
