package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/lumsearch/lumsearch/plan"
)

// TestCompile runs compile on an MLP, verified (the library's
// ExampleCompile compiles and verifies a layer, TestVerifyDir verifies the
// decode step's folder through the command), and on a decode step (KV
// caches as states; the folder the tests share, unverified: the library's
// tests, TestVerifyDir and TestOptimizeEndToEnd verify decode steps) and
// checks what it prints and writes.
func TestCompile(t *testing.T) {
	// Parallel: among the package's longest tests; the default tuning
	// database is TestMain's empty one.
	t.Parallel()
	for _, tc := range []struct {
		model  string
		verify bool
	}{{"tiny-llama:mlp", true}, {decodeModel, false}} {
		model := tc.model
		name := model
		if filepath.IsAbs(model) { // the shared decode step's config file
			name = filepath.Base(filepath.Dir(model)) + "/" + filepath.Base(model)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var dir, stdout string
			if tc.verify {
				dir = filepath.Join(t.TempDir(), "out")
				r := runArgs(t, "compile", model, "--seq", "6", "-o", dir)
				require.Equal(t, exitOK, r.code, r.stderr)
				stdout = r.stdout
			} else {
				require.Equal(t, append([]string{"compile", model}, "--seq", "6", "--verify=false"), decodeArgs())
				dir, stdout = compiledDecode(t)
			}
			assert.Regexp(t, `(?m)^compile `+regexp.QuoteMeta(model)+` for h100-sxm \(sm_90\)$`, stdout)
			assert.Regexp(t, `(?m)^  program: \d+ kernels per run and \d+ at load`, stdout)
			assert.Regexp(t, `(?m)^  lowered: \d+ launches per run`, stdout)
			verified := `(?m)^  verify: the reduced configuration .* matches the reference interpreter under the CPU emulation`
			if _, err := exec.LookPath("g++"); err == nil && tc.verify {
				assert.Regexp(t, verified, stdout)
			} else if !tc.verify {
				assert.NotRegexp(t, verified, stdout)
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
			if strings.Contains(stdout, "  nvrtc: not compiled") {
				assert.Contains(t, stdout, "  host library: no kernels embedded (NVRTC is missing)")
				assert.Contains(t, string(library), "constexpr size_t kPTXBytes = 0;")
			} else {
				assert.NotContains(t, string(library), "constexpr size_t kPTXBytes = 0;")
			}
			assert.Regexp(t, `(?m)^  wrote \S+kernels\.cu, \S+model\.h, \S+model\.cpp and \S+plan\.json$`, stdout)
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
			if !tc.verify {
				assert.NotEmpty(t, pl.Updates, "a decode step updates its KV caches")
			}
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
	// Parallel: the default tuning database is TestMain's empty one.
	t.Parallel()
	data := shareddata.Dir(t)
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
