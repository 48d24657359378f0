package cuda

import (
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
)

// TestNVRTCCompilesCpAsyncGroups compiles the emulation's cp.async test
// kernels (cuda/emu/testdata/async.cu, which the emulation runs) with
// NVRTCPrelude: the prelude has the emulation's names for commit_group and
// wait_group, and the wait counts reach the PTX as immediates.
func TestNVRTCCompilesCpAsyncGroups(t *testing.T) {
	lib := nvrtcOrSkip(t)
	src, err := os.ReadFile("emu/testdata/async.cu")
	require.NoError(t, err)
	res, err := lib.Compile(context.Background(), NVRTCPrelude+string(src), "async.cu", nvrtc.Options{Arch: "sm_80"})
	require.NoError(t, err)
	for _, name := range []string{"cp_groups", "pipe_refill_ok", "pipe_refill_racy", "pipe_stage_ok", "pipe_stage_short", "cp_twice"} {
		assert.Contains(t, res.Kernels, name)
	}
	waits := map[string]bool{}
	for _, m := range regexp.MustCompile(`cp\.async\.wait_group (\d+);`).FindAllStringSubmatch(res.PTX, -1) {
		waits[m[1]] = true
	}
	assert.Equal(t, map[string]bool{"0": true, "1": true, "2": true}, waits, "the wait counts of async.cu")
	assert.Contains(t, res.PTX, "cp.async.commit_group;")
	assert.Contains(t, res.PTX, "cp.async.wait_all;")
}
