package cuda

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// elementwiseBodies are kernel bodies of the elementwise form the tests
// print, compile and emulate.
func elementwiseBodies(t testing.TB) map[string]*ir.Graph {
	t.Helper()
	build := func(f func(b *ir.Builder) []ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		for i, v := range f(b) {
			b.Output("out"+string(rune('0'+i)), v)
		}
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	return map[string]*ir.Graph{
		"silu_mul": build(func(b *ir.Builder) []ir.Value {
			g, u := b.Input("$0", ir.F32, 4, 1000), b.Input("$1", ir.F32, 4, 1000)
			return []ir.Value{b.Mul(b.Mul(g, b.Sigmoid(g)), u)}
		}),
		// Half-precision chains through the vector path: 8-byte loads
		// widened to f32, the graph's own casts, one rounding on store.
		"silu_mul_bf16": build(func(b *ir.Builder) []ir.Value {
			g, u := b.Input("$0", ir.BF16, 4, 1000), b.Input("$1", ir.BF16, 4, 1000)
			return []ir.Value{b.Mul(b.Mul(g, b.Sigmoid(g)), u)}
		}),
		"residual_f16_f32": build(func(b *ir.Builder) []ir.Value {
			x, r := b.Input("$0", ir.F16, 3, 8, 12), b.Input("$1", ir.F32, 3, 8, 12)
			return []ir.Value{b.Cast(b.Add(b.Cast(x, ir.F32), r), ir.F16)}
		}),
		"odd_tail": build(func(b *ir.Builder) []ir.Value {
			x := b.Input("$0", ir.F32, 7, 13)
			return []ir.Value{b.Exp(b.Neg(x))}
		}),
		"broadcast_bias": build(func(b *ir.Builder) []ir.Value {
			x, w := b.Input("$0", ir.F32, 3, 5, 8), b.Input("$1", ir.F32, 8)
			return []ir.Value{b.Add(x, b.BroadcastTo(w, ir.Shape{3, 5, 8}))}
		}),
		"rotate_half": build(func(b *ir.Builder) []ir.Value {
			x := b.Input("$0", ir.F32, 2, 3, 8)
			lo, hi := b.Slice(x, 2, 0, 4, 1), b.Slice(x, 2, 4, 8, 1)
			return []ir.Value{b.Concat(2, b.Neg(hi), lo)}
		}),
		"transpose_cast_f16": build(func(b *ir.Builder) []ir.Value {
			x := b.Input("$0", ir.F16, 5, 7)
			return []ir.Value{b.Cast(b.Mul(b.Permute(x, 1, 0), b.Permute(x, 1, 0)), ir.BF16)}
		}),
		"causal_mask": build(func(b *ir.Builder) []ir.Value {
			i, j := b.Iota(ir.I64, ir.Shape{6, 6}, 0), b.Iota(ir.I64, ir.Shape{6, 6}, 1)
			keep := b.Binary(ir.OpGe, b.Sub(i, j), b.BroadcastTo(b.Scalar(ir.I64, 0), ir.Shape{6, 6}))
			return []ir.Value{b.Where(keep, b.BroadcastTo(b.Scalar(ir.F32, 0), ir.Shape{6, 6}), b.BroadcastTo(b.Scalar(ir.F32, -3.4028234663852886e+38), ir.Shape{6, 6}))}
		}),
		"gather_rows": build(func(b *ir.Builder) []ir.Value {
			table, ids := b.Input("$0", ir.F32, 10, 6), b.Input("$1", ir.I64, 2, 3)
			return []ir.Value{b.Gather(table, ids, 0)}
		}),
		"kv_update": build(func(b *ir.Builder) []ir.Value {
			cache, kv := b.Input("$0", ir.F32, 1, 2, 8, 4), b.Input("$1", ir.F32, 1, 2, 1, 4)
			return []ir.Value{b.SliceUpdate(cache, kv, 2, 5)}
		}),
		"pad_max": build(func(b *ir.Builder) []ir.Value {
			x := b.Input("$0", ir.F32, 3, 4)
			p := b.Pad(x, []int64{1, 0}, []int64{0, 2}, -1)
			return []ir.Value{b.Max(p, b.BroadcastTo(b.Scalar(ir.F32, 0.25), ir.Shape{4, 6}))}
		}),
		"row_sum": build(func(b *ir.Builder) []ir.Value {
			return []ir.Value{b.Sum(b.Exp(b.Input("$0", ir.F32, 5, 300)), 1)}
		}),
		"softmax": build(func(b *ir.Builder) []ir.Value {
			x := b.Input("$0", ir.F32, 2, 3, 37)
			m := b.ReduceMax(x, 2)
			ex := b.Exp(b.Sub(x, b.BroadcastTo(m, ir.Shape{2, 3, 37})))
			return []ir.Value{b.Div(ex, b.BroadcastTo(b.Sum(ex, 2), ir.Shape{2, 3, 37}))}
		}),
		"residual_rms_norm": build(func(b *ir.Builder) []ir.Value {
			x, r, w := b.Input("$0", ir.F32, 4, 1024), b.Input("$1", ir.F32, 4, 1024), b.Input("$2", ir.F32, 1024)
			h := b.Add(x, r)
			ms := b.Mul(b.Sum(b.Mul(h, h), 1), b.BroadcastTo(b.Scalar(ir.F32, 0.0009765625), ir.Shape{4, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, 0.00048828125), ir.Shape{4, 1})))
			return []ir.Value{b.Mul(b.Mul(h, b.BroadcastTo(rs, ir.Shape{4, 1024})), b.BroadcastTo(w, ir.Shape{4, 1024})), h}
		}),
	}
}

// extraBodies are test bodies of the matmul form.
func matmulBodies(t testing.TB) map[string]*ir.Graph {
	t.Helper()
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		b.Output("out0", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	return map[string]*ir.Graph{
		"mm_bias_residual": build(func(b *ir.Builder) ir.Value {
			x, w, bias, res := b.Input("$0", ir.F32, 70, 33), b.Input("$1", ir.F32, 50, 33), b.Input("$2", ir.F32, 50), b.Input("$3", ir.F32, 70, 50)
			y := b.MatMul(x, b.Permute(w, 1, 0))
			return b.Add(b.Add(y, b.BroadcastTo(bias, ir.Shape{70, 50})), res)
		}),
		"mm_silu_prologue": build(func(b *ir.Builder) ir.Value {
			g, u, w := b.Input("$0", ir.F32, 3, 17, 40), b.Input("$1", ir.F32, 3, 17, 40), b.Input("$2", ir.F32, 40, 9)
			h := b.Mul(b.Mul(g, b.Sigmoid(g)), u)
			return b.MatMul(b.Reshape(h, 51, 40), w)
		}),
		"mm_rms_prologue": build(func(b *ir.Builder) ir.Value {
			x, wn, w := b.Input("$0", ir.F32, 1, 70, 96), b.Input("$1", ir.F32, 96), b.Input("$2", ir.F32, 96, 40)
			ms := b.Mul(b.Sum(b.Mul(x, x), 2), b.BroadcastTo(b.Scalar(ir.F32, 0.03125), ir.Shape{1, 70, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, 0.0009765625), ir.Shape{1, 70, 1})))
			n := b.Mul(b.Mul(x, b.BroadcastTo(rs, ir.Shape{1, 70, 96})), b.BroadcastTo(wn, ir.Shape{1, 70, 96}))
			return b.MatMul(b.Reshape(n, 70, 96), w)
		}),
		"batched_scores": build(func(b *ir.Builder) ir.Value {
			q, k := b.Input("$0", ir.F32, 2, 4, 5, 8), b.Input("$1", ir.F32, 2, 4, 7, 8)
			return b.Mul(b.MatMul(q, b.Permute(k, 0, 1, 3, 2)), b.BroadcastTo(b.Scalar(ir.F32, 0.25), ir.Shape{2, 4, 5, 7}))
		}),
	}
}

// attentionBody is a llama-like attention kernel body: rotary on the
// queries and keys, grouped K/V heads, scale, causal mask, softmax,
// values, the heads merged back.
func attentionBody(t testing.TB, s, tk ir.Dim) *ir.Graph {
	return attentionBodyOf(t, ir.F32, s, tk)
}

// attentionBodyOf is attentionBody with q, k, v and the output of dtype dt,
// the softmax computed in f32 between casts, as the corpus builders do for
// half precision.
func attentionBodyOf(t testing.TB, dt ir.DType, s, tk ir.Dim) *ir.Graph {
	return attentionBodySplit(t, dt, s, tk, 0)
}

// attentionBodySplit is attentionBodyOf with q, k and v, when split > 0,
// each the sum of split partials (split-K's, summed as they are loaded).
func attentionBodySplit(t testing.TB, dt ir.DType, s, tk ir.Dim, split ir.Dim) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	const h, kvh, d = 4, 2, 8
	in := func(name string, shape ...ir.Dim) ir.Value {
		if split == 0 {
			return b.Input(name, dt, shape...)
		}
		return b.Reshape(b.Sum(b.Input(name, dt, append(ir.Shape{split}, shape...)...), 0), shape...)
	}
	q := in("$0", 1, h, s, d)
	k := in("$1", 1, kvh, tk, d)
	v := in("$2", 1, kvh, tk, d)
	cos, sin := b.Input("$3", dt, tk, d), b.Input("$4", dt, tk, d)
	rot := func(x ir.Value, heads ir.Dim, rows ir.Dim) ir.Value {
		shape := ir.Shape{1, heads, rows, d}
		half := b.Concat(3, b.Neg(b.Slice(x, 3, d/2, d, 1)), b.Slice(x, 3, 0, d/2, 1))
		c := b.BroadcastTo(b.Slice(cos, 0, int64(tk-rows), int64(tk), 1), shape)
		sn := b.BroadcastTo(b.Slice(sin, 0, int64(tk-rows), int64(tk), 1), shape)
		return b.Add(b.Mul(x, c), b.Mul(half, sn))
	}
	rq, rk := rot(q, h, s), rot(k, kvh, tk)
	grp := func(x ir.Value) ir.Value {
		return b.Reshape(b.Expand(b.Reshape(x, 1, kvh, 1, tk, d), 1, kvh, h/kvh, tk, d), 1, h, tk, d)
	}
	scores := b.MatMul(rq, b.Permute(grp(rk), 0, 1, 3, 2))
	if dt != ir.F32 {
		scores = b.Cast(scores, ir.F32)
	}
	scores = b.Mul(scores, b.BroadcastTo(b.Scalar(ir.F32, 0.25), ir.Shape{1, h, s, tk}))
	qi := b.Add(b.Iota(ir.I64, ir.Shape{s, tk}, 0), b.BroadcastTo(b.Scalar(ir.I64, int64Dim(tk-s)), ir.Shape{s, tk}))
	keep := b.Binary(ir.OpGe, qi, b.Iota(ir.I64, ir.Shape{s, tk}, 1))
	mask := b.Where(keep, b.BroadcastTo(b.Scalar(ir.F32, 0), ir.Shape{s, tk}), b.BroadcastTo(b.Scalar(ir.F32, -3.4028234663852886e+38), ir.Shape{s, tk}))
	scores = b.Add(scores, b.BroadcastTo(mask, ir.Shape{1, h, s, tk}))
	mx := b.BroadcastTo(b.ReduceMax(scores, 3), ir.Shape{1, h, s, tk})
	ex := b.Exp(b.Sub(scores, mx))
	p := b.Div(ex, b.BroadcastTo(b.Sum(ex, 3), ir.Shape{1, h, s, tk}))
	if dt != ir.F32 {
		p = b.Cast(p, dt)
	}
	o := b.MatMul(p, grp(v))
	b.Output("out0", b.Reshape(b.Permute(o, 0, 2, 1, 3), s, h*d))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func int64Dim(d ir.Dim) float64 { return float64(d) }

// rowBodies are the test bodies of the row form.
var rowBodies = map[string]bool{"row_sum": true, "softmax": true, "residual_rms_norm": true}

// TestPrintElementwise prints every test body, checks the text is
// deterministic and free of includes and asm, and that the simple
// same-shape chains (f32, and f16/bf16 with casts) take the vector path.
func TestPrintElementwise(t *testing.T) {
	for name, body := range elementwiseBodies(t) {
		t.Run(name, func(t *testing.T) {
			k, err := PrintKernel(name, "test kernel "+name, body)
			require.NoError(t, err)
			again, err := PrintKernel(name, "test kernel "+name, body)
			require.NoError(t, err)
			assert.Equal(t, k.Text, again.Text, "printing is deterministic")
			assert.NotContains(t, k.Text, "#include")
			assert.NotContains(t, k.Text, "asm")
			assert.Contains(t, k.Text, `extern "C" __global__ void `+name+"(")
			assert.Equal(t, name == "silu_mul" || name == "silu_mul_bf16" || name == "residual_f16_f32", k.Vector)
			if rowBodies[name] {
				assert.Contains(t, k.Text, "lum_scratch")
			}
		})
	}
	b := ir.NewBuilder("kernel")
	q, k, v := b.Input("$0", ir.F32, 4, 8), b.Input("$1", ir.F32, 8, 4), b.Input("$2", ir.F32, 4, 8)
	b.Output("out0", b.MatMul(b.Exp(b.MatMul(q, k)), v))
	g, err := b.Build()
	require.NoError(t, err)
	_, err = PrintKernel("att", "", g)
	require.ErrorContains(t, err, "attention whose probabilities are no softmax")
}

// TestNVRTCCompilesElementwise compiles the printed kernels with NVRTC for
// sm_80 and sm_90 and reads the PTX: the f32 vector kernel loads and
// stores 16 bytes at a time, the bf16 one 8.
func TestNVRTCCompilesElementwise(t *testing.T) {
	lib := nvrtcOrSkip(t)
	var kernels []*Kernel
	bodies := elementwiseBodies(t)
	for name, body := range matmulBodies(t) {
		bodies[name] = body
	}
	bodies["attention_prefill"] = attentionBody(t, 5, 5)
	bodies["attention_decode"] = attentionBody(t, 1, 70)
	for name, body := range bodies {
		k, err := PrintKernel(name, "test kernel "+name, body)
		require.NoError(t, err)
		kernels = append(kernels, k)
	}
	src := NVRTCPrelude + Source(kernels)
	for _, arch := range []string{"sm_80", "sm_90"} {
		res, err := lib.Compile(context.Background(), src, "kernels.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for _, k := range kernels {
			r, ok := res.Kernels[k.Name]
			require.True(t, ok, "%s: no resources for %s", arch, k.Name)
			assert.Zero(t, r.SpillStores, "%s spills", k.Name)
		}
		entry := ptxEntry(res.PTX, "silu_mul")
		assert.Contains(t, entry, "ld.global.nc.v4.f32", "%s: 16-byte loads", arch)
		assert.Contains(t, entry, "st.global.v4.f32", "%s: 16-byte stores", arch)
		// Four bf16 values a load and a store: 8 bytes, one instruction.
		entry = ptxEntry(res.PTX, "silu_mul_bf16")
		assert.Regexp(t, `ld\.global(\.nc)?\.v2\.u32`, entry, "%s: 8-byte bf16 loads", arch)
		assert.Regexp(t, `st\.global\.v2\.u32`, entry, "%s: 8-byte bf16 stores", arch)
	}
}
