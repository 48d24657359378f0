package measure

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUMeasurerChecksBeforeTiming runs the GPU measurer on the fake
// driver, which launches nothing: the candidate is compiled by NVRTC,
// loaded, its inputs uploaded and launched with its grid and block, and
// its outputs, never computed, fail the check against the reference, so
// it is not timed.
func TestGPUMeasurerChecksBeforeTiming(t *testing.T) {
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	f := fakecuda.Build(t)
	f.Set("nparams", 0)
	d, err := gpu.Open()
	require.NoError(t, err)
	dev, err := d.Device(0)
	require.NoError(t, err)
	c, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Release()) }()

	body, err := ir.Parse(bodyText(t))
	require.NoError(t, err)
	k, err := cuda.PrintKernelWith("candidate", "", body, mustSchedule(t, "threads=256"))
	require.NoError(t, err)
	resp := GPU{Ctx: c, NVRTC: lib}.Measure(context.Background(), Request{ID: 9, Body: bodyText(t), Schedule: "threads=256", Seed: 1})
	assert.False(t, resp.OK)
	assert.Contains(t, resp.Error, "differs from the reference")
	log := f.Log()
	assert.True(t, strings.HasPrefix(log, "load \x7fELF"), "a CUBIN (ELF) is loaded: %q", log)
	assert.Contains(t, log, fmt.Sprintf("\nlaunch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=0\n", k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0], k.Block[1], k.Block[2]))
	assert.Equal(t, 1, strings.Count(log, "launch"), "not timed after a failed check")
	assert.Equal(t, int32(0), f.Allocs(), "every buffer freed")
}
