package search

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
)

// TestLoadModelConfigFile: a config file given alone is built as o.Kind
// (model by default) under the name plan.json records, PATH.json:KIND, the
// same graph as that name gives.
func TestLoadModelConfigFile(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "corpus", "configs", "tiny-qwen2.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	for _, file := range []string{"config.json", "qwen.json"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), cfg, 0o644))
	}
	build := corpus.Options{Seq: 5, Past: -1, DType: ir.F32}
	for _, tt := range []struct {
		file, kind, wantKind string
	}{
		{"config.json", "", "model"},
		{"config.json", "decode", "decode"},
		{"qwen.json", "", "model"},
		{"qwen.json", "mlp", "mlp"},
	} {
		t.Run(tt.file+":"+tt.wantKind, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			m, err := LoadModel(path, ModelOptions{Build: build, Kind: tt.kind})
			require.NoError(t, err)
			defer m.Close()
			assert.Equal(t, path+":"+tt.wantKind, m.Name)
			again, err := LoadModel(m.Name, ModelOptions{Build: build})
			require.NoError(t, err)
			defer again.Close()
			assert.Equal(t, again.Graph.String(), m.Graph.String())
		})
	}
	_, err = LoadModel(filepath.Join(dir, "absent.json"), ModelOptions{Build: build})
	assert.ErrorContains(t, err, "absent.json")
}

// TestLoadModelPositions: a length beyond the model's positions is an
// option error, whatever names the model.
func TestLoadModelPositions(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "corpus", "configs", "tiny-llama.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	for _, name := range []string{"tiny-llama:layer", dir, filepath.Join(dir, "config.json"), filepath.Join(dir, "config.json") + ":decode"} {
		_, err := LoadModel(name, ModelOptions{Build: corpus.Options{Seq: 257, Past: -1}})
		require.Error(t, err, name)
		assert.Equal(t, KindOption, KindOf(err), "%s: %v", name, err)
		assert.ErrorContains(t, err, "seq 257")
		assert.ErrorContains(t, err, "256 positions (max_position_embeddings)")
	}
	// Other build errors keep their kind.
	_, err = LoadModel("tiny-llama:nope", ModelOptions{})
	require.Error(t, err)
	assert.NotEqual(t, KindOption, KindOf(err))
}
