package ir

import (
	"fmt"
	"slices"
)

// Builder constructs a graph op by op, checking each as it is added. A
// failed step records the first error and yields NoValue; later steps that
// use NoValue yield it too, so model code can build a whole graph and check
// once, at Build.
type Builder struct {
	g   *Graph
	err error
}

// NewBuilder starts a graph.
func NewBuilder(name string) *Builder { return &Builder{g: &Graph{Name: name}} }

// Err is the first error so far.
func (b *Builder) Err() error { return b.err }

// Build checks and returns the graph.
func (b *Builder) Build() (*Graph, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := b.g.Check(); err != nil {
		return nil, err
	}
	return b.g, nil
}

// Shape is a value's shape (nil for NoValue).
func (b *Builder) Shape(v Value) Shape {
	if v < 0 {
		return nil
	}
	return b.g.Nodes[v].Shape
}

// DType is a value's dtype (invalid for NoValue).
func (b *Builder) DType(v Value) DType {
	if v < 0 {
		return InvalidDType
	}
	return b.g.Nodes[v].DType
}

func (b *Builder) fail(err error) Value {
	if b.err == nil {
		b.err = fmt.Errorf("graph %s: node %%%d: %w", b.g.Name, len(b.g.Nodes), err)
	}
	return NoValue
}

// Apply appends a node for op with attributes a and returns its value. The
// named methods below are shorthands that also broadcast where an
// exporter would.
func (b *Builder) Apply(op Op, a Attrs, inputs ...Value) Value {
	ts := make([]ValueType, len(inputs))
	for i, in := range inputs {
		if in < 0 {
			return NoValue
		}
		if int(in) >= len(b.g.Nodes) {
			return b.fail(fmt.Errorf("%s: input %d is not a value of this graph", op, in))
		}
		n := b.g.Nodes[in]
		ts[i] = ValueType{n.Shape, n.DType}
	}
	shape, dt, err := Infer(op, a, ts)
	if err != nil {
		return b.fail(err)
	}
	b.g.Nodes = append(b.g.Nodes, &Node{Op: op, Inputs: slices.Clone(inputs), Attrs: a, Shape: shape, DType: dt})
	return Value(len(b.g.Nodes) - 1)
}

// Input declares a model input.
func (b *Builder) Input(name string, dt DType, shape ...Dim) Value {
	return b.Apply(OpInput, Attrs{Name: name, DType: dt, To: Shape(shape).Clone()})
}

// Weight declares a parameter.
func (b *Builder) Weight(name string, dt DType, shape ...Dim) Value {
	return b.Apply(OpWeight, Attrs{Name: name, DType: dt, To: Shape(shape).Clone()})
}

// State declares a buffer kept across runs.
func (b *Builder) State(name string, dt DType, shape ...Dim) Value {
	return b.Apply(OpState, Attrs{Name: name, DType: dt, To: Shape(shape).Clone()})
}

// Const makes a constant of the given shape from one value (broadcast) or
// one value per element. An integer constant's values are kept in Ints;
// values beyond 2^53 need ConstInts to be exact.
func (b *Builder) Const(dt DType, shape Shape, data ...float64) Value {
	a := Attrs{DType: dt, To: shape.Clone(), Data: slices.Clone(data)}
	intConstData(dt, &a)
	return b.Apply(OpConst, a)
}

// ConstInts makes an integer constant from exact values: one (broadcast)
// or one per element.
func (b *Builder) ConstInts(dt DType, shape Shape, data ...int64) Value {
	return b.Apply(OpConst, Attrs{DType: dt, To: shape.Clone(), Ints: append([]int64{}, data...)})
}

// Scalar makes a rank-0 constant.
func (b *Builder) Scalar(dt DType, v float64) Value { return b.Const(dt, Shape{}, v) }

// Iota makes 0, 1, 2, ... along axis of shape.
func (b *Builder) Iota(dt DType, shape Shape, axis int) Value {
	return b.Apply(OpIota, Attrs{DType: dt, To: shape.Clone(), Axis: axis})
}

// Unary applies an elementwise op.
func (b *Builder) Unary(op Op, x Value) Value { return b.Apply(op, Attrs{}, x) }

// Neg is -x.
func (b *Builder) Neg(x Value) Value { return b.Unary(OpNeg, x) }

// Abs is |x|.
func (b *Builder) Abs(x Value) Value { return b.Unary(OpAbs, x) }

// Exp is e^x.
func (b *Builder) Exp(x Value) Value { return b.Unary(OpExp, x) }

// Log is the natural logarithm.
func (b *Builder) Log(x Value) Value { return b.Unary(OpLog, x) }

// Sqrt is the square root.
func (b *Builder) Sqrt(x Value) Value { return b.Unary(OpSqrt, x) }

// Rsqrt is 1/sqrt(x).
func (b *Builder) Rsqrt(x Value) Value { return b.Unary(OpRsqrt, x) }

// Recip is 1/x.
func (b *Builder) Recip(x Value) Value { return b.Unary(OpRecip, x) }

// Tanh is the hyperbolic tangent.
func (b *Builder) Tanh(x Value) Value { return b.Unary(OpTanh, x) }

// Sigmoid is 1/(1+e^-x).
func (b *Builder) Sigmoid(x Value) Value { return b.Unary(OpSigmoid, x) }

// RoundE4M3 rounds x to the nearest e4m3 value, saturating at ±448.
func (b *Builder) RoundE4M3(x Value) Value { return b.Unary(OpRoundE4M3, x) }

// Erf is the error function.
func (b *Builder) Erf(x Value) Value { return b.Unary(OpErf, x) }

// Relu is max(x, 0).
func (b *Builder) Relu(x Value) Value { return b.Unary(OpRelu, x) }

// BroadcastTo reshapes (adding leading extent-1 axes) and expands x to
// shape, numpy-style.
func (b *Builder) BroadcastTo(x Value, shape Shape) Value {
	if x < 0 {
		return NoValue
	}
	xs := b.Shape(x)
	if xs.Equal(shape) {
		return x
	}
	if _, err := BroadcastShapes(xs, shape); err != nil || len(xs) > len(shape) {
		return b.fail(fmt.Errorf("cannot broadcast %v to %v", xs, shape))
	}
	if len(xs) < len(shape) {
		padded := make(Shape, len(shape)-len(xs), len(shape))
		for i := range padded {
			padded[i] = 1
		}
		x = b.Reshape(x, append(padded, xs...)...)
	}
	return b.Expand(x, shape...)
}

// broadcast brings the operands to their common shape.
func (b *Builder) broadcast(xs ...Value) []Value {
	var shape Shape
	for i, x := range xs {
		if x < 0 {
			return nil
		}
		if i == 0 {
			shape = b.Shape(x)
			continue
		}
		s, err := BroadcastShapes(shape, b.Shape(x))
		if err != nil {
			b.fail(err)
			return nil
		}
		shape = s
	}
	out := make([]Value, len(xs))
	for i, x := range xs {
		out[i] = b.BroadcastTo(x, shape)
	}
	return out
}

// Binary applies an elementwise binary op or comparison, broadcasting the
// operands numpy-style with explicit reshapes and expands.
func (b *Builder) Binary(op Op, x, y Value) Value {
	v := b.broadcast(x, y)
	if v == nil {
		return NoValue
	}
	return b.Apply(op, Attrs{}, v[0], v[1])
}

// Add is x + y.
func (b *Builder) Add(x, y Value) Value { return b.Binary(OpAdd, x, y) }

// Sub is x - y.
func (b *Builder) Sub(x, y Value) Value { return b.Binary(OpSub, x, y) }

// Mul is x * y.
func (b *Builder) Mul(x, y Value) Value { return b.Binary(OpMul, x, y) }

// Div is x / y.
func (b *Builder) Div(x, y Value) Value { return b.Binary(OpDiv, x, y) }

// Pow is x ** y.
func (b *Builder) Pow(x, y Value) Value { return b.Binary(OpPow, x, y) }

// Max is the elementwise maximum.
func (b *Builder) Max(x, y Value) Value { return b.Binary(OpMax, x, y) }

// Min is the elementwise minimum.
func (b *Builder) Min(x, y Value) Value { return b.Binary(OpMin, x, y) }

// Where selects cond ? x : y, broadcasting all three.
func (b *Builder) Where(cond, x, y Value) Value {
	v := b.broadcast(cond, x, y)
	if v == nil {
		return NoValue
	}
	return b.Apply(OpWhere, Attrs{}, v...)
}

// Sum reduces one axis, keeping it with extent 1.
func (b *Builder) Sum(x Value, axis int) Value { return b.Apply(OpSum, Attrs{Axis: axis}, x) }

// ReduceMax reduces one axis by maximum, keeping it with extent 1.
func (b *Builder) ReduceMax(x Value, axis int) Value {
	return b.Apply(OpMaxReduce, Attrs{Axis: axis}, x)
}

// Mean is the sum along axis times 1/extent, as exporters emit it.
func (b *Builder) Mean(x Value, axis int) Value {
	if x < 0 {
		return NoValue
	}
	s := b.Shape(x)
	ax, err := normAxis(axis, len(s))
	if err != nil {
		return b.fail(fmt.Errorf("mean: %w", err))
	}
	return b.Mul(b.Sum(x, ax), b.Scalar(b.DType(x), b.DType(x).Round(1/float64(s[ax]))))
}

// Permute reorders axes: output axis i is input axis perm[i].
func (b *Builder) Permute(x Value, perm ...int) Value {
	return b.Apply(OpPermute, Attrs{Perm: slices.Clone(perm)}, x)
}

// Transpose swaps two axes.
func (b *Builder) Transpose(x Value, i, j int) Value {
	if x < 0 {
		return NoValue
	}
	r := len(b.Shape(x))
	i, err1 := normAxis(i, r)
	j, err2 := normAxis(j, r)
	if err1 != nil || err2 != nil {
		return b.fail(fmt.Errorf("transpose axes %d and %d of rank %d", i, j, r))
	}
	perm := make([]int, r)
	for k := range perm {
		perm[k] = k
	}
	perm[i], perm[j] = j, i
	return b.Permute(x, perm...)
}

// Reshape changes the shape, keeping row-major order.
func (b *Builder) Reshape(x Value, shape ...Dim) Value {
	return b.Apply(OpReshape, Attrs{To: Shape(shape).Clone()}, x)
}

// Expand repeats extent-1 axes to shape (same rank).
func (b *Builder) Expand(x Value, shape ...Dim) Value {
	return b.Apply(OpExpand, Attrs{To: Shape(shape).Clone()}, x)
}

// Slice takes [start:end:step] along one axis and everything along the rest.
func (b *Builder) Slice(x Value, axis int, start, end, step int64) Value {
	if x < 0 {
		return NoValue
	}
	s := b.Shape(x)
	ax, err := normAxis(axis, len(s))
	if err != nil {
		return b.fail(fmt.Errorf("slice: %w", err))
	}
	a := Attrs{Starts: make([]int64, len(s)), Ends: make([]int64, len(s)), Steps: make([]int64, len(s))}
	for i, d := range s {
		a.Ends[i], a.Steps[i] = int64(d), 1
	}
	a.Starts[ax], a.Ends[ax], a.Steps[ax] = start, end, step
	return b.Apply(OpSlice, a, x)
}

// Pad adds value around x: before[i] and after[i] elements on axis i.
func (b *Builder) Pad(x Value, before, after []int64, value float64) Value {
	return b.Apply(OpPad, Attrs{Before: slices.Clone(before), After: slices.Clone(after), Value: value}, x)
}

// Concat joins values along axis.
func (b *Builder) Concat(axis int, xs ...Value) Value {
	return b.Apply(OpConcat, Attrs{Axis: axis}, xs...)
}

// Cast converts to another dtype.
func (b *Builder) Cast(x Value, dt DType) Value { return b.Apply(OpCast, Attrs{DType: dt}, x) }

// Gather picks entries of data along axis by integer indices.
func (b *Builder) Gather(data, indices Value, axis int) Value {
	return b.Apply(OpGather, Attrs{Axis: axis}, data, indices)
}

// SliceUpdate writes update into base at offset along axis.
func (b *Builder) SliceUpdate(base, update Value, axis int, offset int64) Value {
	return b.Apply(OpSliceUpdate, Attrs{Axis: axis, Offset: offset}, base, update)
}

// MatMul multiplies the last two axes, broadcasting batch axes.
func (b *Builder) MatMul(x, y Value) Value {
	if x < 0 || y < 0 {
		return NoValue
	}
	xs, ys := b.Shape(x), b.Shape(y)
	if len(xs) < 2 || len(ys) < 2 {
		return b.fail(fmt.Errorf("matmul of %v and %v: operands need rank 2 or more", xs, ys))
	}
	batch, err := BroadcastShapes(xs[:len(xs)-2], ys[:len(ys)-2])
	if err != nil {
		return b.fail(fmt.Errorf("matmul of %v and %v: %w", xs, ys, err))
	}
	x = b.BroadcastTo(x, append(batch.Clone(), xs[len(xs)-2:]...))
	y = b.BroadcastTo(y, append(batch.Clone(), ys[len(ys)-2:]...))
	return b.Apply(OpMatMul, Attrs{}, x, y)
}

// Softmax normalizes exp(x) along axis.
func (b *Builder) Softmax(x Value, axis int) Value { return b.Apply(OpSoftmax, Attrs{Axis: axis}, x) }

// LayerNorm normalizes over the last axis, then scales and shifts.
func (b *Builder) LayerNorm(x, scale, bias Value, eps float64) Value {
	return b.Apply(OpLayerNorm, Attrs{Eps: eps}, x, scale, bias)
}

// RMSNorm divides by the root mean square over the last axis, then scales.
func (b *Builder) RMSNorm(x, scale Value, eps float64) Value {
	return b.Apply(OpRMSNorm, Attrs{Eps: eps}, x, scale)
}

// Attention is softmax(q k^T * scale + causal mask) v with grouped key and
// value heads; offset is the position of the first query when causal.
func (b *Builder) Attention(q, k, v Value, scale float64, causal bool, offset int64) Value {
	return b.Apply(OpAttention, Attrs{Scale: scale, Causal: causal, Offset: offset}, q, k, v)
}

// Output names a result of the graph.
func (b *Builder) Output(name string, v Value) {
	if v < 0 {
		return
	}
	b.g.Outputs = append(b.g.Outputs, Output{Name: name, Value: v})
}

// UpdateState makes v the state buffer's content after a run.
func (b *Builder) UpdateState(state, v Value) {
	if state < 0 || v < 0 {
		return
	}
	b.g.Updates = append(b.g.Updates, StateUpdate{State: state, Value: v})
}

// Inline adds body's nodes to b with body's inputs, in order, bound to
// args, and returns body's outputs: a kernel body or a subgraph spliced
// into the graph being built.
func (b *Builder) Inline(body *Graph, args []Value) []Value {
	vals := make([]Value, len(body.Nodes))
	arg := 0
	for i, n := range body.Nodes {
		if n.Op == OpInput {
			if arg >= len(args) {
				b.fail(fmt.Errorf("inline %s: %d arguments for more inputs", body.Name, len(args)))
				return []Value{NoValue}
			}
			vals[i] = args[arg]
			arg++
			continue
		}
		ins := make([]Value, len(n.Inputs))
		for k, in := range n.Inputs {
			ins[k] = vals[in]
		}
		vals[i] = b.Apply(n.Op, n.Attrs, ins...)
	}
	outs := make([]Value, len(body.Outputs))
	for i, o := range body.Outputs {
		outs[i] = vals[o.Value]
	}
	return outs
}

// Inputs returns the inputs declared so far, in order.
func (b *Builder) Inputs() []Value { return b.g.Inputs() }
