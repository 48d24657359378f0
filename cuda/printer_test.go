package cuda

import (
	"context"
	"os"
	"strings"
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

// rowBodies are the test bodies of the row form.
var rowBodies = map[string]bool{"row_sum": true, "softmax": true, "residual_rms_norm": true}

// TestPrintElementwise prints every test body, checks the text is
// deterministic and free of includes and asm, and that the simple
// same-shape f32 chain moves 16 bytes per access.
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
			assert.Equal(t, name == "silu_mul", k.Vector)
			if rowBodies[name] {
				assert.Contains(t, k.Text, "lum_scratch")
			}
		})
	}
	b := ir.NewBuilder("kernel")
	q, k, v := b.Input("$0", ir.F32, 4, 8), b.Input("$1", ir.F32, 8, 4), b.Input("$2", ir.F32, 4, 8)
	b.Output("out0", b.MatMul(b.Softmax(b.MatMul(q, k), 1), v))
	g, err := b.Build()
	require.NoError(t, err)
	_, err = PrintKernel("att", "", g)
	require.ErrorContains(t, err, "an attention kernel cannot be printed yet")
}

// TestNVRTCCompilesElementwise compiles the printed kernels with NVRTC for
// sm_80 and sm_90 and reads the PTX: the vector kernel loads and stores 16
// bytes at a time.
func TestNVRTCCompilesElementwise(t *testing.T) {
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	var kernels []*Kernel
	bodies := elementwiseBodies(t)
	for name, body := range matmulBodies(t) {
		bodies[name] = body
	}
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
		entry := res.PTX[strings.Index(res.PTX, ".entry silu_mul"):]
		entry = entry[:strings.Index(entry, "\n}")]
		assert.Contains(t, entry, "ld.global.nc.v4.f32", "%s: 16-byte loads", arch)
		assert.Contains(t, entry, "st.global.v4.f32", "%s: 16-byte stores", arch)
	}
}
