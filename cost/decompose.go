package cost

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// Decompose rewrites the composite softmax, RMS norm, layer norm and
// attention of a kernel body into the primitive ops a kernel computes them
// by (reductions, elementwise ops, matmuls), in f32 with casts around them
// for f16 and bf16, as the reference interpreter computes them in float64.
// It is the body the CUDA printer prints and the one FormOf reads an
// attention op through, so that the two see the same kernel. Bodies
// without composites are returned as they are.
func Decompose(body *ir.Graph) (*ir.Graph, error) {
	has := false
	for _, n := range body.Nodes {
		has = has || n.Op == ir.OpSoftmax || n.Op == ir.OpRMSNorm || n.Op == ir.OpLayerNorm || n.Op == ir.OpAttention
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
		case ir.OpAttention:
			pos := ir.NoValue
			if len(ins) > 3 {
				pos = ins[3]
			}
			vals[i] = attentionOf(b, ins[0], ins[1], ins[2], pos, n.Attrs, n.DType)
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

// attentionOf is the attention op in the eager form the attention kernel
// form reads (corpus models build the same): grouped key and value heads
// repeated by a reshape, an expand and a reshape (repeat_kv), the scores
// q k^T widened to f32 and scaled, the causal mask added from iotas, a
// softmax in f32 along the keys, its probabilities rounded to the
// operands' dtype and multiplied by v. A runtime position pos (NoValue
// when there is none) is added to the mask's offset, broadcast from its
// scalar: the keys past the last query's position are masked, and the
// attention form bounds its key loop by the same mask.
func attentionOf(b *ir.Builder, q, k, v, pos ir.Value, a ir.Attrs, dt ir.DType) ir.Value {
	qs, ks := b.Shape(q), b.Shape(k)
	if len(qs) != 4 || len(ks) != 4 || ks[1] == 0 {
		// Shape inference of the op itself says what is wrong.
		if pos != ir.NoValue {
			return b.Apply(ir.OpAttention, a, q, k, v, pos)
		}
		return b.Apply(ir.OpAttention, a, q, k, v)
	}
	if n := qs[1] / ks[1]; n > 1 {
		k, v = repeatKV(b, k, n), repeatKV(b, v, n)
	}
	s := b.Mul(up(b, b.MatMul(q, b.Transpose(k, 2, 3))), b.Scalar(ir.F32, float64(float32(a.Scale))))
	if a.Causal {
		S, T := qs[2], ks[2]
		mask := ir.Shape{S, T}
		d := b.Sub(b.Iota(ir.I64, mask, 0), b.Iota(ir.I64, mask, 1)) // query minus key position, less the offset
		if a.Offset != 0 {
			d = b.Add(d, b.Scalar(ir.I64, float64(a.Offset)))
		}
		if pos != ir.NoValue {
			d = b.Add(d, b.Cast(pos, ir.I64))
		}
		see := b.Binary(ir.OpGe, d, b.Scalar(ir.I64, 0))
		s = b.Add(s, b.Where(see, b.Scalar(ir.F32, 0), b.Scalar(ir.F32, -math.MaxFloat32)))
	}
	ax := len(qs) - 1
	ex := b.Exp(b.Sub(s, b.ReduceMax(s, ax)))
	p := down(b, b.Div(ex, b.Sum(ex, ax)), dt)
	return b.MatMul(p, v)
}

// repeatKV repeats each of the heads of x [batch, heads, len, head] n
// times, by a reshape, an expand and a reshape.
func repeatKV(b *ir.Builder, x ir.Value, n ir.Dim) ir.Value {
	s := b.Shape(x)
	x = b.Reshape(x, s[0], s[1], 1, s[2], s[3])
	x = b.Expand(x, s[0], s[1], n, s[2], s[3])
	return b.Reshape(x, s[0], s[1]*n, s[2], s[3])
}
