package gpucheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the module root: two folders above this file.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok, "runtime.Caller")
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "module root %s", root)
	return root
}

// toolsPath is a PATH of symbolic links to the tools the script uses, and
// to python3 when it is installed, but never to nvidia-smi: on any machine
// the script must see no GPU.
func toolsPath(t *testing.T) (dir string, python bool) {
	t.Helper()
	dir = t.TempDir()
	tools := []string{"bash", "env", "dirname", "mkdir", "cat", "grep", "sed", "awk", "head", "timeout", "basename", "printf"}
	for _, name := range tools {
		p, err := exec.LookPath(name)
		if err != nil {
			continue // the script works without timeout; the rest are coreutils
		}
		require.NoError(t, os.Symlink(p, filepath.Join(dir, name)))
	}
	// The interpreter itself, not a shim (pyenv's needs its own PATH).
	if b, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output(); err == nil {
		if p := strings.TrimSpace(string(b)); p != "" {
			require.NoError(t, os.Symlink(p, filepath.Join(dir, "python3")))
			python = true
		}
	}
	return dir, python
}

// torchImportable says whether python3 can import torch.
func torchImportable() bool {
	return exec.Command("python3", "-c", "import torch").Run() == nil
}

func needBash(t *testing.T) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	return bash
}

func TestDryRun(t *testing.T) {
	bash := needBash(t)
	if testing.Short() {
		t.Skip("builds lumsearch and compiles corpus graphs")
	}
	root := repoRoot(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "lumsearch")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lumsearch")
	build.Dir = root
	b, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)

	path, python := toolsPath(t)
	out := filepath.Join(tmp, "out")
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "gpu-check.sh"), "--dry-run", "--lumsearch", bin, "--out", out, "--budget-seconds", "300")
	cmd.Dir = tmp
	// Only the restricted PATH, so a real nvidia-smi cannot be found, and
	// the default graph list (a GRAPHS from the caller would change it).
	cmd.Env = []string{"PATH=" + path, "HOME=" + tmp, "XDG_CACHE_HOME=" + filepath.Join(tmp, "cache")}
	b, err = cmd.CombinedOutput()
	stdout := string(b)
	require.NoError(t, err, "gpu-check.sh: %s", stdout)

	assert.Contains(t, stdout, "no NVIDIA GPU: dry mode")
	// This build has "lumsearch bench"; in dry mode it is found, not run.
	assert.Contains(t, stdout, " bench=1 ")
	if !python || !torchImportable() {
		assert.Contains(t, stdout, "PyTorch missing")
	}
	header := "graph                   lumsearch      eager    compile   ls/eag  ls/comp"
	assert.Contains(t, stdout, header, "the table header")

	summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(summary), header)

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res struct {
		Mode       string         `json:"mode"`
		TorchProbe map[string]any `json:"torch_probe"`
		Ceilings   map[string]any `json:"ceilings"`
		Graphs     []struct {
			Graph       string   `json:"graph"`
			Compile     string   `json:"compile"`
			CompileDir  string   `json:"compile_dir"`
			LumsearchMS *float64 `json:"lumsearch_ms"`
			EagerMS     *float64 `json:"eager_ms"`
		} `json:"graphs"`
	}
	require.NoError(t, json.Unmarshal(raw, &res), "results.json:\n%s", raw)
	assert.Equal(t, "dry", res.Mode)
	require.NotNil(t, res.TorchProbe)
	if !python || !torchImportable() {
		assert.Equal(t, false, res.TorchProbe["torch"])
		assert.Contains(t, res.TorchProbe["reason"], "PyTorch missing")
	}
	var names []string
	for _, g := range res.Graphs {
		names = append(names, g.Graph)
		assert.Equal(t, "ok", g.Compile, "%s compiles", g.Graph)
		assert.Nil(t, g.LumsearchMS, "%s: nothing is timed in dry mode", g.Graph)
		assert.Nil(t, g.EagerMS, "%s: nothing is timed in dry mode", g.Graph)
		for _, f := range []string{"kernels.cu", "model.h", "model.cpp", "plan.json"} {
			assert.FileExists(t, filepath.Join(g.CompileDir, f))
		}
		assert.Contains(t, stdout, "\n"+g.Graph+" ", "a table row for %s", g.Graph)
	}
	assert.Contains(t, names, "tiny-llama:layer")
	assert.Contains(t, names, "llama-3-8b:layer")
}

func TestUnknownOption(t *testing.T) {
	bash := needBash(t)
	root := repoRoot(t)
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "gpu-check.sh"), "--no-such-option")
	cmd.Dir = t.TempDir()
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "want a non-zero exit: %s", b)
	assert.NotEqual(t, 0, exit.ExitCode())
	assert.Contains(t, string(b), "unknown option: --no-such-option")
	assert.True(t, strings.Contains(string(b), "usage: gpu-check.sh"), "usage printed: %s", b)
	assert.NoFileExists(t, filepath.Join(cmd.Dir, "gpu-check-out"), "nothing written on a usage error")
}

// TestFakeGPU runs the GPU path with stand-ins: an nvidia-smi that names a
// GPU, a lumsearch whose help lists bench and whose compile and bench print
// canned results, and a PyTorch side that prints canned timings. It checks
// the flow and the table's arithmetic, not any measurement.
func TestFakeGPU(t *testing.T) {
	bash := needBash(t)
	root := repoRoot(t)
	path, _ := toolsPath(t)
	write := func(name, body string) string {
		p := filepath.Join(path, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/usr/bin/env bash\n"+body), 0o755))
		return p
	}
	write("nvidia-smi", `echo "NVIDIA H200"`+"\n")
	lumsearch := write("lumsearch", `case "$1" in
version) echo "lumsearch (fake)" ;;
help) printf 'Commands:\n  compile   x\n  bench     time a compiled program\n' ;;
compile) while [[ $# -gt 0 && $1 != -o ]]; do shift; done; mkdir -p "$2"; : >"$2/plan.json" ;;
bench) echo '{"ms": 0.5}' ;;
*) exit 2 ;;
esac
`)
	python := write("fakepy", `case "$2" in
--probe) echo '{"cuda_available": true, "torch": true, "torch_version": "2.9.0"}' ;;
--ceilings) echo '{"copy_gbs": 4000.0, "matmul_bf16_tflops": 800.0, "ok": true}' ;;
--graph) echo '{"bytes": 1000000000, "compile_ms": 0.25, "eager_ms": 1.0, "flops": 100000000000}' ;;
esac
`)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out")
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "gpu-check.sh"), "--lumsearch", lumsearch, "--out", out, "--budget-seconds", "60")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=" + path, "HOME=" + tmp, "GRAPHS=llama-3-8b:mlp", "PYTHON=" + python}
	b, err := cmd.CombinedOutput()
	stdout := string(b)
	require.NoError(t, err, "gpu-check.sh: %s", stdout)
	assert.Contains(t, stdout, "GPU: NVIDIA H200")
	assert.NotContains(t, stdout, "dry mode")
	// 0.5 ms lumsearch against 1.0 eager and 0.25 torch.compile; 1 GB in
	// 0.5 ms is 2000 GB/s, half the copy ceiling; 100 GFLOP in 0.5 ms is
	// 200 TFLOP/s, a quarter of the matmul rate.
	assert.Regexp(t, `llama-3-8b:mlp +0\.500 +1\.000 +0\.250 +0\.50 +2\.00 +2000 \(50%\) +200\.0 \(25%\)`, stdout)

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res struct {
		Mode   string `json:"mode"`
		Graphs []struct {
			Graph       string  `json:"graph"`
			LumsearchMS float64 `json:"lumsearch_ms"`
			EagerMS     float64 `json:"eager_ms"`
			CompileMS   float64 `json:"torch_compile_ms"`
		} `json:"graphs"`
	}
	require.NoError(t, json.Unmarshal(raw, &res), "results.json:\n%s", raw)
	assert.Equal(t, "gpu", res.Mode)
	require.Len(t, res.Graphs, 1)
	assert.Equal(t, "llama-3-8b:mlp", res.Graphs[0].Graph)
	assert.InDelta(t, 0.5, res.Graphs[0].LumsearchMS, 1e-9)
	assert.InDelta(t, 1.0, res.Graphs[0].EagerMS, 1e-9)
	assert.InDelta(t, 0.25, res.Graphs[0].CompileMS, 1e-9)
}
