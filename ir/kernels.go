package ir

import (
	"fmt"
	"math"
)

// forEachIndex visits every multi-index of shape in row-major order with
// its flat index. The index slice is reused between calls.
func forEachIndex(shape Shape, f func(flat int64, idx []int64)) {
	n := shape.NumElements()
	if n == 0 {
		return
	}
	idx := make([]int64, len(shape))
	for flat := range n {
		f(flat, idx)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < int64(shape[d]) {
				break
			}
			idx[d] = 0
		}
	}
}

func flatIndex(idx []int64, strides []int64) int64 {
	var j int64
	for d, x := range idx {
		j += x * strides[d]
	}
	return j
}

// move computes the views and data-movement ops: each output element is
// copied from one input element (or is a pad value), so the magnitude
// moves the same way.
func (e *evaluator) move() (*Tensor, *Tensor, error) {
	n := e.n
	v, m := e.out()
	if n.Op == OpCast {
		x := e.in(0)
		for i := range v.Len() {
			castValue(v, i, x, i)
			if m != nil {
				m.F64[i] = castMagnitude(n.DType, v.At(i), e.mag(0).F64[i])
			}
		}
		return v, m, nil
	}
	ins := make([]ValueType, len(n.Inputs))
	for k := range ins {
		ins[k] = ValueType{e.in(k).Shape, e.in(k).DType}
	}
	mp := newMover(n, ins)
	var bad error
	forEachIndex(n.Shape, func(i int64, idx []int64) {
		if bad != nil {
			return
		}
		k, j, err := mp.source(idx, func(k int, j int64) int64 { return e.in(k).Int(j) })
		switch {
		case err != nil:
			bad = err
		case k < 0:
			if v.intStorage() {
				v.setInt(i, n.DType.IntOf(n.Value))
			} else {
				v.F64[i] = n.Value
			}
			if m != nil {
				m.F64[i] = math.Abs(n.Value)
			}
		default:
			copyElem(v, i, e.in(k), j)
			if m != nil {
				m.F64[i] = e.mag(k).F64[j]
			}
		}
	})
	if bad != nil {
		return nil, nil, bad
	}
	return v, m, nil
}

// mover maps an output index of a view or data-movement op to the input
// element it copies. It is the one statement of those ops' meaning, shared
// by whole-tensor evaluation and element evaluation.
type mover struct {
	n       *Node
	ins     []ValueType
	strides [][]int64
	ax      int
	starts  []int64 // concat: where each input begins along the axis
}

func newMover(n *Node, ins []ValueType) *mover {
	mp := &mover{n: n, ins: ins, strides: make([][]int64, len(ins))}
	for k, t := range ins {
		mp.strides[k] = t.Shape.Strides()
	}
	switch n.Op {
	case OpConcat, OpGather, OpSliceUpdate, OpScatter:
		mp.ax, _ = normAxis(n.Axis, len(ins[0].Shape))
	}
	if n.Op == OpConcat {
		mp.starts = make([]int64, len(ins)+1)
		for k, t := range ins {
			mp.starts[k+1] = mp.starts[k] + int64(t.Shape[mp.ax])
		}
	}
	return mp
}

// source returns which input (or -1 for the pad value) and which flat
// element output index idx copies. Gather reads its indices through get.
// idx is left as it was.
func (mp *mover) source(idx []int64, get func(k int, j int64) int64) (int, int64, error) {
	n := mp.n
	st := mp.strides[0]
	switch n.Op {
	case OpReshape:
		return 0, flatIndex(idx, n.Shape.Strides()), nil
	case OpPermute:
		var j int64
		for i, p := range n.Perm {
			j += idx[i] * st[p]
		}
		return 0, j, nil
	case OpExpand:
		var j int64
		for d, x := range idx {
			if mp.ins[0].Shape[d] != 1 {
				j += x * st[d]
			}
		}
		return 0, j, nil
	case OpSlice:
		var j int64
		for d, x := range idx {
			j += (n.Starts[d] + x*n.Steps[d]) * st[d]
		}
		return 0, j, nil
	case OpPad:
		var j int64
		for d, x := range idx {
			x -= n.Before[d]
			if x < 0 || x >= int64(mp.ins[0].Shape[d]) {
				return -1, 0, nil
			}
			j += x * st[d]
		}
		return 0, j, nil
	case OpConcat:
		k := 0
		for idx[mp.ax] >= mp.starts[k+1] {
			k++
		}
		var j int64
		for d, x := range idx {
			if d == mp.ax {
				x -= mp.starts[k]
			}
			j += x * mp.strides[k][d]
		}
		return k, j, nil
	case OpSliceUpdate:
		up := mp.ins[1].Shape
		off := n.Offset
		if len(mp.ins) > 2 {
			at := get(2, 0)
			off += at
			if off < 0 || off > int64(mp.ins[0].Shape[mp.ax])-int64(up[mp.ax]) {
				return 0, 0, fmt.Errorf("runtime position %d writes %d rows at %d, past extent %d on axis %d", at, up[mp.ax], off, mp.ins[0].Shape[mp.ax], mp.ax)
			}
		}
		p := idx[mp.ax] - off
		if p >= 0 && p < int64(up[mp.ax]) {
			var j int64
			for d, x := range idx {
				if d == mp.ax {
					x = p
				}
				j += x * mp.strides[1][d]
			}
			return 1, j, nil
		}
		return 0, flatIndex(idx, st), nil
	case OpScatter:
		return mp.scatterSource(idx, get)
	case OpGather:
		ax := mp.ax
		ir := len(mp.ins[1].Shape)
		extent := int64(mp.ins[0].Shape[ax])
		which := get(1, flatIndex(idx[ax:ax+ir], mp.strides[1]))
		p := which
		if p < 0 && p >= -extent {
			p += extent
		}
		if p < 0 || p >= extent {
			return 0, 0, fmt.Errorf("index %v out of range for extent %d on axis %d", which, extent, ax)
		}
		var j int64
		for q := range ax {
			j += idx[q] * st[q]
		}
		j += p * st[ax]
		for q := ax + 1; q < len(mp.ins[0].Shape); q++ {
			j += idx[q-1+ir] * st[q]
		}
		return 0, j, nil
	}
	return 0, 0, fmt.Errorf("%s is not a view or data movement", n.Op)
}
