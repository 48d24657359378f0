package onnx

import (
	"slices"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// Matrix products, softmax, normalizations and reductions. Where the ONNX
// operator is one of the IR's composite ops (matmul, softmax, layer_norm,
// rms_norm) the composite is emitted, so that kernels and rules can match
// it; otherwise the operator is decomposed into primitive ops.

func init() {
	register("MatMul", opMatMul, 1, 9, 13)
	register("Gemm", opGemm, 7, 9, 11, 13)
	register("Softmax", opSoftmax, 1, 11, 13)
	register("LogSoftmax", opSoftmax, 1, 11, 13)
	register("LayerNormalization", opLayerNorm, 17)
	register("RMSNormalization", opLayerNorm, 23)
	register("ReduceSum", opReduce, 1, 11, 13)
	register("ReduceMean", opReduce, 1, 11, 13, 18)
	register("ReduceMax", opReduce, 1, 11, 12, 13, 18, 20)
	register("ReduceMin", opReduce, 1, 11, 12, 13, 18, 20)
	register("ReduceSumSquare", opReduce, 1, 11, 13, 18)
	register("ArgMax", opArg, 11, 12, 13)
	register("ArgMin", opArg, 11, 12, 13)
	register("GatherElements", opGatherElements, 11, 13)
	register("InstanceNormalization", opChannelNorm, 6, 22)
	register("GroupNormalization", opChannelNorm, 21)
	register("BatchNormalization", opBatchNorm, 9, 14, 15)
}

// opMatMul is numpy's matmul: a 1-D operand gains an axis of extent 1
// (first operand: in front; second: behind) that the result drops again;
// batch axes broadcast.
func opMatMul(c *nodeCtx) ([]ir.Value, error) {
	a, b := c.in(0), c.in(1)
	if a < 0 || b < 0 {
		return nil, c.err
	}
	if dt := c.dtype(a); !dt.IsFloat() || c.dtype(b) != dt {
		return nil, unsupported("MatMul of %s and %s is not supported (the IR multiplies float matrices)", c.dtype(a), c.dtype(b))
	}
	sa, sb := c.shape(a), c.shape(b)
	if len(sa) == 0 || len(sb) == 0 {
		return nil, errorf("MatMul of a scalar")
	}
	if len(sa) == 1 {
		a = c.b.Reshape(a, 1, sa[0])
	}
	if len(sb) == 1 {
		b = c.b.Reshape(b, sb[0], 1)
	}
	y := c.b.MatMul(a, b)
	if y < 0 || (len(sa) > 1 && len(sb) > 1) {
		return c.outs(y)
	}
	s := c.shape(y)
	var out ir.Shape
	switch {
	case len(sa) == 1 && len(sb) == 1:
		out = s[:len(s)-2]
	case len(sa) == 1:
		out = append(s[:len(s)-2:len(s)-2], s[len(s)-1])
	default:
		out = s[:len(s)-1]
	}
	return c.outs(c.b.Reshape(y, out...))
}

// opGemm is alpha * A' B' + beta * C with C broadcast to the result.
func opGemm(c *nodeCtx) ([]ir.Value, error) {
	alpha := c.attrFloat("alpha", 1)
	beta := c.attrFloat("beta", 1)
	transA := c.attrInt("transA", 0) != 0
	transB := c.attrInt("transB", 0) != 0
	a, b := c.in(0), c.in(1)
	if a < 0 || b < 0 || c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(a)
	if !dt.IsFloat() || c.dtype(b) != dt {
		return nil, unsupported("Gemm of %s and %s is not supported (the IR multiplies float matrices)", dt, c.dtype(b))
	}
	if c.rank(a) != 2 || c.rank(b) != 2 {
		return nil, errorf("Gemm of %v and %v; want matrices", c.shape(a), c.shape(b))
	}
	if transA {
		a = c.b.Transpose(a, 0, 1)
	}
	if transB {
		b = c.b.Transpose(b, 0, 1)
	}
	y := c.b.MatMul(a, b)
	if alpha != 1 {
		y = c.b.Mul(c.scalar(dt, alpha), y)
	}
	if c.has(2) {
		bias := c.in(2)
		if bias >= 0 && c.dtype(bias) != dt {
			return nil, errorf("C is %s; want %s", c.dtype(bias), dt)
		}
		if beta != 1 {
			bias = c.b.Mul(c.scalar(dt, beta), bias)
		}
		y = c.b.Add(y, bias)
	}
	return c.outs(y)
}

// opSoftmax: before version 13 the input is coerced to a matrix at axis
// (default 1) and normalized over its rows; from 13 on over the one axis
// given (default -1). LogSoftmax is x - max - log(sum(exp(x - max))).
func opSoftmax(c *nodeCtx) ([]ir.Value, error) {
	def := int64(-1)
	if c.version < 13 {
		def = 1
	}
	axis := c.attrInt("axis", def)
	x := c.in(0)
	if !c.needFloat(x) || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	ax := c.axis(axis, len(s))
	if c.err != nil {
		return nil, c.err
	}
	y := x
	if c.version < 13 {
		y = c.b.Reshape(x, ir.Dim(s[:ax].NumElements()), ir.Dim(s[ax:].NumElements()))
		ax = 1
	}
	if c.op == "Softmax" {
		y = c.b.Softmax(y, ax)
	} else {
		d := c.b.Sub(y, c.b.ReduceMax(y, ax))
		y = c.b.Sub(d, c.b.Log(c.b.Sum(c.b.Exp(d), ax)))
	}
	if c.version < 13 {
		y = c.b.Reshape(y, s...)
	}
	return c.outs(y)
}

// opLayerNorm converts LayerNormalization and RMSNormalization, which
// normalize over the axes from axis on. With axis the last one and a scale
// (and bias) of the last axis's extent, it is the IR's layer_norm or
// rms_norm; otherwise the input is flattened to [outer, inner], normalized
// by the composite with unit scale, and scaled and shifted by broadcasting.
// LayerNormalization's optional Mean and InvStdDev outputs are computed
// separately, in the stash type (float32 unless stash_type says
// otherwise).
func opLayerNorm(c *nodeCtx) ([]ir.Value, error) {
	rms := c.op == "RMSNormalization"
	axis := c.attrInt("axis", -1)
	eps := c.attrFloat("epsilon", 1e-5)
	stash := c.attrInt("stash_type", 1)
	x, scale := c.in(0), c.in(1)
	bias := ir.NoValue
	if !rms && c.has(2) {
		bias = c.in(2)
	}
	if !c.needFloat(x) || scale < 0 || c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(x)
	if c.dtype(scale) != dt || (bias >= 0 && c.dtype(bias) != dt) {
		return nil, errorf("scale and bias must be %s", dt)
	}
	if !(eps > 0) {
		return nil, unsupported("epsilon %v is not supported (the IR's norms need a positive epsilon)", eps)
	}
	s := c.shape(x)
	ax := c.axis(axis, len(s))
	if c.err != nil {
		return nil, c.err
	}
	last := s[len(s)-1]
	fits := func(v ir.Value) bool {
		if v < 0 {
			return true
		}
		vs := c.shape(v)
		return vs.NumElements() == int64(last) && (len(vs) == 0 || vs[len(vs)-1] == last)
	}
	var y ir.Value
	if ax == len(s)-1 && fits(scale) && fits(bias) {
		w := c.b.Reshape(scale, last)
		if rms {
			y = c.b.RMSNorm(x, w, eps)
		} else {
			bv := c.b.Const(dt, ir.Shape{last}, 0)
			if bias >= 0 {
				bv = c.b.Reshape(bias, last)
			}
			y = c.b.LayerNorm(x, w, bv, eps)
		}
	} else {
		inner := ir.Dim(s[ax:].NumElements())
		flat := c.b.Reshape(x, ir.Dim(s[:ax].NumElements()), inner)
		one := c.b.Const(dt, ir.Shape{inner}, 1)
		if rms {
			y = c.b.RMSNorm(flat, one, eps)
		} else {
			y = c.b.LayerNorm(flat, one, c.b.Const(dt, ir.Shape{inner}, 0), eps)
		}
		y = c.b.Mul(c.b.Reshape(y, s...), scale)
		if bias >= 0 {
			y = c.b.Add(y, bias)
		}
	}
	outs := []ir.Value{y}
	out := c.node.GetOutput()
	if !rms && (len(out) > 1 && out[1] != "" || len(out) > 2 && out[2] != "") {
		st, ok := irDType(onnxpb.TensorProto_DataType(stash))
		if !ok || !st.IsFloat() {
			return nil, unsupported("stash_type %d is not supported", stash)
		}
		stats := append(s[:ax:ax].Clone(), slices.Repeat(ir.Shape{1}, len(s)-ax)...)
		flat := c.b.Reshape(x, ir.Dim(s[:ax].NumElements()), ir.Dim(s[ax:].NumElements()))
		if st != dt {
			flat = c.b.Cast(flat, st)
		}
		n := c.scalar(st, float64(s[ax:].NumElements()))
		mean := c.b.Div(c.b.Sum(flat, 1), n)
		d := c.b.Sub(flat, mean)
		variance := c.b.Div(c.b.Sum(c.b.Mul(d, d), 1), n)
		inv := c.b.Rsqrt(c.b.Add(variance, c.scalar(st, eps)))
		outs = append(outs, c.b.Reshape(mean, stats...), c.b.Reshape(inv, stats...))
	}
	return outs, nil
}

// opReduce converts ReduceSum, ReduceMean, ReduceMax, ReduceMin and
// ReduceSumSquare: axes come from an attribute before the version that
// made them an input (13 for ReduceSum, 18 for the others); no axes means
// every axis, or no reduction at all under noop_with_empty_axes. Several
// axes reduce one after another, and keepdims=0 reshapes the reduced axes
// away.
func opReduce(c *nodeCtx) ([]ir.Value, error) {
	inputFrom := int64(18)
	if c.op == "ReduceSum" {
		inputFrom = 13
	}
	keep := c.attrInt("keepdims", 1) != 0
	noop := false
	if c.version >= inputFrom {
		noop = c.attrInt("noop_with_empty_axes", 0) != 0
	}
	axes, _ := c.axesArg(inputFrom)
	x := c.in(0)
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(x)
	if dt == ir.Bool && (c.op == "ReduceMax" && c.version >= 20 || c.op == "ReduceMin" && c.version >= 20) {
		y, err := reduceCast(c, x, ir.I64, axes, noop, keep)
		if err != nil {
			return nil, err
		}
		// y > 0, not a cast: over an empty axis y is i64's least or
		// greatest value, and the bool max is false, the bool min true.
		return c.outs(c.b.Binary(ir.OpGt, y, c.intScalar(ir.I64, 0)))
	}
	if dt == ir.Bool {
		return nil, errorf("%s of bool", c.op)
	}
	y, err := reduceCast(c, x, dt, axes, noop, keep)
	return []ir.Value{y}, err
}

// reduceCast reduces x, computing in dtype dt.
func reduceCast(c *nodeCtx, x ir.Value, dt ir.DType, axes []int64, noop, keep bool) (ir.Value, error) {
	s := c.shape(x)
	if c.dtype(x) != dt {
		x = c.b.Cast(x, dt)
	}
	if c.op == "ReduceSumSquare" {
		x = c.b.Mul(x, x)
	}
	if len(axes) == 0 {
		if noop {
			return x, nil
		}
		for i := range s {
			axes = append(axes, int64(i))
		}
	}
	norm := c.normAxes(axes, len(s))
	if c.err != nil {
		return ir.NoValue, c.err
	}
	slices.Sort(norm)
	y := x
	count := int64(1)
	for _, ax := range norm {
		count *= int64(s[ax])
		switch c.op {
		case "ReduceMax":
			y = c.b.ReduceMax(y, ax)
		case "ReduceMin":
			y = reduceMin(c, y, ax)
		default:
			y = c.b.Sum(y, ax)
		}
	}
	if c.op == "ReduceMean" {
		y = c.b.Div(y, c.scalar(dt, float64(count)))
	}
	if !keep {
		reduced := make([]bool, len(s))
		for _, ax := range norm {
			reduced[ax] = true
		}
		var out ir.Shape
		for i, d := range s {
			if !reduced[i] {
				out = append(out, d)
			}
		}
		y = c.b.Reshape(y, out...)
	}
	return y, nil
}

// reduceMin is the min along ax as a max of order-reversed values: -x for
// floats, and -1 - x (two's-complement NOT) for integers, where -x would
// map the least value to itself. Over an empty axis it is +inf, or the
// dtype's greatest value, as ONNX ReduceMin (opset 18) says.
func reduceMin(c *nodeCtx, x ir.Value, ax int) ir.Value {
	dt := c.dtype(x)
	if !dt.IsInt() {
		return c.b.Neg(c.b.ReduceMax(c.b.Neg(x), ax))
	}
	m1 := c.intScalar(dt, -1)
	return c.b.Sub(m1, c.b.ReduceMax(c.b.Sub(m1, x), ax))
}

// opArg gives the index of the first (or, with select_last_index, the
// last) maximum or minimum along an axis.
func opArg(c *nodeCtx) ([]ir.Value, error) {
	axis := c.attrInt("axis", 0)
	keep := c.attrInt("keepdims", 1) != 0
	last := false
	if c.version >= 12 {
		last = c.attrInt("select_last_index", 0) != 0
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
	if c.dtype(x) == ir.Bool {
		return nil, errorf("%s of bool", c.op)
	}
	v := x
	if c.op == "ArgMin" {
		v = c.b.Neg(x)
	}
	hit := c.b.Binary(ir.OpEq, v, c.b.ReduceMax(v, ax))
	idx := c.b.Iota(ir.I64, s, ax)
	var y ir.Value
	if last {
		y = c.b.ReduceMax(c.b.Where(hit, idx, c.scalar(ir.I64, -1)), ax)
	} else {
		miss := c.scalar(ir.I64, float64(s[ax]))
		y = c.b.Neg(c.b.ReduceMax(c.b.Neg(c.b.Where(hit, idx, miss)), ax))
	}
	if !keep {
		y = c.b.Reshape(y, slices.Delete(s.Clone(), ax, ax+1)...)
	}
	return c.outs(y)
}

// opGatherElements picks out[p] = x[p with axis replaced by idx[p]], as a
// sum over a one-hot selection along a new last axis.
func opGatherElements(c *nodeCtx) ([]ir.Value, error) {
	axis := c.attrInt("axis", 0)
	x, idx := c.in(0), c.in(1)
	if x < 0 || idx < 0 || c.err != nil {
		return nil, c.err
	}
	s, is := c.shape(x), c.shape(idx)
	ax := c.axis(axis, len(s))
	if c.err != nil {
		return nil, c.err
	}
	idt := c.dtype(idx)
	if !idt.IsInt() || len(is) != len(s) {
		return nil, errorf("indices %s%v for data %v", idt, is, s)
	}
	dt := c.dtype(x)
	if dt == ir.Bool {
		return nil, unsupported("GatherElements of bool is not supported")
	}
	n := s[ax]
	// Data restricted to the indices' extents off the axis, the axis moved
	// last and a unit axis left in its place.
	xs := x
	for d := range s {
		if d != ax && is[d] != s[d] {
			xs = c.b.Slice(xs, d, 0, int64(is[d]), 1)
		}
	}
	perm := []int{}
	for d := range s {
		if d != ax {
			perm = append(perm, d)
		}
	}
	perm = append(perm, ax)
	xs = c.b.Permute(xs, perm...)
	withUnit := append(append(is[:ax:ax].Clone(), 1), is[ax+1:]...)
	xs = c.b.Reshape(xs, append(withUnit, n)...)
	full := append(is.Clone(), n)
	nn := c.scalar(idt, float64(n))
	zero := c.scalar(idt, 0)
	fixed := c.b.Where(c.b.Binary(ir.OpLt, idx, zero), c.b.Add(idx, nn), idx)
	hit := c.b.Binary(ir.OpEq, c.b.Reshape(fixed, append(is.Clone(), 1)...), c.b.Reshape(c.b.Iota(idt, ir.Shape{n}, 0), append(slices.Repeat(ir.Shape{1}, len(is)), n)...))
	picked := c.b.Where(c.b.BroadcastTo(hit, full), c.b.BroadcastTo(xs, full), c.scalar(dt, 0))
	return c.outs(c.b.Reshape(c.b.Sum(picked, len(is)), is...))
}

// channelShape is [C, 1, ...] for broadcasting a per-channel vector over
// the axes after the channel axis of a [N, C, ...] tensor of rank r.
func channelShape(c ir.Dim, r int) ir.Shape {
	s := ir.Shape{c}
	for range r - 2 {
		s = append(s, 1)
	}
	return s
}

// opChannelNorm converts InstanceNormalization and GroupNormalization
// (version 21: scale and bias per channel), which normalize [N, C, ...]
// over the spatial axes of each channel or of each group of channels: the
// input is flattened to rows of what one statistic covers, normalized by
// the IR's layer_norm with unit scale, and scaled and shifted per channel.
func opChannelNorm(c *nodeCtx) ([]ir.Value, error) {
	eps := c.attrFloat("epsilon", 1e-5)
	groups := int64(0)
	if c.op == "GroupNormalization" {
		groups = c.attrInt("num_groups", 0)
		c.ignore("stash_type")
	}
	x, scale, bias := c.in(0), c.in(1), c.in(2)
	if !c.needFloat(x) || scale < 0 || bias < 0 || c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(x)
	s := c.shape(x)
	if len(s) < 2 {
		return nil, errorf("input of rank %d; want [N, C, ...]", len(s))
	}
	C := s[1]
	if c.op == "InstanceNormalization" {
		groups = int64(C)
	}
	if groups <= 0 || int64(C)%groups != 0 {
		return nil, errorf("%d channels in %d groups", C, groups)
	}
	for _, p := range []ir.Value{scale, bias} {
		if c.dtype(p) != dt || !c.shape(p).Equal(ir.Shape{C}) {
			return nil, errorf("scale and bias must be %s[%d]", dt, C)
		}
	}
	if !(eps > 0) {
		return nil, unsupported("epsilon %v is not supported (the IR's norms need a positive epsilon)", eps)
	}
	rows := s[0] * ir.Dim(groups)
	inner := ir.Dim(s.NumElements() / max(int64(rows), 1))
	y := c.b.LayerNorm(c.b.Reshape(x, rows, inner), c.b.Const(dt, ir.Shape{inner}, 1), c.b.Const(dt, ir.Shape{inner}, 0), eps)
	y = c.b.Reshape(y, s...)
	cs := channelShape(C, len(s))
	y = c.b.Add(c.b.Mul(y, c.b.Reshape(scale, cs...)), c.b.Reshape(bias, cs...))
	return c.outs(y)
}

// opBatchNorm is inference-mode batch normalization: (x - mean) /
// sqrt(var + epsilon) * scale + bias with per-channel statistics. Training
// mode (which updates running statistics) is not supported.
func opBatchNorm(c *nodeCtx) ([]ir.Value, error) {
	eps := c.attrFloat("epsilon", 1e-5)
	c.ignore("momentum")
	if c.attrInt("training_mode", 0) != 0 {
		return nil, unsupported("training_mode=1 is not supported")
	}
	if len(c.node.GetOutput()) > 1 {
		return nil, unsupported("running statistics outputs are not supported")
	}
	x := c.in(0)
	if !c.needFloat(x) || c.err != nil {
		return nil, c.err
	}
	s := c.shape(x)
	if len(s) < 2 {
		return nil, errorf("input of rank %d; want [N, C, ...]", len(s))
	}
	dt := c.dtype(x)
	cs := channelShape(s[1], len(s))
	var p [4]ir.Value
	for i := range p {
		v := c.in(i + 1)
		if v < 0 {
			return nil, c.err
		}
		if c.dtype(v) != dt || !c.shape(v).Equal(ir.Shape{s[1]}) {
			return nil, unsupported("BatchNormalization with %s%v statistics for %s input is not supported", c.dtype(v), c.shape(v), dt)
		}
		p[i] = c.b.Reshape(v, cs...)
	}
	scale, bias, mean, variance := p[0], p[1], p[2], p[3]
	inv := c.b.Rsqrt(c.b.Add(variance, c.scalar(dt, eps)))
	return c.outs(c.b.Add(c.b.Mul(c.b.Mul(c.b.Sub(x, mean), inv), scale), bias))
}
