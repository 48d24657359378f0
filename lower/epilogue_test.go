package lower

import (
	"context"
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMatmulMergesInDecode lowers the searched decode programs of small
// models and counts what the matmul merges did: a projection writing both
// caches (mergeEpilogues), a matmul reading two weights side by side
// (mergeSiblingMatmuls); the program runs as the graph does either way.
func TestMatmulMergesInDecode(t *testing.T) {
	tests := []struct {
		name           string
		dtype          ir.DType
		cacheWriters   int // matmul launches writing two caches
		siblingMerges  int // matmul launches over a concatenated weight
		launchesAtMost int
	}{
		// Two layers of five launches (QKV with rotary and the cache
		// writes, attention, O with the residual, gate and up, down
		// with the residual), the embedding and the head.
		{"tiny-llama:decode", ir.BF16, 2, 2, 12},
		{"tiny-qwen2:decode", ir.BF16, 2, 2, 12},
		// GPT-2's MLP has no sibling projections.
		{"tiny-gpt2:decode", ir.F32, 2, 0, 14},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.name, tt.dtype), func(t *testing.T) {
			g, err := corpus.Build(tt.name, corpus.Options{Seq: 8, Past: 5, DType: tt.dtype})
			require.NoError(t, err)
			prog, err := rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: 8})
			require.NoError(t, err)
			lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
			require.NoError(t, err)
			checkPlan(t, lp)
			writers, siblings := 0, 0
			for _, l := range lp.Run {
				if l.Form.Kind != "matmul" {
					continue
				}
				states := 0
				for _, o := range l.Outs {
					if lp.Buffers[o].Kind == State {
						states++
					}
				}
				if states == 2 {
					writers++
				}
				for _, n := range l.Body.Nodes {
					if n.Op == ir.OpConcat && len(n.Inputs) == 2 && l.Body.Node(n.Inputs[0]).Op == ir.OpPermute {
						siblings++
						break
					}
				}
			}
			assert.Equal(t, tt.cacheWriters, writers)
			assert.Equal(t, tt.siblingMerges, siblings)
			assert.LessOrEqual(t, len(lp.Run), tt.launchesAtMost)
			checkExecute(t, g, lp)
		})
	}
}
