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

// TestRoundTripThroughEGraph puts corpus graphs into the e-graph, extracts
// them back with random choices (there are only hash-consing merges to
// choose among), and checks they compute the same as the originals.
func TestRoundTripThroughEGraph(t *testing.T) {
	for _, name := range []string{"tiny-llama:layer", "tiny-gpt2:block", "tiny-qwen2:decode"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 8, Past: 3})
			require.NoError(t, err)
			eg, an := NewEGraph(false)
			classes, err := AddGraph(eg, g)
			require.NoError(t, err)
			eg.Rebuild()
			require.Empty(t, an.Conflicts())
			for i, n := range g.Nodes {
				d := eg.Data(classes[i])
				require.True(t, d.Valid(), "node %%%d: %s", i, d.Err)
				require.Equal(t, n.Shape, d.Shape, "node %%%d", i)
				require.Equal(t, n.DType, d.DType, "node %%%d", i)
			}
			roots := GraphRoots(g, classes)
			p, err := extract.NewProblem(&eg.Graph, RootClasses(roots), func(*egraph.Graph, egraph.NodeID) float64 { return 1 }, nil)
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
			require.NoError(t, err)
			for seed := range uint64(3) {
				sol, err := extract.Random(p, seed)
				require.NoError(t, err)
				back, err := SolutionGraph(&eg.Graph, g.Name, roots, p, sol)
				require.NoError(t, err)
				got, err := ir.Eval(context.Background(), back, feeds, ir.EvalOptions{})
				require.NoError(t, err)
				for name, v := range want.Outputs {
					require.Equal(t, v.Float64s(), got.Outputs[name].Float64s(), "output %s", name)
				}
				for name, v := range want.States {
					require.Equal(t, v.Float64s(), got.States[name].Float64s(), "state %s", name)
				}
			}
		})
	}
}

func TestAtom(t *testing.T) {
	for _, tc := range []struct {
		tok  string
		op   ir.Op
		want ir.Attrs
		err  string
	}{
		{tok: "add", op: ir.OpAdd},
		{tok: "sum[axis=-1]", op: ir.OpSum, want: ir.Attrs{Axis: -1}},
		{tok: "reshape[to=[2,3]]", op: ir.OpReshape, want: ir.Attrs{To: ir.Shape{2, 3}}},
		{tok: "cast[dtype=f16]", op: ir.OpCast, want: ir.Attrs{DType: ir.F16}},
		{tok: "attention[scale=0.125,causal=true,offset=3]", op: ir.OpAttention, want: ir.Attrs{Scale: 0.125, Causal: true, Offset: 3}},
		{tok: "addd", err: `unknown op "addd"`},
		{tok: "sum[axis=x]", err: "attribute axis"},
		{tok: "add[axis=1]", err: "add does not take all of these attributes"},
		{tok: "sum[axis=1", err: "unclosed attribute list"},
	} {
		t.Run(tc.tok, func(t *testing.T) {
			sym, pay, err := Atom(tc.tok)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, Symbol(tc.op), sym)
			a, ok := Attrs(pay)
			require.True(t, ok)
			require.Equal(t, tc.op.Normalize(tc.want), a)
		})
	}
}

// TestIllTypedTermIsMarked checks that a term the type checker rejects
// (what an unsound rule builds) is marked, not trusted.
func TestIllTypedTermIsMarked(t *testing.T) {
	eg, _ := NewEGraph(false)
	x := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpInput), Payload: AttrPayload(ir.OpInput, ir.Attrs{Name: "x", DType: ir.F32, To: ir.Shape{2, 3}})})
	y := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpInput), Payload: AttrPayload(ir.OpInput, ir.Attrs{Name: "y", DType: ir.F32, To: ir.Shape{4, 5}})})
	bad := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpMatMul), Children: []egraph.ClassID{x, y}})
	eg.Rebuild()
	require.False(t, eg.Data(bad).Valid())
	require.Contains(t, eg.Data(bad).Err, "inner dimensions 3 and 4 differ")
}

func TestConstantFoldingAndConflicts(t *testing.T) {
	eg, an := NewEGraph(true)
	two := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpConst), Payload: AttrPayload(ir.OpConst, ir.Attrs{DType: ir.F32, To: ir.Shape{}, Data: []float64{2}})})
	e := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpExpand), Payload: AttrPayload(ir.OpExpand, ir.Attrs{To: ir.Shape{}}), Children: []egraph.ClassID{two}})
	sum := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpAdd), Children: []egraph.ClassID{e, two}})
	eg.Rebuild()
	require.True(t, eg.Data(sum).IsConst)
	require.Equal(t, 4.0, eg.Data(sum).Const)
	four, ok := eg.Lookup(egraph.Node{Op: Symbol(ir.OpConst), Payload: AttrPayload(ir.OpConst, ir.Attrs{DType: ir.F32, To: ir.Shape{}, Data: []float64{4}})})
	require.True(t, ok, "folding adds the constant node")
	require.Equal(t, eg.Find(sum), four)
	// An unsound union of 2 and 4 is recorded as a conflict.
	eg.Union(two, sum, "unsound on purpose")
	eg.Rebuild()
	require.NotEmpty(t, an.Conflicts())
}
