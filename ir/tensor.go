package ir

import (
	"fmt"
	"math"
)

// Tensor is a value the interpreter reads and produces: a dtype, a shape
// and one number per element in row-major order. Every element is a value
// of the dtype (rounded to it when the tensor is made), so that the float64
// truth starts from exactly what a device would hold.
//
// Elements live in exactly one of three slices. Integer dtypes (i32, i64)
// live in I64, exactly: torch writes 2^63-1 as the end of every open slice,
// and float64 cannot hold it. Float dtypes live in F64, or in F32: every
// f32, f16 and bf16 value is exact in float32, and weights of a large model
// take half the memory that way. Bool lives in F64 (0 or 1). F64 storage of
// an integer tensor is still read correctly (callers that fill tensors
// themselves may use it), but is exact only up to 2^53.
//
// At reads any element as float64; Int reads it as an exact integer; Set
// and SetInt write one element, converting to the storage.
type Tensor struct {
	DType DType
	Shape Shape
	F64   []float64
	F32   []float32
	I64   []int64
}

// NewTensor makes a tensor of zeros, with I64 storage for integer dtypes
// and F64 storage otherwise.
func NewTensor(dt DType, shape Shape) *Tensor {
	if dt.IsInt() {
		return &Tensor{DType: dt, Shape: shape.Clone(), I64: make([]int64, shape.NumElements())}
	}
	return &Tensor{DType: dt, Shape: shape.Clone(), F64: make([]float64, shape.NumElements())}
}

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
	}
	return t.F64[i]
}

// Int returns element i as an integer: exact for integer storage, and for
// float storage the value truncated toward zero, saturating at the int64
// range (NaN reads as 0), as a cast to i64 does.
func (t *Tensor) Int(i int64) int64 {
	if t.I64 != nil {
		return t.I64[i]
	}
	return I64.IntOf(t.At(i))
}

// Set writes x to element i, rounded to the dtype (for an integer dtype,
// truncated and wrapped as DType.IntOf does).
func (t *Tensor) Set(i int64, x float64) {
	switch {
	case t.I64 != nil:
		t.I64[i] = t.DType.IntOf(x)
	case t.F32 != nil:
		t.F32[i] = float32(t.DType.Round(x))
	default:
		t.F64[i] = t.DType.Round(x)
	}
}

// SetInt writes the integer v to element i, wrapped to the dtype; float
// storage gets the nearest float value of the dtype.
func (t *Tensor) SetInt(i int64, v int64) {
	switch {
	case t.I64 != nil:
		t.I64[i] = t.DType.WrapInt(v)
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
	case t.I64 != nil:
		out := make([]float64, len(t.I64))
		for i, v := range t.I64 {
			out[i] = float64(v)
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
	out := make([]int64, t.Len())
	for i := range out {
		out[i] = t.Int(int64(i))
	}
	return out
}

// StorageLen is the number of elements the tensor's storage holds (the
// length of whichever of F32, I64 and F64 it uses).
func (t *Tensor) StorageLen() int {
	switch {
	case t.F32 != nil:
		return len(t.F32)
	case t.I64 != nil:
		return len(t.I64)
	}
	return len(t.F64)
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
	if int64(t.StorageLen()) != t.Shape.NumElements() {
		return fmt.Errorf("%s%v holds the wrong number of elements", t.DType, t.Shape)
	}
	if t.I64 != nil && !t.DType.IsInt() {
		return fmt.Errorf("%s%v in integer storage", t.DType, t.Shape)
	}
	return nil
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
		if t.I64 != nil {
			s += fmt.Sprint(t.I64[i])
		} else {
			s += fmt.Sprint(t.At(i))
		}
	}
	return s + "}"
}

// isFinite is a helper for stress generators and checks.
func isFinite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }
