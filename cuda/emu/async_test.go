package emu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asyncKernels lists the kernels of testdata/async.cu.
var asyncKernels = []Kernel{
	{"cp_groups", params("const float* src", "float* seen")},
	{"pipe_refill_ok", params("const float* src", "float* out", "int tiles")},
	{"pipe_refill_racy", params("const float* src", "float* out", "int tiles")},
	{"pipe_stage_ok", params("const float* src", "float* out", "int tiles")},
	{"pipe_stage_short", params("const float* src", "float* out", "int tiles")},
	{"cp_twice", params("const float* src", "float* out")},
}

// runAsync runs launches of testdata/async.cu.
func runAsync(tb testing.TB, bufs []Buffer, launches []Launch, opt Options) ([][]byte, error) {
	tb.Helper()
	needCompiler(tb)
	src, err := os.ReadFile("testdata/async.cu")
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opt.CacheDir = testCache
	return Run(ctx, string(src), asyncKernels, bufs, launches, opt)
}

var landings = []Landing{LandAtWait, LandAtIssue, LandBetween}

// TestCpAsyncGroups checks wait_group's count against the PTX ISA: after
// wait_group<1> of three committed groups the two older have landed, after
// wait_group<0> all three, and a copy never committed only after wait_all;
// landing at issue shows every copy at once, landing between never later
// than its wait.
func TestCpAsyncGroups(t *testing.T) {
	t.Parallel()
	const threads = 64
	src := randFloats(rand.New(rand.NewPCG(21, 22)), threads*16)
	for _, land := range landings {
		for _, shuffle := range []bool{false, true} {
			name := fmt.Sprintf("%v shuffled %v", land, shuffle)
			out, err := runAsync(t, []Buffer{{4 * len(src), f32Bytes(src)}, {4 * 3 * threads * 16, nil}},
				[]Launch{launch1("cp_groups", 1, threads, buf(0), buf(1))}, Options{Landing: land, Shuffle: shuffle, Seed: 5})
			require.NoError(t, err, name)
			seen := bytesF32(out[1])
			for stage, landedSlots := range []int{2, 3, 4} { // after wait_group<1>, wait_group<0>, wait_all
				for th := range threads {
					for slot := range 4 {
						for q := range 4 {
							got := seen[((stage*threads+th)*4+slot)*4+q]
							want := src[(4*th+slot)*4+q]
							switch {
							case slot < landedSlots || land == LandAtIssue:
								require.Equal(t, want, got, "%s: stage %d thread %d slot %d must have landed", name, stage, th, slot)
							case land == LandAtWait:
								require.Equal(t, float32(-1), got, "%s: stage %d thread %d slot %d must not have landed", name, stage, th, slot)
							default:
								require.Contains(t, []float32{-1, want}, got, "%s: stage %d thread %d slot %d", name, stage, th, slot)
							}
						}
					}
				}
			}
		}
	}
}

// pipeRun runs a pipeline kernel of testdata/async.cu over blocks blocks
// of 64 threads and 5 tiles and returns whether its sums are right.
func pipeRun(t *testing.T, kernel string, blocks int, opt Options) (bool, error) {
	t.Helper()
	const threads, tiles = 64, 5
	src := randFloats(rand.New(rand.NewPCG(23, uint64(blocks))), blocks*tiles*threads*4)
	want := make([]float32, blocks*threads*4)
	for b := range blocks {
		for th := range threads {
			u := (th + 1) % threads
			for q := range 4 {
				var acc float32
				for k := range tiles {
					acc += src[((b*tiles+k)*threads+u)*4+q]
				}
				want[(b*threads+th)*4+q] = acc
			}
		}
	}
	out, err := runAsync(t, []Buffer{{4 * len(src), f32Bytes(src)}, {4 * len(want), nil}},
		[]Launch{launch1(kernel, blocks, threads, buf(0), buf(1), intArg(tiles))}, opt)
	if err != nil {
		return false, err
	}
	got := bytesF32(out[1])
	for i := range want {
		if got[i] != want[i] {
			return false, nil
		}
	}
	return true, nil
}

// TestCpAsyncPipelines plants the two pipeline bugs that a copy landing
// always at its wait hides or always at issue hides: a refill of a stage
// other threads still read (seen when copies land at issue) and a wait one
// stage short (seen when they land at the wait). Each must fail in the
// landing that shows it and under Vary, whatever the seed, while the
// correct pipelines pass in every mode.
func TestCpAsyncPipelines(t *testing.T) {
	t.Parallel()
	for _, kernel := range []string{"pipe_refill_ok", "pipe_stage_ok"} {
		for _, land := range landings {
			for _, shuffle := range []bool{false, true} {
				for seed := range uint64(2) {
					ok, err := pipeRun(t, kernel, 2, Options{Landing: land, Shuffle: shuffle, Seed: seed})
					require.NoError(t, err)
					assert.True(t, ok, "%s, landing %v, shuffled %v, seed %d", kernel, land, shuffle, seed)
				}
			}
		}
		for seed := range uint64(3) {
			ok, err := pipeRun(t, kernel, 6, Options{Vary: true, Seed: seed})
			require.NoError(t, err)
			assert.True(t, ok, "%s under Vary, seed %d", kernel, seed)
		}
	}
	tests := []struct {
		kernel       string
		shows, hides Landing
	}{
		{"pipe_refill_racy", LandAtIssue, LandAtWait},
		{"pipe_stage_short", LandAtWait, LandAtIssue},
	}
	for _, tc := range tests {
		for _, shuffle := range []bool{false, true} {
			ok, err := pipeRun(t, tc.kernel, 2, Options{Landing: tc.hides, Shuffle: shuffle, Seed: 1})
			require.NoError(t, err)
			assert.True(t, ok, "%s: landing %v (shuffled %v) hides the bug", tc.kernel, tc.hides, shuffle)
			ok, err = pipeRun(t, tc.kernel, 2, Options{Landing: tc.shows, Shuffle: shuffle, Seed: 1})
			require.NoError(t, err)
			assert.False(t, ok, "%s: landing %v (shuffled %v) shows the bug", tc.kernel, tc.shows, shuffle)
		}
		// Landing between shows either bug too.
		for seed := range uint64(2) {
			ok, err := pipeRun(t, tc.kernel, 2, Options{Landing: LandBetween, Seed: seed})
			require.NoError(t, err)
			assert.False(t, ok, "%s: landing between, seed %d", tc.kernel, seed)
		}
		// Three blocks or more try every landing.
		for seed := range uint64(4) {
			ok, err := pipeRun(t, tc.kernel, 3, Options{Vary: true, Seed: seed})
			require.NoError(t, err)
			assert.False(t, ok, "%s under Vary, seed %d", tc.kernel, seed)
		}
	}
}

// TestCpAsyncSameDestination: two copies to one destination, neither
// waited for, are unordered and reported in every landing.
func TestCpAsyncSameDestination(t *testing.T) {
	t.Parallel()
	src := randFloats(rand.New(rand.NewPCG(25, 26)), 8)
	for _, land := range landings {
		_, err := runAsync(t, []Buffer{{4 * len(src), f32Bytes(src)}, {4, nil}},
			[]Launch{launch1("cp_twice", 1, 1, buf(0), buf(1))}, Options{Landing: land})
		ke := kernelError(t, err)
		assert.Equal(t, "usage", ke.Kind, "landing %v", land)
		assert.Contains(t, err.Error(), "while an earlier copy to it (cp.async-group 0) is not waited for", "landing %v", land)
	}
}

func TestLandingValidation(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), "", nil, nil, nil, Options{Landing: LandBetween + 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Options.Landing is Landing(3)")
}
