package ir

import (
	"fmt"
	"math"
	"slices"
)

// pointStore holds the computed elements of one node, or reads a leaf in
// place.
type pointStore struct {
	kind storeKind
	// Computed nodes: the elements held, sorted, and their values and
	// magnitudes (nil without magnitudes), by position in idx, or by
	// element when dense (most of the tensor is needed: lookups are then
	// direct, for at most twice the memory).
	idx      []int64
	dense    bool
	val, mag []float64
	// Leaves.
	t              *Tensor // input, weight, state
	konst          *Attrs  // const
	dt             DType   // iota
	stride, extent int64   // iota: along its axis
	// Views of leaves: the input's store, read through the view's mover.
	// buf makes at unsafe for concurrent use, which nothing needs.
	view  *mover
	from  *pointStore
	shape Shape
	buf   []int64
	pad   float64
	// missing is an element asked for but not held (-1 if none): a bug in
	// the backward pass, reported as an error rather than a panic.
	missing int64
}

type storeKind uint8

const (
	storeHeld storeKind = iota
	storeTensor
	storeConst
	storeIota
	storeView
)

// at returns element j's value and magnitude (0 without magnitudes, except
// for leaves, whose magnitude is their absolute value).
func (s *pointStore) at(j int64) (float64, float64) {
	switch s.kind {
	case storeTensor:
		v := s.t.At(j)
		return v, math.Abs(v)
	case storeConst:
		v := s.konst.ConstAt(j)
		return v, math.Abs(v)
	case storeIota:
		v := s.dt.Round(float64(j / s.stride % s.extent))
		return v, math.Abs(v)
	case storeView:
		unflattenInto(j, s.shape, s.buf)
		k, src, err := s.view.source(s.buf, nil)
		switch {
		case err != nil: // only gather fails, and it is not a view
			return math.NaN(), math.NaN()
		case k < 0:
			return s.pad, math.Abs(s.pad)
		}
		return s.from.at(src)
	}
	p := int(j)
	if !s.dense {
		var ok bool
		p, ok = slices.BinarySearch(s.idx, j)
		if !ok {
			if s.missing < 0 {
				s.missing = j
			}
			return math.NaN(), math.NaN()
		}
	}
	if s.mag == nil {
		return s.val[p], 0
	}
	return s.val[p], s.mag[p]
}

// put sets the element at position p of idx.
func (s *pointStore) put(p int, v, m float64) {
	if s.dense {
		p = int(s.idx[p])
	}
	s.val[p] = v
	if s.mag != nil {
		s.mag[p] = m
	}
}

// newStore makes the store for elements idx of n.
func (pe *pointEval) newStore(n *Node, idx []int64) *pointStore {
	s := &pointStore{kind: storeHeld, idx: idx, missing: -1}
	size := int64(len(idx))
	if total := n.Shape.NumElements(); 2*size >= total {
		s.dense, size = true, total
	}
	s.val = make([]float64, size)
	if pe.magnitude {
		s.mag = make([]float64, size)
	}
	return s
}

func (pe *pointEval) leaf(n *Node) (*pointStore, error) {
	s := &pointStore{missing: -1}
	switch n.Op {
	case OpInput, OpWeight, OpState:
		t, ok := pe.feeds[n.Name]
		if !ok {
			return nil, fmt.Errorf("no %s named %q was fed", n.Op, n.Name)
		}
		if err := t.check(n.DType, n.Shape); err != nil {
			return nil, fmt.Errorf("%s %q: %w", n.Op, n.Name, err)
		}
		s.kind, s.t = storeTensor, t
	case OpConst:
		s.kind, s.konst = storeConst, &n.Attrs
	case OpIota:
		ax, _ := normAxis(n.Axis, len(n.Shape))
		s.kind, s.dt = storeIota, n.DType
		s.stride, s.extent = n.Shape.Strides()[ax], int64(n.Shape[ax])
	default:
		return nil, fmt.Errorf("no evaluation rule")
	}
	return s, nil
}

// inPlaceStore makes the store of in-place node v, and of the views and
// leaf below it, out of turn.
func (pe *pointEval) inPlaceStore(v Value) (*pointStore, error) {
	n := pe.g.Nodes[v]
	if n.Op.Class() == ClassLeaf {
		s, err := pe.leaf(n)
		if err != nil {
			return nil, fmt.Errorf("node %%%d (%s): %w", v, n.Op, err)
		}
		return s, nil
	}
	from, err := pe.inPlaceStore(n.Inputs[0])
	if err != nil {
		return nil, err
	}
	s := pe.view(n)
	s.from = from
	return s, nil
}

// view makes the store of an in-place view.
func (pe *pointEval) view(n *Node) *pointStore {
	return &pointStore{
		kind: storeView, view: newMover(n, pe.inputTypes(n)), from: pe.store[n.Inputs[0]],
		shape: n.Shape, buf: make([]int64, len(n.Shape)), pad: n.Value, missing: -1,
	}
}
