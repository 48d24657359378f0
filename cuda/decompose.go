package cuda

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// decompose rewrites the composite softmax, RMS norm and layer norm of a
// kernel body into the primitive ops the row form prints (reductions along
// the last axis and elementwise ops), computed in f32 with casts around
// them for f16 and bf16, as the reference interpreter computes them in
// float64. Bodies without them are returned as they are.
func decompose(body *ir.Graph) (*ir.Graph, error) {
	has := false
	for _, n := range body.Nodes {
		has = has || n.Op == ir.OpSoftmax || n.Op == ir.OpRMSNorm || n.Op == ir.OpLayerNorm
	}
	if !has {
		return body, nil
	}
	b := ir.NewBuilder(body.Name)
	vals := make([]ir.Value, len(body.Nodes))
	for i, n := range body.Nodes {
		ins := make([]ir.Value, len(n.Inputs))
		for k, in := range n.Inputs {
			ins[k] = vals[in]
		}
		switch n.Op {
		case ir.OpInput:
			vals[i] = b.Input(n.Name, n.DType, n.Shape...)
		case ir.OpSoftmax:
			// Along the last axis the reductions make a row kernel;
			// along another, each output element loops over the axis.
			ax := n.Attrs.Axis
			if ax < 0 {
				ax += len(n.Shape)
			}
			x := up(b, ins[0])
			mx := b.BroadcastTo(b.ReduceMax(x, ax), b.Shape(x))
			ex := b.Exp(b.Sub(x, mx))
			vals[i] = down(b, b.Div(ex, b.BroadcastTo(b.Sum(ex, ax), b.Shape(ex))), n.DType)
		case ir.OpRMSNorm, ir.OpLayerNorm:
			x := up(b, ins[0])
			shape := b.Shape(x)
			ax := len(shape) - 1
			length := b.BroadcastTo(b.Scalar(ir.F32, float64(shape[ax])), reduced(shape))
			d := x
			if n.Op == ir.OpLayerNorm {
				mean := b.Div(b.Sum(x, ax), length)
				d = b.Sub(x, b.BroadcastTo(mean, shape))
			}
			eps := b.BroadcastTo(b.Scalar(ir.F32, float64(float32(n.Attrs.Eps))), reduced(shape))
			inv := b.Rsqrt(b.Add(b.Div(b.Sum(b.Mul(d, d), ax), length), eps))
			y := b.Mul(b.Mul(d, b.BroadcastTo(inv, shape)), b.BroadcastTo(up(b, ins[1]), shape))
			if n.Op == ir.OpLayerNorm {
				y = b.Add(y, b.BroadcastTo(up(b, ins[2]), shape))
			}
			vals[i] = down(b, y, n.DType)
		default:
			vals[i] = b.Apply(n.Op, n.Attrs, ins...)
		}
	}
	for _, o := range body.Outputs {
		b.Output(o.Name, vals[o.Value])
	}
	g, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("decompose %s: %w", body.Name, err)
	}
	return g, nil
}

// reduced is shape with its last axis kept at size 1.
func reduced(shape ir.Shape) ir.Shape {
	r := shape.Clone()
	r[len(r)-1] = 1
	return r
}

// up casts a half-precision value to f32.
func up(b *ir.Builder, v ir.Value) ir.Value {
	if b.DType(v) == ir.F32 {
		return v
	}
	return b.Cast(v, ir.F32)
}

// down casts an f32 value back to dt.
func down(b *ir.Builder, v ir.Value, dt ir.DType) ir.Value {
	if dt == ir.F32 {
		return v
	}
	return b.Cast(v, dt)
}
