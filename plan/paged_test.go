package plan

import (
	"context"
	"maps"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// TestCheckPaged: a plan's runner refuses paged attention metadata the
// op has no meaning on before it uploads anything, accepts valid
// metadata, and leaves metadata it was not given to the caller.
func TestCheckPaged(t *testing.T) {
	b := ir.NewBuilder("paged_step")
	const T, E, Hq, Hkv, D = 5, 16, 2, 1, 8
	x := b.Input("x", ir.F32, T, E)
	proj := func(name string, heads ir.Dim) ir.Value {
		return b.Reshape(b.MatMul(x, b.Weight(name, ir.F32, E, heads*D)), T, heads, D)
	}
	pool := func(name string) ir.Value { return b.Input(name, ir.F32, 32, Hkv, D) }
	b.Output("y", b.PagedAttention(proj("wq", Hq), proj("wk", Hkv), proj("wv", Hkv), pool("kpool"), pool("vpool"),
		b.Input("table", ir.I64, 2, 4), b.Input("lens", ir.I64, 2), b.Input("starts", ir.I64, 3), b.Input("seqs", ir.I64), 1/math.Sqrt(D), 4, 0))
	g, err := b.Build()
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	p, err := Build(lp, ks, nil, nil)
	require.NoError(t, err)
	// Through JSON and back, as a runner reads it.
	data, err := p.Encode()
	require.NoError(t, err)
	p, err = Parse("plan.json", data)
	require.NoError(t, err)

	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	require.NoError(t, p.CheckPaged(feeds))
	with := func(name string, vals ...int64) map[string]*ir.Tensor {
		out := maps.Clone(feeds)
		n := g.Node(inputOf(t, g, name))
		out[name], err = ir.TensorOfInts(n.DType, n.Shape, vals...)
		require.NoError(t, err)
		return out
	}
	assert.ErrorContains(t, p.CheckPaged(with("seqs", 3)), "paged attention metadata: 3 sequences present; the block table has 2 rows")
	bad := with("seqs", 1)
	bad["starts"], err = ir.TensorOfInts(ir.I64, ir.Shape{3}, 0, 2, 2)
	require.NoError(t, err)
	bad["lens"], err = ir.TensorOfInts(ir.I64, ir.Shape{2}, 7, 0)
	require.NoError(t, err)
	bad["table"], err = ir.TensorOfInts(ir.I64, ir.Shape{2, 4}, 3, 8, -1, -1, -1, -1, -1, -1)
	require.NoError(t, err)
	assert.ErrorContains(t, p.CheckPaged(bad), "sequence 0: block 1 of its table is 8, outside the pool's 8 blocks")
	bad["table"], err = ir.TensorOfInts(ir.I64, ir.Shape{2, 4}, 3, 7, -1, -1, -1, -1, -1, -1)
	require.NoError(t, err)
	assert.NoError(t, p.CheckPaged(bad), "5 cached positions in blocks 3 and 7, the table's other entries unused")
	delete(bad, "table")
	assert.NoError(t, p.CheckPaged(bad), "metadata not given is the caller's")
}

// inputOf is g's input of that name.
func inputOf(t *testing.T, g *ir.Graph, name string) ir.Value {
	t.Helper()
	for _, v := range g.Inputs() {
		if g.Node(v).Name == name {
			return v
		}
	}
	t.Fatalf("no input %q", name)
	return 0
}
