package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWorkerWithoutGPU: --measure gpu on a machine without a CUDA driver
// fails at once with an error that says so and names the way out; a bad
// --measure is a usage error.
func TestWorkerWithoutGPU(t *testing.T) {
	t.Setenv("LUMSEARCH_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	r := runArgs(t, "worker", "--measure", "gpu")
	assert.NotZero(t, r.code)
	assert.Contains(t, r.stderr, "no CUDA device")
	assert.Contains(t, r.stderr, "--measure emulated runs without one")
	r = runArgs(t, "worker", "--measure", "tpu")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `--measure "tpu": gpu or emulated`)
}
