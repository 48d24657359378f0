package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestBenchSave: bench --save DIR writes the tensors it fed under the
// graph's names, the compiled program's outputs and the graph's text; the
// graph parses back to the model's graph, and the reference interpreter
// run on the saved inputs gives the saved outputs.
func TestBenchSave(t *testing.T) {
	needGxx(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	dir := filepath.Join(t.TempDir(), "saved")
	got := benchEmulated(t, db, "tiny-llama:mlp", "--seq", "4", "--save", dir)
	assert.Equal(t, "tiny-llama:mlp", got.Model)

	text, err := os.ReadFile(filepath.Join(dir, search.BenchGraphFile))
	require.NoError(t, err)
	g, err := ir.Parse(string(text))
	require.NoError(t, err, "graph.txt is ir text")
	want, err := corpus.Build("tiny-llama:mlp", corpus.Options{Seq: 4, Past: -1, DType: ir.F32})
	require.NoError(t, err)
	assert.Equal(t, want.String(), g.String(), "graph.txt is the model's graph")

	inputs, meta, err := safetensors.ReadFile(filepath.Join(dir, search.BenchInputsFile))
	require.NoError(t, err)
	var leaves []string
	for _, v := range append(g.Inputs(), g.Weights()...) {
		n := g.Node(v)
		leaves = append(leaves, n.Name)
		if assert.Contains(t, inputs, n.Name) {
			assert.Equal(t, n.DType, inputs[n.Name].DType, n.Name)
			assert.Equal(t, n.Shape, inputs[n.Name].Shape, n.Name)
		}
	}
	assert.ElementsMatch(t, leaves, slices.Collect(maps.Keys(inputs)), "exactly the graph's leaves")
	for _, name := range []string{"hidden_states", "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"} {
		assert.Contains(t, inputs, name)
	}
	assert.Equal(t, []int64{128, 64}, shapeInts(inputs["model.layers.0.mlp.gate_proj.weight"].Shape), "nn.Linear's [out, in]")
	assert.Equal(t, "tiny-llama:mlp", meta["model"])
	assert.Equal(t, "1", meta["seed"])
	var names []string
	require.NoError(t, json.Unmarshal([]byte(meta["inputs"]), &names))
	assert.Equal(t, []string{"hidden_states"}, names)
	require.NoError(t, json.Unmarshal([]byte(meta["states"]), &names))
	assert.Empty(t, names)
	require.NoError(t, json.Unmarshal([]byte(meta["weights"]), &names))
	assert.Len(t, names, 3)

	// The same seed draws the same tensors as bench's own feeds.
	feeds, err := ir.RandomFeeds(g, 1, ir.Typical)
	require.NoError(t, err)
	for name, f := range feeds {
		rel, err := measure.RelativeError(inputs[name], f)
		require.NoError(t, err, name)
		assert.Zero(t, rel, "%s is what the seed draws", name)
	}

	outputs, _, err := safetensors.ReadFile(filepath.Join(dir, search.BenchOutputsFile))
	require.NoError(t, err)
	ref, err := ir.Eval(context.Background(), g, inputs, ir.EvalOptions{})
	require.NoError(t, err)
	require.Len(t, outputs, len(ref.Outputs))
	for name, w := range ref.Outputs {
		o := outputs[name]
		require.NotNil(t, o, "output %s saved", name)
		assert.Equal(t, w.Shape, o.Shape, name)
		rel, err := measure.RelativeError(o, w)
		require.NoError(t, err, name)
		assert.LessOrEqual(t, rel, 1e-4, "%s: the compiled program's output against the reference", name)
	}
}

// TestBenchSaveDecodeStates: a decode step's KV caches are saved as the
// states fed (inputs) and their values after the run (outputs), by the
// states' names, and the outputs agree with the reference's. The step is
// the compiled folder the tests share (bench DIR, as scripts/gpu-check.sh
// runs it; TestBenchSave benches a MODEL).
func TestBenchSaveDecodeStates(t *testing.T) {
	needGxx(t)
	// Parallel: among the package's longest tests; the default tuning
	// database is TestMain's empty one.
	t.Parallel()
	out, _ := compiledDecode(t)
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	dir := filepath.Join(t.TempDir(), "saved")
	got := benchEmulated(t, db, out, "--save", dir)
	assert.Equal(t, decodeModel, got.Model)
	text, err := os.ReadFile(filepath.Join(dir, search.BenchGraphFile))
	require.NoError(t, err)
	g, err := ir.Parse(string(text))
	require.NoError(t, err)
	inputs, _, err := safetensors.ReadFile(filepath.Join(dir, search.BenchInputsFile))
	require.NoError(t, err)
	outputs, _, err := safetensors.ReadFile(filepath.Join(dir, search.BenchOutputsFile))
	require.NoError(t, err)
	ref, err := ir.Eval(context.Background(), g, inputs, ir.EvalOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, ref.States)
	assert.Contains(t, inputs, "past_key_values.0.key")
	for name, w := range ref.States {
		o := outputs[name]
		require.NotNil(t, o, "state %s saved after the run", name)
		rel, err := measure.RelativeError(o, w)
		require.NoError(t, err, name)
		assert.LessOrEqual(t, rel, 1e-4, "state %s", name)
	}
	require.Contains(t, outputs, "logits")
	rel, err := measure.RelativeError(outputs["logits"], ref.Outputs["logits"])
	require.NoError(t, err)
	assert.LessOrEqual(t, rel, 1e-4, "logits")
}

// TestBenchSaveDir: bench DIR --save, as scripts/gpu-check.sh runs it,
// saves the rebuilt model's leaves by name and the folder's program's
// outputs, which agree with the reference's.
func TestBenchSaveDir(t *testing.T) {
	needGxx(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "compile", "tiny-llama:rmsnorm", "--seq", "4", "--verify=false", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	saved := filepath.Join(t.TempDir(), "saved")
	benchEmulated(t, filepath.Join(t.TempDir(), "tunedb.jsonl"), dir, "--save", saved)
	inputs, meta, err := safetensors.ReadFile(filepath.Join(saved, search.BenchInputsFile))
	require.NoError(t, err)
	assert.Equal(t, "tiny-llama:rmsnorm", meta["model"])
	assert.ElementsMatch(t, []string{"hidden_states", "model.layers.0.input_layernorm.weight"}, slices.Collect(maps.Keys(inputs)))
	outputs, _, err := safetensors.ReadFile(filepath.Join(saved, search.BenchOutputsFile))
	require.NoError(t, err)
	g, err := corpus.Build("tiny-llama:rmsnorm", corpus.Options{Seq: 4, Past: -1, DType: ir.F32})
	require.NoError(t, err)
	ref, err := ir.Eval(context.Background(), g, inputs, ir.EvalOptions{})
	require.NoError(t, err)
	require.Contains(t, outputs, "output")
	rel, err := measure.RelativeError(outputs["output"], ref.Outputs["output"])
	require.NoError(t, err)
	assert.LessOrEqual(t, rel, 1e-4)
}

// TestBenchSaveOnFakeDriver: on the GPU path (the fake driver, which
// computes nothing, so every output is zeros) --save writes the outputs
// the compiled program gave, at the graph's shapes.
func TestBenchSaveOnFakeDriver(t *testing.T) {
	if _, err := nvrtc.Load(); err != nil {
		t.Skip(err)
	}
	fakecuda.Build(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	saved := filepath.Join(t.TempDir(), "saved")
	r := runArgs(t, "bench", "tiny-llama:mlp", "--seq", "4", "--json", "--tunedb", filepath.Join(t.TempDir(), "tunedb.jsonl"),
		"--min-runs", "1", "--save", saved)
	require.Equal(t, exitOK, r.code, r.stderr)
	inputs, _, err := safetensors.ReadFile(filepath.Join(saved, search.BenchInputsFile))
	require.NoError(t, err)
	assert.Len(t, inputs, 4)
	outputs, _, err := safetensors.ReadFile(filepath.Join(saved, search.BenchOutputsFile))
	require.NoError(t, err)
	require.Contains(t, outputs, "output")
	assert.Equal(t, []int64{1, 4, 64}, shapeInts(outputs["output"].Shape))
}

// TestBenchSaveRefusesAFile: a --save that cannot be a folder fails the
// bench with an error naming --save.
func TestBenchSaveRefusesAFile(t *testing.T) {
	needGxx(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	file := writeFile(t, "taken", "not a folder")
	r := runArgs(t, "bench", "tiny-llama:rmsnorm", "--seq", "4", "--measure", "emulated", "--json",
		"--tunedb", filepath.Join(t.TempDir(), "tunedb.jsonl"), "--min-runs", "1", "--max-time", "50ms", "--save", file)
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "--save")
	assert.Empty(t, r.stdout)
}

// shapeInts is a shape as plain integers, for comparisons.
func shapeInts(s ir.Shape) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}
