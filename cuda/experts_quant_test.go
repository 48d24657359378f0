package cuda

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// quantExpertsCase is an experts_up and experts_down pair over a weight
// quantized in format f (decoded to the rows' dtype dt), packed as a
// checkpoint packs it: [E, N, K] codes read through permute(dequant(...),
// [0, 2, 1]).
type quantExpertsCase struct {
	name          string
	f             quant.Format
	dt            ir.DType
	R, H, E, I, k int
	g             ir.Gating
	limit         float64
}

// weight is the experts' quantized weight of N columns over a reduction
// of K, its codes and scales the inputs $2 and $3.
func (c quantExpertsCase) weight(b *ir.Builder, N, K int) ir.Value {
	E := ir.Dim(c.E)
	if c.f == quant.FP8 {
		return b.Permute(b.Dequant(c.f, c.dt, 32, 16, b.Input("$2", ir.U8, E, ir.Dim(N), ir.Dim(K)),
			b.Input("$3", ir.F32, E, ir.Dim((N+15)/16), ir.Dim((K+31)/32))), 0, 2, 1)
	}
	return b.Permute(b.Dequant(c.f, c.dt, 32, 0, b.Input("$2", ir.U8, E, ir.Dim(N), ir.Dim(K/32), 16),
		b.Input("$3", ir.U8, E, ir.Dim(N), ir.Dim(K/32))), 0, 2, 1)
}

func (c quantExpertsCase) up(t testing.TB) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		return b.ExpertsUp(b.Input("$0", c.dt, ir.Dim(c.R), ir.Dim(c.H)), b.Input("$1", ir.F32, ir.Dim(c.R), ir.Dim(c.E)), c.weight(b, 2*c.I, c.H),
			b.Input("$4", c.dt, ir.Dim(c.E), ir.Dim(2*c.I)), c.k, c.g, c.limit)
	})
}

func (c quantExpertsCase) down(t testing.TB) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		return b.ExpertsDown(b.Input("$0", c.dt, ir.Dim(c.R), ir.Dim(c.k), ir.Dim(c.I)), b.Input("$1", ir.F32, ir.Dim(c.R), ir.Dim(c.E)), c.weight(b, c.H, c.I),
			b.Input("$4", c.dt, ir.Dim(c.E), ir.Dim(c.H)), c.k)
	})
}

// quantMoEBodies are quantized experts bodies at sizes that meet every
// path of their kernels: a decode row, many rows choosing one expert
// (groups of rows, more than one), experts no row chooses, reductions of
// fewer loads than a group has lanes, reductions staged in two chunks
// (640 values for 8 rows), reductions long enough for every group width
// and depth of loads in flight the cost model lists, column tiles with a
// tail, both gatings, the dequant's rounding (mxfp4 into f16, fp8) and
// its exact cases (mxfp4 into bf16 and f32).
func quantMoEBodies(t testing.TB) map[string]*ir.Graph {
	bodies := map[string]*ir.Graph{}
	for _, c := range []quantExpertsCase{
		{"mxfp4_decode_bf16", quant.MXFP4, ir.BF16, 1, 64, 8, 96, 2, ir.GatingClampedSwiGLU, 7},
		{"mxfp4_rows_f32", quant.MXFP4, ir.F32, 29, 96, 6, 32, 2, ir.GatingSwiGLU, 0},
		{"mxfp4_chunks_bf16", quant.MXFP4, ir.BF16, 19, 640, 4, 32, 3, ir.GatingClampedSwiGLU, 0.75},
		{"mxfp4_f16", quant.MXFP4, ir.F16, 5, 96, 5, 64, 2, ir.GatingClampedSwiGLU, 7},
		{"fp8_bf16", quant.FP8, ir.BF16, 7, 128, 4, 48, 2, ir.GatingSwiGLU, 0},
		// Reductions of as many loads as the widest groups' steps take.
		{"mxfp4_long_h_bf16", quant.MXFP4, ir.BF16, 3, 4096, 3, 32, 2, ir.GatingClampedSwiGLU, 7},
		{"mxfp4_long_i_f32", quant.MXFP4, ir.F32, 2, 32, 3, 4096, 2, ir.GatingSwiGLU, 0},
		{"fp8_long_bf16", quant.FP8, ir.BF16, 3, 2048, 3, 32, 2, ir.GatingSwiGLU, 0},
	} {
		if testing.Short() && (strings.Contains(c.name, "long") || c.name == "mxfp4_f16" || c.name == "mxfp4_chunks_bf16") {
			continue // the long reductions and f16: the long test command
		}
		bodies[c.name+"_up"], bodies[c.name+"_down"] = c.up(t), c.down(t)
	}
	return bodies
}

// TestMoEQuantKernelsVerify prints every quantized experts body in every
// schedule the cost model lists for it (under -short, moeSchedules's:
// the best of each way of finding work and the runner-up) and runs each
// under the emulation against the reference, which decodes the codes
// itself (package quant).
func TestMoEQuantKernelsVerify(t *testing.T) {
	t.Parallel()
	needGXX(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var ks []*Kernel
	var gs []*ir.Graph
	kinds := map[string]bool{}
	for name, body := range quantMoEBodies(t) {
		for i, s := range moeSchedules(t, model, body) {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name, body, s)
			require.NoError(t, err, "%s %s", name, s)
			require.Contains(t, k.Text, "lum_ld16(Q0", "%s: the packed codes, 16 bytes a load", name)
			ks, gs = append(ks, k), append(gs, body)
			kinds[fmt.Sprint(s.Grouped)] = true
		}
	}
	assert.Len(t, kinds, 2, "by slot and by expert")
	checks, err := VerifyKernels(context.Background(), ks, gs, VerifyOptions{Seed: 3})
	require.NoError(t, err)
	require.Len(t, checks, len(ks))
}

// TestMoEQuantPlantedErrorsFail: a kernel that reads a code's nibbles in
// the wrong order, or its e8m0 scale with the bias off by one, is refused.
func TestMoEQuantPlantedErrorsFail(t *testing.T) {
	t.Parallel()
	needGXX(t)
	c := quantExpertsCase{"planted", quant.MXFP4, ir.BF16, 3, 64, 4, 32, 2, ir.GatingSwiGLU, 0}
	for _, body := range []*ir.Graph{c.up(t), c.down(t)} {
		k, err := PrintKernel("planted", "planted", body)
		require.NoError(t, err)
		_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 1})
		require.NoError(t, err, "the kernel as printed")
		for _, edit := range [][3]string{
			{"nibbles", "lum_e2m1_in(w[j], 4 * (h % 2) + c)", "lum_e2m1_in(w[j], (4 * (h % 2) + c) ^ 1)"},
			{"bias", "lum_e8m0_to_f32(sc[u][0])", "lum_e8m0_to_f32(sc[u][0] + 1u)"},
		} {
			bad := editKernel(t, k, "planted_"+edit[0], edit[1], edit[2])
			_, err := VerifyKernels(context.Background(), []*Kernel{bad}, []*ir.Graph{body}, VerifyOptions{Seed: 1})
			require.Error(t, err, edit[0])
			t.Logf("%s: %v", edit[0], err)
		}
	}
}

// gptOSSQuantBodies are gpt-oss's experts over MXFP4 weights at a decode
// step (1 row) and a chunk (64 rows): 128 experts (120b), hidden and
// intermediate 2880, top 4, the clamped SwiGLU.
func gptOSSQuantBodies(t testing.TB) map[string]*ir.Graph {
	bodies := map[string]*ir.Graph{}
	for _, R := range []int{1, 64} {
		c := quantExpertsCase{"gptoss", quant.MXFP4, ir.BF16, R, 2880, 128, 2880, 4, ir.GatingClampedSwiGLU, 7}
		bodies[fmt.Sprintf("gptoss_up_%d", R)], bodies[fmt.Sprintf("gptoss_down_%d", R)] = c.up(t), c.down(t)
	}
	return bodies
}

// TestNVRTCCompilesMoEQuantKernels compiles gpt-oss's MXFP4 experts
// kernels with NVRTC for sm_90 in every schedule the cost model lists
// (under -short, each body's best few, and the chunk's of 8 rows a block,
// the most registers and shared memory): real CUDA, no spills, static
// shared memory within its limit.
func TestNVRTCCompilesMoEQuantKernels(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var ks []*Kernel
	for name, body := range gptOSSQuantBodies(t) {
		ranked, err := model.Ranked(body)
		require.NoError(t, err)
		for i, e := range ranked {
			if testing.Short() && i >= 1 && (e.Schedule.BM < 8 || strings.HasSuffix(name, "_1") || i >= 3) {
				continue
			}
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name, body, e.Schedule)
			require.NoError(t, err, "%s %s", name, e.Schedule)
			ks = append(ks, k)
		}
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "moe_quant.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range ks {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
		assert.LessOrEqual(t, r.SharedBytes, attnStaticShared, "%s (%s)", k.Name, k.Schedule)
	}
	t.Logf("%d kernels", len(ks))
}

// TestVerifyManyQuantExpertsOverFewer: a quantized experts kernel over
// more weights than the verification draws at real shapes is verified as
// its kernel for fewer experts, its codes and scales cut along their
// experts too.
func TestVerifyManyQuantExpertsOverFewer(t *testing.T) {
	needGXX(t)
	defer func(was int64) { verifyExpertsElements = was }(verifyExpertsElements)
	verifyExpertsElements = 1 << 16
	c := quantExpertsCase{"many", quant.MXFP4, ir.BF16, 3, 128, 20, 256, 4, ir.GatingClampedSwiGLU, 7}
	body := c.up(t)
	k, err := PrintKernel("many_quant_experts", "many experts", body)
	require.NoError(t, err)
	small, sb, ok, err := fewerExperts(k, body)
	require.NoError(t, err)
	require.True(t, ok)
	in := sb.Inputs()
	assert.Equal(t, ir.Shape{8, 512, 4, 16}, sb.Node(in[2]).Shape, "the codes")
	assert.Equal(t, ir.Shape{8, 512, 4}, sb.Node(in[3]).Shape, "the scales")
	assert.Equal(t, k.Grid, small.Grid, "the same grid")
	assert.True(t, strings.Contains(small.Text, "lum_e2m1_in"))
	_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 1})
	require.NoError(t, err)
}

// TestExpertsQuantLoopMixMatchesPTX: the cost model's count of the
// quantized experts kernel's main loop (cost.ExpertsQuantLoop, a step of
// each of Stages a loop iteration) is NVRTC's PTX of it, by pipe: mxfp4
// and fp8, one row and many, one weight column and two, the dequant's
// rounding or none.
func TestExpertsQuantLoopMixMatchesPTX(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the model's loop against NVRTC's PTX at every quantized layout: the long test command")
	}
	lib := nvrtcOrSkip(t)
	mx := quantExpertsCase{"mix", quant.MXFP4, ir.BF16, 64, 2880, 32, 2880, 4, ir.GatingClampedSwiGLU, 7}
	f8, f16 := mx, mx
	f8.f, f16.dt = quant.FP8, ir.F16
	cases := []struct {
		name string
		body *ir.Graph
		s    cost.Schedule
	}{
		{"mxfp4 up, a row", mx.up(t), cost.Schedule{BM: 1, BN: 8, BK: 128, Threads: 32, Stages: 2}},
		{"mxfp4 down, four steps", mx.down(t), cost.Schedule{BM: 1, BN: 8, BK: 128, Threads: 32, Stages: 4}},
		{"mxfp4 up, four rows", mx.up(t), cost.Schedule{BM: 4, BN: 16, BK: 256, Threads: 128, Stages: 2, Grouped: true}},
		{"mxfp4 down, eight rows", mx.down(t), cost.Schedule{BM: 8, BN: 32, BK: 128, Threads: 128, Stages: 4, Grouped: true}},
		{"fp8 up", f8.up(t), cost.Schedule{BM: 1, BN: 8, BK: 64, Threads: 32, Stages: 2}},
		{"mxfp4 into f16 down", f16.down(t), cost.Schedule{BM: 1, BN: 8, BK: 128, Threads: 32, Stages: 2}},
	}
	var ks []*Kernel
	for i, c := range cases {
		k, err := PrintKernelWith(fmt.Sprintf("qmix%d", i), c.name, c.body, c.s)
		require.NoError(t, err, c.name)
		ks = append(ks, k)
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "qmix.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for i, c := range cases {
		p, err := cost.Experts(c.body)
		require.NoError(t, err)
		est := cost.ExpertsQuantLoop(p, c.s).Scale(float64(c.s.Stages))
		got := LoopMix(res.PTX, ks[i].Name)
		require.Positive(t, got.Total(), "%s: no main loop", c.name)
		assert.Equal(t, got.Load, est.Load, "%s: global loads", c.name)
		assert.Equal(t, got.Shared, est.Shared, "%s: shared loads", c.name)
		assert.Equal(t, got.FP, est.FP, "%s: FP", c.name)
		t.Logf("%s: PTX %+v, estimate %+v", c.name, got, est)
		assert.InDelta(t, got.Int, est.Int, 0.15*got.Int, "%s: integer (PTX %+v, estimate %+v)", c.name, got, est)
		assert.InDelta(t, got.Other, est.Other, 0.15*got.Other, "%s: other (PTX %+v, estimate %+v)", c.name, got, est)
	}
}
