package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scheduleBodies are the test kernels of every form, f32 and half, with
// awkward shapes (tails, a row of one, odd K).
func scheduleBodies(t testing.TB) map[string]*ir.Graph {
	bodies := elementwiseBodies(t)
	for name, body := range matmulBodies(t) {
		bodies[name] = body
	}
	for name, tb := range tensorCoreBodies(t) {
		bodies[name] = tb.body
	}
	bodies["attention_prefill"] = attentionBody(t, 5, 5)
	bodies["attention_decode"] = attentionBody(t, 1, 70)
	bodies["attention_bf16"] = attentionBodyOf(t, ir.BF16, 5, 37)
	for name, body := range splitSumBodies(t) {
		bodies[name] = body
	}
	return bodies
}

// TestEveryScheduleMatchesReference prints each test kernel under every
// schedule the cost model lists for it, runs them all under emulation with
// shuffled threads, and compares each with the reference: a schedule the
// model may pick must compute the same numbers as the default one.
func TestEveryScheduleMatchesReference(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	kernels, bodies := scheduledKernels(t)
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var wants []*ir.Result
	for i := range kernels {
		body := bodies[i]
		feeds, err := ir.RandomFeeds(body, uint64(i+1), ir.Typical)
		require.NoError(t, err)
		if ids, ok := feeds["$1"]; ok && !ids.DType.IsFloat() {
			for j := range ids.Len() {
				ids.SetInt(j, j*7%20-10) // gather rows: negative ones count from the end
			}
		}
		want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err)
		var in []*ir.Tensor
		for _, v := range body.Inputs() {
			in = append(in, feeds[body.Node(v).Name])
		}
		var vt []ir.ValueType
		for _, o := range body.Outputs {
			n := body.Node(o.Value)
			vt = append(vt, ir.ValueType{Shape: n.Shape, DType: n.DType})
		}
		args, outs, wants = append(args, in), append(outs, vt), append(wants, want)
	}
	got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 11})
	require.NoError(t, err)
	forms := map[string]bool{}
	for i, k := range kernels {
		forms[k.Schedule.String()] = true
		for j, o := range bodies[i].Outputs {
			want := wants[i]
			mm, err := ir.Compare(got[i][j], want.Outputs[o.Name], want.Magnitudes[o.Name], 1024)
			require.NoError(t, err)
			assert.Nil(t, mm, "%s (%s) output %d: %v", k.Name, k.Schedule, j, mm)
		}
	}
	t.Logf("%d kernels, %d distinct schedules", len(kernels), len(forms))
	// Every form's alternatives are exercised: warp-per-row rows, f32 and
	// tensor-core tiles of several sizes, attention thread counts.
	for _, s := range []string{"threads=128,rows=4", "bm=16,bn=32,bk=16,threads=32,stages=1", "bm=128,bn=64,bk=16,threads=512,stages=1", "bm=16,bn=64,bk=16,threads=256,stages=1,tm=1", "bm=64,bn=64,bk=16,threads=256,stages=2", "bm=16,bn=32,bk=16,threads=128,stages=2,tm=1",
		"bm=16,bn=32,bk=32,threads=32,stages=2,mma", "bm=128,bn=64,bk=32,threads=256,stages=2,mma", "bm=1,bn=32,threads=64"} {
		assert.True(t, forms[s], "no kernel ran schedule %s", s)
	}
	// And every tensor-core and matrix-vector variant: three and four
	// stages, 64x64 warp patches with two to four, several loads in
	// flight.
	ran := map[string]bool{}
	for _, k := range kernels {
		s := k.Schedule
		ran[fmt.Sprintf("tensor=%v stages=%d warp=%d gemv=%v", s.Tensor, s.Stages, s.Warp, s.GEMV && s.Stages > 1)] = true
	}
	for _, v := range []string{"tensor=true stages=3 warp=0 gemv=false", "tensor=true stages=2 warp=64 gemv=false", "tensor=true stages=3 warp=64 gemv=false",
		"tensor=true stages=4 warp=0 gemv=false", "tensor=true stages=4 warp=64 gemv=false"} {
		assert.True(t, ran[v], "no kernel ran a schedule with %s", v)
	}
	gemv := false
	for _, k := range kernels {
		gemv = gemv || k.Schedule.GEMV && k.Schedule.Stages > 1
	}
	assert.True(t, gemv, "no matrix-vector kernel ran with several loads in flight")
}

// scheduleVariant is what a matmul schedule changes in the printed code:
// the f32 path's stages, rows a thread and tile rows; the tensor-core
// path's warp patch, stages and tile rows; the matrix-vector layout. The
// many block sizes of one variant print the same code with other
// constants; the tests run the first of each variant and the model's best
// few, so that the package's tests stay within their time.
func scheduleVariant(body *ir.Graph, s cost.Schedule) (string, bool) {
	if form, err := cost.FormOf(body); err != nil || form != cost.FormMatMul {
		return "", false
	}
	if !s.Tensor && !s.GEMV {
		return fmt.Sprintf("f32 stages=%d tm=%d bm=%d", s.Stages, s.TM, s.BM), true
	}
	if s.GEMV {
		if _, kContiguous, _ := cost.GEMVWeight(body, matmulOf(body)); !kContiguous {
			return fmt.Sprintf("gemv row-major bn=%d several-stages=%v", s.BN, s.Stages > 1), true
		}
		cols, split, _ := cost.GEMVLayout(s)
		return fmt.Sprintf("gemv cols=%d split=%d several-stages=%v", cols, split, s.Stages > 1), true
	}
	return fmt.Sprintf("mma warp=%d stages=%d bm16=%v", s.Warp, s.Stages, s.BM == 16), true
}

// scheduledKernels prints every test body under every schedule the h100
// model ranks for it, but for matmuls the best three and the first of
// each printed variant (scheduleVariant).
func scheduledKernels(t *testing.T) ([]*Kernel, []*ir.Graph) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies := scheduleBodies(t)
	var kernels []*Kernel
	var of []*ir.Graph
	for _, name := range sortedNames(bodies) {
		body := bodies[name]
		ranked, err := model.Ranked(body)
		require.NoError(t, err, name)
		seen := map[string]bool{}
		for i, e := range ranked {
			if v, ok := scheduleVariant(body, e.Schedule); ok {
				if seen[v] && i >= 3 {
					continue
				}
				seen[v] = true
			}
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name+" "+e.Schedule.String(), body, e.Schedule)
			require.NoError(t, err, "%s %s", name, e.Schedule)
			require.Equal(t, e.Schedule, k.Schedule)
			kernels = append(kernels, k)
			of = append(of, body)
		}
	}
	return kernels, of
}

// TestNVRTCCompilesEverySchedule compiles every scheduled test kernel for
// sm_90: no schedule may print CUDA that NVRTC rejects or that spills.
func TestNVRTCCompilesEverySchedule(t *testing.T) {
	skipLong(t)
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	lib := nvrtcOrSkip(t)
	kernels, _ := scheduledKernels(t)
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range kernels {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
	}
}

// TestPrintRefusesForeignSchedules: a schedule of another form, or one the
// form does not implement, is an error naming it.
func TestPrintRefusesForeignSchedules(t *testing.T) {
	bodies := scheduleBodies(t)
	tests := []struct {
		body string
		s    cost.Schedule
	}{
		{"silu_mul", cost.Schedule{BM: 64, BN: 64, BK: 16, Threads: 256, Stages: 1}},
		{"silu_mul", cost.Schedule{Threads: 100}},
		{"softmax", cost.Schedule{Threads: 128, Rows: 2}},
		{"softmax", cost.Schedule{Threads: 128, Tensor: true}},
		{"tc_f16_linear", cost.Schedule{BM: 64, BN: 64, BK: 16, Threads: 256, Stages: 1}},
		{"tc_f16_linear", cost.Schedule{BM: 48, BN: 64, BK: 32, Threads: 128, Stages: 2, Tensor: true}},
		{"attention_prefill", cost.Schedule{BM: 16, BN: 64, Threads: 128, Tensor: true}},
		// Tensor-core variants the printer does not implement.
		{"tc_f16_linear", cost.Schedule{BM: 32, BN: 64, BK: 32, Threads: 32, Stages: 2, Tensor: true, Warp: 64}},
		{"tc_f16_linear", cost.Schedule{BM: 64, BN: 64, BK: 32, Threads: 128, Stages: 5, Tensor: true}},
		{"tc_f16_linear", cost.Schedule{BM: 128, BN: 128, BK: 32, Threads: 512, Stages: 4, Tensor: true}}, // 64 KiB of tiles
		// Matrix-vector schedules on bodies that are not, or do not fit.
		{"silu_mul", cost.Schedule{BM: 1, BN: 4, Threads: 128, Stages: 1, GEMV: true}},
		{"tc_f16_linear", cost.Schedule{BM: 70, BN: 4, Threads: 128, Stages: 1, GEMV: true}},
		{"tc_f16_one_row", cost.Schedule{BM: 1, BN: 3, Threads: 128, Stages: 1, GEMV: true}},
		{"tc_f16_one_row", cost.Schedule{BM: 1, BN: 4, Threads: 100, Stages: 1, GEMV: true}},
		{"tc_f16_one_row", cost.Schedule{BM: 1, BN: 4, Threads: 128, Stages: 9, GEMV: true}},
		{"tc_f16_odd_k", cost.Schedule{BM: 17, BN: 4, Threads: 128, Stages: 1, GEMV: true}},
		{"tc_bf16_one_row", cost.Schedule{BM: 1, BN: 4, Threads: 128, Stages: 1, GEMV: true, Tensor: true}},
	}
	for _, tt := range tests {
		t.Run(tt.body+" "+tt.s.String(), func(t *testing.T) {
			body, ok := bodies[tt.body]
			require.True(t, ok)
			_, err := PrintKernelWith("k", "", body, tt.s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.s.String())
		})
	}
}
