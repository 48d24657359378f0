package extract

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharingGraph is x = (k (g c) (h c)) = (m d): as a tree, k pays for c
// twice (1+11+11 = 23) and loses to m (1+13 = 14); as a DAG, c is paid
// once and k wins (1+1+1+10 = 13).
func sharingGraph(t *testing.T) (*handGraph, egraph.ClassID) {
	h := newHandGraph(map[string]float64{"k": 1, "m": 1, "g": 1, "h": 1, "c": 10, "d": 13})
	x := h.add(t, "x", "(k (g c) (h c))")
	h.union(x, h.add(t, "md", "(m d)"))
	for _, e := range []string{"(g c)", "(h c)", "c", "d"} {
		h.add(t, e, e) // names the classes for chosenOps
	}
	return h, x
}

func TestTreeAndGreedyOnSharing(t *testing.T) {
	h, x := sharingGraph(t)
	p := h.mustProblem(t, x)
	ctx := context.Background()

	ts, tree, err := Tree(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 14.0, tree)
	assert.Equal(t, map[string]string{"x": "m", "d": "d"}, chosenOps(p, h.g, ts))
	dag, err := ts.DAGCost(p)
	require.NoError(t, err)
	assert.Equal(t, 14.0, dag)

	gs, dag, err := GreedyDAG(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 13.0, dag)
	assert.Equal(t, map[string]string{"x": "k", "c": "c", "(g c)": "g", "(h c)": "h"}, chosenOps(p, h.g, gs))
	tree, err = gs.TreeCost(p)
	require.NoError(t, err)
	assert.Equal(t, 23.0, tree)
}

// zeroCycleGraph is r = (f a b) with a = a0 | (s0 b) and b = b0 | (s1 a),
// the Split nodes costing 0: choosing s0 and s1 ties with the leaves on
// tree cost and beats them on DAG cost if both are taken, but together
// they form a cycle.
func zeroCycleGraph(t *testing.T) (*handGraph, egraph.ClassID) {
	h := newHandGraph(map[string]float64{"f": 1, "a0": 2, "b0": 2, "s0": 0, "s1": 0})
	r := h.add(t, "r", "(f a0 b0)")
	a := h.add(t, "a", "a0")
	b := h.add(t, "b", "b0")
	h.union(a, h.add(t, "s0b", "(s0 b0)"))
	h.union(b, h.add(t, "s1a", "(s1 a0)"))
	return h, r
}

func TestZeroCostCyclesStayAcyclic(t *testing.T) {
	h, r := zeroCycleGraph(t)
	p := h.mustProblem(t, r)
	ctx := context.Background()

	ts, tree, err := Tree(ctx, p)
	require.NoError(t, err)
	require.NoError(t, ts.Check(p))
	assert.Equal(t, 5.0, tree)

	gs, dag, err := GreedyDAG(ctx, p)
	require.NoError(t, err)
	require.NoError(t, gs.Check(p))
	assert.Equal(t, 3.0, dag, "one leaf, the other class through a Split of it")

	for seed := uint64(0); seed < 50; seed++ {
		s, err := Random(p, seed)
		require.NoError(t, err)
		require.NoError(t, s.Check(p))
	}
}

func TestTreeTiesByNodeIndex(t *testing.T) {
	// Two leaves of equal cost in one class: the lower node index wins,
	// whatever order the e-graph lists them in.
	h := newHandGraph(map[string]float64{"p": 1, "q": 1, "f": 1})
	r := h.add(t, "r", "(f p)")
	pq := h.add(t, "p", "p")
	h.union(pq, h.add(t, "q", "q"))
	p := h.mustProblem(t, r)
	s, _, err := Tree(context.Background(), p)
	require.NoError(t, err)
	pc := classOf(t, p, h.g, pq)
	require.Len(t, p.ClassNodes[pc], 2)
	assert.Equal(t, p.ClassNodes[pc][0], s.Choice[pc])
}

func TestRootErrors(t *testing.T) {
	// A hand-made problem may have a root with no executable node, which
	// NewProblem would have refused; every algorithm names the class.
	p := &Problem{
		Nodes:      []Node{{Class: 0, Cost: 1}},
		ClassNodes: [][]int32{{0}, {}},
		Roots:      []int32{0, 1},
		ClassNames: []string{"ok", "dead"},
	}
	ctx := context.Background()
	_, _, err := Tree(ctx, p)
	assert.ErrorContains(t, err, "root class dead cannot be computed")
	_, _, err = GreedyDAG(ctx, p)
	assert.ErrorContains(t, err, "root class dead cannot be computed")
	_, err = Candidates(ctx, p, 3)
	assert.ErrorContains(t, err, "root class dead cannot be computed")
	_, err = Random(p, 1)
	assert.ErrorContains(t, err, "root class dead cannot be computed")
}

func TestCanceled(t *testing.T) {
	h, x := sharingGraph(t)
	p := h.mustProblem(t, x)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := Tree(ctx, p)
	assert.ErrorIs(t, err, context.Canceled)
	_, _, err = GreedyDAG(ctx, p)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = Candidates(ctx, p, 2)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestCandidates(t *testing.T) {
	h, x := sharingGraph(t)
	p := h.mustProblem(t, x)
	ctx := context.Background()

	none, err := Candidates(ctx, p, 0)
	require.NoError(t, err)
	assert.Empty(t, none)

	cands, err := Candidates(ctx, p, 10)
	require.NoError(t, err)
	// Greedy (13, through k) and tree (14, through m) are the only two
	// programs: every other class has a single node.
	require.Len(t, cands, 2)
	var costs []float64
	for _, c := range cands {
		require.NoError(t, c.Check(p))
		cost, err := c.DAGCost(p)
		require.NoError(t, err)
		costs = append(costs, cost)
	}
	assert.Equal(t, []float64{13, 14}, costs)

	one, err := Candidates(ctx, p, 1)
	require.NoError(t, err)
	require.Len(t, one, 1)
	assert.Equal(t, cands[0].Choice, one[0].Choice)
}

func TestRandomDeterministicAndVaried(t *testing.T) {
	h, r := zeroCycleGraph(t)
	p := h.mustProblem(t, r)
	seen := map[float64]bool{}
	for seed := uint64(0); seed < 100; seed++ {
		a, err := Random(p, seed)
		require.NoError(t, err)
		b, err := Random(p, seed)
		require.NoError(t, err)
		require.Equal(t, a.Choice, b.Choice, "same seed, same extraction")
		cost, err := a.DAGCost(p)
		require.NoError(t, err)
		seen[cost] = true
	}
	// Both leaves (1+2+2) and one leaf plus a Split (1+2+0) come out.
	assert.Equal(t, map[float64]bool{5: true, 3: true}, seen)
}
