package rules

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quantizedQKV saturates the query, key and value projections of one
// normalized decode row, their weights quantized in format f, with the
// merge-matmuls rule, the lower rules and region fusion, and returns the
// e-graph.
func quantizedQKV(t *testing.T, f quant.Format) *egraph.EGraph[Data] {
	b := ir.NewBuilder("qkv")
	x := b.RMSNorm(b.Input("x", ir.F32, 1, 256), b.Weight("norm", ir.F32, 256), 1e-5)
	w := func(name string, N ir.Dim) ir.Value {
		if f == quant.AWQ {
			return b.Dequant(f, ir.F32, 64, 0, b.Weight(name+".qweight", ir.I32, 256, N/8), b.Weight(name+".scales", ir.F16, 4, N), b.Weight(name+".qzeros", ir.I32, 4, N/8))
		}
		return mxfp4Weight(b, name, N, 256)
	}
	b.Output("q", b.MatMul(x, w("wq", 128)))
	b.Output("k", b.MatMul(x, w("wk", 64)))
	b.Output("v", b.MatMul(x, w("wv", 64)))
	g, err := b.Build()
	require.NoError(t, err)
	eg, _ := NewEGraph(true)
	_, err = AddGraph(eg, g)
	require.NoError(t, err)
	eg.Rebuild()
	rws := append(algebraRule(t, "merge-matmuls"), LowerRewrites()...)
	runner := egraph.Runner[Data]{IterLimit: 6, NodeLimit: 20_000}
	_, err = runner.Run(context.Background(), eg, append(rws, RegionRewrites()...))
	require.NoError(t, err)
	return eg
}

// TestMergedQuantizedProjectionKernels: the merged matmul of quantized
// weights gets kernels that read each weight's packed operands in place
// (the concat of dequants inlined: OneOpKernel), with the norm before it
// fused in (region fusion inlines the dequants rather than taking a
// dequantized copy for an argument): for mxfp4 one over all three
// weights (six packed operands, eight arguments with x and the norm's
// weight); for awq, whose three weights are nine operands, none over
// three, and the pairs. No kernel writes a dequantized copy or a concat
// of them, and one that did would cost +Inf (writesDequantized).
func TestMergedQuantizedProjectionKernels(t *testing.T) {
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	for _, c := range []struct {
		f       quant.Format
		widest  int // the most weights one kernel reads
		withArg int // its arguments with the norm fused in
	}{{quant.MXFP4, 3, 8}, {quant.AWQ, 2, 8}} {
		t.Run(c.f.String(), func(t *testing.T) {
			eg := quantizedQKV(t, c.f)
			widest, fused := 0, false
			for _, cl := range eg.Classes() {
				for _, id := range eg.ClassNodes(cl) {
					n := eg.Node(id)
					if n.Op != KernelSymbol {
						continue
					}
					body, ok := Spec(n.Payload)
					require.True(t, ok)
					assert.False(t, writesDequantized(eg, n), "a kernel writes a dequantized copy:\n%s", body)
					assert.LessOrEqual(t, len(n.Children), maxKernelArgs)
					weights := strings.Count(body.String(), "= dequant ")
					if weights < 2 {
						continue
					}
					require.Contains(t, body.String(), "= concat ", "%s", body)
					widest = max(widest, weights)
					if weights == c.widest && len(n.Children) == c.withArg && (strings.Contains(body.String(), "rms_norm") || strings.Contains(body.String(), "rsqrt")) {
						fused = true
						e, err := model.Kernel(body)
						require.NoError(t, err)
						assert.True(t, e.Schedule.GEMV, "the merged projection streams its packed weights: %s", e.Schedule)
					}
				}
			}
			assert.Equal(t, c.widest, widest, "the most weights one kernel reads")
			assert.True(t, fused, "a kernel of the %d-weight projection with the norm fused in", c.widest)
		})
	}
	// A kernel that computed the three mxfp4 weights side by side from
	// the weights alone would be a dequantized copy: never extracted.
	eg := quantizedQKV(t, quant.MXFP4)
	for _, cl := range eg.Classes() {
		for _, id := range eg.ClassNodes(cl) {
			n := eg.Node(id)
			if op, ok := OpOf(n.Op); !ok || op != ir.OpConcat || !dequantParts(eg, n.Children) {
				continue
			}
			b := ir.NewBuilder("kernel")
			var leaves []egraph.ClassID
			parts := make([]ir.Value, len(n.Children))
			for i, k := range n.Children {
				var ok bool
				parts[i], ok = inlineDequant(eg, b, k, &leaves)
				require.True(t, ok)
			}
			attrs, _ := Attrs(n.Payload)
			b.Output("out", b.Apply(ir.OpConcat, attrs, parts...))
			body, err := b.Build()
			require.NoError(t, err)
			copy := egraph.Node{Op: KernelSymbol, Payload: SpecPayload(body), Children: leaves}
			k, err := eg.Add(copy)
			require.NoError(t, err)
			eg.Rebuild()
			require.True(t, writesDequantized(eg, copy))
			for _, id := range eg.ClassNodes(k) {
				if m := eg.Node(id); m.Op == KernelSymbol && m.Payload == copy.Payload {
					assert.True(t, math.IsInf(ModelCost(eg, model)(&eg.Graph, id), 1))
					assert.True(t, math.IsInf(SimpleCost(eg)(&eg.Graph, id), 1))
				}
			}
			return
		}
	}
	t.Fatal("no concat of the quantized weights in the e-graph")
}
