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

// TestLowerAndExtract lowers corpus graphs to one-op kernels, extracts the
// cheapest kernel program with the simple estimate and checks that it
// computes what the graph does, with one kernel per computing op.
func TestLowerAndExtract(t *testing.T) {
	for _, name := range []string{"tiny-llama:mlp", "tiny-gpt2:block", "tiny-llama:layer"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 4})
			require.NoError(t, err)
			eg, an := NewEGraph(false)
			classes, err := AddGraph(eg, g)
			require.NoError(t, err)
			r := egraph.Runner[Data]{IterLimit: 3, NodeLimit: 50_000}
			rep, err := r.Run(context.Background(), eg, LowerRewrites())
			require.NoError(t, err)
			require.Equal(t, egraph.Saturated, rep.Stop)
			require.Empty(t, an.Conflicts())
			roots := GraphRoots(g, classes)
			p, err := extract.NewProblem(&eg.Graph, RootClasses(roots), SimpleCost(eg), nil)
			require.NoError(t, err)
			sol, cost, err := extract.GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			require.Positive(t, cost)
			kernels := 0
			order, err := sol.Needed(p)
			require.NoError(t, err)
			for _, c := range order {
				if eg.Node(p.NodeIDs[sol.Choice[c]]).Op == KernelSymbol {
					kernels++
				}
			}
			computing := 0
			for _, n := range g.Nodes {
				if n.Op.Class() != ir.ClassLeaf && n.Op.Class() != ir.ClassView {
					computing++
				}
			}
			require.LessOrEqual(t, kernels, computing, "one kernel per computing op at most (hash-consing may merge)")
			require.Positive(t, kernels)
			t.Logf("%s: %d kernels for %d computing ops, estimated %.3g s", name, kernels, computing, cost)

			back, err := SolutionGraph(&eg.Graph, g.Name, roots, p, sol)
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
			require.NoError(t, err)
			got, err := ir.Eval(context.Background(), back, feeds, ir.EvalOptions{})
			require.NoError(t, err)
			for out, w := range want.Outputs {
				require.Equal(t, w.Float64s(), got.Outputs[out].Float64s(), "output %s", out)
			}
		})
	}
}

func TestKernelTyping(t *testing.T) {
	eg, _ := NewEGraph(false)
	x := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpInput), Payload: AttrPayload(ir.OpInput, ir.Attrs{Name: "x", DType: ir.F32, To: ir.Shape{2, 3}})})
	y := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpInput), Payload: AttrPayload(ir.OpInput, ir.Attrs{Name: "y", DType: ir.F32, To: ir.Shape{2, 3}})})
	eg.Rebuild()
	k1, ok := OneOpKernel(eg, ir.OpAdd, ir.Attrs{}, []egraph.ClassID{x, y})
	require.True(t, ok)
	k2, ok := OneOpKernel(eg, ir.OpAdd, ir.Attrs{}, []egraph.ClassID{y, x})
	require.True(t, ok)
	eg.Rebuild()
	d := eg.Data(k1)
	require.True(t, d.Valid(), d.Err)
	require.Equal(t, ir.Shape{2, 3}, d.Shape)
	// The two argument orders share one canonical body: add($0, $1).
	n1, n2 := eg.Node(eg.ClassNodes(k1)[0]), eg.Node(eg.ClassNodes(k2)[0])
	require.Equal(t, n1.Payload, n2.Payload)
	body, ok := Spec(n1.Payload)
	require.True(t, ok)
	require.Contains(t, body.String(), "add %0, %1")
	// A kernel whose arguments do not fit its body is marked.
	z := eg.MustAdd(egraph.Node{Op: Symbol(ir.OpInput), Payload: AttrPayload(ir.OpInput, ir.Attrs{Name: "z", DType: ir.F32, To: ir.Shape{4}})})
	bad := eg.MustAdd(egraph.Node{Op: KernelSymbol, Payload: n1.Payload, Children: []egraph.ClassID{x, z}})
	eg.Rebuild()
	require.Contains(t, eg.Data(bad).Err, "kernel argument $1 is f32[4], its body wants f32[2,3]")
}

// TestFuseAndExtract lowers and fuses corpus graphs, checks that the
// extracted program has fewer kernels and a lower estimate than the naive
// one, and that it, and random extractions, compute what the graph does.
func TestFuseAndExtract(t *testing.T) {
	for _, name := range []string{"tiny-llama:mlp", "tiny-llama:rmsnorm", "tiny-gpt2:mlp"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 4})
			require.NoError(t, err)
			eg, an := NewEGraph(false)
			classes, err := AddGraph(eg, g)
			require.NoError(t, err)
			r := egraph.Runner[Data]{IterLimit: 12, NodeLimit: 20_000}
			rep, err := r.Run(context.Background(), eg, append(LowerRewrites(), FuseRewrites()...))
			require.NoError(t, err)
			require.Empty(t, an.Conflicts())
			roots := GraphRoots(g, classes)
			p, err := extract.NewProblem(&eg.Graph, RootClasses(roots), SimpleCost(eg), nil)
			require.NoError(t, err)
			sol, cost, err := extract.GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			order, err := sol.Needed(p)
			require.NoError(t, err)
			kernels, computing := 0, 0
			for _, c := range order {
				if eg.Node(p.NodeIDs[sol.Choice[c]]).Op == KernelSymbol {
					kernels++
				}
			}
			for _, n := range g.Nodes {
				if n.Op.Class() != ir.ClassLeaf && n.Op.Class() != ir.ClassView {
					computing++
				}
			}
			t.Logf("%s: %d e-nodes (%s); %d kernels instead of %d, estimated %.3g s", name, eg.NumNodes(), rep.Stop, kernels, computing, cost)
			require.Less(t, kernels, computing)

			feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			sols := []*extract.Solution{sol}
			for seed := range uint64(6) {
				s, err := extract.Random(p, seed)
				require.NoError(t, err)
				sols = append(sols, s)
			}
			for i, s := range sols {
				back, err := SolutionGraph(&eg.Graph, g.Name, roots, p, s)
				require.NoError(t, err)
				got, err := ir.Eval(context.Background(), back, feeds, ir.EvalOptions{})
				require.NoError(t, err)
				for out, w := range want.Outputs {
					mm, err := ir.Compare(got.Outputs[out], w, want.Magnitudes[out], 64)
					require.NoError(t, err)
					require.Nil(t, mm, "extraction %d, output %s: %v", i, out, mm)
				}
			}
		})
	}
}
