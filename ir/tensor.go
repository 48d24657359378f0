package ir

import (
	"fmt"
	"math"
	"slices"
)

// Tensor is a value the interpreter reads and produces: a dtype, a shape
// and one number per element in row-major order. Every element is a value
// of the dtype (rounded to it when the tensor is made), so that the float64
// truth starts from exactly what a device would hold.
//
// Elements live in exactly one of five slices. Integer dtypes live in
// integer storage, exactly: i64 in I64 (torch writes 2^63-1 as the end of
// every open slice, and float64 cannot hold it), i32 in I32 and u8 in U8,
// at their own width, since packed quantized weights are most of a
// quantized checkpoint (a 60 GiB MXFP4 model would take eight times that
// in int64). I64 storage of an i32 or u8 tensor is read correctly too
// (callers that fill tensors themselves may use it). Float dtypes live in
// F64, or in F32: every f32, f16 and bf16 value is exact in float32, and
// weights of a large model take half the memory that way. Bool lives in
// F64 (0 or 1). F64 storage of an integer tensor is still read correctly,
// but is exact only up to 2^53.
//
// At reads any element as float64; Int reads it as an exact integer; Set
// and SetInt write one element, converting to the storage.
type Tensor struct {
	DType DType
	Shape Shape
	F64   []float64
	F32   []float32
	I64   []int64
	I32   []int32
	U8    []uint8
}

// NewTensor makes a tensor of zeros, with integer storage of the dtype's
// width for integer dtypes and F64 storage otherwise.
func NewTensor(dt DType, shape Shape) *Tensor {
	t := &Tensor{DType: dt, Shape: shape.Clone()}
	n := shape.NumElements()
	switch dt {
	case I64:
		t.I64 = make([]int64, n)
	case I32:
		t.I32 = make([]int32, n)
	case U8:
		t.U8 = make([]uint8, n)
	default:
		t.F64 = make([]float64, n)
	}
	return t
}

// TensorOfBytes makes a u8 tensor that keeps values as its storage.
func TensorOfBytes(shape Shape, values []uint8) (*Tensor, error) {
	if err := shape.Check(); err != nil {
		return nil, err
	}
	if int64(len(values)) != shape.NumElements() {
		return nil, fmt.Errorf("tensor u8%v: %d values; want %d", shape, len(values), shape.NumElements())
	}
	return &Tensor{DType: U8, Shape: shape.Clone(), U8: values}, nil
}

// intStorage says whether the tensor keeps its elements in one of the
// integer slices.
func (t *Tensor) intStorage() bool { return t.I64 != nil || t.I32 != nil || t.U8 != nil }

// newMagnitudes makes the magnitude tensor of a value of type dt: always
// float64 storage, since a magnitude is an error bound, not a value of dt.
func newMagnitudes(dt DType, shape Shape) *Tensor {
	return &Tensor{DType: dt, Shape: shape.Clone(), F64: make([]float64, shape.NumElements())}
}

// TensorOfInts makes an integer or bool tensor from exact values, wrapping
// each to the dtype (two's complement for i32, x != 0 for bool). One value
// fills the whole tensor.
func TensorOfInts(dt DType, shape Shape, values ...int64) (*Tensor, error) {
	if !dt.IsInt() && dt != Bool {
		return nil, fmt.Errorf("integer values for a %s tensor", dt)
	}
	if err := shape.Check(); err != nil {
		return nil, err
	}
	n := shape.NumElements()
	if int64(len(values)) != n && len(values) != 1 {
		return nil, fmt.Errorf("tensor %s%v: %d values; want %d", dt, shape, len(values), n)
	}
	t := NewTensor(dt, shape)
	for i := range n {
		v := values[0]
		if len(values) > 1 {
			v = values[i]
		}
		t.SetInt(i, v)
	}
	return t, nil
}

// TensorOf makes a tensor from values, rounding each to the dtype. One
// value fills the whole tensor.
func TensorOf(dt DType, shape Shape, values ...float64) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor of invalid dtype")
	}
	if err := shape.Check(); err != nil {
		return nil, err
	}
	n := shape.NumElements()
	if int64(len(values)) != n && len(values) != 1 {
		return nil, fmt.Errorf("tensor %s%v: %d values; want %d", dt, shape, len(values), n)
	}
	t := NewTensor(dt, shape)
	for i := range n {
		v := values[0]
		if len(values) > 1 {
			v = values[i]
		}
		t.Set(i, v)
	}
	return t, nil
}

// TensorOfFloat32 makes a float tensor that keeps float32 storage, rounding
// each value to the dtype in place (f16 and bf16 values are exact in
// float32). The slice becomes the tensor's.
func TensorOfFloat32(dt DType, shape Shape, values []float32) (*Tensor, error) {
	if !dt.IsFloat() {
		return nil, fmt.Errorf("float32 storage for %s", dt)
	}
	if int64(len(values)) != shape.NumElements() {
		return nil, fmt.Errorf("tensor %s%v: %d values; want %d", dt, shape, len(values), shape.NumElements())
	}
	if dt != F32 {
		for i, v := range values {
			values[i] = float32(dt.Round(float64(v)))
		}
	}
	return &Tensor{DType: dt, Shape: shape.Clone(), F32: values}, nil
}

// Len is the number of elements.
func (t *Tensor) Len() int64 { return t.Shape.NumElements() }

// At returns element i in row-major order, as float64 (the nearest
// float64 for integers beyond 2^53).
func (t *Tensor) At(i int64) float64 {
	switch {
	case t.F32 != nil:
		return float64(t.F32[i])
	case t.I64 != nil:
		return float64(t.I64[i])
	case t.I32 != nil:
		return float64(t.I32[i])
	case t.U8 != nil:
		return float64(t.U8[i])
	}
	return t.F64[i]
}

// Int returns element i as an integer: exact for integer storage, and for
// float storage the value truncated toward zero, saturating at the int64
// range (NaN reads as 0), as a cast to i64 does.
func (t *Tensor) Int(i int64) int64 {
	switch {
	case t.I64 != nil:
		return t.I64[i]
	case t.I32 != nil:
		return int64(t.I32[i])
	case t.U8 != nil:
		return int64(t.U8[i])
	}
	return I64.IntOf(t.At(i))
}

// Set writes x to element i, rounded to the dtype (for an integer dtype,
// truncated and wrapped as DType.IntOf does).
func (t *Tensor) Set(i int64, x float64) {
	switch {
	case t.intStorage():
		t.setInt(i, t.DType.IntOf(x))
	case t.F32 != nil:
		t.F32[i] = float32(t.DType.Round(x))
	default:
		t.F64[i] = t.DType.Round(x)
	}
}

// setInt stores v, already a value of the dtype, in integer storage.
func (t *Tensor) setInt(i int64, v int64) {
	switch {
	case t.I64 != nil:
		t.I64[i] = v
	case t.I32 != nil:
		t.I32[i] = int32(v)
	default:
		t.U8[i] = uint8(v)
	}
}

// SetInt writes the integer v to element i, wrapped to the dtype; float
// storage gets the nearest float value of the dtype.
func (t *Tensor) SetInt(i int64, v int64) {
	switch {
	case t.intStorage():
		t.setInt(i, t.DType.WrapInt(v))
	case t.F32 != nil:
		t.F32[i] = float32(t.DType.Round(float64(v)))
	default:
		if t.DType.IsInt() || t.DType == Bool {
			t.F64[i] = float64(t.DType.WrapInt(v))
		} else {
			t.F64[i] = t.DType.Round(float64(v))
		}
	}
}

// Float64s returns the elements as float64, sharing storage when the
// tensor has it in that form.
func (t *Tensor) Float64s() []float64 {
	switch {
	case t.F32 != nil:
		out := make([]float64, len(t.F32))
		for i, v := range t.F32 {
			out[i] = float64(v)
		}
		return out
	case t.intStorage():
		out := make([]float64, t.StorageLen())
		for i := range out {
			out[i] = t.At(int64(i))
		}
		return out
	}
	return t.F64
}

// Int64s returns the elements as int64 (see Int), sharing storage when
// the tensor has it in that form.
func (t *Tensor) Int64s() []int64 {
	if t.I64 != nil {
		return t.I64
	}
	out := make([]int64, t.StorageLen())
	for i := range out {
		out[i] = t.Int(int64(i))
	}
	return out
}

// StorageLen is the number of elements the tensor's storage holds (the
// length of whichever slice it uses).
func (t *Tensor) StorageLen() int {
	switch {
	case t.F32 != nil:
		return len(t.F32)
	case t.I64 != nil:
		return len(t.I64)
	case t.I32 != nil:
		return len(t.I32)
	case t.U8 != nil:
		return len(t.U8)
	}
	return len(t.F64)
}

// CheckStorage says what is wrong with a tensor's storage for its dtype
// and shape: more than one slice, a slice the dtype cannot live in, or
// the wrong number of elements.
func (t *Tensor) CheckStorage() error {
	used := 0
	for _, in := range []bool{t.F64 != nil, t.F32 != nil, t.I64 != nil, t.I32 != nil, t.U8 != nil} {
		if in {
			used++
		}
	}
	switch {
	case used > 1:
		return fmt.Errorf("%s%v in %d storages at once", t.DType, t.Shape, used)
	case int64(t.StorageLen()) != t.Shape.NumElements():
		return fmt.Errorf("%s%v holds the wrong number of elements", t.DType, t.Shape)
	case t.F32 != nil && !t.DType.IsFloat():
		return fmt.Errorf("%s%v in float32 storage", t.DType, t.Shape)
	case t.I64 != nil && !t.DType.IsInt():
		return fmt.Errorf("%s%v in integer storage", t.DType, t.Shape)
	case t.I32 != nil && t.DType != I32:
		return fmt.Errorf("%s%v in int32 storage", t.DType, t.Shape)
	case t.U8 != nil && t.DType != U8:
		return fmt.Errorf("%s%v in byte storage", t.DType, t.Shape)
	}
	if t.I64 != nil && t.DType != I64 {
		// Wider storage must hold values of the dtype: the interpreter
		// reads what is stored, a device the value wrapped to the dtype.
		for i, v := range t.I64 {
			if t.DType.WrapInt(v) != v {
				return fmt.Errorf("%s%v element %d is %d, not a value of %s", t.DType, t.Shape, i, v, t.DType)
			}
		}
	}
	return nil
}

// Clone is a copy of the tensor that shares no storage with it.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{DType: t.DType, Shape: t.Shape.Clone(), F64: slices.Clone(t.F64), F32: slices.Clone(t.F32),
		I64: slices.Clone(t.I64), I32: slices.Clone(t.I32), U8: slices.Clone(t.U8)}
}

// check verifies that a tensor fed to the interpreter matches what the
// graph declares.
func (t *Tensor) check(dt DType, shape Shape) error {
	if t == nil {
		return fmt.Errorf("no tensor")
	}
	if t.DType != dt || !t.Shape.Equal(shape) {
		return fmt.Errorf("got %s%v, want %s%v", t.DType, t.Shape, dt, shape)
	}
	return t.CheckStorage()
}

// String prints small tensors in full and large ones by their type.
func (t *Tensor) String() string {
	if t.Len() > 16 {
		return fmt.Sprintf("%s%v{...}", t.DType, t.Shape)
	}
	s := fmt.Sprintf("%s%v{", t.DType, t.Shape)
	for i := range t.Len() {
		if i > 0 {
			s += ", "
		}
		if t.intStorage() {
			s += fmt.Sprint(t.Int(i))
		} else {
			s += fmt.Sprint(t.At(i))
		}
	}
	return s + "}"
}

// isFinite is a helper for stress generators and checks.
func isFinite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }
