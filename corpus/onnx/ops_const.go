package onnx

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// Constants, casts and Range: operators whose results the importer often
// knows outright.

func init() {
	register("Constant", opConstant, 1, 9, 11, 12, 13, 19, 21, 23, 24, 25)
	register("ConstantOfShape", opConstantOfShape, 9, 20, 21, 23, 24, 25)
	register("Range", opRange, 11)
	register("Cast", opCast, 6, 9, 13, 19, 21, 23, 24, 25)
	register("CastLike", opCast, 15, 19, 21, 23, 24, 25)
}

// attrTensor converts a TENSOR attribute.
func (c *nodeCtx) attrTensor(name string) *ir.Tensor {
	a := c.attr(name, onnxpb.AttributeProto_TENSOR)
	if a == nil {
		return nil
	}
	t, err := newTensor(a.GetT(), fmt.Sprintf("attribute %q", name))
	if err != nil {
		c.fail(err)
		return nil
	}
	if t.IsExternal() {
		c.unsupportedf("attribute %q: a tensor attribute with external data is not supported", name)
		return nil
	}
	x, err := t.IRTensor()
	if err != nil {
		c.fail(err)
		return nil
	}
	return x
}

func opConstant(c *nodeCtx) ([]ir.Value, error) {
	var set []string
	for name := range c.attrs {
		set = append(set, name)
	}
	if len(set) != 1 {
		return nil, errorf("want exactly one value attribute, got %v", set)
	}
	var t *ir.Tensor
	switch name := set[0]; name {
	case "value":
		t = c.attrTensor(name)
	case "value_float":
		t, _ = ir.TensorOf(ir.F32, ir.Shape{}, c.attrFloat(name, 0))
	case "value_floats":
		a := c.attr(name, onnxpb.AttributeProto_FLOATS)
		if a != nil {
			vals := make([]float32, len(a.GetFloats()))
			copy(vals, a.GetFloats())
			t, _ = ir.TensorOfFloat32(ir.F32, ir.Shape{ir.Dim(len(vals))}, vals)
		}
	case "value_int":
		t = int64Tensor(ir.Shape{}, []int64{c.attrInt(name, 0)})
	case "value_ints":
		vals, _ := c.attrInts(name)
		t = int64Tensor(ir.Shape{ir.Dim(len(vals))}, vals)
	case "value_string", "value_strings":
		c.ignore(name)
		return nil, unsupportedDType(onnxpb.TensorProto_STRING)
	case "sparse_value":
		c.ignore(name)
		return nil, unsupported("sparse_value is not supported")
	default:
		c.ignore(name)
		return nil, unsupported("attribute %q is not supported", name)
	}
	if t == nil {
		return nil, c.err
	}
	return c.outs(c.konst(t))
}

func opConstantOfShape(c *nodeCtx) ([]ir.Value, error) {
	val := c.attrTensor("value")
	spec := c.intsIn(0)
	if c.err != nil {
		return nil, c.err
	}
	shape := shapeOf(spec)
	if err := shape.Check(); err != nil {
		return nil, err
	}
	fill := ir.NewTensor(ir.F32, ir.Shape{})
	if val != nil {
		if val.Len() != 1 {
			return nil, errorf("value has %d elements; want one", val.Len())
		}
		fill = val
	}
	dt := fill.DType
	if shape.NumElements() > foldLimit {
		if dt.IsInt() {
			return c.outs(c.b.ConstInts(dt, shape, fill.Int(0)))
		}
		return c.outs(c.b.Const(dt, shape, fill.At(0)))
	}
	var t *ir.Tensor
	var err error
	if dt.IsInt() || dt == ir.Bool {
		t, err = ir.TensorOfInts(dt, shape, fill.Int(0))
	} else {
		t, err = ir.TensorOf(dt, shape, fill.At(0))
	}
	if err != nil {
		return nil, err
	}
	return c.outs(c.konst(t))
}

// opRange computes start, start+delta, ... below limit at import time; a
// Range over values known only at run time has no static shape and is
// not supported. Integer ranges are computed exactly: their length is
// ceil((limit - start) / delta) in integers, and every value lies between
// start and limit, so none wraps.
func opRange(c *nodeCtx) ([]ir.Value, error) {
	var ks [3]*ir.Tensor
	dt := ir.InvalidDType
	for i := range 3 {
		t := c.konstIn(i)
		if t == nil {
			if !c.has(i) {
				return nil, errorf("input %d is required", i)
			}
			return nil, notConstant("Range of values not known at import time is not supported (its length would not be static)")
		}
		if t.Len() != 1 {
			return nil, errorf("input %d has %d elements; want a scalar", i, t.Len())
		}
		if dt == ir.InvalidDType {
			dt = t.DType
		} else if t.DType != dt {
			return nil, errorf("inputs of types %s and %s", dt, t.DType)
		}
		ks[i] = t
	}
	if dt == ir.Bool {
		return nil, errorf("Range of bool")
	}
	if dt.IsInt() {
		return intRange(c, dt, ks[0].Int(0), ks[1].Int(0), ks[2].Int(0))
	}
	start, limit, delta := ks[0].At(0), ks[1].At(0), ks[2].At(0)
	if delta == 0 {
		return nil, errorf("Range with delta 0")
	}
	n := math.Max(math.Ceil((limit-start)/delta), 0)
	if n > 1<<40 || math.IsNaN(n) {
		return nil, errorf("Range from %v to %v by %v has %v elements: too long", start, limit, delta, n)
	}
	if n > foldLimit {
		// Too long to hold at import time: start + i*delta in the graph.
		i := c.b.Iota(dt, ir.Shape{ir.Dim(n)}, 0)
		return c.outs(c.b.Add(c.b.Mul(i, c.scalar(dt, delta)), c.scalar(dt, start)))
	}
	vals := make([]float64, int(n))
	for i := range vals {
		vals[i] = start + float64(i)*delta
	}
	t, err := ir.TensorOf(dt, ir.Shape{ir.Dim(len(vals))}, vals...)
	if err != nil {
		return nil, err
	}
	return c.outs(c.konst(t))
}

// intRange is Range over integers of dtype dt.
func intRange(c *nodeCtx, dt ir.DType, start, limit, delta int64) ([]ir.Value, error) {
	if delta == 0 {
		return nil, errorf("Range with delta 0")
	}
	n := rangeLen(start, limit, delta)
	if n > 1<<40 {
		return nil, errorf("Range from %d to %d by %d has %d elements: too long", start, limit, delta, n)
	}
	if n > foldLimit {
		i := c.b.Iota(dt, ir.Shape{ir.Dim(n)}, 0)
		return c.outs(c.b.Add(c.b.Mul(i, c.intScalar(dt, delta)), c.intScalar(dt, start)))
	}
	vals := make([]int64, n)
	for i := range vals {
		vals[i] = start + int64(i)*delta
	}
	t, err := ir.TensorOfInts(dt, ir.Shape{ir.Dim(n)}, vals...)
	if err != nil {
		return nil, err
	}
	return c.outs(c.konst(t))
}

// rangeLen is max(ceil((limit - start) / delta), 0) for delta != 0, in
// integers: limit - start may not fit in an int64, so the distance is
// taken in uint64, where it always fits.
func rangeLen(start, limit, delta int64) uint64 {
	var dist, step uint64
	switch {
	case delta > 0 && limit > start:
		dist, step = uint64(limit)-uint64(start), uint64(delta)
	case delta < 0 && limit < start:
		dist, step = uint64(start)-uint64(limit), -uint64(delta)
	default:
		return 0
	}
	return (dist-1)/step + 1
}

// opCast converts to the type attribute "to" (Cast) or to the second
// input's type (CastLike). Float to integer truncates toward zero, as the
// IR's cast does. saturate and round_mode only concern float8 targets,
// which the IR lacks.
func opCast(c *nodeCtx) ([]ir.Value, error) {
	c.ignore("saturate", "round_mode")
	x := c.in(0)
	var to ir.DType
	if c.op == "Cast" {
		if !c.hasAttr("to") {
			return nil, errorf("attribute to is required")
		}
		odt := onnxpb.TensorProto_DataType(c.attrInt("to", 0))
		dt, ok := irDType(odt)
		if !ok {
			return nil, unsupportedDType(odt)
		}
		to = dt
	} else {
		like := c.in(1)
		if like < 0 {
			return nil, c.err
		}
		to = c.dtype(like)
		if k := c.konstIn(0); k != nil {
			// The result is known even when the second input, which
			// gives only a type, is not.
			t, err := castKnown(k, to)
			if err != nil {
				return nil, err
			}
			return c.outs(c.konst(t))
		}
	}
	if x < 0 || c.err != nil {
		return nil, c.err
	}
	if c.dtype(x) == to {
		return c.outs(x)
	}
	return c.outs(c.b.Cast(x, to))
}

// castKnown converts a known tensor to dtype to as the IR's cast does:
// exactly between integers (wrapping), truncating and saturating from
// floats to integers, and to the nearest value otherwise.
func castKnown(k *ir.Tensor, to ir.DType) (*ir.Tensor, error) {
	if to.IsInt() || to == ir.Bool {
		vals := make([]int64, k.Len())
		for i := range vals {
			if k.DType.IsInt() {
				vals[i] = k.Int(int64(i))
			} else {
				vals[i] = to.IntOf(k.At(int64(i)))
			}
		}
		return ir.TensorOfInts(to, k.Shape, vals...)
	}
	return ir.TensorOf(to, k.Shape, k.Float64s()...)
}
