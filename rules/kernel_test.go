package rules

import (
	"context"
	"testing"

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
			s := saturate(t, name, false, egraph.Runner[Data]{IterLimit: 3, NodeLimit: 50_000}, LowerRewrites())
			require.Equal(t, egraph.Saturated, s.report.Stop)
			p := s.problem(t, SimpleCost(s.eg))
			sol, cost, err := extract.GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			require.Positive(t, cost)
			kernels, prep, err := CountKernels(s.eg, p, sol)
			require.NoError(t, err)
			naive := NaiveKernels(s.g)
			require.LessOrEqual(t, kernels+prep, naive, "one kernel per computing op at most (hash-consing may merge)")
			require.Positive(t, kernels)
			t.Logf("%s: %d kernels for %d computing ops, estimated %.3g s", name, kernels, naive, cost)
			s.requireAgree(t, p, []*extract.Solution{sol}, 5, true)
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

// TestFuseAndExtract lowers and fuses corpus graphs with each fusion rule
// set, checks that the extracted program has fewer kernels than the naive
// one, and that it, and random extractions, compute what the graph does.
func TestFuseAndExtract(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	sets := []struct {
		name string
		rws  func() []*egraph.Rewrite[Data]
	}{{"pairs", FuseRewrites}, {"region", RegionRewrites}}
	for _, set := range sets {
		for _, name := range []string{"tiny-llama:mlp", "tiny-llama:rmsnorm", "tiny-gpt2:mlp", "tiny-llama:attention"} {
			t.Run(set.name+"/"+name, func(t *testing.T) {
				s := saturate(t, name, false, egraph.Runner[Data]{IterLimit: 12, NodeLimit: 20_000}, append(LowerRewrites(), set.rws()...))
				p := s.problem(t, SimpleCost(s.eg))
				sol, cost, err := extract.GreedyDAG(context.Background(), p)
				require.NoError(t, err)
				kernels, prep, err := CountKernels(s.eg, p, sol)
				require.NoError(t, err)
				naive := NaiveKernels(s.g)
				t.Logf("%s: %d e-nodes (%s); %d kernels (+%d at load) instead of %d, estimated %.3g s", name, s.eg.NumNodes(), s.report.Stop, kernels, prep, naive, cost)
				require.Less(t, kernels+prep, naive)
				s.requireAgree(t, p, append([]*extract.Solution{sol}, randomSolutions(t, p, 6)...), 5, false)
			})
		}
	}
}
