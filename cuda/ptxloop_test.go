package cuda

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPTXMixClassifies counts a hand-written stretch of PTX by pipe: a
// 64-bit remainder weighs as the subroutine it becomes, 64-bit adds as
// two, a wide multiply as one, packed half FMA as floating point.
func TestPTXMixClassifies(t *testing.T) {
	ptx := `
$L__BB0_2:
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd4];
	ld.shared.f32 	%f1, [%r5];
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%r10];
	cp.async.cg.shared.global [%r11], [%rd5], 16;
	cp.async.commit_group;
	rem.s64 	%rd6, %rd7, %rd8;
	div.u32 	%r12, %r13, %r14;
	add.s64 	%rd9, %rd9, 16;
	mul.wide.s32 	%rd10, %r15, 4;
	fma.rn.f32 	%f2, %f1, %f3, %f2;
	fma.rn.bf16x2 	%r16, %r17, %r18, %r16;
	setp.lt.s32 	%p1, %r19, %r20;
	@%p1 bra 	$L__BB0_2;
	mov.u32 	%r21, %r22;
	// a comment
`
	got := PTXMix(ptx)
	assert.Equal(t, 2.0, got.Load, "the 16-byte load and the cp.async")
	assert.Equal(t, 2.0, got.Shared, "ld.shared and ldmatrix")
	assert.Equal(t, float64(div64Instructions+div32Instructions+2+1+1), got.Int)
	assert.Equal(t, 2.0, got.FP)
	assert.Equal(t, 3.0, got.Other, "commit_group, bra, mov")
}

// TestLoopMixSeesIntegerAddressing compiles two loops that load the same
// keys with NVRTC: one addresses every element by 64-bit division and
// remainder by a runtime extent (as a naive view does), the other walks a
// 32-bit offset. The first's loop is integer-bound by tens of integer
// instructions per FMA, the second's is not; the mix is read from the PTX.
func TestLoopMixSeesIntegerAddressing(t *testing.T) {
	lib := nvrtcOrSkip(t)
	src := `
extern "C" __global__ void divmod(const float* __restrict__ k, const float* __restrict__ q, float* __restrict__ out, long long n, long long d) {
  float acc = 0.0f;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    long long row = i / d, col = i % d;
    acc += q[col] * k[row * d + col];
  }
  out[threadIdx.x] = acc;
}
extern "C" __global__ void incremental(const float* __restrict__ k, const float* __restrict__ q, float* __restrict__ out, int n, int d) {
  float acc = 0.0f;
  const float* p = k + threadIdx.x;
  int col = threadIdx.x;
  for (int i = threadIdx.x; i < n; i += 128) {
    acc += q[col] * *p;
    p += 128;
    col += 128;
    if (col >= d) col -= d;
  }
  out[threadIdx.x] = acc;
}
`
	res, err := lib.Compile(context.Background(), src, "mix.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	bad, good := LoopMix(res.PTX, "divmod"), LoopMix(res.PTX, "incremental")
	require.Positive(t, bad.FP, "divmod: no loop found")
	require.Positive(t, good.FP, "incremental: no loop found")
	assert.GreaterOrEqual(t, bad.IntPerFP(), 30.0, "64-bit division and remainder per element: %+v", bad)
	assert.LessOrEqual(t, good.IntPerFP(), 16.0, "32-bit incremental addressing: %+v", good)
	assert.GreaterOrEqual(t, bad.Int, 3*good.Int, "division against increments")
	assert.Equal(t, 2.0, good.Load, "two loads an iteration")
}
