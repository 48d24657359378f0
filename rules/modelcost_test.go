package rules

import (
	"context"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// modelCost is SaturateOptions.Cost for the cost model of a built-in
// device.
func modelCost(t *testing.T, name string) func(*egraph.EGraph[Data]) extract.CostFunc {
	t.Helper()
	d, err := cost.LookupDevice(name)
	require.NoError(t, err)
	m := cost.NewModel(d, cost.Defaults(d))
	return func(eg *egraph.EGraph[Data]) extract.CostFunc { return ModelCost(eg, m) }
}

// TestModelCostCorpus prices every tiny Llama and GPT-2 corpus graph with
// the cost model: the extracted program is predicted no slower than the
// naive one, and it computes what the graph does. Under the race detector
// the three costliest kinds, the whole model, the prefill and the decode
// step, are priced for one family each (Llama's decode step and prefill,
// GPT-2's model), every other kind for both.
func TestModelCostCorpus(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	price := modelCost(t, "h100")
	for _, name := range corpus.Names() {
		if !strings.HasPrefix(name, "tiny-llama:") && !strings.HasPrefix(name, "tiny-gpt2:") {
			continue
		}
		if raceEnabled && (name == "tiny-llama:model" || name == "tiny-gpt2:decode" || name == "tiny-gpt2:prefill" || name == "tiny-gpt2:step") {
			continue
		}
		if testing.Short() && name != "tiny-llama:step" && name != "tiny-llama:decode" && name != "tiny-gpt2:block" {
			continue // the long test command prices them all
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, err := corpus.Build(name, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			opt := SaturateOptions{IterLimit: 6, NodeLimit: 40_000, Cost: price}
			if testing.Short() {
				// The programs of the three graphs -short prices are byte
				// for byte those of 6 iterations, at a quarter of the
				// time.
				opt.IterLimit = 3
			}
			prog, err := SaturateModel(context.Background(), g, allRewrites(t), opt)
			require.NoError(t, err)
			naive, err := NaiveProgram(context.Background(), g, opt)
			require.NoError(t, err)
			t.Logf("%s: %d kernels per run (+%d at load), %.3g µs; naive %d kernels, %.3g µs", name, prog.Kernels, prog.Prep, prog.Cost*1e6, naive.Kernels+naive.Prep, naive.Cost*1e6)
			require.LessOrEqual(t, prog.Cost, naive.Cost*(1+1e-9))
			feeds, err := ir.RandomFeeds(g, 4, ir.Typical)
			require.NoError(t, err)
			d, err := CheckExtraction(context.Background(), prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution, feeds)
			require.NoError(t, err)
			require.Nil(t, d, "%v", d)
		})
	}
}
