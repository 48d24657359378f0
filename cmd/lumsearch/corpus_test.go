package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func TestCorpusList(t *testing.T) {
	r := runArgs(t, "corpus", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 1+len(corpus.Names()))
	assert.Regexp(t, `^NAME +OPS +PARAMS$`, lines[0])
	assert.Regexp(t, `(?m)^llama-3-8b:model +\d+ +8030261248  8\.03B$`, r.stdout)
	assert.Regexp(t, `(?m)^gpt2:model +\d+ +124439808  124\.4M$`, r.stdout)
	assert.Regexp(t, `(?m)^qwen2\.5-0\.5b:model +\d+ +494032768  494\.0M$`, r.stdout)
	assert.Regexp(t, `(?m)^tiny-llama:softmax +8 +0$`, r.stdout)
	for _, l := range lines {
		assert.Equal(t, strings.TrimRight(l, " "), l, "no trailing spaces")
	}
}

func TestCorpusListJSON(t *testing.T) {
	r := runArgs(t, "corpus", "--json", "list", "--seq", "16")
	require.Equal(t, exitOK, r.code, r.stderr)
	var entries []corpus.Entry
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &entries))
	require.Len(t, entries, len(corpus.Names()))
	byName := map[string]corpus.Entry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	assert.Equal(t, int64(8_030_261_248), byName["llama-3-8b:model"].Params)
	assert.Equal(t, int64(124_439_808), byName["gpt2:decode"].Params)
	g, err := corpus.Build("tiny-llama:layer", corpus.Options{Seq: 16})
	require.NoError(t, err)
	assert.Equal(t, len(g.Nodes), byName["tiny-llama:layer"].Ops)
}

func TestCorpusShow(t *testing.T) {
	r := runArgs(t, "corpus", "show", "tiny-gpt2:decode", "--seq", "8", "--past", "3", "--dtype", "bf16")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, `graph "tiny-gpt2:decode"`), r.stdout)
	assert.Contains(t, r.stdout, `state "past_key_values.1.value" bf16[1,4,8,16]`)
	assert.Contains(t, r.stdout, "offset=3")
	g, err := ir.Parse(r.stdout)
	require.NoError(t, err, "show prints the ir text format")
	want, err := corpus.Build("tiny-gpt2:decode", corpus.Options{Seq: 8, Past: 3, DType: ir.BF16})
	require.NoError(t, err)
	assert.Equal(t, len(want.Nodes), len(g.Nodes))

	r = runArgs(t, "corpus", "show", "tiny-llama:layer", "--composite", "--seq", "4", "--batch", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "rms_norm")
	assert.Contains(t, r.stdout, `input "hidden_states" f32[2,4,64]`)

	r = runArgs(t, "corpus", "show", "--summary", "llama-3-8b:decode")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^params +8030261248$`, r.stdout)
	assert.Regexp(t, `(?m)^states +64$`, r.stdout)
	assert.Regexp(t, `(?m)^matmul +\d+$`, r.stdout)
}

func TestCorpusErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"corpus"}, exitUsage, "missing subcommand"},
		{"unknown subcommand", []string{"corpus", "lst"}, exitUsage, `unknown subcommand "lst"`},
		{"list with argument", []string{"corpus", "list", "x"}, exitUsage, "list takes no arguments"},
		{"show without name", []string{"corpus", "show"}, exitUsage, "show wants one graph NAME"},
		{"bad dtype", []string{"corpus", "show", "gpt2:block", "--dtype", "f8"}, exitUsage, `--dtype: unknown dtype "f8"`},
		{"int dtype", []string{"corpus", "show", "gpt2:block", "--dtype", "i32"}, exitUsage, "--dtype i32: want f32, f16 or bf16"},
		{"zero seq", []string{"corpus", "list", "--seq", "0"}, exitUsage, "--seq 0: must be positive (tokens per sequence)"},
		{"negative seq", []string{"corpus", "show", "tiny-llama:layer", "--seq", "-3"}, exitUsage, "--seq -3: must be positive"},
		{"zero batch", []string{"corpus", "eval", "tiny-llama:layer", "--batch", "0"}, exitUsage, "--batch 0: must be positive (sequences per batch)"},
		{"unknown graph", []string{"corpus", "show", "tiny-lama:model"}, exitError, "did you mean tiny-llama:model"},
		{"past past the cache", []string{"corpus", "show", "tiny-llama:decode", "--seq", "4", "--past", "4"}, exitUsage, "--past 4 is beyond the KV cache: --seq 4 holds positions 0 to 3"},
		{"past below the default", []string{"corpus", "show", "tiny-llama:decode", "--seq", "4", "--past", "-2"}, exitUsage, "--past -2: want a position in the KV cache"},
		{"seq past the positions", []string{"corpus", "show", "tiny-qwen2:mlp", "--seq", "300"}, exitUsage,
			"tiny-qwen2:mlp: seq 300 is more than the model's 256 positions (max_position_embeddings)"},
		{"decode cache past the positions", []string{"corpus", "eval", "tiny-gpt2:decode", "--seq", "257", "--past", "0"}, exitUsage,
			"seq 257 (the KV cache's capacity) is more than the model's 256 positions (n_positions)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			assert.Equal(t, tt.code, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

// TestCorpusConfigPaths shows a Hugging Face config given as a file with
// a kind, as a file alone and as its folder: the last two are the whole
// model.
func TestCorpusConfigPaths(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "corpus", "configs", "tiny-mistral.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(cfg, data, 0o644))
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, data, 0o644))

	show := func(args ...string) string {
		t.Helper()
		r := runArgs(t, append([]string{"corpus", "show", "--seq", "6"}, args...)...)
		require.Equal(t, exitOK, r.code, r.stderr)
		return r.stdout
	}
	body := func(text string) string { // the graph without its name line
		_, rest, _ := strings.Cut(text, "\n")
		return rest
	}
	want := show(cfg + ":model")
	assert.True(t, strings.HasPrefix(want, fmt.Sprintf("graph %q", cfg+":model")), want)
	assert.Equal(t, want, show(cfg), "a config.json alone is its whole model")
	assert.Equal(t, want, show(dir), "and so is its folder")
	assert.Equal(t, body(want), body(show(other)))
	assert.Contains(t, show(other), fmt.Sprintf("graph %q", other+":model"))
	assert.NotEqual(t, body(want), body(show(cfg+":layer")))

	r := runArgs(t, "corpus", "eval", cfg, "--seq", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^output logits: f32\[1,3,97\]$`, r.stdout)

	// A key lumsearch does not implement is refused by name.
	var fields map[string]any
	require.NoError(t, json.Unmarshal(data, &fields))
	fields["n_shared_experts"] = 2
	bad, err := json.Marshal(fields)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfg, bad, 0o644))
	r = runArgs(t, "corpus", "show", cfg)
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, `model_type "mistral": lumsearch does not implement "n_shared_experts": 2`)
}

func TestCorpusEval(t *testing.T) {
	r := runArgs(t, "corpus", "eval", "tiny-qwen2:decode", "--seq", "8", "--past", "3", "--seed", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^graph: +tiny-qwen2:decode \(\d+ ops, \d+ parameters\)$`, r.stdout)
	assert.Regexp(t, `(?m)^evaluate: .+ \(float64 reference interpreter\)$`, r.stdout)
	assert.Regexp(t, `(?m)^output logits: f32\[1,1,\d+\]$`, r.stdout)

	r = runArgs(t, "corpus", "eval", "nope:layer")
	require.NotEqual(t, exitOK, r.code)
	r = runArgs(t, "corpus", "eval")
	require.Equal(t, exitUsage, r.code)
}

// writeONNX writes a model computing x·W with x of shape [batch, 3], batch
// symbolic, and W a float initializer.
func writeONNX(t *testing.T) string {
	t.Helper()
	f32 := int32(onnxpb.TensorProto_FLOAT)
	dim := func(name string, v int64) *onnxpb.TensorShapeProto_Dimension {
		if name != "" {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: name}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	vi := func(name string, dims ...*onnxpb.TensorShapeProto_Dimension) *onnxpb.ValueInfoProto {
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(f32), Shape: &onnxpb.TensorShapeProto{Dim: dims}}}}}
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("mm"),
			Node:        []*onnxpb.NodeProto{{Name: proto.String("mm"), OpType: proto.String("MatMul"), Input: []string{"x", "W"}, Output: []string{"y"}}},
			Initializer: []*onnxpb.TensorProto{{Name: proto.String("W"), DataType: proto.Int32(f32), Dims: []int64{3, 2}, FloatData: []float32{1, 2, 3, 4, 5, 6}}},
			Input:       []*onnxpb.ValueInfoProto{vi("x", dim("batch", 0), dim("", 3))},
			Output:      []*onnxpb.ValueInfoProto{vi("y", dim("batch", 0), dim("", 2))},
		},
	}
	data, err := proto.Marshal(m)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "mm.onnx")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

func TestCorpusONNX(t *testing.T) {
	path := writeONNX(t)
	r := runArgs(t, "corpus", "show", path, "--dim", "batch=4")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `input "x" f32[4,3]`)
	assert.Contains(t, r.stdout, `weight "W" f32[3,2]`)

	r = runArgs(t, "corpus", "eval", path, "--dim", "batch=2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "output y: f32[2,2]")

	r = runArgs(t, "corpus", "show", path)
	require.NotEqual(t, exitOK, r.code)
	assert.Contains(t, r.stderr, "batch")
	assert.Contains(t, r.stderr, "--dim")

	r = runArgs(t, "corpus", "show", path, "--dim", "batch")
	require.Equal(t, exitUsage, r.code)
	r = runArgs(t, "corpus", "show", "tiny-llama:mlp", "--dim", "batch=2")
	require.Equal(t, exitUsage, r.code)
}
