package ir

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustTensor(t *testing.T, dt DType, shape Shape, v ...float64) *Tensor {
	t.Helper()
	x, err := TensorOf(dt, shape, v...)
	require.NoError(t, err)
	return x
}

func TestEvalOps(t *testing.T) {
	x23 := []float64{1, -2, 3, -4, 5, -6}
	for _, tc := range []struct {
		name  string
		build func(b *Builder) Value
		feeds map[string]*Tensor
		want  []float64
		shape Shape
	}{
		{"add broadcast", func(b *Builder) Value {
			return b.Add(b.Input("x", F32, 2, 3), b.Const(F32, Shape{3}, 10, 20, 30))
		}, nil, []float64{11, 18, 33, 6, 25, 24}, Shape{2, 3}},
		{"sum axis 1", func(b *Builder) Value { return b.Sum(b.Input("x", F32, 2, 3), 1) }, nil, []float64{2, -5}, Shape{2, 1}},
		{"reduce_max axis 0", func(b *Builder) Value { return b.ReduceMax(b.Input("x", F32, 2, 3), 0) }, nil, []float64{1, 5, 3}, Shape{1, 3}},
		{"permute", func(b *Builder) Value { return b.Permute(b.Input("x", F32, 2, 3), 1, 0) }, nil, []float64{1, -4, -2, 5, 3, -6}, Shape{3, 2}},
		{"slice step", func(b *Builder) Value { return b.Slice(b.Input("x", F32, 2, 3), 1, 0, 3, 2) }, nil, []float64{1, 3, -4, -6}, Shape{2, 2}},
		{"pad", func(b *Builder) Value {
			return b.Pad(b.Input("x", F32, 2, 3), []int64{0, 1}, []int64{1, 0}, 9)
		}, nil, []float64{9, 1, -2, 3, 9, -4, 5, -6, 9, 9, 9, 9}, Shape{3, 4}},
		{"concat", func(b *Builder) Value {
			x := b.Input("x", F32, 2, 3)
			return b.Concat(0, x, b.Slice(x, 0, 1, 2, 1))
		}, nil, []float64{1, -2, 3, -4, 5, -6, -4, 5, -6}, Shape{3, 3}},
		{"gather negative index", func(b *Builder) Value {
			return b.Gather(b.Input("x", F32, 2, 3), b.Const(I64, Shape{2}, 2, -3), 1)
		}, nil, []float64{3, 1, -6, -4}, Shape{2, 2}},
		{"slice_update", func(b *Builder) Value {
			x := b.Input("x", F32, 2, 3)
			return b.SliceUpdate(x, b.Const(F32, Shape{2, 1}, 7, 8), 1, 1)
		}, nil, []float64{1, 7, 3, -4, 8, -6}, Shape{2, 3}},
		{"where", func(b *Builder) Value {
			x := b.Input("x", F32, 2, 3)
			return b.Where(b.Binary(OpGt, x, b.Scalar(F32, 0)), x, b.Scalar(F32, 0))
		}, nil, []float64{1, 0, 3, 0, 5, 0}, Shape{2, 3}},
		{"cast truncates", func(b *Builder) Value {
			return b.Cast(b.Const(F32, Shape{3}, 2.75, -2.75, 0.5), I32)
		}, nil, []float64{2, -2, 0}, Shape{3}},
		{"cast to f16 rounds", func(b *Builder) Value {
			return b.Cast(b.Const(F32, Shape{1}, float64(float32(1+0x1p-11+0x1p-20))), F16)
		}, nil, []float64{1 + 0x1p-10}, Shape{1}},
		{"integer division truncates", func(b *Builder) Value {
			return b.Div(b.Const(I64, Shape{2}, 7, -7), b.Const(I64, Shape{2}, 2, 2))
		}, nil, []float64{3, -3}, Shape{2}},
		{"matmul", func(b *Builder) Value {
			return b.MatMul(b.Input("x", F32, 2, 3), b.Const(F32, Shape{3, 1}, 1, 1, 1))
		}, nil, []float64{2, -5}, Shape{2, 1}},
		{"matmul transposed weight", func(b *Builder) Value {
			w := b.Weight("w", F32, 2, 3)
			return b.MatMul(b.Input("x", F32, 2, 3), b.Transpose(w, 0, 1))
		}, map[string]*Tensor{"w": nil}, []float64{6, 12, -12, -27}, Shape{2, 2}},
		{"iota", func(b *Builder) Value { return b.Iota(I32, Shape{2, 3}, 1) }, nil, []float64{0, 1, 2, 0, 1, 2}, Shape{2, 3}},
		{"softmax", func(b *Builder) Value { return b.Softmax(b.Const(F32, Shape{1, 2}, 0, F32.Round(math.Log(3))), -1) }, nil,
			[]float64{1 / (1 + math.Exp(F32.Round(math.Log(3)))), 1 / (1 + math.Exp(-F32.Round(math.Log(3))))}, Shape{1, 2}},
		{"rms_norm", func(b *Builder) Value {
			return b.RMSNorm(b.Const(F32, Shape{1, 2}, 3, 4), b.Const(F32, Shape{2}, 1, 2), 1e-30)
		}, nil, []float64{3 / math.Sqrt(12.5), 8 / math.Sqrt(12.5)}, Shape{1, 2}},
		{"layer_norm", func(b *Builder) Value {
			return b.LayerNorm(b.Const(F32, Shape{1, 2}, 1, 3), b.Const(F32, Shape{2}, 1, 1), b.Const(F32, Shape{2}, 0, 10), 1e-30)
		}, nil, []float64{-1, 11}, Shape{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("t")
			b.Output("y", tc.build(b))
			g, err := b.Build()
			require.NoError(t, err)
			feeds := map[string]*Tensor{"x": mustTensor(t, F32, Shape{2, 3}, x23...)}
			if _, ok := tc.feeds["w"]; ok {
				feeds["w"] = mustTensor(t, F32, Shape{2, 3}, 1, 2, 3, 4, 5, 6)
			}
			res, err := Eval(context.Background(), g, feeds, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			y := res.Outputs["y"]
			require.Equal(t, tc.shape, y.Shape)
			require.InDeltaSlice(t, tc.want, y.Float64s(), 1e-12)
			for i := range y.Len() {
				require.GreaterOrEqual(t, res.Magnitudes["y"].At(i)+1e-12, math.Abs(y.At(i)), "magnitude below the value")
			}
			requireElementsAgree(t, g, feeds, g.Outputs[0].Value, y)
		})
	}
}

func TestAttentionMatchesDecomposition(t *testing.T) {
	for _, causal := range []bool{false, true} {
		b := NewBuilder("attn")
		q := b.Input("q", F32, 1, 4, 3, 8)
		k := b.Input("k", F32, 1, 2, 5, 8)
		v := b.Input("v", F32, 1, 2, 5, 8)
		scale := 1 / math.Sqrt(8)
		b.Output("fused", b.Attention(q, k, v, scale, causal, 2))
		// The same computation from primitives: repeat kv heads, scores,
		// mask, softmax, weighted sum.
		rep := func(x Value) Value {
			x = b.Reshape(x, 1, 2, 1, 5, 8)
			x = b.Expand(x, 1, 2, 2, 5, 8)
			return b.Reshape(x, 1, 4, 5, 8)
		}
		s := b.Mul(b.MatMul(q, b.Transpose(rep(k), 2, 3)), b.Scalar(F32, F32.Round(scale)))
		if causal {
			row := b.Add(b.Iota(I64, Shape{3, 5}, 0), b.Scalar(I64, 2))
			col := b.Iota(I64, Shape{3, 5}, 1)
			s = b.Where(b.Binary(OpLe, col, row), s, b.Scalar(F32, math.Inf(-1)))
		}
		b.Output("decomposed", b.MatMul(b.Softmax(s, -1), rep(v)))
		g, err := b.Build()
		require.NoError(t, err)
		feeds, err := RandomFeeds(g, 1, Typical)
		require.NoError(t, err)
		res, err := Eval(context.Background(), g, feeds, EvalOptions{})
		require.NoError(t, err)
		require.InDeltaSlice(t, res.Outputs["decomposed"].F64, res.Outputs["fused"].F64, 1e-6, "causal=%v", causal)
		for _, o := range g.Outputs {
			requireElementsAgree(t, g, feeds, o.Value, res.Outputs[o.Name])
		}
	}
}

// requireElementsAgree checks element evaluation against whole-tensor
// evaluation on every element of v.
func requireElementsAgree(t *testing.T, g *Graph, feeds map[string]*Tensor, v Value, want *Tensor) {
	t.Helper()
	var idx [][]int64
	forEachIndex(want.Shape, func(_ int64, i []int64) { idx = append(idx, append([]int64(nil), i...)) })
	got, err := EvalElements(g, feeds, v, idx)
	require.NoError(t, err)
	require.InDeltaSlice(t, want.Float64s(), got, 1e-12)
}

func TestEvalKernel(t *testing.T) {
	body, err := Parse(`graph fused
%0 = input "$0" f32[2,3]
%1 = input "$1" f32[3]
%2 = reshape %1 to=[1,3] : f32[1,3]
%3 = expand %2 to=[2,3] : f32[2,3]
%4 = add %0, %3 : f32[2,3]
%5 = relu %4 : f32[2,3]
output "out" = %5
`)
	require.NoError(t, err)
	out, err := EvalKernel(context.Background(), body,
		mustTensor(t, F32, Shape{2, 3}, 1, -2, 3, -4, 5, -6), mustTensor(t, F32, Shape{3}, 1, 1, 1))
	require.NoError(t, err)
	require.Equal(t, []float64{2, 0, 4, 0, 6, 0}, out[0].F64)
	_, err = EvalKernel(context.Background(), body)
	require.ErrorContains(t, err, "0 arguments for 2 inputs")
}
