package cost

import "github.com/lumsearch/lumsearch/ir"

// Which elements of its inputs a kernel reads. A kernel computes its
// outputs' elements and nothing else, so an input it reaches only through
// a slice (the key and value columns of a fused QKV projection's output,
// the query's) is read only where the slice looks. The model prices an
// input's DRAM traffic at what the kernel demands of it, a bounding box
// per input traced back from the outputs; where it cannot trace an op,
// it demands all of that op's inputs.

// span is a half-open range of one axis.
type span struct{ lo, hi int64 }

// box is a span per axis of a value's shape; nil is nothing demanded.
type box []span

// fullBox is all of shape.
func fullBox(shape ir.Shape) box {
	b := make(box, len(shape))
	for i, d := range shape {
		b[i] = span{0, int64(d)}
	}
	return b
}

// volume is the elements b holds (none for nil: nothing demanded).
func (b box) volume() float64 {
	if b == nil {
		return 0
	}
	v := 1.0
	for _, s := range b {
		v *= float64(max(s.hi-s.lo, 0))
	}
	return v
}

// union is the bounding box of b and o (either may be nil).
func (b box) union(o box) box {
	if b == nil {
		return append(box(nil), o...)
	}
	if o == nil {
		return b
	}
	for i := range b {
		b[i] = span{min(b[i].lo, o[i].lo), max(b[i].hi, o[i].hi)}
	}
	return b
}

// isFull reports whether b is all of shape.
func (b box) isFull(shape ir.Shape) bool {
	for i, s := range b {
		if s.lo != 0 || s.hi != int64(shape[i]) {
			return false
		}
	}
	return true
}

// demands traces the boxes of every value of body that its outputs need.
func demands(body *ir.Graph) []box {
	need := make([]box, len(body.Nodes))
	for _, o := range body.Outputs {
		need[o.Value] = fullBox(body.Node(o.Value).Shape)
	}
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		b := need[i]
		if b == nil {
			continue
		}
		n := body.Nodes[i]
		for j, in := range n.Inputs {
			ib := demandOf(body, n, j, b)
			need[in] = need[in].union(ib)
		}
	}
	return need
}

// demandOf is the box of input j of n that n's box b needs; all of the
// input where the op is not one it traces.
func demandOf(body *ir.Graph, n *ir.Node, j int, b box) box {
	inShape := body.Node(n.Inputs[j]).Shape
	full := fullBox(inShape)
	switch c := n.Op.Class(); {
	case c == ir.ClassUnary || c == ir.ClassBinary || c == ir.ClassCompare || c == ir.ClassSelect || n.Op == ir.OpCast:
		if inShape.Equal(n.Shape) {
			return append(box(nil), b...)
		}
	case n.Op == ir.OpSlice:
		if len(n.Starts) != len(b) {
			return full
		}
		out := make(box, len(b))
		for a, s := range b {
			if s.hi <= s.lo {
				return nil // nothing of this axis
			}
			step := int64(1)
			if a < len(n.Steps) && n.Steps[a] > 0 {
				step = n.Steps[a]
			}
			out[a] = span{n.Starts[a] + s.lo*step, n.Starts[a] + (s.hi-1)*step + 1}
		}
		return out
	case n.Op == ir.OpPermute:
		if len(n.Perm) != len(b) {
			return full
		}
		out := make(box, len(b))
		for a, p := range n.Perm {
			out[p] = b[a]
		}
		return out
	case n.Op == ir.OpExpand:
		if len(inShape) != len(b) {
			return full
		}
		out := make(box, len(b))
		for a, s := range b {
			if inShape[a] == 1 && n.Shape[a] != 1 {
				out[a] = span{0, 1}
			} else {
				out[a] = s
			}
		}
		return out
	case n.Op == ir.OpReshape:
		return reshapeDemand(inShape, n.Shape, b)
	case c == ir.ClassReduce:
		if len(inShape) != len(b) || n.Axis < 0 || n.Axis >= len(b) {
			return full
		}
		out := append(box(nil), b...)
		out[n.Axis] = span{0, int64(inShape[n.Axis])}
		return out
	case n.Op == ir.OpConcat:
		if n.Axis < 0 || n.Axis >= len(b) {
			return full
		}
		var at int64
		for _, in := range n.Inputs[:j] {
			at += int64(body.Node(in).Shape[n.Axis])
		}
		out := append(box(nil), b...)
		lo, hi := max(b[n.Axis].lo-at, 0), min(b[n.Axis].hi-at, int64(inShape[n.Axis]))
		if hi <= lo {
			return nil // this input is not read
		}
		out[n.Axis] = span{lo, hi}
		return out
	}
	return full
}

// reshapeDemand maps a box of a reshape's result onto its input: exactly
// when the two shapes differ by extent-1 axes only, else through the
// box's range of row-major offsets when the box is one contiguous run of
// them, else all of the input.
func reshapeDemand(in, out ir.Shape, b box) box {
	if b.isFull(out) {
		return fullBox(in)
	}
	var nonUnit []span
	for a, s := range b {
		if out[a] != 1 {
			nonUnit = append(nonUnit, s)
		}
	}
	var inNonUnit []int
	for a, d := range in {
		if d != 1 {
			inNonUnit = append(inNonUnit, a)
		}
	}
	res := make(box, len(in))
	for a := range in {
		res[a] = span{0, 1}
	}
	if len(nonUnit) == len(inNonUnit) {
		same := true
		k := 0
		for _, d := range out {
			if d != 1 {
				same = same && in[inNonUnit[k]] == d
				k++
			}
		}
		if same {
			for k, a := range inNonUnit {
				res[a] = nonUnit[k]
			}
			return res
		}
	}
	// A contiguous run: one axis partial, every inner axis whole, every
	// outer one a single index.
	lo, hi, ok := linearRun(out, b)
	if !ok {
		return fullBox(in)
	}
	return runBox(in, lo, hi)
}

// linearRun is the row-major offsets [lo, hi) box b covers in shape, when
// they are contiguous: one axis partial, every inner axis whole, every
// outer one a single index.
func linearRun(shape ir.Shape, b box) (lo, hi int64, ok bool) {
	partial := -1
	for a := range b {
		if b[a].lo != 0 || b[a].hi != int64(shape[a]) {
			partial = a
			break
		}
	}
	if partial < 0 {
		return 0, int64(shape.NumElements()), true
	}
	for a := partial + 1; a < len(b); a++ {
		if b[a].lo != 0 || b[a].hi != int64(shape[a]) {
			return 0, 0, false
		}
	}
	stride := make([]int64, len(shape))
	st := int64(1)
	for a := len(shape) - 1; a >= 0; a-- {
		stride[a] = st
		st *= int64(shape[a])
	}
	var base int64
	for a := 0; a < partial; a++ {
		if b[a].hi-b[a].lo != 1 {
			return 0, 0, false
		}
		base += b[a].lo * stride[a]
	}
	return base + b[partial].lo*stride[partial], base + b[partial].hi*stride[partial], true
}

// runBox is the bounding box in shape of the row-major offsets [lo, hi):
// each axis narrows to the indices the run takes while the outer ones
// hold one index; past the first axis that holds several, all of each.
func runBox(shape ir.Shape, lo, hi int64) box {
	if hi <= lo {
		return nil
	}
	res := fullBox(shape)
	inner := int64(shape.NumElements())
	for a, d := range shape {
		dd := int64(d)
		inner /= dd
		first, last := lo/inner%dd, (hi-1)/inner%dd
		res[a] = span{first, last + 1}
		if first != last {
			return res
		}
	}
	return res
}
