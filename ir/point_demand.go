package ir

import (
	"fmt"
	"math"
	"slices"
)

// demand adds to v's inputs the elements that v's needed elements read.
func (pe *pointEval) demand(v Value) error {
	n := pe.g.Nodes[v]
	idx := pe.need[v]
	in := func(k int) Value { return n.Inputs[k] }
	switch n.Op.Class() {
	case ClassUnary, ClassBinary, ClassCompare, ClassSelect:
		for k := range n.Inputs {
			pe.add(in(k), idx)
		}
		return nil
	case ClassReduce:
		_, length, stride, first := rowsAlong(pe.g.Nodes[in(0)].Shape, n.Axis)
		for _, r := range idx { // element r of the result reduces row r of the input
			base := first(int(r))
			for j := range int64(length) {
				pe.add1(in(0), base+j*stride)
			}
			if err := pe.tick(int64(length)); err != nil {
				return err
			}
		}
		return nil
	case ClassView, ClassMove:
		if n.Op == OpCast {
			pe.add(in(0), idx)
			return nil
		}
		return pe.demandMove(n, idx)
	}
	switch n.Op {
	case OpMatMul:
		return pe.demandMatMul(n, idx)
	case OpSoftmax:
		_, length, stride, first := rowsAlong(n.Shape, n.Axis)
		for _, r := range softmaxRows(idx, length, stride) {
			base := first(int(r))
			for j := range int64(length) {
				pe.add1(in(0), base+j*stride)
			}
		}
		return nil
	case OpLayerNorm, OpRMSNorm:
		L := int64(n.Shape[len(n.Shape)-1])
		for _, r := range distinctDiv(idx, L) {
			for j := range L {
				pe.add1(in(0), r*L+j)
			}
		}
		// The row rule reads the whole scale and bias; they are as long as
		// one row of x, which is needed anyway.
		for k := 1; k < len(n.Inputs); k++ {
			for j := range L {
				pe.add1(in(k), j)
			}
		}
		return nil
	case OpAttention:
		return pe.demandAttention(n, idx)
	case OpPagedAttention:
		return pe.demandPaged(n, idx)
	case OpRoute, OpExperts, OpExpertsUp, OpExpertsDown:
		return pe.demandMoE(n, idx)
	case OpDequant:
		return pe.demandDequant(n, idx)
	}
	return fmt.Errorf("no evaluation rule")
}

// distinctDiv is the distinct values of j / d over sorted js, in order.
func distinctDiv(js []int64, d int64) []int64 {
	var out []int64
	for _, j := range js {
		if r := j / d; len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return out
}

// rowOf is the row, as rowsAlong numbers them, that element j of a tensor
// split into rows of length elements at stride belongs to.
func rowOf(j int64, length int, stride int64) int64 {
	return j/(int64(length)*stride)*stride + j%stride
}

// softmaxRows is the distinct rows that elements js belong to, sorted.
func softmaxRows(js []int64, length int, stride int64) []int64 {
	rows := make([]int64, len(js))
	for p, j := range js {
		rows[p] = rowOf(j, length, stride)
	}
	return sortUnique(rows)
}

func (pe *pointEval) demandMove(n *Node, idx []int64) error {
	ins := pe.inputTypes(n)
	mp := newMover(n, ins)
	get := func(int, int64) int64 { return 0 }
	if p, ok := n.DynamicOffset(); ok {
		at, err := pe.demandPosition(p)
		if err != nil {
			return err
		}
		get = func(int, int64) int64 { return at }
	}
	if n.Op == OpGather {
		// Which data elements a gather reads depends on its indices'
		// values: compute the indices it reads first, by a nested
		// evaluation of just those (usually a leaf, read in place).
		ir := len(ins[1].Shape)
		pos := make([]int64, len(idx))
		buf := make([]int64, len(n.Shape))
		for p, j := range idx {
			unflattenInto(j, n.Shape, buf)
			pos[p] = flatIndex(buf[mp.ax:mp.ax+ir], mp.strides[1])
		}
		pos = sortUnique(pos)
		vals, err := pe.valuesAt(n.Inputs[1], pos)
		if err != nil {
			return err
		}
		pe.add(n.Inputs[1], pos)
		get = func(_ int, j int64) int64 {
			if p, ok := slices.BinarySearch(pos, j); ok {
				return I64.IntOf(vals[p])
			}
			return math.MinInt64 // cannot happen: pos holds every index read; out of range if it does
		}
	}
	if n.Op == OpScatter {
		// Which update slice an element comes from depends on every
		// index: compute the whole index vector first.
		rows := int64(ins[2].Shape[0])
		all := make([]int64, rows)
		for i := range all {
			all[i] = int64(i)
		}
		vals, err := pe.valuesAt(n.Inputs[2], all)
		if err != nil {
			return err
		}
		pe.add(n.Inputs[2], all)
		get = func(_ int, j int64) int64 { return I64.IntOf(vals[j]) }
	}
	buf := make([]int64, len(n.Shape))
	for _, j := range idx {
		unflattenInto(j, n.Shape, buf)
		k, src, err := mp.source(buf, get)
		if err != nil {
			return err
		}
		if k >= 0 {
			pe.add1(n.Inputs[k], src)
		}
	}
	return pe.tick(int64(len(idx)))
}

// valuesAt evaluates elements js (sorted) of v on their own, without
// magnitudes: the indices a gather reads, needed before the backward pass
// can go on.
func (pe *pointEval) valuesAt(v Value, js []int64) ([]float64, error) {
	if pe.inPlace[v] { // a leaf, or a view of one: read it where it is
		s, err := pe.inPlaceStore(v)
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(js))
		for p, j := range js {
			out[p], _ = s.at(j)
		}
		return out, nil
	}
	sub := newPointEval(pe.ctx, pe.g, pe.feeds, false, pe.stats)
	sub.add(v, js)
	keep := make([]bool, len(pe.g.Nodes))
	keep[v] = true
	if err := sub.run(keep); err != nil {
		return nil, err
	}
	out := make([]float64, len(js))
	for p, j := range js {
		out[p], _ = sub.store[v].at(j)
	}
	return out, nil
}

// matmulGeometry names the parts of a matmul's element: batch s, row i,
// column j of [batch, M, N], with inner extent K.
type matmulGeometry struct{ M, N, K int64 }

func newMatmulGeometry(pe *pointEval, n *Node) matmulGeometry {
	r := len(n.Shape)
	return matmulGeometry{M: int64(n.Shape[r-2]), N: int64(n.Shape[r-1]), K: int64(pe.g.Nodes[n.Inputs[0]].Shape[r-1])}
}

// split returns the row of A (s*M+i) and the column of B (s*N+j) that
// element f of the result combines.
func (mg matmulGeometry) split(f int64) (row, col int64) {
	s := f / (mg.M * mg.N)
	return f / mg.N, s*mg.N + f%mg.N
}

// aAt and bAt are the flat elements k of A's row and B's column.
func (mg matmulGeometry) aAt(row, k int64) int64 { return row*mg.K + k }
func (mg matmulGeometry) bAt(col, k int64) int64 {
	s, j := col/mg.N, col%mg.N
	return (s*mg.K+k)*mg.N + j
}

func (pe *pointEval) demandMatMul(n *Node, idx []int64) error {
	mg := newMatmulGeometry(pe, n)
	rows, cols := matmulRowsCols(mg, idx)
	for _, r := range rows {
		for k := range mg.K {
			pe.add1(n.Inputs[0], mg.aAt(r, k))
		}
	}
	for _, c := range cols {
		for k := range mg.K {
			pe.add1(n.Inputs[1], mg.bAt(c, k))
		}
	}
	return pe.tick(int64(len(rows)+len(cols)) * mg.K)
}

// matmulRowsCols is the distinct rows of A and columns of B that elements
// idx of a matmul read, sorted.
func matmulRowsCols(mg matmulGeometry, idx []int64) (rows, cols []int64) {
	rows, cols = make([]int64, len(idx)), make([]int64, len(idx))
	for p, f := range idx {
		rows[p], cols[p] = mg.split(f)
	}
	return sortUnique(rows), sortUnique(cols)
}

// attentionGeometry names attention's extents.
type attentionGeometry struct {
	Hq, S, D, Hkv, T int64
	First            int64 // position of the first query, runtime part included
}

// newAttentionGeometry reads n's extents; position gives the value of its
// runtime position operand, if it has one.
func newAttentionGeometry(pe *pointEval, n *Node, position func(Value) (int64, error)) (attentionGeometry, error) {
	qs, ks := pe.g.Nodes[n.Inputs[0]].Shape, pe.g.Nodes[n.Inputs[1]].Shape
	ag := attentionGeometry{Hq: int64(qs[1]), S: int64(qs[2]), D: int64(qs[3]), Hkv: int64(ks[1]), T: int64(ks[2])}
	var bad error
	first, err := attentionFirst(n, int(ag.S), int(ag.T), func(v Value) int64 {
		at, err := position(v)
		bad = err
		return at
	})
	if bad != nil {
		return ag, bad
	}
	ag.First = first
	return ag, err
}

// demandPosition reads element 0 of a runtime position operand ahead of
// the backward pass, and records that it is read.
func (pe *pointEval) demandPosition(v Value) (int64, error) {
	vals, err := pe.valuesAt(v, []int64{0})
	if err != nil {
		return 0, err
	}
	pe.add(v, []int64{0})
	return I64.IntOf(vals[0]), nil
}

// query splits query row r (b*Hq*S + h*S + i) into the key-value head it
// reads (b*Hkv + kh) and the number of keys it attends to.
func (ag attentionGeometry) query(n *Node, r int64) (kvHead, limit int64) {
	i := r % ag.S
	h := r / ag.S % ag.Hq
	b := r / (ag.S * ag.Hq)
	kvHead = b*ag.Hkv + h/(ag.Hq/ag.Hkv)
	limit = ag.T
	if n.Causal {
		limit = ag.First + i + 1
	}
	return kvHead, limit
}

func (pe *pointEval) demandAttention(n *Node, idx []int64) error {
	ag, err := newAttentionGeometry(pe, n, pe.demandPosition)
	if err != nil {
		return err
	}
	keys := map[int64]int64{}   // key-value head: keys read
	values := map[int64]int64{} // key-value head * D + d: values read
	for _, r := range distinctDiv(idx, ag.D) {
		for c := range ag.D {
			pe.add1(n.Inputs[0], r*ag.D+c)
		}
		kv, limit := ag.query(n, r)
		keys[kv] = max(keys[kv], limit)
	}
	for _, f := range idx {
		kv, limit := ag.query(n, f/ag.D)
		c := kv*ag.D + f%ag.D
		values[c] = max(values[c], limit)
	}
	for _, kv := range sortedKeys(keys) {
		for j := range keys[kv] {
			for c := range ag.D {
				pe.add1(n.Inputs[1], (kv*ag.T+j)*ag.D+c)
			}
		}
	}
	for _, c := range sortedKeys(values) {
		kv, d := c/ag.D, c%ag.D
		for j := range values[c] {
			pe.add1(n.Inputs[2], (kv*ag.T+j)*ag.D+d)
		}
	}
	return nil
}

func sortedKeys(m map[int64]int64) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
