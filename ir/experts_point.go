package ir

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Point evaluation of route and experts: both compute whole rows, so the
// elements asked for are grouped by row.

// demandRows adds, for each distinct row of a result whose rows hold L
// elements among idx, that row of input v (rows along its first axis).
func (pe *pointEval) demandRows(v Value, idx []int64, L int64) {
	s := pe.g.Nodes[v].Shape
	width := s.NumElements() / int64(s[0])
	for _, r := range distinctDiv(idx, L) {
		for j := range width {
			pe.add1(v, r*width+j)
		}
	}
}

// demandWhole adds every element of v: a read in place costs nothing, and
// a computed operand is needed whole by any row.
func (pe *pointEval) demandWhole(v Value) {
	if pe.inPlace[v] {
		pe.used[v] = true
		return
	}
	n := pe.g.Nodes[v].Shape.NumElements()
	js := make([]int64, n)
	for j := range js {
		js[j] = int64(j)
	}
	pe.add(v, js)
}

func (pe *pointEval) demandMoE(n *Node, idx []int64) error {
	L := n.Shape.NumElements() / int64(n.Shape[0])
	if n.Op == OpRoute {
		pe.demandRows(n.Inputs[0], idx, L)
		return pe.tick(int64(len(idx)))
	}
	pe.demandRows(n.Inputs[0], idx, L)
	pe.demandRows(n.Inputs[1], idx, L)
	for _, v := range n.Inputs[2:] {
		pe.demandWhole(v)
	}
	return pe.tick(int64(len(idx)))
}

func (pe *pointEval) computeMoE(n *Node, idx []int64, out *pointStore) error {
	L := n.Shape.NumElements() / int64(n.Shape[0])
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / L })
	if n.Op == OpRoute {
		rb := newRowBuffers(int(L), pe.magnitude)
		for g, r := range rows {
			gatherRow(pe.store[n.Inputs[0]], r*L, 1, rb)
			RouteRow(n.Gating, rb.x, rb.xm, TopK(rb.x, int(n.TopK)), rb.y, rb.ym)
			for _, p := range groups[g] {
				out.put(p, rb.y[idx[p]%L], orZero(rb.ym, idx[p]%L))
			}
		}
		return pe.tick(int64(len(rows)) * L)
	}
	o := operandsOf(n, func(k int) Shape { return pe.g.Nodes[n.Inputs[k]].Shape }, func(k int) ([]float64, []float64) {
		return pe.rowsOf(n.Inputs[k], rows)
	}, func(k int) floats { return floats{s: pe.store[n.Inputs[k]]} })
	y := make([]float64, L)
	var ym []float64
	if pe.magnitude {
		ym = make([]float64, L)
	}
	for g, r := range rows {
		if err := o.compute(n.Op, int(n.TopK), int(r), y, ym); err != nil {
			return err
		}
		for _, p := range groups[g] {
			out.put(p, y[idx[p]%L], orZero(ym, idx[p]%L))
		}
		if err := pe.tick(int64(n.TopK) * int64(o.H) * int64(o.I)); err != nil {
			return err
		}
	}
	return nil
}

// routeFeeds replaces, for every experts (or experts_up, experts_down) node whose weights operand is a
// leaf drawn here (and not one with a range a caller stated), its
// independent draw in out with weights a route could have made: each row
// chooses between 1 and TopK distinct experts, at random, with positive
// weights summing to at most 1, and now and then (one row in eight) none.
// Independent draws would choose every expert, which the op refuses.
func routeFeeds(g *Graph, seed uint64, out map[string]*Tensor, stated map[string]Range) error {
	done := map[string]bool{}
	for i, n := range g.Nodes {
		if n.Op != OpExperts && n.Op != OpExpertsUp && n.Op != OpExpertsDown {
			continue
		}
		// The weights operand, or the leaf under its reshapes (a kernel
		// body reads them so), drawn as the operand's [rows, experts].
		wv := n.Inputs[1]
		for g.Nodes[wv].Op == OpReshape {
			wv = g.Nodes[wv].Inputs[0]
		}
		w, ws := g.Nodes[wv], g.Nodes[n.Inputs[1]].Shape
		_, drawn := out[w.Name]
		_, fixed := stated[w.Name]
		if !drawn || fixed || done[w.Name] || !slices.Contains([]Op{OpInput, OpWeight, OpState}, w.Op) {
			continue
		}
		rng := rand.New(rand.NewPCG(seed, 0x7e0e^uint64(i)))
		R, E := int(ws[0]), int(ws[1])
		vals := make([]float64, R*E)
		for r := range R {
			if R > 1 && rng.IntN(8) == 0 {
				continue
			}
			k := 1 + rng.IntN(int(n.TopK))
			chosen := rng.Perm(E)[:k]
			p := make([]float64, k)
			sum := 0.0
			for j := range p {
				p[j] = 0.05 + rng.Float64()
				sum += p[j]
			}
			scale := 1 / sum
			if rng.IntN(2) == 0 {
				scale *= 0.5 + 0.5*rng.Float64() // softmax_all: the chosen share less than 1
			}
			for j, ex := range chosen {
				vals[r*E+ex] = float64(float32(p[j] * scale))
			}
		}
		t, err := TensorOf(w.DType, w.Shape, vals...)
		if err != nil {
			return fmt.Errorf("experts' weights %q: %w", w.Name, err)
		}
		out[w.Name] = t
		done[w.Name] = true
	}
	return nil
}

// rowsOf reads input v of n at the given rows only (rows along its first
// axis), 0 elsewhere, with magnitudes when asked.
func (pe *pointEval) rowsOf(v Value, rows []int64) (vals, mags []float64) {
	s := pe.g.Nodes[v].Shape
	width := s.NumElements() / int64(s[0])
	vals = make([]float64, s.NumElements())
	if pe.magnitude {
		mags = make([]float64, len(vals))
	}
	for _, r := range rows {
		for j := range width {
			at := r*width + j
			x, m := pe.store[v].at(at)
			vals[at] = x
			if mags != nil {
				mags[at] = m
			}
		}
	}
	return vals, mags
}
