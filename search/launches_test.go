package search

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// launchesPerLayer compiles the corpus config name (corpus/configs) as
// kind (built with build) with from and with from+2 decoder layers and returns the
// launches per run a layer adds, counted from the plans: the layers of a
// repeated pair may be printed apart, so a pair's average.
func launchesPerLayer(t *testing.T, name, kind string, build corpus.Options, from int) float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "corpus", "configs", name+".json"))
	require.NoError(t, err)
	launches := map[int]int{}
	for _, layers := range []int{from, from + 2} {
		var cfg map[string]any
		require.NoError(t, json.Unmarshal(raw, &cfg))
		if _, ok := cfg["n_layer"]; ok {
			cfg["n_layer"] = layers // GPT-2's name for it
		} else {
			cfg["num_hidden_layers"] = layers
		}
		data, err := json.Marshal(cfg)
		require.NoError(t, err)
		dir := t.TempDir()
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, layers))
		require.NoError(t, os.WriteFile(path, data, 0o644))
		m, err := LoadModel(path+":"+kind, ModelOptions{Build: build})
		require.NoError(t, err)
		res, err := Compile(context.Background(), m, Options{NoVerify: true, Target: "h100", TuneDB: filepath.Join(dir, "tunedb.jsonl")})
		m.Close()
		require.NoError(t, err)
		launches[layers] = len(res.Plan.Run)
	}
	return float64(launches[from+2]-launches[from]) / 2
}

// TestLaunchesPerLayer counts what a decoder layer costs in launches in
// the programs the search prints for llama, qwen2 and gpt2 (eight
// compiles: the long command only). The goal is at most 5 (QKV with
// rotary and the cache write, attention, O with the residual, gate and up
// with the SiLU product, down with the residual); the figures measured
// when the test was written are the bounds, so that a change that adds
// launches fails and one that removes some lowers them.
func TestLaunchesPerLayer(t *testing.T) {
	skipLong(t)
	tests := []struct {
		name, kind string
		build      corpus.Options
		from       int // layers of the smaller compile
		most       float64
	}{
		// Llama 3 8B's bf16 decode layer is the goal's five launches: QKV
		// with rotary and the cache writes in its epilogue, attention, O
		// with the residual, gate and up as one launch over both weights,
		// down with the residual (lowering's epilogue and sibling merges).
		// From 4 layers: with 2 the rotary tables fold into the first
		// layer's launches differently, which the difference would count.
		// The position is a runtime extent, as a served decode step's.
		{"llama-3-8b", "decode", corpus.Options{Seq: 8, Past: -1, DType: ir.BF16}, 4, 5},
		// The tiny models' searched programs (f32, position 0) split QKV
		// into projections of two weight layouts (a prepared row-major
		// merge beside a K-contiguous weight), which no one matrix-vector
		// launch reads, and normalize in a row kernel of their own.
		{"tiny-llama", "decode", corpus.Options{Seq: 8}, 2, 7},
		{"tiny-llama", "step", corpus.Options{Seq: 8}, 2, 9.5},
		{"tiny-qwen2", "decode", corpus.Options{Seq: 8}, 2, 8},
		{"tiny-gpt2", "decode", corpus.Options{Seq: 8}, 2, 6.5},
	}
	for _, tt := range tests {
		t.Run(tt.name+":"+tt.kind, func(t *testing.T) {
			got := launchesPerLayer(t, tt.name, tt.kind, tt.build, tt.from)
			t.Logf("%s:%s: %.1f launches a layer", tt.name, tt.kind, got)
			assert.LessOrEqual(t, got, tt.most)
			assert.GreaterOrEqual(t, got, 3.0, "a layer is at least its projections and attention")
		})
	}
}
