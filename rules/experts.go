package rules

import (
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The experts op has no kernel of its own: split_experts rewrites it into
// the ops that have one, experts_up (each row's chosen experts' gated
// activations, slot by slot) and experts_down (their down projections
// times their weights, f32), then a sum over the slots and a cast. The
// slots' outputs are partials of the row's sum and stay f32 until it.
func init() {
	RegisterApplier("split_experts", applySplitExperts)
	RegisterExamples("split_experts", splitExpertsExamples)
}

func applySplitExperts(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	a, ok := Attrs(m.GetPayload("?a"))
	if !ok {
		return 0, false
	}
	var classes []egraph.ClassID
	for _, name := range []string{"?x", "?w", "?gu", "?dn", "?gub", "?dnb"} {
		classes = append(classes, m.Get(name))
	}
	return splitExperts(g, a, classes)
}

// splitExperts adds experts (attributes a, operands the classes) as its
// split form and returns its class. It is also the lower set's rewrite of
// experts, which has no one-op kernel, so that the naive program and the
// first stage have one.
func splitExperts(g *egraph.EGraph[Data], a ir.Attrs, classes []egraph.ClassID) (egraph.ClassID, bool) {
	if len(classes) != 6 {
		return 0, false
	}
	t := newTileBody()
	var args [6]ir.Value
	for i, c := range classes {
		v, ok := t.arg(g, c)
		if !ok {
			return 0, false
		}
		args[i] = v
	}
	b := t.b
	x, w := args[0], args[1]
	xs := b.Shape(x)
	if len(xs) != 2 {
		return 0, false
	}
	k := int(a.TopK)
	h := b.ExpertsUp(x, w, args[2], args[4], k, a.Gating, a.Limit)
	y := b.ExpertsDown(h, w, args[3], args[5], k)
	out := b.Reshape(b.Sum(y, 1), xs[0], xs[1])
	if dt := b.DType(x); dt != ir.F32 {
		out = b.Cast(out, dt)
	}
	return t.add(g, out)
}

func splitExpertsExamples(dt ir.DType) ([]*ir.Graph, error) {
	var builds []func(b *ir.Builder)
	for _, c := range []struct {
		R, H, E, I, k int
		g             ir.Gating
		limit         float64
	}{
		{1, 8, 4, 4, 2, ir.GatingSwiGLU, 0},           // decode
		{5, 6, 8, 3, 2, ir.GatingClampedSwiGLU, 0.75}, // clamps met
		{3, 4, 3, 2, 3, ir.GatingSwiGLU, 0},           // every expert chosen
		{4, 8, 6, 5, 1, ir.GatingClampedSwiGLU, 7},
	} {
		builds = append(builds, func(b *ir.Builder) {
			x := b.Input("x", dt, ir.Dim(c.R), ir.Dim(c.H))
			logits := b.Input("logits", ir.F32, ir.Dim(c.R), ir.Dim(c.E))
			gu := b.Weight("gate_up", dt, ir.Dim(c.E), ir.Dim(c.H), ir.Dim(2*c.I))
			dn := b.Weight("down", dt, ir.Dim(c.E), ir.Dim(c.I), ir.Dim(c.H))
			gub := b.Weight("gate_up_bias", dt, ir.Dim(c.E), ir.Dim(2*c.I))
			dnb := b.Weight("down_bias", dt, ir.Dim(c.E), ir.Dim(c.H))
			w := b.Route(logits, c.k, ir.GatingChosen)
			b.Output("out", b.Experts(x, w, gu, dn, gub, dnb, c.k, c.g, c.limit))
		})
	}
	return examplesOfBuilds("split-experts", builds...)
}
