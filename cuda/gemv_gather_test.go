package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatheredBodies are matrix-vector kernels whose epilogue reads the
// product at other columns than the one it writes (cost's gather.go): a
// gate and up projection merged into one matmul with the SiLU product
// after it, over a K-contiguous and a row-major weight; and a merged QKV
// projection whose epilogue applies rotary embedding (rotate-half) to the
// keys and writes keys and values into their caches at a runtime
// position, besides the whole product.
func gatheredBodies(t testing.TB) map[string]*ir.Graph {
	t.Helper()
	build := func(f func(b *ir.Builder)) *ir.Graph {
		b := ir.NewBuilder("kernel")
		f(b)
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	silu := func(b *ir.Builder, x ir.Value) ir.Value { return b.Mul(x, b.Sigmoid(x)) }
	rotary := func(b *ir.Builder, x, cos, sin ir.Value, shape ir.Shape) ir.Value {
		d := int64(shape[len(shape)-1])
		ax := len(shape) - 1
		half := b.Concat(ax, b.Neg(b.Slice(x, ax, d/2, d, 1)), b.Slice(x, ax, 0, d/2, 1))
		c, s := b.BroadcastTo(b.Reshape(cos, 1, 1, 1, ir.Dim(d)), shape), b.BroadcastTo(b.Reshape(sin, 1, 1, 1, ir.Dim(d)), shape)
		return b.Add(b.Mul(x, c), b.Mul(half, s))
	}
	return map[string]*ir.Graph{
		// Two rows, the weight [2N, K] read transposed: gate and up are
		// N = 40 columns apart.
		"gather_bf16_gate_up": build(func(b *ir.Builder) {
			const K, N = 264, 40
			x, w := b.Input("$0", ir.BF16, 2, K), b.Input("$1", ir.BF16, 2*N, K)
			mm := b.MatMul(x, b.Permute(w, 1, 0))
			b.Output("out0", b.Mul(silu(b, b.Slice(mm, 1, 0, N, 1)), b.Slice(mm, 1, N, 2*N, 1)))
		}),
		// One row, a row-major weight [K, 2N] in f16, an RMS norm.
		"gather_f16_rowmajor_gate_up": build(func(b *ir.Builder) {
			const K, N = 136, 48
			x, wn, w := b.Input("$0", ir.F32, 1, K), b.Input("$1", ir.F32, K), b.Input("$2", ir.F16, K, 2*N)
			ms := b.Mul(b.Sum(b.Mul(x, x), 1), b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1.0/K))), ir.Shape{1, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{1, 1})))
			n := b.Cast(b.Mul(b.Mul(x, b.BroadcastTo(rs, ir.Shape{1, K})), b.BroadcastTo(b.Reshape(wn, 1, K), ir.Shape{1, K})), ir.F16)
			mm := b.MatMul(n, w)
			b.Output("out0", b.Mul(silu(b, b.Slice(mm, 1, 0, N, 1)), b.Slice(mm, 1, N, 2*N, 1)))
		}),
		// Gate and up in their own buffers [N, K], read in place as
		// one concatenated weight (lowering's sibling merge), an RMS
		// norm computed once for both.
		"gather_bf16_concat_gate_up": build(func(b *ir.Builder) {
			const K, N = 320, 24
			x, wn, wg, wu := b.Input("$0", ir.BF16, 1, K), b.Input("$1", ir.BF16, K), b.Input("$2", ir.BF16, N, K), b.Input("$3", ir.BF16, N, K)
			h := b.Cast(x, ir.F32)
			ms := b.Mul(b.Sum(b.Mul(h, h), 1), b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1.0/K))), ir.Shape{1, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{1, 1})))
			n := b.Mul(b.BroadcastTo(b.Reshape(wn, 1, K), ir.Shape{1, K}), b.Cast(b.Mul(h, b.BroadcastTo(rs, ir.Shape{1, K})), ir.BF16))
			mm := b.MatMul(n, b.Concat(1, b.Permute(wg, 1, 0), b.Permute(wu, 1, 0)))
			b.Output("out0", b.Mul(silu(b, b.Slice(mm, 1, 0, N, 1)), b.Slice(mm, 1, N, 2*N, 1)))
		}),
		// Two row-major weights [K, 16] side by side, in f32, their
		// products summed.
		"gather_f32_concat_rowmajor": build(func(b *ir.Builder) {
			const K = 72
			x, w1, w2 := b.Input("$0", ir.F32, 3, K), b.Input("$1", ir.F32, K, 16), b.Input("$2", ir.F32, K, 16)
			mm := b.MatMul(x, b.Concat(1, w1, w2))
			b.Output("out0", b.Add(b.Slice(mm, 1, 0, 16, 1), b.Slice(mm, 1, 16, 32, 1)))
		}),
		// QKV of 4 query heads and 2 key heads of 16, rotary on the
		// keys, keys and values into caches of 10 positions at $4.
		"gather_bf16_qkv_rotary_cache": build(func(b *ir.Builder) {
			const K, H, KV, D, T = 200, 4, 2, 16, 10
			x, w := b.Input("$0", ir.BF16, 1, K), b.Input("$1", ir.BF16, K, (H+2*KV)*D)
			cos, sin, pos := b.Input("$2", ir.BF16, D), b.Input("$3", ir.BF16, D), b.Input("$4", ir.I32)
			_ = pos
			mm := b.MatMul(x, w)
			heads := func(lo int64) ir.Value {
				return b.Permute(b.Reshape(b.Slice(mm, 1, lo, lo+KV*D, 1), 1, 1, KV, D), 0, 2, 1, 3)
			}
			shape := ir.Shape{1, KV, 1, D}
			win := lower.Window{Axis: 2, Shape: ir.Shape{1, KV, T, D}, Runtime: true, Pos: 4}
			b.Output("out0", mm)
			b.Output(win.OutputName(1), rotary(b, heads(H*D), cos, sin, shape))
			b.Output(win.OutputName(2), heads((H+KV)*D))
		}),
	}
}

// TestGatheredEpilogueColumnMaps: the column map each body's reads need;
// a body whose map no matrix-vector schedule fits (groups of 3 runs of 16
// columns over a row-major weight, whose blocks take 32 to 256 columns)
// has no kernel form.
func TestGatheredEpilogueColumnMaps(t *testing.T) {
	b := ir.NewBuilder("kernel")
	x, w := b.Input("$0", ir.F32, 1, 64), b.Input("$1", ir.F32, 64, 48)
	mm := b.MatMul(x, w)
	b.Output("out0", b.Add(b.Slice(mm, 1, 0, 16, 1), b.Slice(mm, 1, 32, 48, 1)))
	odd, err := b.Build()
	require.NoError(t, err)
	g, err := cost.GatheredEpilogue(odd, matmulOf(odd))
	require.NoError(t, err)
	assert.Equal(t, cost.ColumnMap{P: 3, I: 16}, g.Map)
	_, err = cost.FormOf(odd)
	assert.ErrorContains(t, err, "no matrix-vector schedule")

	bodies := gatheredBodies(t)
	for name, want := range map[string]cost.ColumnMap{
		"gather_bf16_gate_up":          {P: 2, I: 40},
		"gather_f16_rowmajor_gate_up":  {P: 2, I: 48},
		"gather_bf16_qkv_rotary_cache": {P: 2, I: 8},
		"gather_bf16_concat_gate_up":   {P: 2, I: 24},
		"gather_f32_concat_rowmajor":   {P: 2, I: 16},
	} {
		g, err := cost.GatheredEpilogue(bodies[name], matmulOf(bodies[name]))
		require.NoError(t, err, name)
		assert.Equal(t, want, g.Map, name)
	}
}

// TestEmulatedGatheredEpilogues verifies every matrix-vector schedule the
// model lists for each gathered body under the emulation (every block,
// shared memory poisoned, threads shuffled) against the reference, the
// caches' other rows untouched; the model lists only schedules whose
// blocks hold the column groups, and the printer refuses the others.
func TestEmulatedGatheredEpilogues(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	kernels, of := gatheredKernels(t)
	checks, err := VerifyKernels(context.Background(), kernels, of, VerifyOptions{Seed: 5, MaxElements: 1 << 20, MaxBlocks: 1 << 10})
	require.NoError(t, err)
	for i, c := range checks {
		assert.Positive(t, c.Elements, kernels[i].Name)
	}
	t.Logf("%d kernels verified", len(kernels))
}

// TestNVRTCCompilesGatheredEpilogues: NVRTC compiles every schedule's
// kernel for sm_90 with no spills, stack frame or local memory.
func TestNVRTCCompilesGatheredEpilogues(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	kernels, _ := gatheredKernels(t)
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range kernels {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
		assert.Zero(t, r.StackBytes, "%s (%s) has a stack frame", k.Name, k.Schedule)
		assert.NotContains(t, ptxEntry(res.PTX, k.Name), ".local", k.Name)
	}
}

// gatheredKernels prints each gathered body under every schedule the h200
// model lists for it (all matrix-vector ones), and checks that a block
// of one column, which holds no pair, is refused.
func gatheredKernels(t *testing.T) ([]*Kernel, []*ir.Graph) {
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies := gatheredBodies(t)
	var kernels []*Kernel
	var of []*ir.Graph
	for _, name := range sortedNames(bodies) {
		body := bodies[name]
		ranked, err := model.Ranked(body)
		require.NoError(t, err, name)
		require.NotEmpty(t, ranked, name)
		for i, e := range ranked {
			require.True(t, e.Schedule.GEMV, "%s: %s", name, e.Schedule)
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), e.Schedule.String(), body, e.Schedule)
			require.NoError(t, err, "%s %s", name, e.Schedule)
			kernels, of = append(kernels, k), append(of, body)
		}
		// A block of an odd number of columns cannot hold pairs.
		_, err = PrintKernelWith("odd", "", body, cost.Schedule{BM: ranked[0].Schedule.BM, BN: 1, Threads: 128, Stages: 1, TM: 1, GEMV: true})
		assert.Error(t, err, name)
	}
	return kernels, of
}
