package emu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func kernelError(t *testing.T, err error) *KernelError {
	t.Helper()
	var ke *KernelError
	require.ErrorAs(t, err, &ke)
	return ke
}

func TestOutOfBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bufs     []Buffer
		launch   Launch
		contains []string
		block    bool
	}{
		{"write past the end", []Buffer{{4000, nil}}, launch1("oob_write", 4, 256, buf(0), intArg(1000)),
			[]string{"out-of-bounds access", "past the end of buffer 0 (parameter y, 4000 bytes)"}, true},
		{"read before the start", []Buffer{{4096, f32Bytes(make([]float32, 1024))}, {4 * 32, nil}},
			launch1("oob_read_before", 1, 32, buf(0), buf(1)),
			[]string{"out-of-bounds access", "4 bytes before the start of buffer 0 (parameter x, 4096 bytes)"}, true},
		{"write into the alignment slack", []Buffer{{4004, nil}}, launch1("tail_write", 1, 32, buf(0), intArg(1001)),
			[]string{"out-of-bounds access", "a write 0 bytes past the end of buffer 0 (parameter y, 4004 bytes), found after the launch"}, false},
	}
	for _, tc := range tests {
		_, err := run(t, tc.bufs, []Launch{tc.launch}, Options{Workers: 1})
		require.Error(t, err, tc.name)
		ke := kernelError(t, err)
		assert.Equal(t, "out-of-bounds", ke.Kind, tc.name)
		assert.Equal(t, tc.launch.Kernel, ke.Kernel, tc.name)
		assert.Contains(t, err.Error(), "kernel "+tc.launch.Kernel, tc.name)
		for _, s := range tc.contains {
			assert.Contains(t, err.Error(), s, tc.name)
		}
		if tc.block {
			assert.NotNil(t, ke.Block, tc.name)
			assert.NotNil(t, ke.Thread, tc.name)
			assert.Contains(t, err.Error(), "block (", tc.name)
		}
	}
}

func TestOutOfBoundsNamesTheLaunch(t *testing.T) {
	t.Parallel()
	ok := launch1("vadd", 1, 32, buf(0), buf(0), buf(1), intArg(8))
	_, err := run(t, []Buffer{{32, f32Bytes(make([]float32, 8))}, {32, nil}},
		[]Launch{ok, launch1("oob_write", 1, 32, buf(1), intArg(8))}, Options{})
	ke := kernelError(t, err)
	assert.Equal(t, 1, ke.Launch)
	assert.Equal(t, []int{0, 0, 0}, ke.Block)
	assert.Contains(t, err.Error(), "emu: kernel oob_write (launch 1), block (0,0,0), thread (")
}

func TestMisalignedVectorLoad(t *testing.T) {
	t.Parallel()
	_, err := run(t, []Buffer{{4 * 64, f32Bytes(make([]float32, 64))}, {4 * 8, nil}},
		[]Launch{launch1("misaligned", 1, 8, buf(0), buf(1))}, Options{Workers: 1})
	ke := kernelError(t, err)
	assert.Equal(t, "misaligned", ke.Kind)
	assert.Equal(t, "misaligned", ke.Kernel)
	assert.Equal(t, []int{0, 0, 0}, ke.Block)
	assert.Equal(t, []int{0, 0, 0}, ke.Thread)
	assert.Contains(t, err.Error(), "lum_ld4")
	assert.Contains(t, err.Error(), "byte offset 4 of buffer 0 (parameter x")
}

func TestStackOverflow(t *testing.T) {
	t.Parallel()
	_, err := run(t, []Buffer{{4 * 4, nil}}, []Launch{launch1("stack_hog", 1, 4, buf(0), intArg(32768))}, Options{})
	ke := kernelError(t, err)
	assert.Equal(t, "stack-overflow", ke.Kind)
	assert.Contains(t, err.Error(), "kernel stack_hog (launch 0), block (0,0,0), thread (")
}

func TestDeadlock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kernel   string
		block    int
		contains []string
	}{
		{"divergent_barrier", 64, []string{"__syncthreads reached at different lines",
			"threads 0-31 wait at __syncthreads (line", "threads 32-63 wait at __syncthreads (line"}},
		{"barrier_vs_shuffle", 64, []string{"no thread of the block can proceed",
			"threads 0 wait at __syncthreads", "threads 1-31 wait in __shfl_xor_sync", "threads 32-63 have returned"}},
		{"diverged_warp", 32, []string{"warp 0 diverged: thread 0 is in __shfl_xor_sync (mask 0xffffffff, width 32) " +
			"but thread 16, which that mask names, is in __shfl_down_sync"}},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		needCompiler(t)
		_, err := Run(ctx, testSource(t), testKernels, []Buffer{{4 * 64 * 3, nil}},
			[]Launch{launch1(tc.kernel, 3, tc.block, buf(0))}, Options{CacheDir: testCache, Workers: 1})
		cancel()
		require.NotErrorIs(t, err, context.DeadlineExceeded, "a deadlock must be reported, not hang")
		ke := kernelError(t, err)
		assert.Equal(t, "deadlock", ke.Kind, tc.kernel)
		assert.Equal(t, []int{0, 0, 0}, ke.Block, tc.kernel)
		assert.Contains(t, err.Error(), "block (0,0,0)", tc.kernel)
		for _, s := range tc.contains {
			assert.Contains(t, err.Error(), s, tc.kernel)
		}
	}
}

func TestCancelRunawayKernel(t *testing.T) {
	t.Parallel()
	flag := []Buffer{{4, make([]byte, 4)}}
	// Compile first, so that the deadline below falls on the running kernel.
	_, err := run(t, flag, nil, Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Run(ctx, testSource(t), testKernels, flag, []Launch{launch1("spin", 2, 32, buf(0))}, Options{CacheDir: testCache})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Less(t, time.Since(start), time.Minute)
}
