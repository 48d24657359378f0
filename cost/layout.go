package cost

import "github.com/lumsearch/lumsearch/ir"

// Mode is one factor of a view's axis: Size values Stride elements apart
// in the buffer the view reads.
type Mode struct {
	Size, Stride int64
}

// Layout is how a chain of views (reshapes, permutes, slices of step 1,
// expands) addresses the buffer under it, as CuTe writes layouts: each
// axis of the view is a list of modes, outermost first (the axis's index
// is their mixed-radix number), and the element at an index is at Offset
// plus each mode's digit times its stride. A reshape splits and regroups
// the modes; a permute reorders the axes; a slice moves the offset and
// shortens an axis; an expand gives a new extent stride 0.
type Layout struct {
	Axes   [][]Mode
	Offset int64
}

// ViewLayout follows v's views down to a kernel input and returns it with
// the layout that addresses it; false when something else than those
// views (a computed value, a slice with a step, a reshape or slice that
// cuts across a mode) lies between.
func ViewLayout(body *ir.Graph, v ir.Value) (ir.Value, Layout, bool) {
	n := body.Node(v)
	switch n.Op {
	case ir.OpInput:
		l := Layout{Axes: make([][]Mode, len(n.Shape))}
		stride := int64(1)
		for d := len(n.Shape) - 1; d >= 0; d-- {
			l.Axes[d] = []Mode{{int64(n.Shape[d]), stride}}
			stride *= int64(n.Shape[d])
		}
		return v, l, true
	case ir.OpPermute:
		buf, in, ok := ViewLayout(body, n.Inputs[0])
		if !ok || len(n.Attrs.Perm) != len(in.Axes) {
			return 0, Layout{}, false
		}
		out := Layout{Axes: make([][]Mode, len(in.Axes)), Offset: in.Offset}
		for d, p := range n.Attrs.Perm {
			out.Axes[d] = in.Axes[p]
		}
		return buf, out, true
	case ir.OpReshape:
		buf, in, ok := ViewLayout(body, n.Inputs[0])
		if !ok {
			return 0, Layout{}, false
		}
		out, ok := reshapeLayout(in, n.Shape)
		return buf, out, ok
	case ir.OpSlice:
		buf, in, ok := ViewLayout(body, n.Inputs[0])
		if !ok || len(n.Attrs.Starts) != len(in.Axes) {
			return 0, Layout{}, false
		}
		out := Layout{Axes: make([][]Mode, len(in.Axes)), Offset: in.Offset}
		for d, modes := range in.Axes {
			out.Axes[d] = modes
			start, size := n.Attrs.Starts[d], int64(n.Shape[d])
			if start == 0 && size == axisSize(modes) {
				continue
			}
			if n.Attrs.Steps[d] != 1 || len(modes) == 0 {
				return 0, Layout{}, false
			}
			// The slice must keep whole blocks of the inner modes: it
			// shortens the outermost one.
			inner := axisSize(modes[1:])
			if start%inner != 0 || size%inner != 0 {
				return 0, Layout{}, false
			}
			outer := append([]Mode{{size / inner, modes[0].Stride}}, modes[1:]...)
			out.Axes[d] = outer
			out.Offset += start / inner * modes[0].Stride
		}
		return buf, out, true
	case ir.OpExpand:
		buf, in, ok := ViewLayout(body, n.Inputs[0])
		if !ok || len(n.Shape) != len(in.Axes) {
			return 0, Layout{}, false
		}
		out := Layout{Axes: make([][]Mode, len(in.Axes)), Offset: in.Offset}
		for d, modes := range in.Axes {
			out.Axes[d] = modes
			if axisSize(modes) == 1 && n.Shape[d] != 1 {
				out.Axes[d] = []Mode{{int64(n.Shape[d]), 0}}
			}
		}
		return buf, out, true
	}
	return 0, Layout{}, false
}

// axisSize is the extent of an axis: the product of its modes' sizes.
func axisSize(modes []Mode) int64 {
	s := int64(1)
	for _, m := range modes {
		s *= m.Size
	}
	return s
}

// reshapeLayout regroups in's modes, read in row-major order, into the
// axes of shape, splitting a mode where an axis ends inside it (its
// sizes must divide); false when they do not.
func reshapeLayout(in Layout, shape ir.Shape) (Layout, bool) {
	var flat []Mode
	for _, modes := range in.Axes {
		for _, m := range modes {
			if m.Size != 1 {
				flat = append(flat, m)
			}
		}
	}
	out := Layout{Axes: make([][]Mode, len(shape)), Offset: in.Offset}
	for d, dim := range shape {
		want := int64(dim)
		for want > 1 {
			if len(flat) == 0 {
				return Layout{}, false
			}
			m := flat[0]
			switch {
			case want%m.Size == 0:
				out.Axes[d] = append(out.Axes[d], m)
				want /= m.Size
				flat = flat[1:]
			case m.Size%want == 0:
				// The axis ends inside the mode: its outer part goes
				// here, the inner part (stride unchanged) stays.
				out.Axes[d] = append(out.Axes[d], Mode{want, m.Stride * (m.Size / want)})
				flat[0] = Mode{m.Size / want, m.Stride}
				want = 1
			default:
				return Layout{}, false
			}
		}
	}
	return out, len(flat) == 0
}

// StridedLoad is a matmul operand read through views with K in 16-byte
// runs: Layout addresses Buf, and the K axis (KAxis) ends in a mode of
// stride 1 whose size is a multiple of a run, every other stride and the
// offset are multiples of a run, so that every run of a row, K offset a
// multiple of a run, is whole and aligned in Buf. RowAxis is the axis of
// the tile's rows (M of a left operand, N of a right one).
type StridedLoad struct {
	Buf            ir.Value
	Layout         Layout
	KAxis, RowAxis int
}

// StridedOperand reports whether matmul operand v (K its reduced length,
// right for the right operand [.., K, N]) is an input of dtype dt read
// through views (ViewLayout) whose K runs of 16 bytes are contiguous and
// aligned: a permuted and reshaped attention output read by the output
// projection, say. The tensor-core path copies such an operand with
// cp.async, its address computed once per run rather than per element.
func StridedOperand(body *ir.Graph, v ir.Value, dt ir.DType, K int64, right bool) (StridedLoad, bool) {
	buf, l, ok := ViewLayout(body, v)
	r := len(l.Axes)
	run := int64(16 / dt.Size())
	if !ok || r < 2 || body.Node(buf).DType != dt || dt.Size() > 4 || K%run != 0 {
		return StridedLoad{}, false
	}
	s := StridedLoad{Buf: buf, Layout: l, KAxis: r - 1, RowAxis: r - 2}
	if right {
		s.KAxis, s.RowAxis = r-2, r-1
	}
	kmodes := l.Axes[s.KAxis]
	if len(kmodes) == 0 || kmodes[len(kmodes)-1].Stride != 1 || kmodes[len(kmodes)-1].Size%run != 0 || l.Offset%run != 0 {
		return StridedLoad{}, false
	}
	for d, modes := range l.Axes {
		for i, m := range modes {
			if d == s.KAxis && i == len(modes)-1 {
				continue
			}
			if m.Stride%run != 0 {
				return StridedLoad{}, false
			}
		}
	}
	return s, true
}
