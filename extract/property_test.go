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

// randomFile makes a random egraph-serialize file of up to 12 classes that
// the extraction properties are about: some nodes repeat another
// class's node exactly (same op, cost and children: a congruence a real
// e-graph would merge, which the file's own problem keeps apart),
// children from any class (cycles and self-loops), and, with negative,
// costs below zero. Costs are small integers, so sums are exact. The
// choice count stays small enough to enumerate.
func randomFile(rng *rand.Rand, negative bool) *egraph.Serialized {
	classes := 2 + rng.IntN(11)
	maxNodes := 3
	if classes > 7 {
		maxNodes = 2
	}
	costs := []float64{0, 1, 1, 2, 3}
	if negative {
		costs = append(costs, -1, -2)
	}
	s := &egraph.Serialized{Roots: []string{"c0"}}
	var made []egraph.SerializedNode
	for c := 0; c < classes; c++ {
		for j := 0; j < 1+rng.IntN(maxNodes); j++ {
			id := fmt.Sprintf("c%dn%d", c, j)
			var n egraph.SerializedNode
			if len(made) > 0 && rng.IntN(5) == 0 {
				// An identical node in another class.
				n = made[rng.IntN(len(made))]
				n.Children = append([]string(nil), n.Children...)
			} else {
				n = egraph.SerializedNode{Op: fmt.Sprintf("op%d", rng.IntN(4)), Cost: costs[rng.IntN(len(costs))]}
				for k := rng.IntN(3); k > 0; k-- {
					n.Children = append(n.Children, fmt.Sprintf("c%dn0", rng.IntN(classes)))
				}
			}
			n.ID, n.Class = id, fmt.Sprintf("c%d", c)
			made = append(made, n)
			s.Nodes = append(s.Nodes, n)
		}
	}
	return s
}

// bestTreeOfDepth is the least tree cost of each class over trees of depth
// at most d, by recursion: an oracle for Tree that does not share its
// rounds.
func bestTreeOfDepth(p *Problem, d int) []float64 {
	memo := map[[2]int]float64{}
	var best func(c, d int) float64
	best = func(c, d int) float64 {
		if d == 0 {
			return math.Inf(1)
		}
		key := [2]int{c, d}
		if v, ok := memo[key]; ok {
			return v
		}
		v := math.Inf(1)
		for _, n := range p.ClassNodes[c] {
			sum := p.Nodes[n].Cost
			for _, k := range p.Nodes[n].Children {
				sum += best(int(k), d-1)
			}
			v = math.Min(v, sum)
		}
		memo[key] = v
		return v
	}
	out := make([]float64, p.NumClasses())
	for c := range out {
		out[c] = best(c, d)
	}
	return out
}

// TestExtractionProperties checks, on random files (identical nodes in
// different classes, cycles, negative costs), against enumeration of
// every choice:
//   - the file's own problem keeps every class of the file;
//   - Tree finds the least tree cost, or says it is unbounded exactly
//     when trees of greater depth keep getting cheaper;
//   - GreedyDAG returns a valid acyclic choice no cheaper than the least
//     DAG cost and no dearer than FasterGreedyDAG's, which is itself
//     valid when it succeeds;
//   - Exact finds the least DAG cost when costs are not negative, and
//     refuses negative ones.
func TestExtractionProperties(t *testing.T) {
	ctx := context.Background()
	var tried, unbounded, negatives, exact int
	for seed := uint64(0); seed < 600; seed++ {
		rng := rand.New(rand.NewPCG(seed, 24))
		negative := seed%2 == 1
		file := randomFile(rng, negative)
		p, f, err := FromSerialized(file, LoadOptions{})
		if err != nil {
			require.Contains(t, err.Error(), "cannot be computed", "seed %d", seed)
			continue
		}
		classes := map[string]bool{}
		for _, n := range file.Nodes {
			classes[n.Class] = true
		}
		require.Equal(t, len(classes), p.NumClasses(), "seed %d: the file's own classes", seed)
		require.Equal(t, len(file.Nodes), f.ENodes)
		tried++
		if p.hasNegative() {
			negatives++
		}
		wantTree, wantDAG := bruteForce(p)

		nc := p.NumClasses()
		shallow, deep := bestTreeOfDepth(p, nc+1), bestTreeOfDepth(p, 3*nc+3)
		ts, tree, err := Tree(ctx, p)
		if deep[p.Roots[0]] < shallow[p.Roots[0]] {
			unbounded++
			require.Error(t, err, "seed %d: the tree cost keeps falling with depth", seed)
			assert.Contains(t, err.Error(), "unbounded", "seed %d", seed)
		} else {
			require.NoError(t, err, "seed %d", seed)
			require.NoError(t, ts.Check(p))
			require.Equal(t, wantTree, tree, "seed %d: tree cost", seed)
			require.Equal(t, shallow[p.Roots[0]], tree, "seed %d: tree cost by depth", seed)
		}

		gs, dag, err := GreedyDAG(ctx, p)
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, gs.Check(p))
		got, err := gs.DAGCost(p)
		require.NoError(t, err)
		require.Equal(t, got, dag)
		require.GreaterOrEqual(t, dag, wantDAG, "seed %d: greedy beats the optimum", seed)
		if fs, fdag, err := FasterGreedyDAG(ctx, p, FasterGreedyOptions{}); err == nil {
			require.NoError(t, fs.Check(p))
			require.GreaterOrEqual(t, fdag, wantDAG, "seed %d", seed)
			require.LessOrEqual(t, dag, fdag, "seed %d: greedy worse than faster greedy DAG", seed)
		}

		if seed%5 == 0 {
			res, err := Exact(ctx, p, ExactOptions{})
			if p.hasNegative() {
				require.ErrorContains(t, err, "non-negative", "seed %d", seed)
			} else {
				require.NoError(t, err, "seed %d", seed)
				require.True(t, res.Optimal, "seed %d", seed)
				require.Equal(t, wantDAG, res.Cost, "seed %d: exact DAG cost", seed)
				exact++
			}
		}
	}
	t.Logf("%d files, %d with negative costs, %d unbounded, %d solved exactly", tried, negatives, unbounded, exact)
	assert.Greater(t, tried, 300)
	assert.Greater(t, negatives, 100)
	assert.Greater(t, unbounded, 10)
	assert.Greater(t, exact, 20)
}

// TestFileProblemIsTheFiles: the smallest file congruence changes (a leaf
// a in two classes, one of which also holds a cheaper b, the root reading
// the other): its own tree optimum is 2; loaded into an e-graph, the
// classes merge and the optimum becomes 1.5.
func TestFileProblemIsTheFiles(t *testing.T) {
	s, err := egraph.ReadSerializedFile(writeTemp(t, `{"nodes": {
		"a1": {"op": "a", "cost": 1, "eclass": "c1", "children": []},
		"a2": {"op": "a", "cost": 1, "eclass": "c2", "children": []},
		"b": {"op": "b", "cost": 0.5, "eclass": "c2", "children": []},
		"f": {"op": "f", "cost": 1, "eclass": "r", "children": ["a1"]}
	}, "root_eclasses": ["r"]}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		opt  LoadOptions
		want float64
	}{{LoadOptions{}, 2}, {LoadOptions{Congruence: true}, 1.5}} {
		p, _, err := FromSerialized(s, tc.opt)
		require.NoError(t, err)
		_, tree, err := Tree(context.Background(), p)
		require.NoError(t, err)
		assert.Equal(t, tc.want, tree, "%+v", tc.opt)
	}
}
