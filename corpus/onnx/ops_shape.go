package onnx

import (
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// Shape and data-movement operators. Shapes are static, so the inputs that
// give shapes, axes or slice bounds must be known at import time; Shape
// and Size always are.

func init() {
	register("Identity", func(c *nodeCtx) ([]ir.Value, error) { return c.outs(c.in(0)) }, 1, 13, 14, 16, 19, 21, 23, 24, 25)
	register("Reshape", opReshape, 5, 13, 14, 19, 21, 23, 24, 25)
	register("Flatten", opFlatten, 1, 9, 11, 13, 21, 23, 24, 25)
	register("Squeeze", opSqueeze, 1, 11, 13, 21, 23, 24, 25)
	register("Unsqueeze", opUnsqueeze, 1, 11, 13, 21, 23, 24, 25)
	register("Transpose", opTranspose, 1, 13, 21, 23, 24, 25)
	register("Expand", opExpand, 8, 13)
	register("Concat", opConcat, 4, 11, 13)
	register("Split", opSplit, 2, 11, 13, 18)
	register("Slice", opSlice, 1, 10, 11, 13)
	register("Gather", opGather, 1, 11, 13)
	register("Shape", opShape, 1, 13, 15, 19, 21, 23, 24, 25)
	register("Size", func(c *nodeCtx) ([]ir.Value, error) {
		x := c.in(0)
		if x < 0 {
			return nil, c.err
		}
		return c.outs(c.konst(int64Tensor(ir.Shape{}, []int64{c.shape(x).NumElements()})))
	}, 1, 13, 19, 21, 23, 24, 25)
	register("Where", func(c *nodeCtx) ([]ir.Value, error) {
		cond, x, y := c.in(0), c.in(1), c.in(2)
		if cond < 0 || x < 0 || y < 0 {
			return nil, c.err
		}
		if c.dtype(cond) != ir.Bool || c.dtype(x) != c.dtype(y) {
			return nil, errorf("Where of %s, %s, %s; want bool and two values of one type", c.dtype(cond), c.dtype(x), c.dtype(y))
		}
		return c.outs(c.b.Where(cond, x, y))
	}, 9, 16)
	register("Trilu", opTrilu, 14)
	register("Pad", opPad, 2, 11, 13, 18, 19, 21, 23, 24, 25)
	register("CumSum", opCumSum, 11, 14)
}

func opReshape(c *nodeCtx) ([]ir.Value, error) {
	allowZero := int64(0)
	if c.version >= 14 {
		allowZero = c.attrInt("allowzero", 0)
	}
	x := c.in(0)
	spec := c.intsIn(1)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	in := c.shape(x)
	out := make(ir.Shape, len(spec))
	infer := -1
	known := int64(1)
	for i, d := range spec {
		switch {
		case d == -1:
			if infer >= 0 {
				return nil, errorf("shape %v has more than one -1", spec)
			}
			infer = i
			continue
		case d == 0 && allowZero == 0:
			if i >= len(in) {
				return nil, errorf("shape %v copies axis %d of %v, which has no such axis", spec, i, in)
			}
			d = int64(in[i])
		case d < 0:
			return nil, errorf("shape %v has a negative extent", spec)
		}
		out[i] = ir.Dim(d)
		known *= d
	}
	if infer >= 0 {
		total := in.NumElements()
		if known == 0 || total%known != 0 {
			return nil, errorf("cannot reshape %v to %v", in, spec)
		}
		out[infer] = ir.Dim(total / known)
	}
	return c.outs(c.b.Reshape(x, out...))
}

func opFlatten(c *nodeCtx) ([]ir.Value, error) {
	axis := c.attrInt("axis", 1)
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	r := int64(len(s))
	if axis < -r || axis > r {
		return nil, errorf("axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += r
	}
	return c.outs(c.b.Reshape(x, ir.Dim(s[:axis].NumElements()), ir.Dim(s[axis:].NumElements())))
}

// axesArg reads axes from an attribute (before version `inputFrom`) or
// from input 1 (from it on); set is false when none are given.
func (c *nodeCtx) axesArg(inputFrom int64) (axes []int64, set bool) {
	if c.version < inputFrom {
		return c.attrInts("axes")
	}
	if !c.has(1) {
		return nil, false
	}
	return c.intsIn(1), true
}

// normAxes normalizes axes for rank r, rejecting repeats.
func (c *nodeCtx) normAxes(axes []int64, r int) []int {
	out := make([]int, len(axes))
	seen := make([]bool, r)
	for i, a := range axes {
		out[i] = c.axis(a, r)
		if c.err != nil {
			return out
		}
		if seen[out[i]] {
			c.failf("axis %d repeats", a)
			return out
		}
		seen[out[i]] = true
	}
	return out
}

func opSqueeze(c *nodeCtx) ([]ir.Value, error) {
	axes, set := c.axesArg(13)
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	drop := make([]bool, len(s))
	if set {
		norm := c.normAxes(axes, len(s))
		if c.err != nil {
			return nil, c.err
		}
		for _, a := range norm {
			if s[a] != 1 {
				return nil, errorf("cannot squeeze axis %d of extent %d", a, s[a])
			}
			drop[a] = true
		}
	} else {
		for i, d := range s {
			drop[i] = d == 1
		}
	}
	var out ir.Shape
	for i, d := range s {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return c.outs(c.b.Reshape(x, out...))
}

func opUnsqueeze(c *nodeCtx) ([]ir.Value, error) {
	axes, set := c.axesArg(13)
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	if !set {
		return nil, errorf("axes are required")
	}
	s := c.shape(x)
	r := len(s) + len(axes)
	ins := make([]bool, r)
	for _, a := range c.normAxes(axes, r) {
		ins[a] = true
	}
	out := make(ir.Shape, 0, r)
	k := 0
	for i := range r {
		if ins[i] {
			out = append(out, 1)
		} else {
			out = append(out, s[k])
			k++
		}
	}
	return c.outs(c.b.Reshape(x, out...))
}

func opTranspose(c *nodeCtx) ([]ir.Value, error) {
	perm, set := c.attrInts("perm")
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	r := c.rank(x)
	p := make([]int, r)
	for i := range p {
		p[i] = r - 1 - i
	}
	if set {
		if len(perm) != r {
			return nil, errorf("perm %v for rank %d", perm, r)
		}
		for i, a := range perm {
			p[i] = c.axis(a, r)
		}
	}
	return c.outs(c.b.Permute(x, p...))
}

func opExpand(c *nodeCtx) ([]ir.Value, error) {
	x := c.in(0)
	spec := c.intsIn(1)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	want := shapeOf(spec)
	if err := want.Check(); err != nil {
		return nil, err
	}
	out, err := ir.BroadcastShapes(c.shape(x), want)
	if err != nil {
		return nil, err
	}
	return c.outs(c.b.BroadcastTo(x, out))
}

func opConcat(c *nodeCtx) ([]ir.Value, error) {
	if !c.hasAttr("axis") {
		return nil, errorf("attribute axis is required")
	}
	axis := c.attrInt("axis", 0)
	var xs []ir.Value
	for i := range c.n() {
		x := c.in(i)
		if x < 0 {
			return nil, c.err
		}
		xs = append(xs, x)
	}
	if len(xs) == 0 {
		return nil, errorf("needs at least one input")
	}
	ax := c.axis(axis, c.rank(xs[0]))
	if c.err != nil {
		return nil, c.err
	}
	if len(xs) == 1 {
		return c.outs(xs[0])
	}
	return c.outs(c.b.Concat(ax, xs...))
}

func opSplit(c *nodeCtx) ([]ir.Value, error) {
	axis := c.attrInt("axis", 0)
	numOutputs := int64(0)
	if c.version >= 18 {
		numOutputs = c.attrInt("num_outputs", 0)
	}
	var sizes []int64
	var set bool
	if c.version < 13 {
		sizes, set = c.attrInts("split")
	} else if c.has(1) {
		sizes, set = c.intsIn(1), true
	}
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	ax := c.axis(axis, len(s))
	if c.err != nil {
		return nil, c.err
	}
	n := int64(len(c.node.GetOutput()))
	d := int64(s[ax])
	switch {
	case set && numOutputs != 0:
		return nil, errorf("both split and num_outputs are given")
	case set:
		if int64(len(sizes)) != n {
			return nil, errorf("split %v for %d outputs", sizes, n)
		}
	case numOutputs != 0:
		if numOutputs != n {
			return nil, errorf("num_outputs %d for %d outputs", numOutputs, n)
		}
		chunk := (d + n - 1) / n
		for i := range n {
			sizes = append(sizes, max(0, min(chunk, d-i*chunk)))
		}
	default:
		if n == 0 || d%n != 0 {
			return nil, errorf("cannot split extent %d into %d equal parts", d, n)
		}
		for range n {
			sizes = append(sizes, d/n)
		}
	}
	var total int64
	for _, z := range sizes {
		if z < 0 {
			return nil, errorf("split %v has a negative size", sizes)
		}
		total += z
	}
	if total != d {
		return nil, errorf("split %v does not add up to extent %d", sizes, d)
	}
	var outs []ir.Value
	start := int64(0)
	for _, z := range sizes {
		outs = append(outs, c.b.Slice(x, ax, start, start+z, 1))
		start += z
	}
	return outs, nil
}

func opSlice(c *nodeCtx) ([]ir.Value, error) {
	var starts, ends, axes, steps []int64
	axesSet := false
	if c.version < 10 {
		starts, _ = c.attrInts("starts")
		ends, _ = c.attrInts("ends")
		axes, axesSet = c.attrInts("axes")
	} else {
		starts, ends = c.intsIn(1), c.intsIn(2)
		if c.has(3) {
			axes, axesSet = c.intsIn(3), true
		}
		if c.has(4) {
			steps = c.intsIn(4)
		}
	}
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	if !axesSet {
		axes = nil
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if steps == nil {
		steps = slices.Repeat([]int64{1}, len(starts))
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, errorf("starts %v, ends %v, axes %v and steps %v differ in length", starts, ends, axes, steps)
	}
	norm := c.normAxes(axes, len(s))
	if c.err != nil {
		return nil, c.err
	}
	y := x
	for i, ax := range norm {
		if steps[i] == 0 {
			return nil, errorf("step 0 on axis %d", ax)
		}
		st, step, n := sliceBounds(int64(s[ax]), starts[i], ends[i], steps[i])
		switch {
		case n == int64(s[ax]) && step == 1:
			// The whole axis.
		case step > 0 || n <= 1:
			y = c.b.Slice(y, ax, st, st+(n-1)*step+1, step)
		default:
			// A negative step gathers st, st+step, ... (n elements).
			idx := c.b.Add(c.b.Mul(c.b.Iota(ir.I64, ir.Shape{ir.Dim(n)}, 0), c.intScalar(ir.I64, step)), c.intScalar(ir.I64, st))
			y = c.b.Gather(y, idx, ax)
		}
	}
	return c.outs(y)
}

// sliceBounds applies ONNX Slice's rules to one axis of extent dim:
// negative starts and ends count from the end (dim is added once); then
// for a positive step the start and end are clamped to [0, dim], and for a
// negative step the start to [0, dim-1] and the end to [-1, dim-1], so
// that torch's INT64_MAX end of an open slice and its INT64_MIN end of
// x[::-1] both mean "to the edge". It returns the first index, the step
// and the number of elements n taken; the step is 1 when n <= 1, so that
// the graph never carries a stride no element uses. step must not be 0.
func sliceBounds(dim, start, end, step int64) (first, stride, n int64) {
	if start < 0 {
		start += dim // no overflow: start < 0 <= dim
	}
	if end < 0 {
		end += dim
	}
	var dist uint64 // the distance covered, in the step's direction
	if step > 0 {
		start, end = clamp(start, 0, dim), clamp(end, 0, dim)
		if end > start {
			dist = uint64(end - start)
		}
	} else {
		start, end = clamp(start, 0, dim-1), clamp(end, -1, dim-1)
		if start > end && dim > 0 {
			dist = uint64(start - end)
		}
	}
	if dist == 0 {
		return 0, 1, 0
	}
	abs := uint64(step)
	if step < 0 {
		abs = -uint64(step) // exact for INT64_MIN too
	}
	n = int64((dist-1)/abs + 1)
	if n == 1 {
		return start, 1, 1
	}
	return start, step, n
}

func clamp(x, lo, hi int64) int64 { return max(lo, min(x, hi)) }

func opGather(c *nodeCtx) ([]ir.Value, error) {
	axis := c.attrInt("axis", 0)
	x, idx := c.in(0), c.in(1)
	if x < 0 || idx < 0 || c.err != nil {
		return nil, c.err
	}
	ax := c.axis(axis, c.rank(x))
	if c.err != nil {
		return nil, c.err
	}
	if !c.dtype(idx).IsInt() {
		return nil, errorf("indices are %s; want an integer type", c.dtype(idx))
	}
	return c.outs(c.b.Gather(x, idx, ax))
}

func opShape(c *nodeCtx) ([]ir.Value, error) {
	start, end := int64(0), int64(math.MaxInt64)
	if c.version >= 15 {
		start = c.attrInt("start", 0)
		end = c.attrInt("end", math.MaxInt64)
	}
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	d := dims(c.shape(x))
	r := int64(len(d))
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = clamp(start, 0, r), clamp(end, 0, r)
	if end < start {
		end = start
	}
	part := d[start:end]
	return c.outs(c.konst(int64Tensor(ir.Shape{ir.Dim(len(part))}, part)))
}

// opTrilu keeps the upper (or lower) triangle of the last two axes,
// shifted by k: element (i, j) stays where j - i >= k (upper) or
// j - i <= k (lower), and becomes zero elsewhere.
func opTrilu(c *nodeCtx) ([]ir.Value, error) {
	upper := c.attrInt("upper", 1)
	x := c.in(0)
	k := int64(0)
	if c.has(1) {
		ks := c.intsIn(1)
		if c.err == nil {
			if len(ks) != 1 {
				return nil, errorf("k has %d values; want one", len(ks))
			}
			k = ks[0]
		}
	}
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	if len(s) < 2 {
		return nil, errorf("input of rank %d; want at least 2", len(s))
	}
	mn := ir.Shape{s[len(s)-2], s[len(s)-1]}
	diff := c.b.Sub(c.b.Iota(ir.I64, mn, 1), c.b.Iota(ir.I64, mn, 0))
	cmp := ir.OpGe
	if upper == 0 {
		cmp = ir.OpLe
	}
	keep := c.b.Binary(cmp, diff, c.intScalar(ir.I64, k))
	return c.outs(c.b.Where(keep, x, c.scalar(c.dtype(x), 0)))
}

// opPad supports mode "constant" (negative pads crop).
func opPad(c *nodeCtx) ([]ir.Value, error) {
	mode := c.attrString("mode", "constant")
	var pads, axes []int64
	value := 0.0
	if c.version < 11 {
		pads, _ = c.attrInts("pads")
		value = c.attrFloat("value", 0)
	} else {
		pads = c.intsIn(1)
		if c.has(2) {
			t := c.konstIn(2)
			if t == nil {
				return nil, notConstant("constant_value must be a constant known at import time")
			}
			if t.Len() != 1 {
				return nil, errorf("constant_value has %d elements; want one", t.Len())
			}
			value = t.At(0)
			if t.DType.IsInt() && (value >= 0x1p63 || int64(value) != t.Int(0)) {
				// The IR's pad value is a float64.
				return nil, unsupported("constant_value %d is not exact in float64", t.Int(0))
			}
		}
		if c.version >= 18 && c.has(3) {
			axes = c.intsIn(3)
		}
	}
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	if mode != "constant" {
		return nil, unsupported("mode %q is not supported", mode)
	}
	r := c.rank(x)
	if axes == nil {
		for i := range r {
			axes = append(axes, int64(i))
		}
	}
	norm := c.normAxes(axes, r)
	if c.err != nil {
		return nil, c.err
	}
	if len(pads) != 2*len(norm) {
		return nil, errorf("pads %v for %d axes", pads, len(norm))
	}
	before, after := make([]int64, r), make([]int64, r)
	y := x
	for i, ax := range norm {
		b, a := pads[i], pads[i+len(norm)]
		if b < 0 || a < 0 {
			if y < 0 {
				return nil, c.err
			}
			d := int64(c.shape(y)[ax])
			st, en := max(0, -b), d-max(0, -a)
			if en < st {
				return nil, errorf("pads %v crop axis %d of extent %d past nothing", pads, ax, d)
			}
			y = c.b.Slice(y, ax, st, en, 1)
		}
		before[ax], after[ax] = max(b, 0), max(a, 0)
	}
	dt := c.dtype(x)
	return c.outs(c.b.Pad(y, before, after, dt.Round(value)))
}

// opCumSum sums along an axis: output element i adds the inputs j <= i
// (j < i when exclusive; j >= i, j > i when reversed), as a masked sum
// over a broadcast of the input.
func opCumSum(c *nodeCtx) ([]ir.Value, error) {
	exclusive := c.attrInt("exclusive", 0) != 0
	reverse := c.attrInt("reverse", 0) != 0
	x := c.in(0)
	axv := c.intsIn(1)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	if len(axv) != 1 {
		return nil, errorf("axis has %d values; want one", len(axv))
	}
	s := c.shape(x)
	ax := c.axis(axv[0], len(s))
	if c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(x)
	if dt == ir.Bool {
		return nil, errorf("CumSum of bool")
	}
	n := s[ax]
	// xj: x with a new axis after ax, so that axis ax indexes j and axis
	// ax+1 indexes i.
	xs := append(append(s[:ax+1:ax+1].Clone(), 1), s[ax+1:]...)
	xj := c.b.Reshape(x, xs...)
	jShape := ir.Shape{n, n}
	j, i := c.b.Iota(ir.I64, jShape, 0), c.b.Iota(ir.I64, jShape, 1)
	var op ir.Op
	switch {
	case !reverse && !exclusive:
		op = ir.OpLe
	case !reverse:
		op = ir.OpLt
	case !exclusive:
		op = ir.OpGe
	default:
		op = ir.OpGt
	}
	mask := c.b.Binary(op, j, i)
	ms := make(ir.Shape, len(xs))
	for k := range ms {
		ms[k] = 1
	}
	ms[ax], ms[ax+1] = n, n
	mask = c.b.Reshape(mask, ms...)
	full := append(append(s[:ax+1:ax+1].Clone(), n), s[ax+1:]...)
	picked := c.b.Where(c.b.BroadcastTo(mask, full), c.b.BroadcastTo(xj, full), c.scalar(dt, 0))
	return c.outs(c.b.Reshape(c.b.Sum(picked, ax), s...))
}
