package ir

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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

// transformer builds a small Llama-style decoder of layers layers over 16
// tokens of width 64: RMS norm, attention with 4 query heads over 2 key and
// value heads (repeated, as repeat_kv does) under a causal mask made the way
// Hugging Face makes it (0 or the lowest f32, added to the scores), a SiLU
// gated MLP, residual adds, a final norm and a 50-way output projection.
// With composite it uses the RMS norm and attention ops instead of their
// decompositions. variant makes it wrong on purpose, the way a broken
// kernel would be: "mask" lets each query see one key too many (all of
// them, with the attention op), "heads" maps query heads to the wrong
// key-value heads, "sum" drops the last key from the softmax's
// denominator.
func transformer(layers int, composite bool, variant string) (*Graph, error) {
	const S, D, H, KV, F, V = 16, 64, 4, 2, 128, 50
	hd := D / H
	b := NewBuilder("transformer")
	x := b.Input("x", F32, 1, S, D)
	linear := func(x Value, name string, in, out int) Value {
		return b.MatMul(x, b.Transpose(b.Weight(name, F32, Dim(out), Dim(in)), 0, 1))
	}
	rms := func(x Value, name string) Value {
		w := b.Weight(name, F32, D)
		if composite {
			return b.RMSNorm(x, w, 1e-5)
		}
		r := b.Rsqrt(b.Add(b.Mean(b.Mul(x, x), -1), b.Scalar(F32, F32.Round(1e-5))))
		return b.Mul(b.Mul(x, r), w)
	}
	heads := func(x Value, n int) Value { // [1,S,n*hd] -> [1,n,S,hd]
		return b.Transpose(b.Reshape(x, 1, S, Dim(n), Dim(hd)), 1, 2)
	}
	repeat := func(x Value) Value { // [1,KV,S,hd] -> [1,H,S,hd], head h reading h/(H/KV)
		if variant == "heads" {
			return b.Reshape(b.Expand(b.Reshape(x, 1, 1, KV, S, Dim(hd)), 1, H/KV, KV, S, Dim(hd)), 1, H, S, Dim(hd))
		}
		return b.Reshape(b.Expand(b.Reshape(x, 1, KV, 1, S, Dim(hd)), 1, KV, H/KV, S, Dim(hd)), 1, H, S, Dim(hd))
	}
	row, col := b.Iota(I64, Shape{S, S}, 0), b.Iota(I64, Shape{S, S}, 1)
	if variant == "mask" {
		row = b.Add(row, b.Scalar(I64, 1))
	}
	mask := b.Where(b.Binary(OpGe, row, col), b.Scalar(F32, 0), b.Scalar(F32, -math.MaxFloat32))
	for l := range layers {
		p := fmt.Sprintf("layers.%d.", l)
		h := rms(x, p+"ln1")
		q := heads(linear(h, p+"q", D, D), H)
		k := heads(linear(h, p+"k", D, KV*hd), KV)
		v := heads(linear(h, p+"v", D, KV*hd), KV)
		scale := 1 / math.Sqrt(float64(hd))
		var o Value
		if composite {
			switch variant {
			case "heads": // the two key-value heads swapped
				k = b.Concat(1, b.Slice(k, 1, 1, 2, 1), b.Slice(k, 1, 0, 1, 1))
				v = b.Concat(1, b.Slice(v, 1, 1, 2, 1), b.Slice(v, 1, 0, 1, 1))
			}
			o = b.Attention(q, k, v, scale, variant != "mask", 0)
		} else {
			s := b.Mul(b.MatMul(q, b.Transpose(repeat(k), 2, 3)), b.Scalar(F32, F32.Round(scale)))
			s = b.Add(s, mask)
			e := b.Exp(b.Sub(s, b.ReduceMax(s, -1)))
			sum := b.Sum(e, -1)
			if variant == "sum" {
				sum = b.Sum(b.Slice(e, 3, 0, S-1, 1), -1)
			}
			o = b.MatMul(b.Div(e, sum), repeat(v))
		}
		o = b.Reshape(b.Transpose(o, 1, 2), 1, S, D)
		x = b.Add(x, linear(o, p+"o", D, D))
		h = rms(x, p+"ln2")
		gate, up := linear(h, p+"gate", D, F), linear(h, p+"up", D, F)
		x = b.Add(x, linear(b.Mul(b.Mul(gate, b.Sigmoid(gate)), up), p+"down", F, D))
	}
	b.Output("logits", linear(rms(x, "norm"), "lm_head", D, V))
	return b.Build()
}

// transformerFeeds draws the inputs and weights of transformer at the
// scale of a trained model's: linear weights of variance 1/fan-in, norm
// weights near 1, unit inputs.
func transformerFeeds(t *testing.T, g *Graph, seed uint64) map[string]*Tensor {
	feeds, err := RandomFeeds(g, seed, Typical)
	require.NoError(t, err)
	for name, f := range feeds {
		vals := f.Float64s()
		scale, shift := 1/math.Sqrt(float64(f.Shape[len(f.Shape)-1])), 0.0
		switch {
		case name == "x":
			scale = 1
		case strings.HasSuffix(name, "ln1"), strings.HasSuffix(name, "ln2"), name == "norm":
			scale, shift = 0.1, 1
		}
		for i := range vals {
			vals[i] = vals[i]*scale + shift
		}
		feeds[name] = mustTensor(t, f.DType, f.Shape, vals...)
	}
	return feeds
}

// roundedF32 is g with every float intermediate rounded to f32 where it is
// made, as a correct f32 program's kernels round what they write.
func roundedF32(t *testing.T, g *Graph) *Graph {
	b := NewBuilder(g.Name + " in f32")
	vals := make([]Value, len(g.Nodes))
	for i, n := range g.Nodes {
		ins := make([]Value, len(n.Inputs))
		for k, in := range n.Inputs {
			ins[k] = vals[in]
		}
		vals[i] = b.Apply(n.Op, n.Attrs, ins...)
		if c := n.Op.Class(); c != ClassLeaf && c != ClassView && n.DType == F32 {
			vals[i] = b.Cast(vals[i], F32)
		}
	}
	for _, o := range g.Outputs {
		b.Output(o.Name, vals[o.Value])
	}
	r, err := b.Build()
	require.NoError(t, err)
	return r
}

// worstRatio is the largest error of got against the truth want, in units
// of the error Compare allows.
func worstRatio(got, want, mag *Tensor, reduction int) float64 {
	tol := Tolerance(want.DType, reduction)
	worst := 0.0
	for i := range want.Len() {
		worst = math.Max(worst, math.Abs(got.At(i)-want.At(i))/(tol*math.Max(mag.At(i), math.Abs(want.At(i)))))
	}
	return worst
}

// TestTransformerMagnitudes checks that magnitudes stay meaningful through
// whole models: through two transformer layers with a causal mask of
// -3.4e38, the output's magnitude stays within a small factor of its
// values, so that a correct f32 program passes Compare while one element
// off by 1% fails, and so do programs with a wrong mask, wrong key-value
// heads or a dropped term.
func TestTransformerMagnitudes(t *testing.T) {
	ctx := context.Background()
	for _, layers := range []int{1, 2} {
		for _, composite := range []bool{false, true} {
			t.Run(fmt.Sprintf("layers=%d/composite=%v", layers, composite), func(t *testing.T) {
				g, err := transformer(layers, composite, "")
				require.NoError(t, err)
				feeds := transformerFeeds(t, g, uint64(layers))
				res, err := Eval(ctx, g, feeds, EvalOptions{Magnitude: true})
				require.NoError(t, err)
				y, m := res.Outputs["logits"], res.Magnitudes["logits"]
				maxV, maxM, arg := 0.0, 0.0, int64(0)
				for i := range y.Len() {
					require.False(t, math.IsNaN(m.At(i)) || math.IsInf(m.At(i), 0), "magnitude %d is %v", i, m.At(i))
					require.GreaterOrEqual(t, m.At(i), math.Abs(y.At(i)))
					if math.Abs(y.At(i)) > maxV {
						maxV, arg = math.Abs(y.At(i)), i
					}
					maxM = math.Max(maxM, m.At(i))
				}
				t.Logf("max |logit| %.3g, max magnitude %.3g (%.3gx)", maxV, maxM, maxM/maxV)
				require.Less(t, maxM, 100*maxV, "magnitudes within 100x of the values")

				const reduction = 1024 // as the compiler verifies whole programs
				f32, err := Eval(ctx, roundedF32(t, g), feeds, EvalOptions{})
				require.NoError(t, err)
				mm, err := Compare(f32.Outputs["logits"], y, m, reduction)
				require.NoError(t, err)
				require.Nil(t, mm, "a correct f32 program fails: %v", mm)
				require.Less(t, worstRatio(f32.Outputs["logits"], y, m, reduction), 0.01, "a correct f32 program comes close to failing")

				off := NewTensor(F32, y.Shape)
				copy(off.F64, y.F64)
				off.F64[arg] *= 1.01
				mm, err = Compare(off, y, m, reduction)
				require.NoError(t, err)
				require.NotNil(t, mm, "one logit off by 1% passes")
				require.Equal(t, arg, mm.Index)

				for _, variant := range []string{"mask", "heads", "sum"} {
					if composite && variant == "sum" {
						continue // the attention op has no sum to drop a term of
					}
					bad, err := transformer(layers, composite, variant)
					require.NoError(t, err)
					got, err := Eval(ctx, bad, feeds, EvalOptions{})
					require.NoError(t, err)
					mm, err := Compare(got.Outputs["logits"], y, m, reduction)
					require.NoError(t, err)
					require.NotNil(t, mm, "a program with the %s wrong passes", variant)
					require.Greater(t, worstRatio(got.Outputs["logits"], y, m, reduction), 10.0, "a program with the %s wrong nearly passes", variant)
				}

				// EvalAt agrees on a sample.
				rng := rand.New(rand.NewPCG(uint64(layers), 3))
				idx := sampleIndices(rng, y.Len())
				vals, mags, err := EvalAt(ctx, g, feeds, map[string][]int64{"logits": idx}, EvalOptions{Magnitude: true})
				require.NoError(t, err)
				for p, j := range idx {
					requireSame(t, vals["logits"][p], y.At(j), m.At(j), "logits[%d]", j)
					requireSame(t, mags["logits"][p], m.At(j), m.At(j), "magnitude of logits[%d]", j)
				}
			})
		}
	}
}

// TestMagnitudeRules checks the rules that keep magnitudes meaningful: a
// discarded where branch or max operand contributes nothing, a masked
// score (the lowest f32, or -inf) whose exp underflows contributes 0 and
// never NaN, products and norms grow the relative excess linearly, and
// reductions add excesses in quadrature.
func TestMagnitudeRules(t *testing.T) {
	huge := -math.MaxFloat32
	for _, tc := range []struct {
		name  string
		build func(b *Builder, x Value) Value // x: f32[4] = 1, -2, 3, 0.5
		check func(t *testing.T, v, m []float64)
	}{
		{"where takes the selected branch", func(b *Builder, x Value) Value {
			return b.Where(b.Binary(OpGt, x, b.Scalar(F32, 0)), x, b.Scalar(F32, huge))
		}, func(t *testing.T, v, m []float64) {
			require.Equal(t, []float64{1, -huge, 3, 0.5}, m)
		}},
		{"max takes the winner", func(b *Builder, x Value) Value {
			return b.Max(b.Mul(x, b.Scalar(F32, 1000)), b.Scalar(F32, huge))
		}, func(t *testing.T, v, m []float64) {
			require.Equal(t, []float64{1000, 2000, 3000, 500}, m)
		}},
		{"min takes the winner", func(b *Builder, x Value) Value {
			return b.Min(b.Mul(x, b.Scalar(F32, 1000)), b.Scalar(F32, 1))
		}, func(t *testing.T, v, m []float64) {
			require.Equal(t, []float64{1, 2000, 1, 1}, m)
		}},
		{"masked softmax decomposed", func(b *Builder, x Value) Value {
			s := b.Add(x, b.Const(F32, Shape{4}, 0, huge, 0, 0))
			s = b.Where(b.Binary(OpEq, b.Iota(I32, Shape{4}, 0), b.Scalar(I32, 3)), b.Scalar(F32, math.Inf(-1)), s)
			e := b.Exp(b.Sub(s, b.ReduceMax(s, 0)))
			return b.Div(e, b.Sum(e, 0))
		}, func(t *testing.T, v, m []float64) {
			require.Zero(t, v[1])
			require.Zero(t, v[3])
			require.Equal(t, []float64{0, 0}, []float64{m[1], m[3]}, "masked entries")
			for i := range m {
				require.Less(t, m[i], 50.0, "element %d", i)
			}
		}},
		{"masked softmax composite", func(b *Builder, x Value) Value {
			return b.Softmax(b.Add(x, b.Const(F32, Shape{4}, 0, huge, 0, math.Inf(-1))), 0)
		}, func(t *testing.T, v, m []float64) {
			require.Equal(t, []float64{0, 0}, []float64{m[1], m[3]}, "masked entries")
			for i := range m {
				require.Less(t, m[i], 50.0, "element %d", i)
			}
		}},
		{"x*x grows the relative excess linearly", func(b *Builder, x Value) Value {
			// y = x + (x - x): the value of x, with excess 2|x|.
			y := b.Add(x, b.Sub(x, x))
			return b.Mul(y, y)
		}, func(t *testing.T, v, m []float64) {
			// x - x is 0 with magnitude 2|x|, all of it excess, so y
			// has excess E(y) = 2|x|, and M(y*y) = |y|^2 + sqrt(2) |y|
			// E(y) (the two factors' excesses in quadrature), not M(y)^2
			// = 9 |y|^2.
			for i, x := range []float64{1, -2, 3, 0.5} {
				require.InDelta(t, x*x+math.Sqrt2*math.Abs(x)*2*math.Abs(x), m[i], 1e-12)
			}
		}},
		{"sum adds excesses in quadrature", func(b *Builder, x Value) Value {
			return b.Sum(b.Add(x, b.Sub(x, x)), 0)
		}, func(t *testing.T, v, m []float64) {
			// The terms, 6.5, plus their excesses 2|x| in quadrature
			// (linearly they would add to 13).
			sum2 := 0.0
			for _, x := range []float64{1, -2, 3, 0.5} {
				sum2 += 4 * x * x
			}
			require.InDelta(t, 6.5+math.Sqrt(sum2), m[0], 1e-12)
		}},
		{"rms norm keeps the relative excess", func(b *Builder, x Value) Value {
			y := b.Mul(x, b.Scalar(F32, 1)) // excess 0
			return b.RMSNorm(b.Add(y, b.Sub(y, y)), b.Const(F32, Shape{4}, 1), 1e-6)
		}, func(t *testing.T, v, m []float64) {
			// Input excess 2|x|: the output's stays of that order, not
			// the square or the row's sum.
			for i := range m {
				require.Less(t, m[i], 6*math.Abs(v[i])+2, "element %d", i)
				require.Greater(t, m[i], 3*math.Abs(v[i]), "element %d", i)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("rules")
			b.Output("y", tc.build(b, b.Input("x", F32, 4)))
			g, err := b.Build()
			require.NoError(t, err)
			feeds := map[string]*Tensor{"x": mustTensor(t, F32, Shape{4}, 1, -2, 3, 0.5)}
			res, err := Eval(context.Background(), g, feeds, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			m := res.Magnitudes["y"].Float64s()
			for i, x := range m {
				require.False(t, math.IsNaN(x), "magnitude %d is NaN", i)
			}
			tc.check(t, res.Outputs["y"].Float64s(), m)
			// EvalAt applies the same rules.
			idx := make([]int64, len(m))
			for i := range idx {
				idx[i] = int64(len(m) - 1 - i)
			}
			vals, mags, err := EvalAt(context.Background(), g, feeds, map[string][]int64{"y": idx}, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			for p, j := range idx {
				requireSame(t, vals["y"][p], res.Outputs["y"].At(j), m[j], "value %d", j)
				requireSame(t, mags["y"][p], m[j], m[j], "magnitude %d", j)
			}
		})
	}
}
