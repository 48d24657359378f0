package search

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
)

func TestLoadModel(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "corpus", "configs", "tiny-llama.json"))
	require.NoError(t, err)
	folder := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(folder, "config.json"), cfg, 0o644))
	build := corpus.Options{Seq: 4, Past: -1, DType: ir.F32}
	for _, c := range []struct {
		name, model string
		o           ModelOptions
		wantName    string
		reducible   bool
	}{
		{"corpus", "tiny-llama:mlp", ModelOptions{Build: build}, "tiny-llama:mlp", true},
		{"folder", folder, ModelOptions{Build: build, Kind: "layer"}, filepath.Join(folder, "config.json") + ":layer", true},
		{"folder, default kind", folder, ModelOptions{Build: build}, filepath.Join(folder, "config.json") + ":model", true},
		{"recorded config name", filepath.Join(folder, "config.json") + ":decode", ModelOptions{Build: build}, filepath.Join(folder, "config.json") + ":decode", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := LoadModel(c.model, c.o)
			require.NoError(t, err)
			defer m.Close()
			assert.Equal(t, c.wantName, m.Name)
			assert.NotEmpty(t, m.Graph.Nodes)
			assert.Nil(t, m.Weights, "a config without safetensors has random weights")
			assert.Equal(t, c.reducible, m.reducible())
			m.Close() // twice is fine
		})
	}
}

// TestLoadModelConfigNames: a config file named as PATH.json:KIND is built
// from that very file, under the name as given; the name plan.json
// records for a folder with weights ("DIR/config.json:KIND") is built
// with the folder's weights, as it was compiled.
func TestLoadModelConfigNames(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "corpus", "configs", "tiny-llama.json"))
	require.NoError(t, err)
	build := corpus.Options{Seq: 4, Past: -1, DType: ir.F32}

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.json"), cfg, 0o644))
	other := dir + "/./mine.json" // not clean: kept as given
	m, err := LoadModel(other+":layer", ModelOptions{Build: build})
	require.NoError(t, err)
	assert.Equal(t, other+":layer", m.Name, "the name as given")
	assert.Nil(t, m.Weights)
	assert.True(t, m.reducible())

	folder := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(folder, "config.json"), cfg, 0o644))
	plain, err := LoadModel(folder, ModelOptions{Build: build, Kind: "mlp"})
	require.NoError(t, err)
	weights, err := corpus.RandomWeights(plain.Graph, 7)
	require.NoError(t, err)
	require.NoError(t, safetensors.WriteFile(filepath.Join(folder, "model.safetensors"), weights, nil))
	recorded := filepath.Join(folder, "config.json") + ":mlp"
	for _, name := range []string{folder, recorded} {
		m, err := LoadModel(name, ModelOptions{Build: build, Kind: "mlp"})
		require.NoError(t, err, name)
		assert.Equal(t, recorded, m.Name)
		require.Len(t, m.Weights, len(weights), "the folder's weights")
		for k, w := range weights {
			assert.Equal(t, w.At(0), m.Weights[k].At(0), k)
		}
		m.Close()
	}
}

func TestLoadModelErrors(t *testing.T) {
	for _, c := range []struct {
		name, model string
		o           ModelOptions
		kind        Kind
		want        string
	}{
		{"dims for a corpus model", "tiny-llama:mlp", ModelOptions{Dims: Dims{"batch": 1}}, KindOption, "--dim batch=1: tiny-llama:mlp has no dimension batch"},
		{"dims for a folder", t.TempDir(), ModelOptions{Dims: Dims{"batch": 1}}, KindOption, "has no dimension batch (a decode step has past"},
		{"unknown corpus model", "no-such-model:layer", ModelOptions{}, KindOther, "no-such-model"},
		{"missing onnx file", filepath.Join(t.TempDir(), "gone.onnx"), ModelOptions{}, KindOther, "gone.onnx"},
		{"folder without config", t.TempDir(), ModelOptions{}, KindOther, "config.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := LoadModel(c.model, c.o)
			require.Error(t, err)
			assert.Nil(t, m)
			assert.Equal(t, c.kind, KindOf(err))
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestGoModelIsVerifiedWhole(t *testing.T) {
	g, err := corpus.Build("tiny-llama:mlp", corpus.Options{Seq: 4, Past: -1})
	require.NoError(t, err)
	for _, name := range []string{"", "mine", "my:model", "model.onnx"} {
		m := &Model{Name: name, Graph: g}
		assert.False(t, m.reducible(), "%q has no architecture to reduce", name)
		m.Close()
	}
}

func TestDims(t *testing.T) {
	d := Dims{}
	for _, c := range []struct {
		arg, err string
	}{
		{"sequence=128", ""},
		{"batch=4", ""},
		{"batch=0", "positive integer"},
		{"batch", "NAME=VALUE"},
		{"=3", "NAME=VALUE"},
		{"x=-1", "positive"},
		{"x=1.5", "positive integer"},
	} {
		err := d.Set(c.arg)
		if c.err == "" {
			assert.NoError(t, err, c.arg)
		} else {
			assert.ErrorContains(t, err, c.err, c.arg)
		}
	}
	assert.Equal(t, "batch=4,sequence=128", d.String())
	assert.Equal(t, "", Dims{}.String())
}

func TestKindOf(t *testing.T) {
	base := errors.New("disk full")
	for _, c := range []struct {
		err  error
		kind Kind
	}{
		{nil, KindOther},
		{base, KindOther},
		{withKind(KindOutput, base), KindOutput},
		{errors.Join(errors.New("other"), withKind(KindInput, base)), KindInput},
		{optionErrorf("--arch %s", "sm_70"), KindOption},
	} {
		assert.Equal(t, c.kind, KindOf(c.err), "%v", c.err)
	}
	err := withKind(KindOutput, base)
	assert.Equal(t, "disk full", err.Error(), "a kind does not change the message")
	assert.ErrorIs(t, err, base)
	assert.Nil(t, withKind(KindOutput, nil))
}
