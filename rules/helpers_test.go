package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// saturated is a corpus graph (seq 4) put into an e-graph and run with rws.
type saturated struct {
	g       *ir.Graph
	eg      *egraph.EGraph[Data]
	classes []egraph.ClassID // AddGraph's
	roots   []Root
	report  *egraph.Report
}

func saturate(t *testing.T, name string, fold bool, r egraph.Runner[Data], rws []*egraph.Rewrite[Data]) *saturated {
	t.Helper()
	g, err := corpus.Build(name, corpus.Options{Seq: 4})
	require.NoError(t, err)
	eg, an := NewEGraph(fold)
	classes, err := AddGraph(eg, g)
	require.NoError(t, err)
	rep, err := r.Run(context.Background(), eg, rws)
	require.NoError(t, err)
	require.Empty(t, an.Conflicts(), "a rule merged incompatible classes")
	return &saturated{g: g, eg: eg, classes: classes, roots: GraphRoots(g, classes), report: rep}
}

// problem is the extraction problem of the roots under cost.
func (s *saturated) problem(t *testing.T, cost extract.CostFunc) *extract.Problem {
	t.Helper()
	p, err := extract.NewProblem(&s.eg.Graph, RootClasses(s.roots), cost, nil)
	require.NoError(t, err)
	return p
}

// requireAgree evaluates each extraction as a program and compares it with
// the original graph: its outputs bit for bit when exact (programs that
// only regroup the same ops), else every value it computes within the
// project's tolerance (CheckExtraction), a failure naming the e-class, the
// two nodes and the rules that made them equal.
func (s *saturated) requireAgree(t *testing.T, p *extract.Problem, sols []*extract.Solution, seed uint64, exact bool) {
	t.Helper()
	feeds, err := ir.RandomFeeds(s.g, seed, ir.Typical)
	require.NoError(t, err)
	for i, sol := range sols {
		if !exact {
			d, err := CheckExtraction(context.Background(), s.eg, s.g, s.classes, p, sol, feeds)
			require.NoError(t, err)
			require.Nil(t, d, "extraction %d of %s: %v", i, s.g.Name, d)
			continue
		}
		want, err := ir.Eval(context.Background(), s.g, feeds, ir.EvalOptions{})
		require.NoError(t, err)
		back, err := SolutionGraph(&s.eg.Graph, s.g.Name, s.roots, p, sol)
		require.NoError(t, err)
		got, err := ir.Eval(context.Background(), back, feeds, ir.EvalOptions{})
		require.NoError(t, err)
		for out, w := range want.Outputs {
			require.Equal(t, w.Float64s(), got.Outputs[out].Float64s(), "extraction %d of %s, output %s", i, s.g.Name, out)
		}
		for name, w := range want.States {
			require.Equal(t, w.Float64s(), got.States[name].Float64s(), "extraction %d of %s, state %s", i, s.g.Name, name)
		}
	}
}

// randomSolutions draws n seeded random extractions.
func randomSolutions(t *testing.T, p *extract.Problem, n int) []*extract.Solution {
	t.Helper()
	var out []*extract.Solution
	for seed := range uint64(n) {
		sol, err := extract.Random(p, seed)
		require.NoError(t, err)
		out = append(out, sol)
	}
	return out
}
