package emu

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedMemoryPoisoned: every block starts with its shared memory
// holding the NaN pattern, the first block a worker runs as much as the
// next, whether the variable is declared in the kernel or in a helper
// before it; what a block writes is its own.
func TestSharedMemoryPoisoned(t *testing.T) {
	t.Parallel()
	const threads, blocks = 256, 4
	tests := []struct {
		name    string
		workers int
		blocks  []int // nil: all
	}{
		{"one worker", 1, nil},
		{"two workers", 2, nil},
		{"block 0 not run", 1, []int{3, 1, 2}},
	}
	for _, tc := range tests {
		for _, helper := range []int64{0, 1} {
			name := fmt.Sprintf("%s, helper %d", tc.name, helper)
			l := launch1("shared_unwritten", blocks, threads, buf(0), intArg(helper))
			l.Blocks = tc.blocks
			out, err := run(t, []Buffer{{4 * threads * blocks, nil}}, []Launch{l}, Options{Workers: tc.workers})
			require.NoError(t, err, name)
			y := bytesF32(out[0])
			ran := map[int]bool{}
			for _, b := range tc.blocks {
				ran[b] = true
			}
			for b := range blocks {
				for th := range threads {
					i := b*threads + th
					switch {
					case b == 0 && (tc.blocks == nil || ran[0]):
						require.Equal(t, float32(th), y[i], "%s: block 0 thread %d reads what it wrote", name, th)
					default:
						// A block that ran reads poison; one that did not run
						// leaves the output's own fill: the same pattern.
						require.True(t, Unwritten(out[0], 4*i, 4), "%s: block %d thread %d reads %v, not the NaN pattern", name, b, th, y[i])
					}
				}
			}
		}
	}
}

// TestBarrierLinesSurviveSharedSections: the sections placed for shared
// memory keep the source's line numbers, by which barriers are told apart
// and reported.
func TestBarrierLinesSurviveSharedSections(t *testing.T) {
	t.Parallel()
	needCompiler(t)
	src := testSource(t)
	start := strings.Index(src, "void divergent_barrier(")
	require.GreaterOrEqual(t, start, 0)
	first := strings.Count(src[:start+strings.Index(src[start:], "__syncthreads")], "\n") + 1
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Run(ctx, src, testKernels, []Buffer{{4 * 64, nil}},
		[]Launch{launch1("divergent_barrier", 1, 64, buf(0))}, Options{CacheDir: testCache})
	ke := kernelError(t, err)
	assert.Contains(t, ke.Msg, fmt.Sprintf("threads 0-31 wait at __syncthreads (line %d)", first))
	assert.Contains(t, ke.Msg, fmt.Sprintf("threads 32-63 wait at __syncthreads (line %d)", first+2))
}

func TestPlaceShared(t *testing.T) {
	t.Parallel()
	ks := []Kernel{{Name: "a"}, {Name: "b"}}
	tests := []struct {
		name, src, want string
	}{
		{
			"two kernels",
			"__device__ int h() { return 1; }\nextern \"C\" __global__ void b(int* x) {\n  x[0] = 1;\n}\n\nextern \"C\" __global__ void a(int* x) { x[0] = 2; }\n",
			"__device__ int h() { return 1; }\n" +
				"#undef __shared__\n#define __shared__ LUM_EMU_SHARED_IN(\"lum_emu_shared_1\")\n#line 2 \"kernels.cu\"\n" +
				"extern \"C\" __global__ void b(int* x) {\n  x[0] = 1;\n}\n\n" +
				"#undef __shared__\n#define __shared__ LUM_EMU_SHARED_IN(\"lum_emu_shared_0\")\n#line 6 \"kernels.cu\"\n" +
				"extern \"C\" __global__ void a(int* x) { x[0] = 2; }\n",
		},
		{
			"a prototype is not the definition",
			"extern \"C\" __global__ void a(int* x);\nextern \"C\" __global__ void b(int* x) {}\nextern \"C\" __global__ void a(int* x) {}\n",
			"extern \"C\" __global__ void a(int* x);\n" +
				"#undef __shared__\n#define __shared__ LUM_EMU_SHARED_IN(\"lum_emu_shared_1\")\n#line 2 \"kernels.cu\"\n" +
				"extern \"C\" __global__ void b(int* x) {}\n" +
				"#undef __shared__\n#define __shared__ LUM_EMU_SHARED_IN(\"lum_emu_shared_0\")\n#line 3 \"kernels.cu\"\n" +
				"extern \"C\" __global__ void a(int* x) {}\n",
		},
		{
			"a kernel not found leaves the source as it is",
			"extern \"C\" __global__ void a(int* x) {}\n",
			"extern \"C\" __global__ void a(int* x) {}\n",
		},
		{
			"two kernels on one line",
			"extern \"C\" __global__ void a(int* x) {} extern \"C\" __global__ void b(int* x) {}\n",
			"extern \"C\" __global__ void a(int* x) {} extern \"C\" __global__ void b(int* x) {}\n",
		},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, placeShared(tc.src, ks), tc.name)
	}
}
