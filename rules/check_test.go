package rules

import (
	"context"
	"os"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// allRewrites is every rule set's rewrites.
func allRewrites(t *testing.T) []*egraph.Rewrite[Data] {
	t.Helper()
	var rws []*egraph.Rewrite[Data]
	for _, s := range Sets() {
		r, err := SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	return rws
}

// TestExtractionsAgree is the e-graph fuzz test: corpus graphs saturated
// with every rule set, and many seeded random extractions of each (kernel
// bodies included; 12 a graph under -short, 24 in the long test command)
// evaluated against the original graph, value by value.
func TestExtractionsAgree(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	for _, name := range []string{"tiny-llama:layer", "tiny-gpt2:block", "tiny-llama:attention"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := saturate(t, name, false, egraph.Runner[Data]{IterLimit: 10, NodeLimit: 60_000}, allRewrites(t))
			t.Logf("%s: %d e-nodes, stop: %s", name, s.eg.NumNodes(), s.report.Stop)
			p := s.problem(t, SimpleCost(s.eg))
			best, _, err := extract.GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			n := 24
			if testing.Short() {
				n = 12 // the long test command draws 24
			}
			sols := append([]*extract.Solution{best}, randomSolutions(t, p, n)...)
			s.requireAgree(t, p, sols, 7, false)
		})
	}
}

// TestCheckExtractionNamesUnsoundRule saturates graphs with the unsound
// test rules (loaded without the verifier) and checks that a random
// extraction that picks their work is caught, with the rule named.
func TestCheckExtractionNamesUnsoundRule(t *testing.T) {
	src, err := os.ReadFile("testdata/unsound.rules")
	require.NoError(t, err)
	f, err := ParseRules("testdata/unsound.rules", src, Atom)
	require.NoError(t, err)
	rs, err := Compile(f)
	require.NoError(t, err)
	byName := map[string]*Rule{}
	for _, r := range rs {
		byName[r.Decl.Name] = r
	}
	cube := func() *ir.Graph {
		b := ir.NewBuilder("cube")
		x := b.Input("x", ir.F32, 3, 3, 3)
		b.Output("y", b.Exp(b.Permute(b.Permute(x, 1, 2, 0), 1, 2, 0)))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	diff := func() *ir.Graph {
		b := ir.NewBuilder("diff")
		x := b.Input("x", ir.F32, 4, 5)
		y := b.Input("y", ir.F32, 4, 5)
		b.Output("z", b.Exp(b.Sub(x, y)))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	tests := []struct {
		rule  string
		graph *ir.Graph
	}{{"blatant", diff()}, {"perm-twice", cube()}}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			eg, _ := NewEGraph(false)
			classes, err := AddGraph(eg, tt.graph)
			require.NoError(t, err)
			r := egraph.Runner[Data]{IterLimit: 4}
			_, err = r.Run(context.Background(), eg, append(LowerRewrites(), byName[tt.rule].Rewrites...))
			require.NoError(t, err)
			p, err := extract.NewProblem(&eg.Graph, RootClasses(GraphRoots(tt.graph, classes)), SimpleCost(eg), nil)
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(tt.graph, 5, ir.Typical)
			require.NoError(t, err)
			var caught *Disagreement
			for seed := uint64(0); seed < 64 && caught == nil; seed++ {
				sol, err := extract.Random(p, seed)
				require.NoError(t, err)
				caught, err = CheckExtraction(context.Background(), eg, tt.graph, classes, p, sol, feeds)
				require.NoError(t, err)
			}
			require.NotNil(t, caught, "no random extraction used the unsound rule")
			require.Contains(t, caught.Rules(), tt.rule)
			require.Contains(t, caught.Error(), tt.rule)
			t.Log(caught.Error())
		})
	}
}
