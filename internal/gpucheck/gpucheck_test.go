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
	bin := buildLumsearch(t)

	path, python := toolsPath(t)
	out := filepath.Join(tmp, "out")
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "gpu-check.sh"), "--dry-run", "--lumsearch", bin, "--out", out, "--budget-seconds", "300")
	cmd.Dir = tmp
	// Only the restricted PATH, so a real nvidia-smi cannot be found, and
	// the default graph list (a GRAPHS from the caller would change it).
	cmd.Env = []string{"PATH=" + path, "HOME=" + tmp, "XDG_CACHE_HOME=" + filepath.Join(tmp, "cache")}
	b, err := cmd.CombinedOutput()
	stdout := string(b)
	require.NoError(t, err, "gpu-check.sh: %s", stdout)

	assert.Contains(t, stdout, "no NVIDIA GPU: dry mode")
	assert.NotContains(t, stdout, "--save: not available", "this build's bench has --save")
	// This build has "lumsearch bench"; in dry mode it is found, not run.
	assert.Contains(t, stdout, " bench=1 ")
	if !python || !torchImportable() {
		assert.Contains(t, stdout, "PyTorch missing")
	}
	header := "graph                   lumsearch      eager    compile   ls/eag  ls/comp"
	assert.Contains(t, stdout, header, "the table header")
	assert.Regexp(t, `TFLOP/s \(%mm\) +torch=ls\?  notes`, stdout, "the column saying whether PyTorch matched lumsearch")

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
			SavedDir    *string  `json:"saved_dir"`
			Matches     *bool    `json:"torch_matches_lumsearch"`
		} `json:"graphs"`
		Decode  decodeResult  `json:"decode"`
		Prefill prefillResult `json:"prefill"`
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
		assert.Nil(t, g.SavedDir, "%s: bench does not run in dry mode", g.Graph)
		assert.Nil(t, g.Matches, "%s: PyTorch does not run in dry mode", g.Graph)
		for _, f := range []string{"kernels.cu", "model.h", "model.cpp", "plan.json"} {
			assert.FileExists(t, filepath.Join(g.CompileDir, f))
		}
		assert.Contains(t, stdout, "\n"+g.Graph+" ", "a table row for %s", g.Graph)
	}
	assert.Contains(t, names, "tiny-llama:layer")
	assert.Contains(t, names, "llama-3-8b:layer")

	// One decode program with a runtime position, compiled once; timed
	// at three positions on a GPU, at none in dry mode.
	d := res.Decode
	assert.Equal(t, "llama-3.2-1b:decode", d.Graph)
	assert.Equal(t, "ok", d.Compile)
	assert.FileExists(t, filepath.Join(d.CompileDir, "plan.json"))
	require.Len(t, d.Positions, 3)
	assert.Equal(t, []int{128, 1024, d.MaxSeq - 1}, []int{d.Positions[0].Past, d.Positions[1].Past, d.Positions[2].Past})
	for _, p := range d.Positions {
		assert.Nil(t, p.LumsearchMS, "nothing is timed in dry mode")
	}
	assert.Contains(t, string(summary), "decode llama-3.2-1b:decode --max-seq 8192 (one program, compile ok): past=128: ? ms;")
	// The kernels are compared with the emulation on a GPU only.
	assert.Contains(t, stdout, " compare=1 ", "this build's bench has --compare-kernels")
	assert.Contains(t, string(summary), "  decode llama-3.2-1b:decode: skipped (dry run)\n  prefill llama-3-8b:layer --seq 512: skipped (dry run)\n")
	assert.Equal(t, compareResult{Status: "skipped (dry run)"}, d.Compare)
	assert.Equal(t, compareResult{Status: "skipped (dry run)"}, res.Prefill.Compare)
}

// decodeResult is results.json's decode section: one decode program with
// a runtime position, compiled once, its kernels compared on the GPU with
// the emulation and timed at three positions.
type decodeResult struct {
	Graph      string `json:"graph"`
	MaxSeq     int    `json:"max_seq"`
	Compile    string `json:"compile"`
	CompileDir string `json:"compile_dir"`
	Positions  []struct {
		Past        int      `json:"past"`
		LumsearchMS *float64 `json:"lumsearch_ms"`
	} `json:"positions"`
	Compare compareResult `json:"kernel_compare"`
}

// prefillResult is results.json's prefill section.
type prefillResult struct {
	Graph   string        `json:"graph"`
	Status  string        `json:"status"`
	Compare compareResult `json:"kernel_compare"`
}

// compareResult is a program's kernel comparison (bench --compare-kernels)
// in results.json: its verdict, or why it did not run, and the file of its
// table (null when it did not run).
type compareResult struct {
	Status string  `json:"status"`
	File   *string `json:"file"`
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
	// bench --save writes the two files, except for the layer, where it
	// saves nothing (as a bench of an older build would).
	lumsearch := write("lumsearch", `case "$1" in
version) echo "lumsearch (fake)" ;;
help)
	if [[ ${2:-} == bench ]]; then
		echo 'Usage: lumsearch bench DIR|MODEL [--json] [--save DIR] [--compare-kernels [--budget D]]'
	else
		printf 'Commands:\n  compile   x\n  bench     time a compiled program\n'
	fi
	;;
compile) while [[ $# -gt 0 && $1 != -o ]]; do shift; done; mkdir -p "$2"; : >"$2/plan.json" ;;
bench)
	dir=$2
	if [[ " $* " == *" --compare-kernels "* ]]; then
		# Each kernel on the GPU and under the emulation: the decode
		# program agrees, the prefill layer has a kernel that does not.
		[[ " $* " == *" --budget "*s" "* ]] || { echo "fake: --compare-kernels without --budget" >&2; exit 2; }
		echo "compare kernels of $dir (fake) on NVIDIA H200 with the CPU emulation, seed 1"
		echo "KERNEL  SCHEDULE     RUNS  ELEMENTS  GPU ERR  EMU ERR  GPU-EMU  RESULT"
		if [[ $dir == *decode* ]]; then
			echo "k4      threads=512  3/3   3072      0.12     0.117    0.01     ok"
			echo "verdict: agree: all 1 kernels match the reference on the GPU and under the emulation"
			exit 0
		fi
		echo "k7      bm=128,mma   1     8192      3.5      0.01     3.4      FAIL (GPU)"
		echo "k7 on the GPU: verify kernel k7 on the device: output out0 element 5 [0,5]: got 1, want 2"
		echo "verdict: DISAGREE: 1 of 1 kernels fail (k7)"
		exit 1
	fi
	while [[ $# -gt 0 && $1 != --save ]]; do shift; done
	if [[ $# -ge 2 && $dir != *layer ]]; then
		mkdir -p "$2"
		: >"$2/inputs.safetensors"
		: >"$2/outputs.safetensors"
	fi
	if [[ $dir == *prefill* || $dir == *decode* ]]; then
		echo '{"ms": 0.5, "kernels":[{"launch":"l0","kernel":"k3","schedule":"bm=1,bn=64,threads=128,gemv","predicted_ms":0.1,"median_ms":0.2,"iqr_ms":0.01,"runs":9,"bytes":400000000,"bound":"dram"},{"launch":"l1","kernel":"k3","schedule":"bm=1,bn=64,threads=128,gemv","predicted_ms":0.1,"median_ms":0.2,"iqr_ms":0.01,"runs":9,"bytes":400000000,"bound":"dram"},{"launch":"l2","kernel":"k7","schedule":"bm=1,bn=32,threads=1024,splitkeys","predicted_ms":0.01,"median_ms":0.05,"iqr_ms":0.01,"runs":9,"bytes":1000000,"bound":"latency"}],"tunedb":"x"}'
	else
		echo '{"ms": 0.5}'
	fi
	;;
*) exit 2 ;;
esac
`)
	// The PyTorch side matches lumsearch on the MLP and not on the RMS
	// norm, and runs on its own inputs without --inputs.
	python := write("fakepy", `case "$2" in
--probe) echo '{"cuda_available": true, "torch": true, "torch_version": "2.9.0"}' ;;
--ceilings) echo '{"copy_gbs": 4000.0, "matmul_bf16_tflops": 800.0, "ok": true}' ;;
--graph)
	graph=$3
	while [[ $# -gt 0 && $1 != --inputs ]]; do shift; done
	if [[ $# -lt 2 ]]; then
		echo '{"bytes": 1000000000, "compile_ms": 0.25, "eager_ms": 1.0, "flops": 100000000000, "inputs": "random"}'
	elif [[ ! -f $2/inputs.safetensors ]]; then
		echo "fakepy: --inputs $2 has no inputs.safetensors" >&2
		exit 1
	elif [[ $graph == *mlp ]]; then
		echo '{"bytes": 1000000000, "compile_ms": 0.25, "eager_ms": 1.0, "flops": 100000000000, "inputs": "lumsearch", "lumsearch_match": true, "max_rel_err_vs_lumsearch": 0.002}'
	else
		echo '{"eager_ms": 2.0, "inputs": "lumsearch", "lumsearch_match": false, "lumsearch_reason": "PyTorch eager'"'"'s output differs from lumsearch'"'"'s (relative L2 0.3 > 0.05)", "max_rel_err_vs_lumsearch": 0.3}'
	fi
	;;
esac
`)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out")
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "gpu-check.sh"), "--lumsearch", lumsearch, "--out", out, "--budget-seconds", "60")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=" + path, "HOME=" + tmp, "GRAPHS=llama-3-8b:mlp llama-3-8b:rmsnorm llama-3-8b:layer", "PYTHON=" + python}
	b, err := cmd.CombinedOutput()
	stdout := string(b)
	require.NoError(t, err, "gpu-check.sh: %s", stdout)
	assert.Contains(t, stdout, "GPU: NVIDIA H200")
	assert.NotContains(t, stdout, "dry mode")
	// 0.5 ms lumsearch against 1.0 eager and 0.25 torch.compile; 1 GB in
	// 0.5 ms is 2000 GB/s, half the copy ceiling; 100 GFLOP in 0.5 ms is
	// 200 TFLOP/s, a quarter of the matmul rate.
	assert.Regexp(t, `llama-3-8b:mlp +0\.500 +1\.000 +0\.250 +0\.50 +2\.00 +2000 \(50%\) +200\.0 \(25%\) +yes 2\.0e-03 *\n`, stdout)
	// PyTorch ran on lumsearch's tensors and disagreed: NO, and the why.
	assert.Regexp(t, `llama-3-8b:rmsnorm +0\.500 +2\.000 .* NO 3\.0e-01  PyTorch eager's output differs from lumsearch's \(relative L2 0\.3 > 0\.05\)\n`, stdout)
	// bench saved nothing: PyTorch drew its own inputs, and says so.
	assert.Regexp(t, `llama-3-8b:layer +0\.500 +1\.000 .* own inputs  PyTorch ran on its own random inputs \(no tensors saved by lumsearch bench\)\n`, stdout)
	assert.Contains(t, stdout, "torch=ls?: whether PyTorch eager and torch.compile")

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res struct {
		Mode   string `json:"mode"`
		Graphs []struct {
			Graph       string   `json:"graph"`
			LumsearchMS float64  `json:"lumsearch_ms"`
			EagerMS     float64  `json:"eager_ms"`
			CompileMS   float64  `json:"torch_compile_ms"`
			SavedDir    *string  `json:"saved_dir"`
			TorchInputs *string  `json:"torch_inputs"`
			RelErr      *float64 `json:"max_rel_err_vs_lumsearch"`
			Matches     *bool    `json:"torch_matches_lumsearch"`
		} `json:"graphs"`
		Decode  decodeResult  `json:"decode"`
		Prefill prefillResult `json:"prefill"`
	}
	require.NoError(t, json.Unmarshal(raw, &res), "results.json:\n%s", raw)
	assert.Equal(t, "gpu", res.Mode)
	assert.Equal(t, "agree", res.Decode.Compare.Status)
	if assert.NotNil(t, res.Decode.Compare.File) {
		assert.FileExists(t, *res.Decode.Compare.File)
	}
	assert.Equal(t, "DISAGREE", res.Prefill.Compare.Status)
	if assert.NotNil(t, res.Prefill.Compare.File) {
		assert.Equal(t, filepath.Join(out, "compare-prefill.txt"), *res.Prefill.Compare.File)
	}
	// The decode program is timed by bench --dim past=P at each position.
	assert.Equal(t, "ok", res.Decode.Compile)
	require.Len(t, res.Decode.Positions, 3)
	for _, p := range res.Decode.Positions {
		if assert.NotNil(t, p.LumsearchMS, "past=%d is timed", p.Past) {
			assert.InDelta(t, 0.5, *p.LumsearchMS, 1e-9)
		}
	}
	assert.Contains(t, stdout, "(one program, compile ok): past=128: 0.5 ms; past=1024: 0.5 ms; past=8191: 0.5 ms;")
	// The prefill layer is benched, and each bench's kernels are listed
	// with measured against predicted time and the bandwidth achieved:
	// two launches of k3 moving 800 MB in 0.4 ms are 2000 GB/s, half the
	// copy ceiling.
	assert.Contains(t, stdout, "prefill llama-3-8b:layer --seq 512: ok, 0.5 ms")
	// Each program's kernels run on the GPU and under the emulation,
	// compared: the summary holds each verdict and table; a kernel that
	// disagrees is named with its element.
	assert.Contains(t, stdout, "kernels on the GPU against the CPU emulation (bench --compare-kernels")
	assert.Contains(t, stdout, "  decode llama-3.2-1b:decode: agree\n    compare kernels of "+filepath.Join(out, "compile-decode")+" (fake)")
	assert.Regexp(t, `\n    k4 +threads=512 +3/3 +3072 +0\.12 +0\.117 +0\.01 +ok\n`, stdout)
	assert.Contains(t, stdout, "  prefill llama-3-8b:layer --seq 512: DISAGREE\n")
	assert.Contains(t, stdout, "    k7 on the GPU: verify kernel k7 on the device: output out0 element 5 [0,5]: got 1, want 2\n    verdict: DISAGREE: 1 of 1 kernels fail (k7)\n")
	assert.Less(t, strings.Index(stdout, "compare the kernels of "+filepath.Join(out, "compile-decode")), strings.Index(stdout, "past=128"),
		"the kernels are compared before the decode program is timed")
	assert.Contains(t, stdout, "kernels of bench-prefill (measured against the cost model")
	assert.Regexp(t, `k3 +2 bm=1,bn=64,threads=128,gemv +dram +0\.2000 ms +0\.4000 ms +2\.00 +2000 \(50%\)\n`, stdout)
	assert.Regexp(t, `k7 +1 bm=1,bn=32,threads=1024,splitkeys +latency +0\.0100 ms +0\.0500 ms +5\.00 +20 \(0%\)\n`, stdout)
	require.Len(t, res.Graphs, 3)
	mlp, norm, layer := res.Graphs[0], res.Graphs[1], res.Graphs[2]
	assert.Equal(t, "llama-3-8b:mlp", mlp.Graph)
	assert.InDelta(t, 0.5, mlp.LumsearchMS, 1e-9)
	assert.InDelta(t, 1.0, mlp.EagerMS, 1e-9)
	assert.InDelta(t, 0.25, mlp.CompileMS, 1e-9)
	if assert.NotNil(t, mlp.SavedDir) {
		assert.Equal(t, filepath.Join(out, "bench-llama-3-8b_mlp"), *mlp.SavedDir)
	}
	if assert.NotNil(t, mlp.TorchInputs) {
		assert.Equal(t, "lumsearch", *mlp.TorchInputs)
	}
	if assert.NotNil(t, mlp.RelErr) {
		assert.InDelta(t, 0.002, *mlp.RelErr, 1e-12)
	}
	if assert.NotNil(t, mlp.Matches) {
		assert.True(t, *mlp.Matches)
	}
	if assert.NotNil(t, norm.Matches) {
		assert.False(t, *norm.Matches)
	}
	assert.Nil(t, layer.SavedDir)
	assert.Nil(t, layer.Matches)
	if assert.NotNil(t, layer.TorchInputs) {
		assert.Equal(t, "random", *layer.TorchInputs)
	}
}
