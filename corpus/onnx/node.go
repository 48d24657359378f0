package onnx

import (
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// opDef is how one operator converts: fn builds the IR for a node given
// the version in effect, which is one of impl.
type opDef struct {
	fn   func(c *nodeCtx) ([]ir.Value, error)
	impl []int64
}

// handlers holds every operator the importer converts, filled by the
// ops_*.go files.
var handlers = map[string]opDef{}

// register adds an operator with the since_versions it implements.
func register(op string, fn func(c *nodeCtx) ([]ir.Value, error), impl ...int64) {
	if _, dup := handlers[op]; dup {
		panic("onnx: operator registered twice: " + op)
	}
	handlers[op] = opDef{fn: fn, impl: impl}
}

// nodeCtx is what a handler sees of its node: inputs as IR values of the
// builder it must use, the known values of constant inputs, the
// attributes, and the version in effect. Errors found while reading
// attributes are kept (the first one) and reported after the handler.
type nodeCtx struct {
	node    *onnxpb.NodeProto
	op      string
	version int64
	attrs   map[string]*onnxpb.AttributeProto
	used    map[string]bool
	inNames []string
	entries []*entry

	b     *ir.Builder
	ins   []ir.Value
	known map[ir.Value]*ir.Tensor
	err   error
}

// fail records the first error and returns NoValue, so that handlers can
// write `return c.outs(c.fail(...))`.
func (c *nodeCtx) fail(err error) ir.Value {
	if c.err == nil {
		c.err = err
	}
	return ir.NoValue
}

func (c *nodeCtx) failf(format string, args ...any) ir.Value {
	return c.fail(fmt.Errorf(format, args...))
}

func (c *nodeCtx) unsupportedf(format string, args ...any) ir.Value {
	return c.fail(unsupported(format, args...))
}

// n is the number of inputs the node lists (including empty optional ones).
func (c *nodeCtx) n() int { return len(c.ins) }

// has reports whether input i is given.
func (c *nodeCtx) has(i int) bool { return i < len(c.ins) && c.entries[i] != nil }

// in returns input i; a missing required input is an error.
func (c *nodeCtx) in(i int) ir.Value {
	if !c.has(i) {
		return c.failf("input %d is required", i)
	}
	return c.ins[i]
}

// shape and dtype of a value of the node's builder.
func (c *nodeCtx) shape(v ir.Value) ir.Shape { return c.b.Shape(v) }
func (c *nodeCtx) dtype(v ir.Value) ir.DType { return c.b.DType(v) }
func (c *nodeCtx) rank(v ir.Value) int       { return len(c.b.Shape(v)) }

// konstIn returns the value of input i when it is known at import time.
func (c *nodeCtx) konstIn(i int) *ir.Tensor {
	if !c.has(i) {
		return nil
	}
	return c.entries[i].c
}

// intsIn returns the elements of integer input i, which must be known at
// import time.
func (c *nodeCtx) intsIn(i int) []int64 {
	t := c.konstIn(i)
	if t == nil {
		if c.has(i) {
			c.fail(notConstant("input %d (%q) must be a constant known at import time", i, c.inNames[i]))
		} else {
			c.failf("input %d is required", i)
		}
		return nil
	}
	if !t.DType.IsInt() {
		c.failf("input %d (%q) is %s; want an integer tensor", i, c.inNames[i], t.DType)
		return nil
	}
	return slices.Clone(t.Int64s())
}

// konst makes a constant output whose value the importer knows.
func (c *nodeCtx) konst(t *ir.Tensor) ir.Value {
	v := constValue(c.b, t)
	if v >= 0 {
		c.known[v] = t
	}
	return v
}

// scalar is a rank-0 constant of dtype dt (x rounded to it; for an
// integer dtype, truncated and saturated as DType.IntOf, and exact).
func (c *nodeCtx) scalar(dt ir.DType, x float64) ir.Value {
	if dt.IsInt() {
		return c.intScalar(dt, dt.IntOf(x))
	}
	return c.b.Scalar(dt, dt.Round(x))
}

// intScalar is a rank-0 integer constant holding v exactly.
func (c *nodeCtx) intScalar(dt ir.DType, v int64) ir.Value {
	return c.b.ConstInts(dt, ir.Shape{}, v)
}

// attr returns attribute name if present, marking it handled and checking
// its type.
func (c *nodeCtx) attr(name string, typ onnxpb.AttributeProto_AttributeType) *onnxpb.AttributeProto {
	c.used[name] = true
	a := c.attrs[name]
	if a == nil {
		return nil
	}
	if a.GetType() != typ && !(a.GetType() == onnxpb.AttributeProto_UNDEFINED && typ != onnxpb.AttributeProto_UNDEFINED) {
		c.failf("attribute %q is %s; want %s", name, a.GetType(), typ)
		return nil
	}
	return a
}

// hasAttr reports whether the node sets attribute name.
func (c *nodeCtx) hasAttr(name string) bool { return c.attrs[name] != nil }

// ignore marks attributes that do not change the result (precision hints
// of a float64 reference, legacy annotations).
func (c *nodeCtx) ignore(names ...string) {
	for _, n := range names {
		c.used[n] = true
	}
}

func (c *nodeCtx) attrInt(name string, def int64) int64 {
	if a := c.attr(name, onnxpb.AttributeProto_INT); a != nil {
		return a.GetI()
	}
	return def
}

func (c *nodeCtx) attrFloat(name string, def float64) float64 {
	if a := c.attr(name, onnxpb.AttributeProto_FLOAT); a != nil {
		return float64(a.GetF())
	}
	return def
}

func (c *nodeCtx) attrString(name, def string) string {
	if a := c.attr(name, onnxpb.AttributeProto_STRING); a != nil {
		return string(a.GetS())
	}
	return def
}

// attrInts returns an INTS attribute and whether it is set.
func (c *nodeCtx) attrInts(name string) ([]int64, bool) {
	if a := c.attr(name, onnxpb.AttributeProto_INTS); a != nil {
		return a.GetInts(), true
	}
	return nil, false
}

// axis normalizes an axis attribute or input value for rank r.
func (c *nodeCtx) axis(a int64, r int) int {
	if a < -int64(r) || a >= int64(r) {
		c.failf("axis %d out of range for rank %d", a, r)
		return 0
	}
	if a < 0 {
		a += int64(r)
	}
	return int(a)
}

// outs returns its arguments as the handler's results.
func (c *nodeCtx) outs(vs ...ir.Value) ([]ir.Value, error) { return vs, nil }

// needFloat reports whether v is of a float type, recording an
// unsupported-type error when it is not.
func (c *nodeCtx) needFloat(v ir.Value) bool {
	if v < 0 {
		return false
	}
	if dt := c.dtype(v); !dt.IsFloat() {
		c.unsupportedf("%s of %s is not supported (it needs a float type)", c.op, dt)
		return false
	}
	return true
}

// lowest is the most negative finite value of a float dtype, which masked
// attention scores take (it behaves as -inf under softmax unless a whole
// row is masked, and keeps magnitudes finite).
func lowest(dt ir.DType) float64 {
	switch dt {
	case ir.F16:
		return -65504
	case ir.BF16:
		return float64(ir.BFloat16(0xff7f).Float32())
	}
	return -math.MaxFloat32
}

// shapeOf converts ONNX dimensions to an IR shape.
func shapeOf(dims []int64) ir.Shape {
	s := make(ir.Shape, len(dims))
	for i, d := range dims {
		s[i] = ir.Dim(d)
	}
	return s
}

// int64Tensor makes a known I64 tensor holding a copy of vals exactly.
func int64Tensor(shape ir.Shape, vals []int64) *ir.Tensor {
	return &ir.Tensor{DType: ir.I64, Shape: shape.Clone(), I64: append([]int64{}, vals...)}
}

// dims returns a shape as int64s.
func dims(s ir.Shape) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// errorf is fmt.Errorf, short for handlers.
var errorf = fmt.Errorf
