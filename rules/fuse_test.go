package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// splitGraph is a projection long enough for split-K (K >= SplitKMin)
// whose result two consumers read through views: a rotary-like
// elementwise epilogue on one half, a residual add on the whole.
func splitGraph(t *testing.T) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("split")
	x := b.Input("x", ir.F32, 3, SplitKMin)
	w := b.Weight("w", ir.F32, SplitKMin, 16)
	r := b.Input("r", ir.F32, 3, 16)
	y := b.MatMul(x, w)
	half := b.Concat(1, b.Neg(b.Slice(y, 1, 8, 16, 1)), b.Slice(y, 1, 0, 8, 1))
	b.Output("rot", b.Add(b.Mul(y, r), half))
	b.Output("res", b.Add(y, r))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestCrossSumFusion: once split-K has split a projection, the kernels
// reading its result get variants that read the partials and sum them as
// they load them, and every extraction, those variants included, computes
// what the graph does.
func TestCrossSumFusion(t *testing.T) {
	g := splitGraph(t)
	prog, err := Saturate(context.Background(), g, allRewrites(t), SaturateOptions{IterLimit: 10})
	require.NoError(t, err)
	eg := prog.EGraph
	crossed := 0
	for _, c := range eg.Classes() {
		for _, id := range eg.ClassNodes(c) {
			if n := eg.Node(id); n.Op == KernelSymbol && readsCrossSum(n.Payload) {
				crossed++
				body, ok := Spec(n.Payload)
				require.True(t, ok)
				require.True(t, Legal(body), "%s", body)
			}
		}
	}
	require.Positive(t, crossed, "no kernel reads split-K partials")
	p, err := extract.NewProblem(&eg.Graph, RootClasses(prog.Roots), SimpleCost(eg), nil)
	require.NoError(t, err)
	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	used := 0
	for seed := uint64(0); seed < 48; seed++ {
		sol, err := extract.Random(p, seed)
		require.NoError(t, err)
		kernels, err := ProgramKernels(eg, p, sol)
		require.NoError(t, err)
		for _, k := range kernels {
			for _, n := range k.Body.Nodes {
				if n.Op == ir.OpSum && !rowReduce(k.Body, n) && len(k.Body.Nodes) > 2 {
					used++
				}
			}
		}
		d, err := CheckExtraction(context.Background(), eg, g, prog.Classes, p, sol, feeds)
		require.NoError(t, err)
		require.Nil(t, d, "%v", d)
	}
	require.Positive(t, used, "no random extraction fused a split-K sum")
}

// TestInPlaceRowsPricing: a kernel writing a state's new rows is priced
// as lowering runs it, the rows alone written in place, not as a copy of
// the whole state; the same update of an input (no state) is a copy. A
// decode step's slice_update of its KV cache and a serving step's scatter
// into its paged pool (llama-3-8b's: 32768 slots of 8 heads of 128) both.
func TestInPlaceRowsPricing(t *testing.T) {
	d, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(d, cost.Defaults(d))
	tests := []struct {
		name  string
		dt    ir.DType
		shape []ir.Dim
		// update writes rows (computed) into the cache.
		update func(b *ir.Builder, cache ir.Value) ir.Value
	}{
		{"slice_update", ir.F32, []ir.Dim{1, 8, 4096, 128}, func(b *ir.Builder, cache ir.Value) ir.Value {
			rows := b.Input("rows", ir.F32, 1, 8, 1, 128)
			return b.SliceUpdate(cache, b.Neg(rows), 2, 7)
		}},
		{"scatter", ir.BF16, []ir.Dim{32768, 8, 128}, func(b *ir.Builder, cache ir.Value) ir.Value {
			rows := b.Input("rows", ir.BF16, 64, 8, 128)
			return b.Scatter(cache, b.Neg(rows), b.Input("slot_mapping", ir.I32, 64), 0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			price := func(state bool) (priced, whole float64) {
				b := ir.NewBuilder("step")
				var cache ir.Value
				if state {
					cache = b.State("cache", tt.dt, tt.shape...)
				} else {
					cache = b.Input("cache", tt.dt, tt.shape...)
				}
				b.Output("new", tt.update(b, cache))
				g, err := b.Build()
				require.NoError(t, err)
				prog, err := Saturate(context.Background(), g, LowerRewrites(), SaturateOptions{})
				require.NoError(t, err)
				eg := prog.EGraph
				root := eg.Find(prog.Roots[0].Class)
				for _, id := range eg.ClassNodes(root) {
					n := eg.Node(id)
					if n.Op != KernelSymbol {
						continue
					}
					body, ok := Spec(n.Payload)
					require.True(t, ok)
					e, err := m.Kernel(body)
					require.NoError(t, err)
					return ModelCost(eg, m)(&eg.Graph, id), e.Seconds
				}
				t.Fatal("no kernel computes the update")
				return 0, 0
			}
			priced, whole := price(true)
			require.Less(t, priced, whole/4, "an in-place state update priced as a copy of the state")
			priced, whole = price(false)
			require.InDelta(t, whole, priced, whole*1e-9)
		})
	}
}
