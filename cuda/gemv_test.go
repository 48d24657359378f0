package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gemvBodies are matmuls of a few rows against a weight read transposed:
// a decode step's projections (norm and gate prologues, a residual
// epilogue), K longer than one chunk of A, columns that no block size
// divides, a batched product (decode attention's scores), in f32, f16 and
// bf16.
func gemvBodies(t testing.TB) map[string]*ir.Graph {
	t.Helper()
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		b.Output("out0", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	return map[string]*ir.Graph{
		// RMS norm in f32 statistics, the bf16 weight, a residual.
		"gemv_bf16_rms_residual": build(func(b *ir.Builder) ir.Value {
			const K, N = 328, 37
			x, wn, w, res := b.Input("$0", ir.BF16, 1, 1, K), b.Input("$1", ir.BF16, K), b.Input("$2", ir.BF16, N, K), b.Input("$3", ir.BF16, 1, N)
			h := b.Cast(x, ir.F32)
			ms := b.Mul(b.Sum(b.Mul(h, h), 2), b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1.0/K))), ir.Shape{1, 1, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{1, 1, 1})))
			n := b.Mul(b.BroadcastTo(wn, ir.Shape{1, 1, K}), b.Cast(b.Mul(h, b.BroadcastTo(rs, ir.Shape{1, 1, K})), ir.BF16))
			return b.Add(b.MatMul(b.Reshape(n, 1, K), b.Permute(w, 1, 0)), res)
		}),
		// A decode projection of few columns over a long K in bf16: the
		// layouts that split K among a block's warps, and groups of 4
		// and 8 loads in flight.
		"gemv_bf16_rms_few_columns": build(func(b *ir.Builder) ir.Value {
			const K, N = 2048, 12
			x, wn, w := b.Input("$0", ir.BF16, 1, K), b.Input("$1", ir.BF16, K), b.Input("$2", ir.BF16, N, K)
			h := b.Cast(x, ir.F32)
			ms := b.Mul(b.Sum(b.Mul(h, h), 1), b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1.0/K))), ir.Shape{1, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{1, 1})))
			n := b.Mul(b.BroadcastTo(b.Reshape(wn, 1, K), ir.Shape{1, K}), b.Cast(b.Mul(h, b.BroadcastTo(rs, ir.Shape{1, K})), ir.BF16))
			return b.MatMul(n, b.Permute(w, 1, 0))
		}),
		// Eight rows: A's chunks of 1024 values, the last one short.
		"gemv_f32_eight_rows_chunks": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.F32, 8, 1048), b.Input("$1", ir.F32, 29, 1048)
			return b.MatMul(x, b.Permute(w, 1, 0))
		}),
		// A silu gate of three rows in f16.
		"gemv_f16_gate_three_rows": build(func(b *ir.Builder) ir.Value {
			g, u, w := b.Input("$0", ir.F16, 3, 136), b.Input("$1", ir.F16, 3, 136), b.Input("$2", ir.F16, 19, 136)
			return b.MatMul(b.Mul(b.Mul(g, b.Sigmoid(g)), u), b.Permute(w, 1, 0))
		}),
		// Row-major weights (N contiguous): a split-K batch of a
		// projection whose weight is stored [K, N], with f32 partials.
		"gemv_bf16_rowmajor_splitk": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 1, 512), b.Input("$1", ir.BF16, 512, 40)
			a := b.Permute(b.Reshape(x, 1, 8, 64), 1, 0, 2)
			return b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, a, b.Reshape(w, 8, 64, 40))
		}),
		// A split-K batch of a transposed weight [N, K']: the batch is
		// a block of K'.
		"gemv_bf16_folded_splitk": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 1, 512), b.Input("$1", ir.BF16, 44, 512)
			a := b.Permute(b.Reshape(x, 1, 4, 128), 1, 0, 2)
			return b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, a, b.Reshape(b.Permute(w, 1, 0), 4, 128, 44))
		}),
		// Three rows with a norm in f32, K no multiple of 8.
		"gemv_f32_rowmajor_rms": build(func(b *ir.Builder) ir.Value {
			x, wn, w := b.Input("$0", ir.F32, 3, 100), b.Input("$1", ir.F32, 100), b.Input("$2", ir.F32, 100, 24)
			ms := b.Mul(b.Sum(b.Mul(x, x), 1), b.BroadcastTo(b.Scalar(ir.F32, 0.0078125), ir.Shape{3, 1}))
			rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{3, 1})))
			n := b.Mul(b.Mul(x, b.BroadcastTo(rs, ir.Shape{3, 100})), b.BroadcastTo(wn, ir.Shape{3, 100}))
			return b.MatMul(n, w)
		}),
		// Eight rows in f16 over two chunks of A, a residual.
		"gemv_f16_rowmajor_chunks": build(func(b *ir.Builder) ir.Value {
			x, w, res := b.Input("$0", ir.F16, 8, 1100), b.Input("$1", ir.F16, 1100, 16), b.Input("$2", ir.F16, 8, 16)
			return b.Add(b.MatMul(x, w), res)
		}),
		// Decode scores: a query row per head against its keys.
		"gemv_bf16_batched_scores": build(func(b *ir.Builder) ir.Value {
			q, k := b.Input("$0", ir.BF16, 2, 3, 1, 16), b.Input("$1", ir.BF16, 2, 3, 11, 16)
			return b.Cast(b.MatMul(q, b.Permute(k, 0, 1, 3, 2)), ir.F32)
		}),
	}
}

// gemvKernels prints every body under the matrix-vector schedules the
// h200 model ranks first, and under the first it ranks of each thread
// layout, stage count and block width (TestEveryScheduleMatchesReference
// runs every schedule of its bodies; these cover the layouts without
// emulating all of them again).
func gemvKernels(t *testing.T) ([]*Kernel, []*ir.Graph) {
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies := gemvBodies(t)
	var kernels []*Kernel
	var of []*ir.Graph
	for _, name := range sortedNames(bodies) {
		ranked, err := model.Ranked(bodies[name])
		require.NoError(t, err, name)
		n := 0
		seen := map[string]bool{}
		for _, e := range ranked {
			if !e.Schedule.GEMV {
				continue
			}
			key := func(what string, v int) bool {
				k := fmt.Sprintf("%s=%d", what, v)
				fresh := !seen[k]
				seen[k] = true
				return fresh
			}
			cols, split, _ := cost.GEMVLayout(e.Schedule)
			fresh := key("cols", cols)
			fresh = key("split", split) || fresh
			fresh = key(fmt.Sprintf("cols=%d split", cols), split) || fresh
			fresh = key("stages", e.Schedule.Stages) || fresh
			fresh = key("bn", e.Schedule.BN) || fresh
			fresh = key("threads", e.Schedule.Threads) || fresh
			if n >= 4 && !fresh {
				continue
			}
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, n), name+" "+e.Schedule.String(), bodies[name], e.Schedule)
			require.NoError(t, err, "%s %s", name, e.Schedule)
			kernels, of = append(kernels, k), append(of, bodies[name])
			n++
		}
		require.NotZero(t, n, "%s: the model offers no matrix-vector schedule", name)
	}
	return kernels, of
}

// TestEmulatedGEMVMatchesReference runs every matrix-vector schedule of
// the bodies under the emulation (in order and with shuffled threads) on
// random inputs against the reference interpreter. The kernel keeps A in
// f32 where the reference rounds each op to its dtype, as the tensor-core
// path does before it packs (see TestEmulatedTensorCoreMatchesReference
// for the bound), so the same allowance holds.
func TestEmulatedGEMVMatchesReference(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	kernels, bodies := gemvKernels(t)
	args, outs, wants := referenceRuns(t, bodies, 300)
	layouts := map[string]bool{}
	for _, opt := range []emu.Options{{}, {Shuffle: true, Seed: 7}} {
		got, err := Emulate(context.Background(), kernels, args, outs, opt)
		require.NoError(t, err)
		for i, k := range kernels {
			if _, kContiguous, _ := cost.GEMVWeight(bodies[i], matmulOf(bodies[i])); kContiguous {
				cols, split, _ := cost.GEMVLayout(k.Schedule)
				layouts[fmt.Sprintf("cols=%d split=%d", cols, split)] = true
			} else {
				lanes, _, _ := cost.GEMVRowLayout(k.Schedule, bodies[i].Node(bodies[i].Node(matmulOf(bodies[i])).Inputs[1]).DType.Size())
				layouts[fmt.Sprintf("lanes=%d", lanes)] = true
			}
			for j, o := range bodies[i].Outputs {
				mm, err := ir.Compare(got[i][j], wants[i].Outputs[o.Name], wants[i].Magnitudes[o.Name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "%s (%s) output %d, shuffled %v: %v", k.Name, k.Schedule, j, opt.Shuffle, mm)
			}
		}
	}
	t.Logf("%d kernels, layouts %v", len(kernels), layouts)
	for _, l := range []string{"cols=1 split=1", "cols=1 split=2", "cols=2 split=2", "cols=4 split=1", "cols=4 split=4", "cols=8 split=1", "lanes=8", "lanes=16", "lanes=32"} {
		assert.True(t, layouts[l], "no kernel ran layout %s", l)
	}
}

// TestGEMVPrinted: the weight comes through 16-byte loads, several in
// flight before the first is used, and nothing is rounded but where the
// graph says; a weight that is not a plain K-contiguous buffer, or K not a
// multiple of 8, gets no matrix-vector schedule.
func TestGEMVPrinted(t *testing.T) {
	bodies := gemvBodies(t)
	k, err := PrintKernelWith("g", "", bodies["gemv_bf16_rms_residual"], cost.Schedule{BM: 1, BN: 8, Threads: 128, Stages: 2, TM: 2, GEMV: true})
	require.NoError(t, err)
	assert.Contains(t, k.Text, "lum_ld16(")
	assert.Contains(t, k.Text, "uint4 w[2][2]")
	assert.Equal(t, [3]int{5, 1, 1}, k.Grid)
	assert.Equal(t, 9, strings.Count(k.Text, "lum_f32_to_bf16("), "two roundings: the graph's own cast in the prologue (once for each of a thread's 8 values) and C's store")

	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		b.Output("out0", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	for name, body := range map[string]*ir.Graph{
		"odd K": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 1, 36), b.Input("$1", ir.BF16, 20, 36)
			return b.MatMul(x, b.Permute(w, 1, 0))
		}),
		"row-major weight, N no multiple of 8": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 1, 64), b.Input("$1", ir.BF16, 64, 20)
			return b.MatMul(x, w)
		}),
		"computed weight": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 1, 64), b.Input("$1", ir.F32, 20, 64)
			return b.MatMul(x, b.Permute(b.Cast(w, ir.BF16), 1, 0))
		}),
		"nine rows": build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", ir.BF16, 9, 64), b.Input("$1", ir.BF16, 20, 64)
			return b.MatMul(x, b.Permute(w, 1, 0))
		}),
	} {
		ranked, err := model.Ranked(body)
		require.NoError(t, err, name)
		for _, e := range ranked {
			assert.False(t, e.Schedule.GEMV, "%s: %s", name, e.Schedule)
		}
		_, err = PrintKernelWith("g", "", body, cost.Schedule{BM: int(body.Node(body.Node(body.Outputs[0].Value).Inputs[0]).Shape[0]), BN: 4, Threads: 128, Stages: 1, GEMV: true})
		assert.Error(t, err, name)
	}
}

// vectorLoad is a 16-byte global load in PTX (through the read-only path
// or not: NVRTC picks it for a const __restrict__ parameter).
var vectorLoad = regexp.MustCompile(`ld\.global(\.nc)?\.v4\.u32`)

// TestNVRTCCompilesGEMV compiles every matrix-vector kernel for sm_90
// (each body's best for sm_80 too): no spills, no local memory, and the
// weight read by 16-byte vector loads (ld.global.v4) in the main loop.
// Under -short sm_90 compiles the first kernel of each body in each
// printed variant (scheduleVariant: the thread layout, the split of K and
// whether several loads are in flight), leaving out the others' block
// widths and thread counts, which print the same code with other
// constants; the long test command compiles them all.
func TestNVRTCCompilesGEMV(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	all, allBodies := gemvKernels(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		// sm_90 compiles every variant; sm_80 each body's best.
		var kernels []*Kernel
		var bodies []*ir.Graph
		seen := map[string]bool{}
		for i, k := range all {
			v, _ := scheduleVariant(allBodies[i], k.Schedule)
			v = fmt.Sprintf("%p %s", allBodies[i], v)
			switch {
			case arch == "sm_80" && !strings.HasSuffix(k.Name, "_0"):
				continue
			case arch == "sm_90" && testing.Short() && seen[v] && !strings.HasSuffix(k.Name, "_0"):
				continue
			}
			seen[v] = true
			kernels, bodies = append(kernels, k), append(bodies, allBodies[i])
		}
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for ki, k := range kernels {
			r, ok := res.Kernels[k.Name]
			require.True(t, ok, "%s: no resources for %s", arch, k.Name)
			assert.Zero(t, r.SpillStores, "%s: %s (%s) spills", arch, k.Name, k.Schedule)
			assert.Zero(t, r.StackBytes, "%s: %s (%s) has a stack frame", arch, k.Name, k.Schedule)
			entry := ptxEntry(res.PTX, k.Name)
			require.NotEmpty(t, entry, "%s: entry %s", arch, k.Name)
			assert.False(t, strings.Contains(entry, ".local"), "%s %s: local memory", arch, k.Name)
			assert.True(t, vectorLoad.MatchString(entry), "%s %s: no 16-byte weight loads", arch, k.Name)
			// A reduction of a few groups unrolls whole; a long one
			// keeps its loop, whose instructions rerank reads.
			body := bodies[ki]
			a := body.Node(body.Node(matmulOf(body)).Inputs[0]).Shape
			loads, step, _, ok := cost.GEMVLoop(body, matmulOf(body), k.Schedule)
			require.True(t, ok, "%s %s", k.Name, k.Schedule)
			if int(a[len(a)-1]) >= 3*step {
				assert.Positive(t, MainLoopInstructions(res.PTX, k.Name), "%s %s: no main loop around the weight loads", arch, k.Name)
			}
			if loop := gemvMainLoop(entry); loop != "" {
				assert.Equal(t, loads, longestLoadRun(loop), "%s %s (%s): the main loop's group of 16-byte loads, issued with no branch between them", arch, k.Name, k.Schedule)
			}
		}
	}
}

// gemvMainLoop is the innermost loop of a PTX entry around 16-byte global
// loads ("" when none), the loop LoopMix reads.
func gemvMainLoop(entry string) string {
	loops := ptxLoops(entry, vectorLoad)
	if len(loops) == 0 {
		return ""
	}
	inner := loops[0]
	for _, l := range loops[1:] {
		if len(l) < len(inner) {
			inner = l
		}
	}
	return inner
}

// longestLoadRun is the most 16-byte global loads of a stretch of PTX that
// no label or branch separates (one basic block's: loads the warp has in
// flight together).
func longestLoadRun(ptx string) int {
	best, run := 0, 0
	for _, line := range strings.Split(ptx, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case vectorLoad.MatchString(line):
			run++
			best = max(best, run)
		case strings.HasPrefix(line, "$") || strings.Contains(line, "bra"):
			run = 0
		}
	}
	return best
}

// TestGEMVLoopMixMatchesPTX: the instruction mix cost.GEMVLoop estimates
// for a matrix-vector schedule's main loop agrees with LoopMix's count of
// the loop in NVRTC's PTX, pipe by pipe, and a loop with one 16-byte load
// in flight per thread has one load in a basic block where the repaired
// one has eight. Decode shapes (K = 4096, the loop kept), a sample of
// layouts and weight types.
func TestGEMVLoopMixMatchesPTX(t *testing.T) {
	lib := nvrtcOrSkip(t)
	build := func(dt ir.DType, rowMajor bool, M int) *ir.Graph {
		b := ir.NewBuilder("kernel")
		const K, N = 4096, 64
		x := b.Input("$0", ir.F32, ir.Dim(M), K)
		var w ir.Value
		if rowMajor {
			w = b.Input("$1", dt, K, N)
		} else {
			w = b.Permute(b.Input("$1", dt, N, K), 1, 0)
		}
		b.Output("out0", b.MatMul(b.Cast(x, dt), w))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	cases := []struct {
		name     string
		body     *ir.Graph
		s        cost.Schedule
		inFlight int
	}{
		{"bf16 one load in flight", build(ir.BF16, false, 1), cost.Schedule{BM: 1, BN: 4, Threads: 128, Stages: 1, TM: 1, GEMV: true}, 1},
		{"bf16 eight a column", build(ir.BF16, false, 1), cost.Schedule{BM: 1, BN: 4, Threads: 128, Stages: 8, TM: 1, GEMV: true}, 8},
		{"bf16 four columns, two each", build(ir.BF16, false, 1), cost.Schedule{BM: 1, BN: 8, Threads: 256, Stages: 2, TM: 4, GEMV: true}, 8},
		{"bf16 split-K, two rows", build(ir.BF16, false, 2), cost.Schedule{BM: 2, BN: 8, Threads: 256, Stages: 2, TM: 2, GEMV: true}, 4},
		{"f16 two columns", build(ir.F16, false, 1), cost.Schedule{BM: 1, BN: 8, Threads: 128, Stages: 2, TM: 2, GEMV: true}, 4},
		{"f32 eight rows", build(ir.F32, false, 8), cost.Schedule{BM: 8, BN: 8, Threads: 256, Stages: 4, TM: 1, GEMV: true}, 4},
		{"bf16 row-major", build(ir.BF16, true, 1), cost.Schedule{BM: 1, BN: 64, Threads: 128, Stages: 8, GEMV: true}, 8},
	}
	var kernels []*Kernel
	for i, c := range cases {
		k, err := PrintKernelWith(fmt.Sprintf("mix%d", i), c.name, c.body, c.s)
		require.NoError(t, err, c.name)
		kernels = append(kernels, k)
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for i, c := range cases {
		loads, _, est, ok := cost.GEMVLoop(c.body, matmulOf(c.body), c.s)
		require.True(t, ok, c.name)
		assert.Equal(t, c.inFlight, loads, c.name)
		got := LoopMix(res.PTX, kernels[i].Name)
		require.Positive(t, got.Total(), "%s: no main loop", c.name)
		assert.Equal(t, c.inFlight, longestLoadRun(gemvMainLoop(ptxEntry(res.PTX, kernels[i].Name))), "%s: loads in one basic block", c.name)
		assert.Equal(t, got.Load, est.Load, "%s: global loads", c.name)
		assert.Equal(t, got.Shared, est.Shared, "%s: shared loads", c.name)
		assert.InDelta(t, got.FP, est.FP, 0.1*got.FP+2, "%s: FP (PTX %+v, estimate %+v)", c.name, got, est)
		assert.InDelta(t, got.Int, est.Int, 0.2*got.Int+6, "%s: integer (PTX %+v, estimate %+v)", c.name, got, est)
		assert.InDelta(t, got.Other, est.Other, 0.2*got.Other+6, "%s: other (PTX %+v, estimate %+v)", c.name, got, est)
	}
}

// matmulOf is body's matmul.
func matmulOf(body *ir.Graph) ir.Value {
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			return ir.Value(i)
		}
	}
	return -1
}

// TestGEMVSchedulesMatchPrinter: every matrix-vector schedule the h200
// model offers for the test bodies prints, with the group of loads
// GEMVLoop prices (uint4 w[Stages][cols]), the grid and block the
// features price; printing only, so every schedule is checked cheaply
// (the emulation and NVRTC tests run a sample).
func TestGEMVSchedulesMatchPrinter(t *testing.T) {
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies := gemvBodies(t)
	for _, name := range sortedNames(bodies) {
		body := bodies[name]
		ranked, err := model.Ranked(body)
		require.NoError(t, err, name)
		for _, e := range ranked {
			s := e.Schedule
			if !s.GEMV {
				continue
			}
			k, err := PrintKernelWith("g", "", body, s)
			require.NoError(t, err, "%s %s", name, s)
			loads, _, _, ok := cost.GEMVLoop(body, matmulOf(body), s)
			require.True(t, ok, "%s %s", name, s)
			cols := 1
			if _, kContiguous, _ := cost.GEMVWeight(body, matmulOf(body)); kContiguous {
				cols, _, _ = cost.GEMVLayout(s)
			}
			assert.Contains(t, k.Text, fmt.Sprintf("uint4 w[%d][%d];", s.Stages, cols), "%s %s", name, s)
			assert.Equal(t, loads, s.Stages*cols, "%s %s", name, s)
			assert.Equal(t, e.Features.Blocks, k.Grid[0]*k.Grid[1]*k.Grid[2], "%s %s", name, s)
			assert.Equal(t, e.Features.WarpsPerBlock*32, k.Block[0], "%s %s", name, s)
		}
	}
}
