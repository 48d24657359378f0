package gpucheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
)

// buildLumsearch builds the lumsearch binary into a temporary folder.
func buildLumsearch(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lumsearch")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lumsearch")
	build.Dir = repoRoot(t)
	b, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
	return bin
}

func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	return py
}

// torchBench runs scripts/torch_bench.py with args and returns its JSON
// object and exit status.
func torchBench(t *testing.T, args ...string) (map[string]any, int) {
	t.Helper()
	py := needPython(t)
	cmd := exec.Command(py, append([]string{filepath.Join(repoRoot(t), "scripts", "torch_bench.py")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err, "torch_bench.py: %s", stderr.String())
	}
	var obj map[string]any
	require.NoError(t, json.Unmarshal(out, &obj), "one JSON object: %s (stderr: %s)", out, stderr.String())
	return obj, code
}

// selfTestTensor is one tensor of --self-test's output.
type selfTestTensor struct {
	Name  string    `json:"name"`
	DType string    `json:"dtype"`
	Shape []int64   `json:"shape"`
	Bytes int64     `json:"bytes"`
	First []float64 `json:"first"`
	Sum   float64   `json:"sum"`
}

// selfTest runs torch_bench.py --self-test on path.
func selfTest(t *testing.T, path string) (map[string]string, map[string]selfTestTensor) {
	t.Helper()
	obj, code := torchBench(t, "--self-test", path)
	require.Equal(t, 0, code, "%v", obj)
	require.Equal(t, true, obj["ok"], "%v", obj)
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	var res struct {
		Metadata map[string]string `json:"metadata"`
		Tensors  []selfTestTensor  `json:"tensors"`
	}
	require.NoError(t, json.Unmarshal(raw, &res))
	byName := map[string]selfTestTensor{}
	for _, x := range res.Tensors {
		byName[x.Name] = x
	}
	return res.Metadata, byName
}

// TestSelfTestReadsGoSafetensors: the standard-library parser of
// torch_bench.py reads a file the Go safetensors writer wrote, every dtype
// lumsearch writes: names, dtypes, shapes, sizes and values.
func TestSelfTestReadsGoSafetensors(t *testing.T) {
	mk := func(dt ir.DType, shape ir.Shape, vals ...float64) *ir.Tensor {
		x, err := ir.TensorOf(dt, shape, vals...)
		require.NoError(t, err)
		return x
	}
	tensors := map[string]*ir.Tensor{
		"model.layers.0.self_attn.q_proj.weight": mk(ir.F32, ir.Shape{2, 3}, 1.5, -2.25, 3, 0.1, 1e-3, -7),
		"half":                                   mk(ir.F16, ir.Shape{3}, 0.5, -1.0009765625, 65504),
		"brain":                                  mk(ir.BF16, ir.Shape{2, 2}, 1, -3.140625, 0.0078125, 256),
		"input_ids":                              mk(ir.I64, ir.Shape{1, 3}, 7, -1, 1<<40),
		"i32":                                    mk(ir.I32, ir.Shape{2}, -5, 123456),
		"mask":                                   mk(ir.Bool, ir.Shape{2}, 1, 0),
		"empty":                                  {DType: ir.F32, Shape: ir.Shape{0, 4}, F64: []float64{}},
	}
	path := filepath.Join(t.TempDir(), "mixed.safetensors")
	require.NoError(t, safetensors.WriteFile(path, tensors, map[string]string{"model": "tiny-llama:mlp", "seed": "1"}))

	meta, got := selfTest(t, path)
	assert.Equal(t, map[string]string{"model": "tiny-llama:mlp", "seed": "1"}, meta)
	require.Len(t, got, len(tensors))
	for name, want := range tensors {
		g, ok := got[name]
		if !assert.True(t, ok, "%s parsed", name) {
			continue
		}
		dt, err := safetensors.DTypeName(want.DType)
		require.NoError(t, err)
		assert.Equal(t, dt, g.DType, name)
		shape := make([]int64, len(want.Shape))
		for i, d := range want.Shape {
			shape[i] = int64(d)
		}
		assert.Equal(t, shape, g.Shape, name)
		assert.Equal(t, want.Len()*int64(want.DType.Size()), g.Bytes, name)
		vals := want.Float64s()
		sum := 0.0
		for _, v := range vals {
			sum += v
		}
		n := min(4, len(vals))
		if n == 0 {
			assert.Empty(t, g.First, name)
		} else {
			assert.Equal(t, vals[:n], g.First, "%s: values decoded exactly", name)
		}
		assert.InDelta(t, sum, g.Sum, 1e-9*math.Max(1, math.Abs(sum)), name)
	}
}

// TestSelfTestRejectsMalformed: a truncated file or a header that points
// beyond the data is an error, {"ok": false} and exit status 1, not a
// traceback.
func TestSelfTestRejectsMalformed(t *testing.T) {
	x, err := ir.TensorOf(ir.F32, ir.Shape{4}, 1, 2, 3, 4)
	require.NoError(t, err)
	good, err := safetensors.Encode(map[string]*ir.Tensor{"x": x}, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"short":     good[:5],
		"truncated": good[:len(good)-4],
		"not-json":  append([]byte{4, 0, 0, 0, 0, 0, 0, 0}, []byte("{{{{")...),
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		obj, code := torchBench(t, "--self-test", path)
		assert.Equal(t, 1, code, name)
		assert.Equal(t, false, obj["ok"], name)
		assert.NotEmpty(t, obj["error"], name)
	}
}

// TestInputsFromBenchSave: what "lumsearch bench --save" writes is read by
// torch_bench.py: its parser lists lumsearch's names, and --graph --inputs
// maps them onto PyTorch's graph of the same name (reported even without
// PyTorch), and says why not, falling back to its own random inputs, when
// the graph, the sequence length or the dtype differ.
func TestInputsFromBenchSave(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lumsearch and emulates a layer")
	}
	needPython(t)
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("bench --measure emulated needs g++:", err)
	}
	bin := buildLumsearch(t)
	tmp := t.TempDir()
	saved := filepath.Join(tmp, "saved")
	bench := exec.Command(bin, "bench", "tiny-llama:layer", "--seq", "4", "--measure", "emulated", "--json",
		"--tunedb", filepath.Join(tmp, "tunedb.jsonl"), "--min-runs", "1", "--max-time", "50ms", "--save", saved)
	b, err := bench.CombinedOutput()
	require.NoError(t, err, "lumsearch bench: %s", b)

	meta, inputs := selfTest(t, filepath.Join(saved, "inputs.safetensors"))
	assert.Equal(t, "tiny-llama:layer", meta["model"])
	for name, shape := range map[string][]int64{
		"hidden_states":                          {1, 4, 64},
		"model.layers.0.input_layernorm.weight":  {64},
		"model.layers.0.self_attn.q_proj.weight": {64, 64},
		"model.layers.0.self_attn.k_proj.weight": {32, 64},
		"model.layers.0.self_attn.o_proj.weight": {64, 64},
		"model.layers.0.mlp.gate_proj.weight":    {128, 64},
		"model.layers.0.mlp.down_proj.weight":    {64, 128},
	} {
		if assert.Contains(t, inputs, name) {
			assert.Equal(t, "F32", inputs[name].DType, name)
			assert.Equal(t, shape, inputs[name].Shape, name)
		}
	}
	_, outputs := selfTest(t, filepath.Join(saved, "outputs.safetensors"))
	require.Contains(t, outputs, "hidden_states")
	assert.Equal(t, []int64{1, 4, 64}, outputs["hidden_states"].Shape)

	torch := torchImportable()
	obj, code := torchBench(t, "--graph", "tiny-llama:layer", "--seq", "4", "--dtype", "f32", "--inputs", saved, "--time-cap", "20")
	require.Equal(t, 0, code)
	assert.Equal(t, true, obj["inputs_mapped"], "%v", obj)
	assert.Nil(t, obj["inputs_reason"], "%v", obj)
	if !torch {
		assert.Contains(t, obj["reason"], "PyTorch missing")
	}

	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{"--graph", "tiny-llama:layer", "--seq", "8", "--dtype", "f32"}, "lumsearch's hidden_states is [1, 4, 64], this graph's [1, 8, 64]"},
		{[]string{"--graph", "tiny-llama:mlp", "--seq", "4", "--dtype", "f32"}, "names this graph does not"},
		{[]string{"--graph", "tiny-llama:layer", "--seq", "4", "--dtype", "bf16"}, "is F32, not BF16"},
		{[]string{"--graph", "tiny-gpt2:block", "--seq", "4", "--dtype", "f32"}, "no PyTorch equivalent of tiny-gpt2:block"},
	} {
		obj, code := torchBench(t, append(tc.args, "--inputs", saved, "--time-cap", "20")...)
		require.Equal(t, 0, code, "%v", tc.args)
		assert.Equal(t, "random", obj["inputs"], "%v", tc.args)
		assert.Contains(t, obj["inputs_reason"], "lumsearch's inputs not used", "%v", tc.args)
		assert.Contains(t, obj["inputs_reason"], tc.why, "%v", tc.args)
		assert.NotEqual(t, true, obj["inputs_mapped"], "%v", tc.args)
	}
}
