package search

import (
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// CheckQuantizedExperts refuses a model whose experts' weights are in a
// format no experts kernel decodes (awq and gptq: the experts kernels
// stream mxfp4 and fp8 codes along each column's reduction), naming the
// weight, before a search that could find no program for it. The graph
// itself is sound: the reference evaluates it (corpus eval).
func CheckQuantizedExperts(m *Model) error {
	if m == nil || m.Graph == nil {
		return nil
	}
	g := m.Graph
	for _, n := range g.Nodes {
		if n.Op != ir.OpExperts && n.Op != ir.OpExpertsUp && n.Op != ir.OpExpertsDown {
			continue
		}
		for _, w := range n.Inputs[2:] {
			dv, ok := ir.DequantUnder(g, w)
			d := g.Node(dv)
			if !ok || d.Format == quant.MXFP4 || d.Format == quant.FP8 {
				continue
			}
			name := "an experts weight"
			if leaf, ok := ir.DequantOperand(g, d.Inputs[0]); ok {
				name = g.Node(leaf).Name
			}
			return optionErrorf("%s: %s: %s experts are not implemented (the experts kernels decode mxfp4 and fp8 weights): give --weights mxfp4, fp8 or none", m.Name, name, d.Format)
		}
	}
	return nil
}
