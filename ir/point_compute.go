package ir

import (
	"fmt"
	"math"
	"slices"
)

// compute evaluates elements idx of n from its inputs' stores.
func (pe *pointEval) compute(n *Node, idx []int64) (*pointStore, error) {
	out := pe.newStore(n, idx)
	in := func(k int) *pointStore { return pe.store[n.Inputs[k]] }
	switch n.Op.Class() {
	case ClassUnary:
		f := unaryFn(n.Op)
		x := in(0)
		for p, j := range idx {
			xv, xm := x.at(j)
			y := n.DType.roundInt(f(xv))
			if n.DType.IsInt() {
				out.put(p, y, math.Abs(y)) // exact, as Eval's
				continue
			}
			out.put(p, y, unaryMagnitude(n.Op, xv, y, xm))
		}
		return out, pe.tick(int64(len(idx)))
	case ClassBinary, ClassCompare:
		dt := pe.g.Nodes[n.Inputs[0]].DType
		f := binaryFn(n.Op, dt)
		a, b := in(0), in(1)
		for p, j := range idx {
			av, am := a.at(j)
			bv, bm := b.at(j)
			if divisionByZero(n.Op, dt, bv) {
				return nil, fmt.Errorf("integer division by zero at element %d", j)
			}
			y := n.DType.roundInt(f(av, bv))
			if dt.IsInt() {
				// Integer results are exact, as Eval's (intElementwise).
				out.put(p, y, math.Abs(y))
				continue
			}
			out.put(p, y, binaryMagnitude(n.Op, av, bv, am, bm, y))
		}
		return out, pe.tick(int64(len(idx)))
	case ClassSelect:
		c := in(0)
		for p, j := range idx {
			cv, _ := c.at(j)
			y, m := in(selectBranch(cv)).at(j)
			out.put(p, y, m)
		}
		return out, pe.tick(int64(len(idx)))
	case ClassReduce:
		x := in(0)
		_, length, stride, first := rowsAlong(pe.g.Nodes[n.Inputs[0]].Shape, n.Axis)
		for p, r := range idx {
			base := first(int(r))
			red := newReducer(n.Op)
			for j := range int64(length) {
				xv, xm := x.at(base + j*stride)
				red.add(j, xv, xm)
			}
			y := n.DType.roundInt(red.v)
			if length == 0 && n.Op == OpMaxReduce && n.DType.IsInt() {
				y = float64(n.DType.MinInt()) // the empty max, as Eval's
			}
			out.put(p, y, red.magnitude())
			if err := pe.tick(int64(length)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case ClassView, ClassMove:
		return out, pe.computeMove(n, idx, out)
	}
	switch n.Op {
	case OpMatMul:
		return out, pe.computeMatMul(n, idx, out)
	case OpSoftmax:
		return out, pe.computeSoftmax(n, idx, out)
	case OpLayerNorm, OpRMSNorm:
		return out, pe.computeNorm(n, idx, out)
	case OpAttention:
		return out, pe.computeAttention(n, idx, out)
	case OpPagedAttention:
		return out, pe.computePaged(n, idx, out)
	case OpRoute, OpExperts, OpExpertsUp, OpExpertsDown:
		return out, pe.computeMoE(n, idx, out)
	case OpDequant:
		return out, pe.computeDequant(n, idx, out)
	}
	return nil, fmt.Errorf("no evaluation rule")
}

func (pe *pointEval) computeMove(n *Node, idx []int64, out *pointStore) error {
	if n.Op == OpCast {
		x := pe.store[n.Inputs[0]]
		for p, j := range idx {
			xv, xm := x.at(j)
			y := n.DType.Round(xv)
			out.put(p, y, castMagnitude(n.DType, y, xm))
		}
		return pe.tick(int64(len(idx)))
	}
	mp := newMover(n, pe.inputTypes(n))
	get := func(k int, j int64) int64 {
		v, _ := pe.store[n.Inputs[k]].at(j)
		return I64.IntOf(v)
	}
	buf := make([]int64, len(n.Shape))
	for p, j := range idx {
		unflattenInto(j, n.Shape, buf)
		k, src, err := mp.source(buf, get)
		if err != nil {
			return err
		}
		if k < 0 {
			out.put(p, n.Value, math.Abs(n.Value))
			continue
		}
		v, m := pe.store[n.Inputs[k]].at(src)
		out.put(p, v, m)
	}
	return pe.tick(int64(len(idx)))
}

// computeMatMul gathers the distinct rows of A and columns of B that the
// needed elements read into contiguous buffers (as much memory as those
// inputs' needed elements), then takes one dot product per element, in
// parallel when there are many.
func (pe *pointEval) computeMatMul(n *Node, idx []int64, out *pointStore) error {
	mg := newMatmulGeometry(pe, n)
	rows, cols := matmulRowsCols(mg, idx)
	K := int(mg.K)
	gather := func(s *pointStore, lines []int64, at func(line, k int64) int64) (vals, mags []float64) {
		vals = make([]float64, len(lines)*K)
		if pe.magnitude {
			mags = make([]float64, len(lines)*K)
		}
		for l, line := range lines {
			for k := range K {
				v, m := s.at(at(line, int64(k)))
				vals[l*K+k] = v
				if mags != nil {
					mags[l*K+k] = m
				}
			}
		}
		return vals, mags
	}
	av, am := gather(pe.store[n.Inputs[0]], rows, mg.aAt)
	bv, bm := gather(pe.store[n.Inputs[1]], cols, mg.bAt)
	if err := pe.tick(int64(len(rows)+len(cols)) * mg.K); err != nil {
		return err
	}
	one := func(p int) {
		row, col := mg.split(idx[p])
		r, _ := slices.BinarySearch(rows, row)
		c, _ := slices.BinarySearch(cols, col)
		a, b := av[r*K:(r+1)*K], bv[c*K:(c+1)*K]
		m := 0.0
		if am != nil {
			m = matmulMagnitude(a, am[r*K:(r+1)*K], b, bm[c*K:(c+1)*K])
		}
		out.put(p, dot(a, b), m)
	}
	pe.stats.macs += int64(len(idx)) * mg.K
	return pe.parallel(len(idx), K, one)
}

// rowGroups splits positions of idx by the row key(idx[p]) they belong to,
// in order of first appearance.
func rowGroups(idx []int64, key func(int64) int64) (keys []int64, groups [][]int) {
	at := map[int64]int{}
	for p, j := range idx {
		k := key(j)
		g, ok := at[k]
		if !ok {
			g = len(keys)
			at[k] = g
			keys = append(keys, k)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], p)
	}
	return keys, groups
}

// gatherRow reads length elements of s from base at stride into rb's x
// and xm.
func gatherRow(s *pointStore, base, stride int64, rb rowBuffers) {
	for j := range rb.x {
		v, m := s.at(base + int64(j)*stride)
		rb.x[j] = v
		if rb.xm != nil {
			rb.xm[j] = m
		}
	}
}

func (pe *pointEval) computeSoftmax(n *Node, idx []int64, out *pointStore) error {
	_, length, stride, first := rowsAlong(n.Shape, n.Axis)
	rb := newRowBuffers(length, pe.magnitude)
	rows, groups := rowGroups(idx, func(j int64) int64 { return rowOf(j, length, stride) })
	for g, r := range rows {
		gatherRow(pe.store[n.Inputs[0]], first(int(r)), stride, rb)
		softmaxRow(rb.x, rb.xm, rb.y, rb.ym)
		for _, p := range groups[g] {
			j := idx[p] / stride % int64(length)
			out.put(p, rb.y[j], orZero(rb.ym, j))
		}
		if err := pe.tick(int64(length)); err != nil {
			return err
		}
	}
	return nil
}

// orZero is s[j], or 0 when s is nil (no magnitudes).
func orZero(s []float64, j int64) float64 {
	if s == nil {
		return 0
	}
	return s[j]
}

func (pe *pointEval) computeNorm(n *Node, idx []int64, out *pointStore) error {
	L := int64(n.Shape[len(n.Shape)-1])
	rb := newRowBuffers(int(L), pe.magnitude)
	// The scale and bias, whole.
	params := make([]rowBuffers, len(n.Inputs))
	for k := 1; k < len(n.Inputs); k++ {
		params[k] = newRowBuffers(int(L), pe.magnitude)
		gatherRow(pe.store[n.Inputs[k]], 0, 1, params[k])
	}
	var b, bm []float64
	if n.Op == OpLayerNorm {
		b, bm = params[2].x, params[2].xm
	}
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / L })
	for g, r := range rows {
		gatherRow(pe.store[n.Inputs[0]], r*L, 1, rb)
		normRow(n.Op, n.Eps, rb.x, rb.xm, params[1].x, params[1].xm, b, bm, rb.y, rb.ym)
		for _, p := range groups[g] {
			j := idx[p] % L
			out.put(p, rb.y[j], orZero(rb.ym, j))
		}
		if err := pe.tick(L); err != nil {
			return err
		}
	}
	return nil
}

// computeAttention works query row by query row: the row's attention
// weights from its query and the keys it sees, then, for each needed
// element of the row, the weighted sum of one column of the values.
func (pe *pointEval) computeAttention(n *Node, idx []int64, out *pointStore) error {
	ag, err := newAttentionGeometry(pe, n, func(v Value) (int64, error) {
		at, _ := pe.store[v].at(0)
		return I64.IntOf(at), nil
	})
	if err != nil {
		return err
	}
	D := int(ag.D)
	qs, ks, vs := pe.store[n.Inputs[0]], pe.store[n.Inputs[1]], pe.store[n.Inputs[2]]
	q := newRowBuffers(D, pe.magnitude)
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / ag.D })
	for g, r := range rows {
		kv, limit := ag.query(n, r)
		gatherRow(qs, r*ag.D, 1, q)
		k := newRowBuffers(int(limit)*D, pe.magnitude)
		gatherRow(ks, kv*ag.T*ag.D, 1, k)
		p := make([]float64, limit)
		var pm []float64
		if pe.magnitude {
			pm = make([]float64, limit)
		}
		avg := attentionProbs(q.x, q.xm, k.x, k.xm, n.Scale, p, pm)
		col := newRowBuffers(int(limit), pe.magnitude)
		for _, pos := range groups[g] {
			d := idx[pos] % ag.D
			gatherRow(vs, kv*ag.T*ag.D+d, ag.D, col)
			v, m := attentionOut(p, pm, avg, col.x, col.xm)
			out.put(pos, v, m)
		}
		work := limit*ag.D + int64(len(groups[g]))*limit
		pe.stats.macs += work
		if err := pe.tick(work); err != nil {
			return err
		}
	}
	return nil
}
