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
// Elements live in F64, or, for float dtypes, in F32: every f32, f16 and
// bf16 value is exact in float32, and weights of a large model take half
// the memory that way.
type Tensor struct {
	DType DType
	Shape Shape
	F64   []float64
	F32   []float32
}

// NewTensor makes a tensor of zeros.
func NewTensor(dt DType, shape Shape) *Tensor {
	return &Tensor{DType: dt, Shape: shape.Clone(), F64: make([]float64, shape.NumElements())}
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
	for i := range t.F64 {
		v := values[0]
		if len(values) > 1 {
			v = values[i]
		}
		t.F64[i] = dt.Round(v)
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

// At returns element i in row-major order.
func (t *Tensor) At(i int64) float64 {
	if t.F32 != nil {
		return float64(t.F32[i])
	}
	return t.F64[i]
}

// Float64s returns the elements as float64, sharing storage when the
// tensor has it in that form.
func (t *Tensor) Float64s() []float64 {
	if t.F32 == nil {
		return t.F64
	}
	out := make([]float64, len(t.F32))
	for i, v := range t.F32 {
		out[i] = float64(v)
	}
	return out
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
	n := t.Shape.NumElements()
	if (t.F32 == nil && int64(len(t.F64)) != n) || (t.F32 != nil && int64(len(t.F32)) != n) {
		return fmt.Errorf("%s%v holds the wrong number of elements", t.DType, t.Shape)
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
		s += fmt.Sprint(t.At(i))
	}
	return s + "}"
}

// isFinite is a helper for stress generators and checks.
func isFinite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }
