package ir

import (
	"fmt"
	"math"
)

// EvalElements computes only the requested elements of value v (each index
// a multi-index into v's shape), reading leaves from feeds and computing
// only the input elements those need, recursively. Later phases check
// sampled blocks of huge kernels this way, and a kernel body (a small graph
// over numbered inputs) is evaluated by the same path. It agrees with Eval
// element for element.
func EvalElements(g *Graph, feeds map[string]*Tensor, v Value, indices [][]int64) ([]float64, error) {
	if v < 0 || int(v) >= len(g.Nodes) {
		return nil, fmt.Errorf("eval elements of %s: no value %%%d", g.Name, v)
	}
	ee := &elemEval{g: g, feeds: feeds, memo: map[elemKey]float64{}}
	shape := g.Nodes[v].Shape
	st := shape.Strides()
	out := make([]float64, len(indices))
	for i, idx := range indices {
		if len(idx) != len(shape) {
			return nil, fmt.Errorf("eval elements of %s: index %v for shape %v", g.Name, idx, shape)
		}
		for d, x := range idx {
			if x < 0 || x >= int64(shape[d]) {
				return nil, fmt.Errorf("eval elements of %s: index %v outside shape %v", g.Name, idx, shape)
			}
		}
		out[i] = ee.at(v, flatIndex(idx, st))
		if ee.err != nil {
			return nil, fmt.Errorf("eval elements of %s: %w", g.Name, ee.err)
		}
	}
	return out, nil
}

type elemKey struct {
	v    Value
	flat int64
}

type elemEval struct {
	g     *Graph
	feeds map[string]*Tensor
	memo  map[elemKey]float64
	err   error
}

func (ee *elemEval) fail(v Value, err error) float64 {
	if ee.err == nil {
		ee.err = fmt.Errorf("node %%%d (%s): %w", v, ee.g.Nodes[v].Op, err)
	}
	return math.NaN()
}

func (ee *elemEval) at(v Value, flat int64) float64 {
	if ee.err != nil {
		return math.NaN()
	}
	key := elemKey{v, flat}
	if x, ok := ee.memo[key]; ok {
		return x
	}
	x := ee.compute(v, flat)
	ee.memo[key] = x
	return x
}

func unflatten(flat int64, shape Shape) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = flat % int64(shape[d])
			flat /= int64(shape[d])
		}
	}
	return idx
}

func (ee *elemEval) compute(v Value, flat int64) float64 {
	n := ee.g.Nodes[v]
	in := func(k int, j int64) float64 { return ee.at(n.Inputs[k], j) }
	switch n.Op.Class() {
	case ClassLeaf:
		switch n.Op {
		case OpConst:
			if len(n.Data) == 1 {
				return n.Data[0]
			}
			return n.Data[flat]
		case OpIota:
			ax, _ := normAxis(n.Axis, len(n.Shape))
			return n.DType.Round(float64(unflatten(flat, n.Shape)[ax]))
		}
		t, ok := ee.feeds[n.Name]
		if !ok {
			return ee.fail(v, fmt.Errorf("no %s named %q was fed", n.Op, n.Name))
		}
		if err := t.check(n.DType, n.Shape); err != nil {
			return ee.fail(v, err)
		}
		return t.At(flat)
	case ClassUnary:
		return n.DType.roundInt(unaryFn(n.Op)(in(0, flat)))
	case ClassBinary, ClassCompare:
		dt := ee.g.Nodes[n.Inputs[0]].DType
		a, b := in(0, flat), in(1, flat)
		if dt.IsInt() && b == 0 && (n.Op == OpDiv || n.Op == OpMod) {
			return ee.fail(v, fmt.Errorf("integer division by zero"))
		}
		return n.DType.roundInt(binaryFn(n.Op, dt)(a, b))
	case ClassSelect:
		if in(0, flat) != 0 {
			return in(1, flat)
		}
		return in(2, flat)
	case ClassReduce:
		xs := ee.g.Nodes[n.Inputs[0]].Shape
		ax, _ := normAxis(n.Axis, len(xs))
		idx := unflatten(flat, n.Shape)
		st := xs.Strides()
		base := flatIndex(idx, st)
		acc := 0.0
		if n.Op == OpMaxReduce {
			acc = math.Inf(-1)
		}
		for j := range int64(xs[ax]) {
			x := in(0, base+j*st[ax])
			if n.Op == OpSum {
				acc += x
			} else if x > acc || x != x {
				if acc == acc {
					acc = x
				}
			}
		}
		return n.DType.roundInt(acc)
	case ClassView, ClassMove:
		if n.Op == OpCast {
			return n.DType.Round(in(0, flat))
		}
		ins := make([]ValueType, len(n.Inputs))
		for k, x := range n.Inputs {
			ins[k] = ValueType{ee.g.Nodes[x].Shape, ee.g.Nodes[x].DType}
		}
		k, j, err := newMover(n, ins).source(unflatten(flat, n.Shape), in)
		if err != nil {
			return ee.fail(v, err)
		}
		if k < 0 {
			return n.Value
		}
		return in(k, j)
	}
	idx := unflatten(flat, n.Shape)
	switch n.Op {
	case OpMatMul:
		r := len(n.Shape)
		as := ee.g.Nodes[n.Inputs[0]].Shape
		bs := ee.g.Nodes[n.Inputs[1]].Shape
		K := int64(as[r-1])
		ai := append(append([]int64(nil), idx[:r-1]...), 0)
		bi := append(append([]int64(nil), idx[:r-2]...), 0, idx[r-1])
		ast, bst := as.Strides(), bs.Strides()
		acc := 0.0
		for k := range K {
			ai[r-1], bi[r-2] = k, k
			acc += in(0, flatIndex(ai, ast)) * in(1, flatIndex(bi, bst))
		}
		return acc
	case OpSoftmax:
		ax, _ := normAxis(n.Axis, len(n.Shape))
		st := n.Shape.Strides()
		base := flat - idx[ax]*st[ax]
		mx := math.Inf(-1)
		for j := range int64(n.Shape[ax]) {
			mx = math.Max(mx, in(0, base+j*st[ax]))
		}
		sum := 0.0
		for j := range int64(n.Shape[ax]) {
			sum += math.Exp(in(0, base+j*st[ax]) - mx)
		}
		return math.Exp(in(0, flat)-mx) / sum
	case OpLayerNorm, OpRMSNorm:
		L := int64(n.Shape[len(n.Shape)-1])
		j := flat % L
		base := flat - j
		mean := 0.0
		if n.Op == OpLayerNorm {
			for c := range L {
				mean += in(0, base+c)
			}
			mean /= float64(L)
		}
		ss := 0.0
		for c := range L {
			d := in(0, base+c) - mean
			ss += d * d
		}
		y := (in(0, flat) - mean) / math.Sqrt(ss/float64(L)+n.Eps) * in(1, j)
		if n.Op == OpLayerNorm {
			y += in(2, j)
		}
		return y
	case OpAttention:
		qs, ks := ee.g.Nodes[n.Inputs[0]].Shape, ee.g.Nodes[n.Inputs[1]].Shape
		Hq, S, D := qs[1], qs[2], int64(qs[3])
		Hkv, T := ks[1], int64(ks[2])
		b, h, i, d := idx[0], idx[1], idx[2], idx[3]
		kh := h / int64(Hq/Hkv)
		limit := T
		if n.Causal {
			limit = n.Offset + i + 1
		}
		qo := ((b*int64(Hq)+h)*int64(S) + i) * D
		scores := make([]float64, limit)
		mx := math.Inf(-1)
		for j := range limit {
			ko := ((b*int64(Hkv)+kh)*T + j) * D
			s := 0.0
			for c := range D {
				s += in(0, qo+c) * in(1, ko+c)
			}
			scores[j] = s * n.Scale
			mx = math.Max(mx, scores[j])
		}
		sum, acc := 0.0, 0.0
		for j := range limit {
			p := math.Exp(scores[j] - mx)
			sum += p
			acc += p * in(2, ((b*int64(Hkv)+kh)*T+j)*D+d)
		}
		return acc / sum
	}
	return ee.fail(v, fmt.Errorf("no evaluation rule"))
}
