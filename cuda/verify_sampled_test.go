package cuda

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// TestSampledBlocksThatWriteNaNAreSeen is the regression test of the bf16
// decode's split-K matmul with an RMS norm prologue (llama-3-8b:decode,
// seq 512, its k2): its rsqrt of random signed partial sums of squares is
// NaN, the kernel wrote the canonical bf16 NaN 0x7fff, and the emulation's
// fill pattern was that NaN too, so a sampled run "wrote no output
// element". The fill pattern is now a NaN no conversion makes: every
// sampled block's elements are seen and compared.
func TestSampledBlocksThatWriteNaNAreSeen(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	src, err := os.ReadFile("testdata/decode_split_k_norm_prologue.ir")
	require.NoError(t, err)
	body, err := ir.Parse(string(src))
	require.NoError(t, err)
	for _, sched := range []string{"bm=16,bn=128,bk=32,threads=128,stages=2,mma", "bm=16,bn=32,bk=32,threads=32,stages=2,mma"} {
		t.Run(sched, func(t *testing.T) {
			if strings.Contains(sched, "bn=128") {
				// The same NaNs in another tiling, each a few seconds of
				// a real-size reference under the race detector: the long
				// test command verifies both.
				skipLong(t)
			}
			s, err := cost.ParseSchedule(sched)
			require.NoError(t, err)
			k, err := PrintKernelWith("k2", "", body, s)
			require.NoError(t, err)
			c, err := VerifyKernel(context.Background(), k, body, VerifyOptions{Seed: 1})
			require.NoError(t, err)
			require.True(t, c.Sampled, "the grid of %v blocks is sampled", k.Grid)
			require.Greater(t, c.Elements, int64(0))
		})
	}
}
