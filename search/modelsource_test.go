package search

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
)

// TestVerifyFindsTheModelFile compiles a model from a config.json named
// by a relative path and verifies its folder from elsewhere: found beside
// the folder as it was (the two moved together) or at its absolute path
// (the folder moved alone); a changed model and a missing one are errors
// saying what the folder needs.
func TestVerifyFindsTheModelFile(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "corpus", "configs", "tiny-llama.json"))
	require.NoError(t, err)
	work := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(work, "hf"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "hf", "config.json"), cfg, 0o644))
	t.Chdir(work)
	m, err := LoadModel("hf/config.json:rmsnorm", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	res, err := Compile(context.Background(), m, Options{NoVerify: true, TuneDB: filepath.Join(work, "db.jsonl")})
	require.NoError(t, err)
	require.NoError(t, res.Write(context.Background(), "out"))
	pl, err := readPlan("out")
	require.NoError(t, err)
	require.NotNil(t, pl.Source)
	assert.Equal(t, "../hf/config.json", pl.Source.Rel)
	assert.Equal(t, filepath.Join(work, "hf", "config.json"), pl.Source.Path)

	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	abs := filepath.Join(work, "out")
	require.NoError(t, Verify(context.Background(), abs, nil), "from another working directory")

	// The folder and the model moved together.
	moved := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.Rename(work, moved))
	require.NoError(t, Verify(context.Background(), filepath.Join(moved, "out"), nil), "found relative to the folder")

	// The folder alone moved back: the model is not where either path says.
	require.NoError(t, os.Rename(filepath.Join(moved, "out"), filepath.Join(elsewhere, "out")))
	err = Verify(context.Background(), filepath.Join(elsewhere, "out"), nil)
	require.Error(t, err)
	assert.Equal(t, KindInput, KindOf(err))
	assert.Contains(t, err.Error(), "the folder needs the model it was compiled from")
	assert.Contains(t, err.Error(), filepath.Join(work, "hf", "config.json"))

	// The model back at its absolute path: found.
	require.NoError(t, os.Rename(moved, work))
	require.NoError(t, Verify(context.Background(), filepath.Join(elsewhere, "out"), nil), "found at its absolute path")

	// A changed model is not the one the folder was compiled from.
	require.NoError(t, os.WriteFile(filepath.Join(work, "hf", "config.json"), append(cfg, ' '), 0o644))
	err = Verify(context.Background(), filepath.Join(elsewhere, "out"), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has changed since")
}
