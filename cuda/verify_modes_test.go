package cuda

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
)

// stagedKernel is a hand-written kernel computing out0 = in0 + in0 over
// blocks of 4 tiles of 64 16-byte chunks, each tile staged through a
// two-stage cp.async pipeline in shared memory, where thread t writes the
// chunk thread t + 1 copied. refillBarrier false drops the barrier between
// reading a stage and refilling it: a write-after-read race that a copy
// landing at its wait hides.
func stagedKernel(name string, blocks int, refillBarrier bool) *Kernel {
	barrier := ""
	if refillBarrier {
		barrier = "    __syncthreads();\n"
	}
	text := fmt.Sprintf(`extern "C" __global__ void %s(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ __align__(16) float buf[2][64][4];
  const unsigned t = threadIdx.x, u = (t + 1) %% 64;
  const long long base = (long long)blockIdx.x * 4 * 64 * 4;
  for (int s = 0; s < 2; s++) {
    lum_cp_async16(buf[s][t], in0 + base + ((long long)s * 64 + t) * 4);
    lum_cp_async_commit();
  }
  for (int k = 0; k < 4; k++) {
    lum_cp_async_wait_group<1>();
    __syncthreads();
    for (int q = 0; q < 4; q++) out0[base + ((long long)k * 64 + u) * 4 + q] = buf[k %% 2][u][q] + buf[k %% 2][u][q];
%s    if (k + 2 < 4) lum_cp_async16(buf[k %% 2][t], in0 + base + ((long long)(k + 2) * 64 + t) * 4);
    lum_cp_async_commit();
  }
}
`, name, barrier)
	return &Kernel{Name: name, Text: text, Inputs: 1, Grid: [3]int{blocks, 1, 1}, Block: [3]int{64, 1, 1},
		Params: []Param{{Name: "in0", Type: "const float*"}, {Name: "out0", Type: "float*"}}}
}

// TestVerifyVariesModes: verification runs its blocks in varied modes, so
// a race that thread order and copies landing at their wait hide is
// caught by default, and FixedModes keeps the caller's one mode.
func TestVerifyVariesModes(t *testing.T) {
	needGXX(t)
	const blocks = 4
	body := buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.F32, blocks*4*64*4)
		return b.Add(x, x)
	})
	ctx := context.Background()
	fixed, racy := stagedKernel("staged_fixed", blocks, true), stagedKernel("staged_racy", blocks, false)
	for seed := range uint64(3) {
		_, err := VerifyKernel(ctx, fixed, body, VerifyOptions{Seed: seed})
		require.NoError(t, err, "the correct pipeline passes in every mode, seed %d", seed)
		_, err = VerifyKernel(ctx, racy, body, VerifyOptions{Seed: seed})
		var mm *KernelMismatch
		require.ErrorAs(t, err, &mm, "the race is caught by default, seed %d", seed)
		assert.True(t, strings.HasPrefix(mm.Kernel, "staged_racy"))
	}
	for _, tc := range []struct {
		opt    emu.Options
		caught bool
	}{
		{emu.Options{}, false},
		{emu.Options{Shuffle: true, Seed: 2}, false},
		{emu.Options{Landing: emu.LandAtIssue}, true},
	} {
		_, err := VerifyKernel(ctx, racy, body, VerifyOptions{Seed: 1, FixedModes: true, Emu: tc.opt})
		if tc.caught {
			assert.Error(t, err, "fixed modes %+v", tc.opt)
		} else {
			assert.NoError(t, err, "fixed modes %+v hide the race", tc.opt)
		}
	}
}
