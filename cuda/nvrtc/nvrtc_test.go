package nvrtc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// library loads NVRTC for a test, skipping the test when it is absent unless
// LUMSEARCH_REQUIRE_NVRTC=1 (as in CI), which fails it instead.
func library(t *testing.T) *Library {
	t.Helper()
	lib, err := Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatalf("LUMSEARCH_REQUIRE_NVRTC=1: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return lib
}

const saxpySrc = `extern "C" __global__ void saxpy(float a, const float* x, float* y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
`

// blockSumSrc reduces each block's 256 values in shared memory.
const blockSumSrc = `extern "C" __global__ void block_sum(const float* x, float* out)
{
	__shared__ float buf[256];
	unsigned t = threadIdx.x;
	buf[t] = x[blockIdx.x * 256 + t];
	__syncthreads();
	for (unsigned s = 128; s > 0; s >>= 1) {
		if (t < s)
			buf[t] += buf[t + s];
		__syncthreads();
	}
	if (t == 0)
		out[blockIdx.x] = buf[0];
}
`

func TestVersion(t *testing.T) {
	lib := library(t)
	major, minor := lib.Version()
	t.Logf("NVRTC %d.%d from %s, architectures %v", major, minor, lib.Path(), lib.SupportedArchs())
	assert.True(t, major > 11 || major == 11 && minor >= 2, "version %d.%d", major, minor)
	again, err := Load()
	require.NoError(t, err)
	assert.Same(t, lib, again, "Load loads once")
}

func TestCompile(t *testing.T) {
	lib := library(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			res, err := lib.Compile(context.Background(), saxpySrc, "saxpy.cu", Options{Arch: arch})
			require.NoError(t, err)
			assert.Contains(t, res.PTX, ".entry saxpy(")
			assert.Contains(t, res.PTX, ".target "+arch)
			assert.NotContains(t, res.PTX, "\x00")
			require.NotEmpty(t, res.CUBIN, "a real architecture makes a CUBIN")
			assert.Equal(t, "\x7fELF", string(res.CUBIN[:4]))
			require.Contains(t, res.Kernels, "saxpy", "log:\n%s", res.Log)
			r := res.Kernels["saxpy"]
			t.Logf("saxpy on %s: %+v", arch, r)
			assert.Greater(t, r.Registers, 0)
			assert.Zero(t, r.SharedBytes)
			assert.Zero(t, r.SpillStores+r.SpillLoads)
		})
	}
}

func TestSharedMemory(t *testing.T) {
	lib := library(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		res, err := lib.Compile(context.Background(), blockSumSrc, "block_sum.cu", Options{Arch: arch})
		require.NoError(t, err)
		r, ok := res.Kernels["block_sum"]
		require.True(t, ok, "log:\n%s", res.Log)
		t.Logf("block_sum on %s: %+v", arch, r)
		assert.Equal(t, 256*4, r.SharedBytes, arch)
	}
}

func TestCompileError(t *testing.T) {
	lib := library(t)
	src := "extern \"C\" __global__ void broken(float* y)\n{\n\tfloat x = 1\n\ty[0] = x;\n}\n"
	_, err := lib.Compile(context.Background(), src, "broken.cu", Options{Arch: "sm_80"})
	require.Error(t, err)
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	t.Logf("%v", err)
	assert.Contains(t, err.Error(), "broken.cu(4): error")
	assert.Contains(t, err.Error(), "broken.cu:4: y[0] = x;")
	require.NotEmpty(t, ce.Diagnostics)
	d := ce.Diagnostics[0]
	assert.Equal(t, "error", d.Severity)
	assert.Equal(t, 4, d.Line)
	assert.Equal(t, "\ty[0] = x;", d.Source)
}

func TestVirtualArch(t *testing.T) {
	lib := library(t)
	res, err := lib.Compile(context.Background(), saxpySrc, "", Options{Arch: "compute_80"})
	require.NoError(t, err)
	assert.Contains(t, res.PTX, ".entry saxpy(")
	assert.Empty(t, res.CUBIN)
	assert.Empty(t, res.Kernels)
}

func TestArchErrors(t *testing.T) {
	lib := library(t)
	_, err := lib.Compile(context.Background(), saxpySrc, "", Options{Arch: "hopper"})
	assert.ErrorContains(t, err, `architecture "hopper" is not sm_NN or compute_NN`)
	_, err = lib.Compile(context.Background(), saxpySrc, "", Options{})
	assert.ErrorContains(t, err, `architecture "" is not`)
	if len(lib.SupportedArchs()) > 0 {
		_, err = lib.Compile(context.Background(), saxpySrc, "", Options{Arch: "sm_21"})
		assert.ErrorContains(t, err, "cannot compile for sm_21 (it supports sm_")
	}
	_, err = lib.Compile(context.Background(), "int x;\x00", "", Options{Arch: "sm_80"})
	assert.ErrorContains(t, err, "NUL")
}

func TestOptions(t *testing.T) {
	lib := library(t)
	// -default-device: plain functions are device functions; --std=c++17: if constexpr.
	src := `template <int N> int pick() { if constexpr (N > 0) return N; else return -N; }
extern "C" __global__ void opts(int* y) { y[0] = pick<3>(); }
`
	_, err := lib.Compile(context.Background(), src, "opts.cu", Options{Arch: "sm_80"})
	require.NoError(t, err)
	// An Extra standard replaces the default one (C++11 has no if constexpr).
	_, err = lib.Compile(context.Background(), src, "opts.cu", Options{Arch: "sm_80", Extra: []string{"--std=c++11"}})
	require.Error(t, err)
	// Extra options reach NVRTC.
	res, err := lib.Compile(context.Background(), saxpySrc, "saxpy.cu", Options{Arch: "sm_80", Extra: []string{"--maxrregcount=16", "-lineinfo"}})
	require.NoError(t, err)
	assert.Contains(t, res.PTX, ".loc")
	_, err = lib.Compile(context.Background(), saxpySrc, "saxpy.cu", Options{Arch: "sm_80", Extra: []string{"--no-such-option"}})
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	t.Logf("%v", err)
}

func TestConcurrentCompiles(t *testing.T) {
	lib := library(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			name := fmt.Sprintf("scale%d", i)
			src := fmt.Sprintf("extern \"C\" __global__ void %s(float* y) { y[threadIdx.x] *= %d.0f; }\n", name, i+2)
			res, err := lib.Compile(context.Background(), src, name+".cu", Options{Arch: []string{"sm_80", "sm_90"}[i%2]})
			if err == nil && !strings.Contains(res.PTX, ".entry "+name+"(") {
				err = fmt.Errorf("%s: PTX without its entry", name)
			}
			if err == nil {
				if _, ok := res.Kernels[name]; !ok {
					err = fmt.Errorf("%s: no resources in log %q", name, res.Log)
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

func TestContext(t *testing.T) {
	lib := library(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := lib.Compile(ctx, saxpySrc, "", Options{Arch: "sm_80"})
	assert.ErrorIs(t, err, context.Canceled)

	// Cancel while NVRTC is working: Compile returns without waiting for it.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(time.Millisecond, cancel)
	_, err = lib.Compile(ctx, blockSumSrc, "", Options{Arch: "sm_90", Extra: []string{"-G"}})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestLoadErrors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("NVRTC loads on Linux only")
	}
	saved := sonames
	t.Cleanup(func() { sonames = saved })
	sonames = []string{"libnvrtc-lumsearch-test.so.99"}
	home := t.TempDir()
	t.Setenv("CUDA_HOME", home)

	_, err := load("")
	require.Error(t, err)
	assert.ErrorContains(t, err, "NVRTC not found: tried libnvrtc-lumsearch-test.so.99, "+filepath.Join(home, "lib64", "libnvrtc.so*"))
	assert.ErrorContains(t, err, "/usr/local/cuda-*/lib64/libnvrtc.so*")
	assert.ErrorContains(t, err, "install libnvrtc (Debian: libnvrtc11.2 and libnvrtc-builtins11.8 from non-free) or set LUMSEARCH_NVRTC")

	// A file that is there but does not load is named with the reason.
	bogus := filepath.Join(home, "lib64", "libnvrtc-lumsearch-test.so.99")
	require.NoError(t, os.MkdirAll(filepath.Dir(bogus), 0o755))
	require.NoError(t, os.WriteFile(bogus, []byte("not a library"), 0o644))
	_, err = load("")
	assert.ErrorContains(t, err, "("+bogus+": ")

	_, err = load("/nonexistent/libnvrtc.so")
	assert.ErrorContains(t, err, "NVRTC not loaded from LUMSEARCH_NVRTC=/nonexistent/libnvrtc.so")
	_, err = load("libc.so.6")
	assert.ErrorContains(t, err, "libc.so.6 has no nvrtcVersion: not an NVRTC library")
}
