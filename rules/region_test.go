package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRegionTwoOutputs checks residual add plus norm as one kernel with two
// outputs: a graph that returns both the residual sum and its RMS norm is
// extracted as a single kernel writing both, and random extractions (which
// mix projections, one-output kernels and one-op kernels) compute the same.
func TestRegionTwoOutputs(t *testing.T) {
	b := ir.NewBuilder("residual-norm")
	x := b.Input("x", ir.F32, 4, 32)
	r := b.Input("r", ir.F32, 4, 32)
	w := b.Weight("w", ir.F32, 32)
	h := b.Add(x, r)
	ss := b.Mul(b.Sum(b.Mul(h, h), 1), b.BroadcastTo(b.Scalar(ir.F32, 1.0/32), ir.Shape{4, 1}))
	rs := b.Rsqrt(b.Add(ss, b.BroadcastTo(b.Scalar(ir.F32, 0.0009765625), ir.Shape{4, 1})))
	b.Output("normed", b.Mul(b.Mul(h, b.BroadcastTo(rs, ir.Shape{4, 32})), b.BroadcastTo(w, ir.Shape{4, 32})))
	b.Output("sum", h)
	g, err := b.Build()
	require.NoError(t, err)

	for _, withPairs := range []bool{false, true} {
		rws := append(LowerRewrites(), RegionRewrites()...)
		if withPairs {
			rws = append(rws, FuseRewrites()...) // which must leave multi-output kernels alone
		}
		checkTwoOutputs(t, g, rws)
	}
}

func checkTwoOutputs(t *testing.T, g *ir.Graph, rws []*egraph.Rewrite[Data]) {
	eg, an := NewEGraph(false)
	classes, err := AddGraph(eg, g)
	require.NoError(t, err)
	run := egraph.Runner[Data]{IterLimit: 6}
	_, err = run.Run(context.Background(), eg, rws)
	require.NoError(t, err)
	require.Empty(t, an.Conflicts())
	p, err := extract.NewProblem(&eg.Graph, RootClasses(GraphRoots(g, classes)), SimpleCost(eg), nil)
	require.NoError(t, err)
	best, _, err := extract.GreedyDAG(context.Background(), p)
	require.NoError(t, err)
	best, _, err = extract.Improve(context.Background(), p, best)
	require.NoError(t, err)
	ks, err := ProgramKernels(eg, p, best)
	require.NoError(t, err)
	require.Len(t, ks, 1, "one kernel writes the norm and the sum")
	require.Len(t, ks[0].Outputs, 2)
	require.Equal(t, "row, 2 outputs", ks[0].Form.String())

	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	sols := []*extract.Solution{best}
	for seed := range uint64(16) {
		sol, err := extract.Random(p, seed)
		require.NoError(t, err)
		sols = append(sols, sol)
	}
	for i, sol := range sols {
		d, err := CheckExtraction(context.Background(), eg, g, classes, p, sol, feeds)
		require.NoError(t, err)
		require.Nil(t, d, "extraction %d: %v", i, d)
	}
}

// One rule set serves several e-graphs at once (SaturateModel's two
// searches): each keeps its own record of the regions grown, so that
// switching between them neither forgets nor mixes them.
func TestRegionMemoPerEGraph(t *testing.T) {
	var m regionMemo
	a, _ := NewEGraph(false)
	b, _ := NewEGraph(false)
	require.True(t, m.first(a, "x"))
	require.True(t, m.first(b, "x"), "another e-graph's record")
	require.False(t, m.first(a, "x"), "a's record survives b's")
	require.False(t, m.first(b, "x"))
	for range maxMemoGraphs {
		g, _ := NewEGraph(false)
		require.True(t, m.first(g, "x"))
	}
	require.True(t, m.first(a, "x"), "the oldest e-graph's record is dropped")
	require.Len(t, m.graphs, maxMemoGraphs)
}

// TestRegionStatisticsBesideResidual is a decode step's residual add and
// norm ahead of a projection: the extraction computes the norm's row
// statistics in a row kernel that also writes the residual sum it takes
// them of, reading the split-K partials of the projection before it, so
// the residual add has no launch of its own; random extractions compute
// the same.
func TestRegionStatisticsBesideResidual(t *testing.T) {
	skipLong(t)
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	const hid = 2 * SplitKMin
	b := ir.NewBuilder("residual-norm-proj")
	a := b.Input("a", ir.BF16, 1, hid)
	r := b.Input("r", ir.F32, 1, hid)
	wo := b.Weight("wo", ir.BF16, hid, hid)
	w := b.Weight("w", ir.F32, hid)
	wu := b.Weight("wu", ir.BF16, hid, 1024)
	h := b.Add(b.Cast(b.MatMul(a, wo), ir.F32), r)
	ss := b.Mul(b.Sum(b.Mul(h, h), 1), b.BroadcastTo(b.Scalar(ir.F32, 1.0/hid), ir.Shape{1, 1}))
	rs := b.Rsqrt(b.Add(ss, b.BroadcastTo(b.Scalar(ir.F32, 0.0009765625), ir.Shape{1, 1})))
	n := b.Mul(b.Mul(h, b.BroadcastTo(rs, ir.Shape{1, hid})), b.BroadcastTo(w, ir.Shape{1, hid}))
	b.Output("up", b.MatMul(b.Cast(n, ir.BF16), wu))
	b.Output("sum", h)
	g, err := b.Build()
	require.NoError(t, err)

	d, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(d, cost.Defaults(d))
	price := func(eg *egraph.EGraph[Data]) extract.CostFunc { return ModelCost(eg, m) }
	prog, err := Saturate(context.Background(), g, allRewrites(t), SaturateOptions{IterLimit: 8, Cost: price})
	require.NoError(t, err)
	var two []Kernel
	for _, k := range prog.List {
		if len(k.Outputs) == 2 {
			two = append(two, k)
		}
	}
	require.Len(t, two, 1, "no kernel writes the statistics beside the residual sum")
	k := two[0]
	assert.Equal(t, "row", k.Form.Kind)
	assert.Equal(t, ir.Shape{1, hid}, k.Outputs[1].Shape, "the second output is the residual sum")
	assert.Less(t, k.Outputs[0].Shape.NumElements(), int64(hid), "the first output is the statistics")
	partials := false
	for _, n := range k.Body.Nodes {
		partials = partials || n.Op == ir.OpSum && !rowReduce(k.Body, n)
	}
	assert.True(t, partials, "the row kernel does not sum the projection's partials")
	assert.Equal(t, 4, prog.Kernels, "projection, statistics and sum, projection, cast")

	feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
	require.NoError(t, err)
	sols := []*extract.Solution{prog.Solution}
	for seed := range uint64(1) {
		sol, err := extract.Random(prog.Problem, seed)
		require.NoError(t, err)
		sols = append(sols, sol)
	}
	for i, sol := range sols {
		d, err := CheckExtraction(context.Background(), prog.EGraph, g, prog.Classes, prog.Problem, sol, feeds)
		require.NoError(t, err)
		require.Nil(t, d, "extraction %d: %v", i, d)
	}
}
