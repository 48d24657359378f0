package lower

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
)

// stepFeeds are random feeds of g with a random batch of the step's
// layout in place of its metadata and ids: fewer tokens and sequences
// than the maxima, so that rows past T exist.
func stepFeeds(t *testing.T, g *ir.Graph, l step.Layout, seed uint64) (map[string]*ir.Tensor, *step.Batch) {
	t.Helper()
	feeds, err := ir.RandomFeeds(g, seed, ir.Typical)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 5))
	shapes := l.DrawShapes(rng, 3, l.MaxLen()/2)
	b, err := l.Arrange(rng, shapes)
	require.NoError(t, err)
	for i := range b.IDs {
		b.IDs[i] = int64(rng.IntN(l.Vocab))
	}
	require.Less(t, b.Tokens(), l.MaxTokens, "the batch leaves rows past T")
	meta, err := l.Feeds(b)
	require.NoError(t, err)
	maps.Copy(feeds, meta)
	return feeds, b
}

// withPooled adds an output that sums value v (of token rows) over the
// tokens, rows past T included: a reader that needs every row.
func withPooled(t *testing.T, g *ir.Graph, v ir.Value) *ir.Graph {
	t.Helper()
	g = g.Clone()
	n := g.Node(v)
	g.Nodes = append(g.Nodes, &ir.Node{Op: ir.OpSum, Inputs: []ir.Value{v}, Attrs: ir.Attrs{Axis: 0}, Shape: append(ir.Shape{1}, n.Shape[1:]...), DType: n.DType})
	g.Outputs = append(g.Outputs, ir.Output{Name: "pooled", Value: ir.Value(len(g.Nodes) - 1)})
	require.NoError(t, g.Check())
	return g
}

// TestStepLaunchesWorkOnTheTokensPresent lowers serving steps (naive and
// fused) and checks which launches compute the rows present alone: the
// row-wise ones over the tokens (projections, norms, rotary, the pool
// writes, paged attention) on T, the last-token gather and the LM head on
// the S sequences (T with all logits); and a reader of every token row (a sum over the tokens) keeps
// whole the launches it depends on. Executed with the rows past T
// poisoned, each program computes what its graph does, and a row count
// planted on a launch whose rows are needed is caught.
func TestStepLaunchesWorkOnTheTokensPresent(t *testing.T) {
	tests := []struct {
		model     string
		allLogits bool
		fused     bool
		pooled    bool
	}{
		{"tiny-llama", false, false, false},
		{"tiny-llama", false, true, false},
		{"tiny-gpt2", true, false, false},
		{"tiny-mistral", false, true, false},
		{"tiny-llama", false, false, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/all_logits=%t/fused=%t/pooled=%t", tt.model, tt.allLogits, tt.fused, tt.pooled), func(t *testing.T) {
			opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 10, MaxSeqs: 4, BlockSize: 4, KVBlocks: 20, AllLogits: tt.allLogits}}
			g, err := corpus.Build(tt.model+":step", opt)
			require.NoError(t, err)
			var pooledOf ir.Value = ir.NoValue
			if tt.pooled {
				// The embeddings: the gather's launch must stay
				// whole.
				pooledOf = ir.Value(slices.IndexFunc(g.Nodes, func(n *ir.Node) bool { return n.Op == ir.OpGather }))
				g = withPooled(t, g, pooledOf)
			}
			var lp *Program
			if tt.fused {
				prog, err := rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: shortIters(6), NodeLimit: 40_000})
				require.NoError(t, err)
				lp, err = FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
				require.NoError(t, err)
			} else {
				lp = lowerNaive(t, g, true)
			}
			require.NotNil(t, lp.Step)
			l := *lp.Step
			scaled := 0
			for _, ln := range lp.Run {
				paged := slices.ContainsFunc(ln.Body.Nodes, func(n *ir.Node) bool { return n.Op == ir.OpPagedAttention })
				logits := slices.Contains(ln.Outs, lp.Outputs["logits"])
				switch {
				case paged:
					assert.NotNil(t, ln.Rows, "%s: paged attention works on the tokens present", ln.Name)
				case logits:
					if assert.NotNil(t, ln.Rows, "%s: the LM head works on the rows present", ln.Name) {
						assert.Equal(t, !tt.allLogits, ln.Rows.Seqs, "%s: the LM head works on sequences, or with all logits on tokens", ln.Name)
					}
				}
				if ln.Rows != nil {
					scaled++
					want := l.MaxTokens
					if ln.Rows.Seqs {
						want = l.MaxSeqs
					}
					assert.Equal(t, int64(want), ln.Rows.Max)
					assert.Len(t, ln.Params(), len(ln.Args)+2+len(ln.Outs))
				}
			}
			t.Logf("%d of %d launches work on the tokens present", scaled, len(lp.Run))
			assert.Greater(t, scaled, len(lp.Run)/2)

			feeds, b := stepFeeds(t, g, l, 11)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			check := func(lp *Program) (mismatches int) {
				outs, states, err := Execute(context.Background(), lp, feeds)
				require.NoError(t, err)
				// The rows of the sequences present (of the tokens
				// with all logits).
				outs, err = l.Present(outs, b)
				require.NoError(t, err)
				wants, err := l.Present(want.Outputs, b)
				require.NoError(t, err)
				mags, err := l.Present(want.Magnitudes, b)
				require.NoError(t, err)
				for name, w := range wants {
					mm, err := ir.Compare(outs[name], w, mags[name], 256)
					require.NoError(t, err)
					if mm != nil {
						mismatches++
						t.Logf("output %s: %v", name, mm)
					}
				}
				for name, w := range want.States {
					mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 256)
					require.NoError(t, err)
					if mm != nil {
						mismatches++
						t.Logf("state %s: %v", name, mm)
					}
				}
				return mismatches
			}
			require.Zero(t, check(lp), "the program with its rows past T poisoned")
			if !tt.pooled {
				return
			}
			// Plant a row count on the launches the pooled output
			// keeps whole: the poison reaches it.
			planted := 0
			for _, ln := range lp.Run {
				if ln.Rows == nil && len(ln.Outs) == 1 && lp.Buffers[ln.Outs[0]].Kind == Temp && len(lp.Buffers[ln.Outs[0]].Shape) > 0 &&
					int64(lp.Buffers[ln.Outs[0]].Shape[0]) == int64(l.MaxTokens) && !slices.Contains(ln.Outs, lp.Outputs["pooled"]) {
					ln.Rows = &Rows{Max: int64(l.MaxTokens), Args: []int{lp.namedBuffer(t, step.QueryStarts), lp.namedBuffer(t, step.SeqsSymbol)}}
					planted++
				}
			}
			require.Positive(t, planted)
			assert.Positive(t, check(lp), "a row count on launches whose rows a reader needs")
		})
	}
}

// namedBuffer is the id of the buffer named name.
func (p *Program) namedBuffer(t *testing.T, name string) int {
	t.Helper()
	i := slices.IndexFunc(p.Buffers, func(b *Buffer) bool { return b.Name == name })
	require.GreaterOrEqual(t, i, 0, name)
	return i
}
