package extract

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomSerialized makes a small random e-graph file: classes c0..cN-1 with
// one to maxNodes nodes each, up to two children from any class (so
// cycles, self-loops included, are common), costs from a few small
// integers with zeros among them (exact sums keep comparisons exact), and
// now and then a subsumed node. Every operator is distinct, so importing
// merges no classes.
func randomSerialized(rng *rand.Rand, classes, maxNodes int) *egraph.Serialized {
	s := &egraph.Serialized{Roots: []string{"c0"}}
	costs := []float64{0, 1, 1, 2, 3, 5}
	op := 0
	for c := 0; c < classes; c++ {
		for j := 0; j < 1+rng.IntN(maxNodes); j++ {
			n := egraph.SerializedNode{
				ID:       fmt.Sprintf("c%dn%d", c, j),
				Op:       fmt.Sprintf("op%d", op),
				Class:    fmt.Sprintf("c%d", c),
				Cost:     costs[rng.IntN(len(costs))],
				Subsumed: rng.IntN(12) == 0,
			}
			op++
			for k := rng.IntN(3); k > 0; k-- {
				n.Children = append(n.Children, fmt.Sprintf("c%dn0", rng.IntN(classes)))
			}
			s.Nodes = append(s.Nodes, n)
		}
	}
	return s
}

// bruteForce tries every assignment of executable nodes to classes and
// returns the least tree cost and the least DAG cost of the valid ones.
func bruteForce(p *Problem) (tree, dag float64) {
	tree, dag = math.Inf(1), math.Inf(1)
	s := NewSolution(p)
	var rec func(c int)
	rec = func(c int) {
		if c == p.NumClasses() {
			if s.Check(p) != nil {
				return
			}
			tc, _ := s.TreeCost(p)
			dc, _ := s.DAGCost(p)
			tree, dag = math.Min(tree, tc), math.Min(dag, dc)
			return
		}
		if len(p.ClassNodes[c]) == 0 {
			rec(c + 1)
			return
		}
		for _, n := range p.ClassNodes[c] {
			s.Choice[c] = n
			rec(c + 1)
		}
		s.Choice[c] = -1
	}
	rec(0)
	return tree, dag
}

// TestAgainstBruteForce checks every algorithm on random small e-graphs
// against exhaustive search: Tree finds the least tree cost, GreedyDAG a
// valid solution no better than the least DAG cost (it is a heuristic),
// Candidates distinct valid solutions in cost order led by one at least
// as good as GreedyDAG's, and Random valid solutions.
func TestAgainstBruteForce(t *testing.T) {
	ctx := context.Background()
	tried := 0
	for seed := uint64(0); seed < 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		p, _, err := FromSerialized(randomSerialized(rng, 2+rng.IntN(5), 3), LoadOptions{})
		if err != nil {
			require.Contains(t, err.Error(), "cannot be computed", "seed %d", seed)
			continue
		}
		tried++
		wantTree, wantDAG := bruteForce(p)

		ts, tree, err := Tree(ctx, p)
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, ts.Check(p))
		require.Equal(t, wantTree, tree, "seed %d: tree cost", seed)

		gs, dag, err := GreedyDAG(ctx, p)
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, gs.Check(p))
		require.GreaterOrEqual(t, dag, wantDAG, "seed %d: greedy beats the optimum", seed)

		cands, err := Candidates(ctx, p, 5)
		require.NoError(t, err, "seed %d", seed)
		require.NotEmpty(t, cands)
		require.LessOrEqual(t, len(cands), 5)
		prev := math.Inf(-1)
		for i, c := range cands {
			require.NoError(t, c.Check(p))
			cost, err := c.DAGCost(p)
			require.NoError(t, err)
			require.GreaterOrEqual(t, cost, prev, "seed %d: candidates best first", seed)
			prev = cost
			if i == 0 {
				require.LessOrEqual(t, cost, dag, "seed %d: first candidate no worse than greedy", seed)
			}
			for _, d := range cands[:i] {
				require.NotEqual(t, d.Choice, c.Choice, "seed %d: candidates distinct", seed)
			}
		}

		for r := uint64(0); r < 5; r++ {
			s, err := Random(p, r)
			require.NoError(t, err, "seed %d", seed)
			require.NoError(t, s.Check(p))
			cost, err := s.DAGCost(p)
			require.NoError(t, err)
			require.GreaterOrEqual(t, cost, wantDAG)
		}
	}
	assert.Greater(t, tried, 200, "most random e-graphs are computable")
}
