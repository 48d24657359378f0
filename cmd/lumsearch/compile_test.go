package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/tunedb"
)

func TestCompile(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	// The decode step skips verification: the library's tests and
	// TestOptimizeEndToEnd verify it, and under the race detector it
	// doubles this test's time.
	for _, tc := range []struct {
		model  string
		verify bool
	}{{"tiny-llama:layer", true}, {"tiny-gpt2:decode", false}} {
		model := tc.model
		t.Run(model, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			r := runArgs(t, "compile", model, "--seq", "6", "-o", dir, fmt.Sprintf("--verify=%v", tc.verify))
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Regexp(t, `(?m)^compile `+model+` for h100-sxm \(sm_90\)$`, r.stdout)
			assert.Regexp(t, `(?m)^  program: \d+ kernels per run and \d+ at load`, r.stdout)
			assert.Regexp(t, `(?m)^  lowered: \d+ launches per run`, r.stdout)
			if _, err := exec.LookPath("g++"); err == nil && tc.verify {
				assert.Regexp(t, `(?m)^  verify: the reduced configuration .* matches the reference interpreter under the CPU emulation`, r.stdout)
			}
			src, err := os.ReadFile(filepath.Join(dir, "kernels.cu"))
			require.NoError(t, err)
			assert.Contains(t, string(src), `extern "C" __global__ void k0(`)
			header, err := os.ReadFile(filepath.Join(dir, "model.h"))
			require.NoError(t, err)
			assert.Contains(t, string(header), "int lum_create(lum_model** out, char* err, size_t errlen);")
			library, err := os.ReadFile(filepath.Join(dir, "model.cpp"))
			require.NoError(t, err)
			assert.Contains(t, string(library), `dlopen("libcuda.so.1"`)
			assert.NotContains(t, string(library), "#include <cuda")
			if strings.Contains(r.stdout, "  nvrtc: not compiled") {
				assert.Contains(t, r.stdout, "  host library: no kernels embedded (NVRTC is missing)")
				assert.Contains(t, string(library), "constexpr size_t kPTXBytes = 0;")
			} else {
				assert.NotContains(t, string(library), "constexpr size_t kPTXBytes = 0;")
			}
			assert.Regexp(t, `(?m)^  wrote \S+kernels\.cu, \S+model\.h, \S+model\.cpp and \S+plan\.json$`, r.stdout)
			pl, err := plan.Read(dir)
			require.NoError(t, err)
			assert.Equal(t, model, pl.Model)
			assert.Equal(t, "sm_90", pl.Arch)
			assert.NotEmpty(t, pl.Version)
			require.NotEmpty(t, pl.Run)
			for _, l := range pl.Run {
				assert.Positive(t, l.Predicted, l.Kernel)
				assert.Positive(t, l.Block[0], l.Kernel)
			}
			assert.NotEmpty(t, pl.Outputs)
		})
	}
	r := runArgs(t, "compile", "tiny-llama:layer")
	require.Equal(t, exitUsage, r.code)
	r = runArgs(t, "compile", "tiny-llama:layer", "-o", t.TempDir(), "--arch", "sm_70")
	require.Equal(t, exitUsage, r.code)
}

// TestCompileONNX compiles ONNX conformance models through the whole
// pipeline and verifies each whole program under the emulation with the
// model's own weights.
func TestCompileONNX(t *testing.T) {
	data := shareddata.Dir(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	for _, name := range []string{"test_gemm_default_vector_bias", "test_layer_normalization_2d_axis_negative_1_expanded", "test_softmax_axis_2", "test_softmax_axis_0"} {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join(data, "onnx-node", name, "model.onnx")
			dir := filepath.Join(t.TempDir(), "out")
			r := runArgs(t, "compile", model, "-o", dir)
			require.Equal(t, exitOK, r.code, r.stderr)
			if _, err := exec.LookPath("g++"); err == nil {
				assert.Regexp(t, `(?m)^  verify: the whole program matches the reference interpreter under the CPU emulation`, r.stdout)
			}
			_, err := os.Stat(filepath.Join(dir, "kernels.cu"))
			require.NoError(t, err)
		})
	}
}
