package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replayIters is the replay tests' iteration limit: 8, or 5 under -short,
// where the four-layer decode step's pair e-graph holds 7,000 e-nodes
// rather than 11,000 and the program extracted and replayed is the same
// (35 kernels a run; the same cost under the model), at under half the
// time.
func replayIters() int {
	if testing.Short() {
		return 5
	}
	return 8
}

// TestSaturateModelReplay searches a four-layer model on one pair of its
// layers and checks that the replayed program runs every layer fused and
// computes what the model computes, value by value, as do random
// extractions of the model's e-graph.
func TestSaturateModelReplay(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	for _, tt := range []struct {
		model, kind string
		perLayer    int // kernels per run a layer may take at most (a decode step also writes its K and V caches)
	}{{"tiny-llama", "model", 8}, {"tiny-gpt2", "model", 7}, {"tiny-llama", "decode", 10}} {
		if testing.Short() && tt.kind != "decode" {
			continue // the long test command replays the whole models too
		}
		t.Run(tt.model+":"+tt.kind, func(t *testing.T) {
			t.Parallel()
			cfg, err := corpus.EmbeddedConfig(tt.model)
			require.NoError(t, err)
			cfg.NumHiddenLayers = 4
			g, err := corpus.BuildConfig(tt.model+"-4", cfg, tt.kind, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			prog, err := SaturateModel(context.Background(), g, allRewrites(t), SaturateOptions{IterLimit: replayIters(), NodeLimit: 60_000})
			require.NoError(t, err)
			require.NotNil(t, prog.Block, "the layers are found and searched once")
			require.Equal(t, 4, prog.Block.Copies)
			t.Logf("%s: %d kernels per run, %d at load; pair %d e-nodes (%s), %d replayed", g.Name, prog.Kernels, prog.Prep, prog.Block.Pair.EGraph.NumNodes(), prog.Block.Pair.Report.Stop, prog.Block.Replayed)
			require.LessOrEqual(t, prog.Kernels, 4*tt.perLayer+4)

			feeds, err := ir.RandomFeeds(g, 9, ir.Typical)
			require.NoError(t, err)
			d, err := CheckExtraction(context.Background(), prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution, feeds)
			require.NoError(t, err)
			require.Nil(t, d, "the extracted program: %v", d)
			for seed := range uint64(6) {
				sol, err := extract.Random(prog.Problem, seed)
				require.NoError(t, err)
				d, err := CheckExtraction(context.Background(), prog.EGraph, g, prog.Classes, prog.Problem, sol, feeds)
				require.NoError(t, err)
				require.Nil(t, d, "random extraction %d: %v", seed, d)
			}
		})
	}
}

// TestReplayedSolution checks the replayed block's program, the model's
// extraction: run on disjoint pairs of copies and completed greedily
// outside the blocks, it is a valid program that computes what the model
// does, takes no more kernels than the pair's program on every pair plus
// those outside the blocks, and costs no more than the greedy pass over
// every class of the model's e-graph, improved.
func TestReplayedSolution(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	kinds := []string{"model", "decode"}
	if testing.Short() {
		kinds = kinds[1:] // the long test command replays the whole model too
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg, err := corpus.EmbeddedConfig("tiny-llama")
			require.NoError(t, err)
			cfg.NumHiddenLayers = 4
			g, err := corpus.BuildConfig("tiny-llama-4", cfg, kind, corpus.Options{Seq: 16, Past: 8})
			require.NoError(t, err)
			prog, err := SaturateModel(context.Background(), g, allRewrites(t), SaturateOptions{IterLimit: replayIters(), NodeLimit: 60_000, Cost: modelCost(t, "h100")})
			require.NoError(t, err)
			require.NotNil(t, prog.Block)
			sol, cost, err := extract.GreedyFrom(context.Background(), prog.Problem, replayedSolution(prog.EGraph, prog.Problem, prog.replayed))
			require.NoError(t, err)
			assert.InDelta(t, cost, prog.Cost, cost*1e-12, "the model's program is the replayed one")
			// The greedy pass over every class finds nothing cheaper.
			_, full, err := extract.GreedyImproved(context.Background(), prog.Problem)
			require.NoError(t, err)
			assert.LessOrEqual(t, cost, full*(1+1e-9))
			ks, err := ProgramKernels(prog.EGraph, prog.Problem, sol)
			require.NoError(t, err)
			run := 0
			for _, k := range ks {
				if !k.Prep {
					run++
				}
			}
			t.Logf("%s: replayed %d kernels per run, %.3g µs; extracted %d kernels, %.3g µs; pair %d kernels", g.Name, run, cost*1e6, prog.Kernels, prog.Cost*1e6, prog.Block.Pair.Kernels)
			assert.LessOrEqual(t, run, 2*prog.Block.Pair.Kernels+6, "the head (embedding, final norm, projection) takes at most 6")
			feeds, err := ir.RandomFeeds(g, 9, ir.Typical)
			require.NoError(t, err)
			d, err := CheckExtraction(context.Background(), prog.EGraph, g, prog.Classes, prog.Problem, sol, feeds)
			require.NoError(t, err)
			require.Nil(t, d, "the replayed program: %v", d)
		})
	}
}
