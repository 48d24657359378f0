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

// TestModelCostFoldStopsAtKernels: a view chain that ends at a computed
// class is folded only up to the first class a kernel may compute, where
// extraction may choose that kernel's buffer over the view (a transposed
// copy made by its own kernel): a kernel reading such a class is priced
// over the class's buffer as it stands.
func TestModelCostFoldStopsAtKernels(t *testing.T) {
	const M, K, N = 512, 1024, 2048
	b := ir.NewBuilder("linear")
	x := b.Input("x", ir.BF16, M, K)
	y := b.Exp(b.Weight("w", ir.BF16, N, K)) // computed, [N, K]
	wt := b.Permute(y, 1, 0)                 // a view of it, [K, N]
	b.Output("y", b.MatMul(x, wt))
	g, err := b.Build()
	require.NoError(t, err)
	eg, _ := NewEGraph(false)
	classes, err := AddGraph(eg, g)
	require.NoError(t, err)
	xc, yc, wtc := classes[x], classes[y], classes[wt]
	kernelBody := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		kb := ir.NewBuilder("kernel")
		kb.Output("out0", f(kb))
		body, err := kb.Build()
		require.NoError(t, err)
		return body
	}
	// y computed by a kernel.
	ky, err := eg.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(kernelBody(func(b *ir.Builder) ir.Value {
		return b.Exp(b.Input("$0", ir.BF16, N, K))
	})), Children: []egraph.ClassID{classes[1]}})
	require.NoError(t, err)
	eg.Union(ky, yc, "test")
	eg.Rebuild()
	plainMM := kernelBody(func(b *ir.Builder) ir.Value {
		return b.MatMul(b.Input("$0", ir.BF16, M, K), b.Input("$1", ir.BF16, K, N))
	})
	viewMM := kernelBody(func(b *ir.Builder) ir.Value {
		return b.MatMul(b.Input("$0", ir.BF16, M, K), b.Permute(b.Input("$1", ir.BF16, N, K), 1, 0))
	})
	add := func(children ...egraph.ClassID) egraph.ClassID {
		c, err := eg.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(plainMM), Children: children})
		require.NoError(t, err)
		return c
	}
	folded := add(xc, wtc)
	eg.Rebuild()
	d, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(d, cost.Defaults(d))
	price := func(c egraph.ClassID) float64 {
		for _, id := range eg.ClassNodes(eg.Find(c)) {
			if n := eg.Node(id); n.Op == KernelSymbol && n.Payload == SpecPayload(plainMM) {
				return ModelCost(eg, m)(&eg.Graph, id)
			}
		}
		t.Fatalf("no matmul kernel in class %d", c)
		return 0
	}
	asView, err := m.Kernel(viewMM)
	require.NoError(t, err)
	asBuffer, err := m.Kernel(plainMM)
	require.NoError(t, err)
	require.NotEqual(t, asView.Seconds, asBuffer.Seconds)
	// No kernel computes wt itself: the permute of y's buffer is read.
	assert.InEpsilon(t, asView.Seconds, price(folded), 1e-9)

	// A kernel that computes wt directly (a transposed copy): wt may be
	// its buffer.
	kt, err := eg.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(kernelBody(func(b *ir.Builder) ir.Value {
		return b.Permute(b.Exp(b.Input("$0", ir.BF16, N, K)), 1, 0)
	})), Children: []egraph.ClassID{classes[1]}})
	require.NoError(t, err)
	eg.Union(kt, wtc, "test")
	eg.Rebuild()
	assert.InEpsilon(t, asBuffer.Seconds, price(folded), 1e-9)
}
