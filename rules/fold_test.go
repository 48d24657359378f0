package rules

import (
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModelCostFoldsViews: a kernel whose argument is a view of a weight
// (an nn.Linear weight's transpose) is priced as lowering builds it, with
// the view folded into its body, not as a kernel over a plain row-major
// buffer: the folded matmul streams the weight with cp.async, the plain
// one computes it element by element, and the model prices the two apart.
// A kernel whose arguments are plain buffers is priced as it stands.
func TestModelCostFoldsViews(t *testing.T) {
	const M, K, N = 512, 1024, 2048
	b := ir.NewBuilder("linear")
	x := b.Input("x", ir.BF16, M, K)
	w := b.Weight("w", ir.BF16, N, K)
	wt := b.Permute(w, 1, 0)
	b.Output("y", b.MatMul(x, wt))
	w2 := b.Weight("w2", ir.BF16, K, N) // a weight stored [K, N]
	b.Output("z", b.MatMul(x, w2))
	g, err := b.Build()
	require.NoError(t, err)
	eg, _ := NewEGraph(false)
	classes, err := AddGraph(eg, g)
	require.NoError(t, err)
	xc, wtc, w2c := classes[x], classes[wt], classes[w2]
	require.Equal(t, ir.Shape{K, N}, eg.Data(wtc).Shape)

	plain := ir.NewBuilder("kernel")
	plain.Output("out0", plain.MatMul(plain.Input("$0", ir.BF16, M, K), plain.Input("$1", ir.BF16, K, N)))
	body, err := plain.Build()
	require.NoError(t, err)
	kc, err := eg.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(body), Children: []egraph.ClassID{xc, wtc}})
	require.NoError(t, err)
	kp, err := eg.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(body), Children: []egraph.ClassID{xc, w2c}})
	require.NoError(t, err)
	eg.Rebuild()
	kernelOf := func(c egraph.ClassID) egraph.NodeID {
		for _, id := range eg.ClassNodes(eg.Find(c)) {
			if eg.Node(id).Op == KernelSymbol {
				return id
			}
		}
		t.Fatalf("class %d has no kernel", c)
		return 0
	}

	d, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(d, cost.Defaults(d))
	price := ModelCost(eg, m)
	got := price(&eg.Graph, kernelOf(kc))

	folded := ir.NewBuilder("kernel")
	folded.Output("out0", folded.MatMul(folded.Input("$0", ir.BF16, M, K), folded.Permute(folded.Input("$1", ir.BF16, N, K), 1, 0)))
	fb, err := folded.Build()
	require.NoError(t, err)
	want, err := m.Kernel(fb)
	require.NoError(t, err)
	asIs, err := m.Kernel(body)
	require.NoError(t, err)
	assert.InEpsilon(t, want.Seconds, got, 1e-9, "priced with the transpose folded in")
	assert.Less(t, want.Seconds, asIs.Seconds, "the streamed weight is cheaper than the computed one")

	// Plain arguments: the body as it stands.
	assert.InEpsilon(t, asIs.Seconds, price(&eg.Graph, kernelOf(kp)), 1e-9)
}
