package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lumsearch/lumsearch/internal/fakecuda"
)

// noGPUDrivers are the two ways a machine has no GPU: no CUDA driver
// library, or a driver whose cuInit finds no device (a CI container with
// the driver package); each points LUMSEARCH_LIBCUDA there.
var noGPUDrivers = []struct {
	name  string
	setup func(t *testing.T)
	want  string // what the error says of the driver
}{
	{"no driver", func(t *testing.T) {
		t.Setenv("LUMSEARCH_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	}, "libcuda.so.1 not found"},
	{"driver without a device", func(t *testing.T) {
		fakecuda.Build(t).Set("no_device", 1)
	}, "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"},
}

// TestWorkerWithoutGPU: --measure gpu on a machine without a GPU fails at
// once with an error that says so and names the way out; a bad --measure
// is a usage error.
func TestWorkerWithoutGPU(t *testing.T) {
	for _, d := range noGPUDrivers {
		t.Run(d.name, func(t *testing.T) {
			d.setup(t)
			r := runArgs(t, "worker", "--measure", "gpu")
			assert.NotZero(t, r.code)
			assert.Contains(t, r.stderr, "worker --measure gpu: no CUDA device: ")
			assert.Contains(t, r.stderr, d.want)
			assert.Contains(t, r.stderr, "--measure emulated runs without one")
		})
	}
	r := runArgs(t, "worker", "--measure", "tpu")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `--measure "tpu": gpu or emulated`)
}
