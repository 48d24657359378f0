package cuda

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// moeBodies are route, experts_up and experts_down kernel bodies at sizes
// that meet every path of their kernels: a row's chosen experts in slots
// (and slots left over), several rows choosing one expert (groups of rows
// a block, more than one group), experts no row chooses, column tiles
// with a tail, reductions staged in several chunks.
func moeBodies(t *testing.T) map[string]*ir.Graph {
	bodies := map[string]*ir.Graph{}
	for _, c := range []struct {
		name          string
		dt            ir.DType
		R, H, E, I, k int
		g             ir.Gating
		limit         float64
	}{
		{"decode_f32", ir.F32, 1, 40, 8, 24, 2, ir.GatingSwiGLU, 0},
		{"rows_bf16", ir.BF16, 37, 48, 6, 20, 2, ir.GatingClampedSwiGLU, 0.75},
		{"many_f16", ir.F16, 70, 9000, 4, 5, 3, ir.GatingSwiGLU, 0},
	} {
		R, H, E, I := ir.Dim(c.R), ir.Dim(c.H), ir.Dim(c.E), ir.Dim(c.I)
		bodies[c.name+"_up"] = buildBody(t, func(b *ir.Builder) ir.Value {
			return b.ExpertsUp(b.Input("$0", c.dt, R, H), b.Input("$1", ir.F32, R, E), b.Input("$2", c.dt, E, H, 2*I), b.Input("$3", c.dt, E, 2*I), c.k, c.g, c.limit)
		})
		bodies[c.name+"_down"] = buildBody(t, func(b *ir.Builder) ir.Value {
			return b.ExpertsDown(b.Input("$0", c.dt, R, ir.Dim(c.k), I), b.Input("$1", ir.F32, R, E), b.Input("$2", c.dt, E, I, H), b.Input("$3", c.dt, E, H), c.k)
		})
	}
	for _, c := range []struct {
		name string
		dt   ir.DType
		R, E int
		k    int
		g    ir.Gating
	}{
		{"route_chosen", ir.F32, 9, 40, 4, ir.GatingChosen},
		{"route_all_bf16", ir.BF16, 5, 128, 8, ir.GatingAll},
		{"route_one", ir.F32, 3, 3, 1, ir.GatingChosen},
	} {
		bodies[c.name] = buildBody(t, func(b *ir.Builder) ir.Value {
			return b.Route(b.Input("$0", c.dt, ir.Dim(c.R), ir.Dim(c.E)), c.k, c.g)
		})
	}
	return bodies
}

// moeSchedules are the schedules of body the tests print: every one the
// cost model lists, or under -short the best of each way blocks find
// their work (by slot, by expert) and the best's runner-up.
func moeSchedules(t *testing.T, model *cost.Model, body *ir.Graph) []cost.Schedule {
	ranked, err := model.Ranked(body)
	require.NoError(t, err)
	var out []cost.Schedule
	kinds := map[bool]bool{}
	for i, e := range ranked {
		if testing.Short() && i > 1 && kinds[e.Schedule.Grouped] {
			continue
		}
		kinds[e.Schedule.Grouped] = true
		out = append(out, e.Schedule)
	}
	return out
}

// TestMoEKernelsVerify prints every MoE body in every schedule the cost
// model lists for it (under -short, moeSchedules's) and runs each under
// the emulation against the reference.
func TestMoEKernelsVerify(t *testing.T) {
	t.Parallel()
	needGXX(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var ks []*Kernel
	var gs []*ir.Graph
	for name, body := range moeBodies(t) {
		for i, s := range moeSchedules(t, model, body) {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name, body, s)
			require.NoError(t, err, "%s %s", name, s)
			ks, gs = append(ks, k), append(gs, body)
		}
	}
	checks, err := VerifyKernels(context.Background(), ks, gs, VerifyOptions{Seed: 3})
	require.NoError(t, err)
	require.Len(t, checks, len(ks))
}

// TestNVRTCCompilesMoEKernels compiles the MoE bodies' kernels, in
// moeSchedules's schedules, with NVRTC for sm_90: real CUDA, no
// spills.
func TestNVRTCCompilesMoEKernels(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var ks []*Kernel
	bodies := moeBodies(t)
	// gpt-oss-20b's experts at 4 rows: the most shared memory a schedule
	// takes (a 2880-long reduction staged, 8 warps' partials).
	bodies["gptoss_up"] = buildBody(t, func(b *ir.Builder) ir.Value {
		return b.ExpertsUp(b.Input("$0", ir.BF16, 4, 2880), b.Input("$1", ir.F32, 4, 32), b.Input("$2", ir.BF16, 32, 2880, 5760), b.Input("$3", ir.BF16, 32, 5760), 4, ir.GatingClampedSwiGLU, 7)
	})
	bodies["gptoss_down"] = buildBody(t, func(b *ir.Builder) ir.Value {
		return b.ExpertsDown(b.Input("$0", ir.BF16, 4, 4, 2880), b.Input("$1", ir.F32, 4, 32), b.Input("$2", ir.BF16, 32, 2880, 2880), b.Input("$3", ir.BF16, 32, 2880), 4)
	})
	for name, body := range bodies {
		schedules := moeSchedules(t, model, body)
		if strings.HasPrefix(name, "gptoss") {
			// Every schedule's shared memory within the static limit:
			// the largest staging and partials, whatever their rank.
			schedules = nil
			ranked, err := model.Ranked(body)
			require.NoError(t, err)
			for _, e := range ranked {
				if e.Schedule.BM >= 4 || !testing.Short() {
					schedules = append(schedules, e.Schedule)
				}
			}
		}
		for i, s := range schedules {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name, body, s)
			require.NoError(t, err)
			ks = append(ks, k)
		}
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "moe.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range ks {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
		assert.LessOrEqual(t, r.SharedBytes, attnStaticShared, "%s (%s)", k.Name, k.Schedule)
	}
}

// TestVerifyManyExpertsOverFewer: an experts kernel over more weights than
// the verification draws at real shapes is verified as its kernel for
// fewer experts (the same code but the count it scans), at its real rows,
// hidden and intermediate sizes; a planted error still fails (an edited
// kernel is verified as it is). Not parallel: it lowers the bound for its
// small weights, and the parallel tests run after it.
func TestVerifyManyExpertsOverFewer(t *testing.T) {
	needGXX(t)
	defer func(was int64) { verifyExpertsElements = was }(verifyExpertsElements)
	verifyExpertsElements = 1 << 20
	body := buildBody(t, func(b *ir.Builder) ir.Value {
		return b.ExpertsUp(b.Input("$0", ir.BF16, 3, 128), b.Input("$1", ir.F32, 3, 20), b.Input("$2", ir.BF16, 20, 128, 512), b.Input("$3", ir.BF16, 20, 512), 4, ir.GatingClampedSwiGLU, 7)
	})
	k, err := PrintKernel("many_experts", "many experts", body)
	require.NoError(t, err)
	small, sb, ok, err := fewerExperts(k, body)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ir.Shape{8, 128, 512}, sb.Node(sb.Inputs()[2]).Shape)
	assert.Equal(t, k.Grid, small.Grid, "the same grid")
	_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 1})
	require.NoError(t, err)
	if testing.Short() {
		return // the edited kernel's whole run: the long test command
	}
	bad := editKernel(t, k, "many_experts", "(u + 1.0f) * (g * sg)", "(u + 1.0f) * (u * sg)")
	_, err = VerifyKernels(context.Background(), []*Kernel{bad}, []*ir.Graph{body}, VerifyOptions{Seed: 1})
	require.Error(t, err)
}

// TestMoEEveryRankedSchedulePrintsAtLongChunks: at a long chunk's rows
// (Qwen3-30B-A3B's 128 experts, 8 a token, at 8192 rows; gpt-oss-120b's
// at 4096) every schedule the cost model ranks prints, its grid within
// CUDA's limits (the work along x, the column tiles along y).
func TestMoEEveryRankedSchedulePrintsAtLongChunks(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	for _, c := range []struct {
		name          string
		R, H, E, I, k int
		g             ir.Gating
		limit         float64
	}{
		{"qwen3", 8192, 2048, 128, 768, 8, ir.GatingSwiGLU, 0},
		{"gptoss", 4096, 2880, 128, 2880, 4, ir.GatingClampedSwiGLU, 7},
	} {
		R, H, E, I := ir.Dim(c.R), ir.Dim(c.H), ir.Dim(c.E), ir.Dim(c.I)
		for _, body := range []*ir.Graph{
			buildBody(t, func(b *ir.Builder) ir.Value {
				return b.ExpertsUp(b.Input("$0", ir.BF16, R, H), b.Input("$1", ir.F32, R, E), b.Input("$2", ir.BF16, E, H, 2*I), b.Input("$3", ir.BF16, E, 2*I), c.k, c.g, c.limit)
			}),
			buildBody(t, func(b *ir.Builder) ir.Value {
				return b.ExpertsDown(b.Input("$0", ir.BF16, R, ir.Dim(c.k), I), b.Input("$1", ir.F32, R, E), b.Input("$2", ir.BF16, E, I, H), b.Input("$3", ir.BF16, E, H), c.k)
			}),
			buildBody(t, func(b *ir.Builder) ir.Value { return b.Route(b.Input("$0", ir.F32, R, E), c.k, ir.GatingChosen) }),
		} {
			ranked, err := model.Ranked(body)
			require.NoError(t, err, c.name)
			for _, e := range ranked {
				k, err := PrintKernelWith("k", c.name, body, e.Schedule)
				require.NoError(t, err, "%s %s", c.name, e.Schedule)
				assert.LessOrEqual(t, k.Grid[0], 1<<31-1)
				assert.LessOrEqual(t, k.Grid[1], 65535)
				assert.LessOrEqual(t, k.Grid[2], 65535)
			}
		}
	}
}
