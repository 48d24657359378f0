package ir

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Integer tensors keep their elements at the dtype's own width (a packed
// quantized checkpoint is mostly u8 and i32), and every accessor reads and
// writes them as the dtype's values: wrapped on SetInt, truncated and
// wrapped on Set.
func TestIntegerStorageWidth(t *testing.T) {
	tests := []struct {
		dt      DType
		width   func(*Tensor) int
		in      []int64 // written with SetInt
		want    []int64 // read back with Int
		fromF64 float64 // written with Set
		wantF64 int64
	}{
		{U8, func(t *Tensor) int { return len(t.U8) }, []int64{0, 255, 256, -1, 300}, []int64{0, 255, 0, 255, 44}, 257.9, 1},
		{I32, func(t *Tensor) int { return len(t.I32) }, []int64{math.MaxInt32, math.MaxInt32 + 1, -7, 1 << 40}, []int64{math.MaxInt32, math.MinInt32, -7, 0}, -3.7, -3},
		{I64, func(t *Tensor) int { return len(t.I64) }, []int64{math.MaxInt64, math.MinInt64, 1<<53 + 1}, []int64{math.MaxInt64, math.MinInt64, 1<<53 + 1}, 9.5, 9},
	}
	for _, tt := range tests {
		t.Run(tt.dt.String(), func(t *testing.T) {
			n := len(tt.in) + 1
			x := NewTensor(tt.dt, Shape{Dim(n)})
			require.Equal(t, n, tt.width(x), "storage of the dtype's own width")
			require.NoError(t, x.CheckStorage())
			for i, v := range tt.in {
				x.SetInt(int64(i), v)
			}
			x.Set(int64(len(tt.in)), tt.fromF64)
			want := append(append([]int64{}, tt.want...), tt.wantF64)
			assert.Equal(t, want, x.Int64s())
			for i, v := range want {
				assert.Equal(t, v, x.Int(int64(i)))
				assert.Equal(t, float64(v), x.At(int64(i)))
				assert.Equal(t, float64(v), x.Float64s()[i])
			}
			// The interpreter copies and casts through the same storage.
			y, err := TensorOfInts(tt.dt, Shape{Dim(n)}, want...)
			require.NoError(t, err)
			assert.Equal(t, x, y)
		})
	}
}

// TensorOfBytes keeps the slice as the tensor's storage.
func TestTensorOfBytes(t *testing.T) {
	b := []uint8{1, 2, 3, 4, 5, 6}
	x, err := TensorOfBytes(Shape{2, 3}, b)
	require.NoError(t, err)
	b[4] = 99
	assert.Equal(t, int64(99), x.Int(4), "the slice is the storage, not a copy")
	assert.Equal(t, "u8[2,3]{1, 2, 3, 4, 99, 6}", x.String())
	_, err = TensorOfBytes(Shape{4}, b)
	assert.ErrorContains(t, err, "6 values; want 4")
}

// Storage that disagrees with the dtype or the shape is refused, as the
// interpreter's feeds check it.
func TestCheckStorageRefusals(t *testing.T) {
	tests := []struct {
		name string
		t    *Tensor
		want string
	}{
		{"bytes for i32", &Tensor{DType: I32, Shape: Shape{2}, U8: []uint8{1, 2}}, "i32[2] in byte storage"},
		{"int32 for u8", &Tensor{DType: U8, Shape: Shape{2}, I32: []int32{1, 2}}, "u8[2] in int32 storage"},
		{"int32 for f32", &Tensor{DType: F32, Shape: Shape{1}, I32: []int32{1}}, "f32[1] in int32 storage"},
		{"float32 for i64", &Tensor{DType: I64, Shape: Shape{1}, F32: []float32{1}}, "i64[1] in float32 storage"},
		{"int64 for bf16", &Tensor{DType: BF16, Shape: Shape{1}, I64: []int64{1}}, "bf16[1] in integer storage"},
		{"two storages", &Tensor{DType: U8, Shape: Shape{1}, U8: []uint8{1}, I64: []int64{1}}, "u8[1] in 2 storages at once"},
		{"short", &Tensor{DType: U8, Shape: Shape{3}, U8: []uint8{1, 2}}, "u8[3] holds the wrong number of elements"},
		{"wide u8 out of range", &Tensor{DType: U8, Shape: Shape{2}, I64: []int64{7, 300}}, "u8[2] element 1 is 300, not a value of u8"},
		{"wide i32 out of range", &Tensor{DType: I32, Shape: Shape{1}, I64: []int64{1 << 31}}, "i32[1] element 0 is 2147483648, not a value of i32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.EqualError(t, tt.t.CheckStorage(), tt.want)
		})
	}
	// I64 storage of a narrower integer dtype is still accepted and read.
	wide := &Tensor{DType: U8, Shape: Shape{2}, I64: []int64{7, 255}}
	require.NoError(t, wide.CheckStorage())
	assert.Equal(t, []int64{7, 255}, wide.Int64s())
}

// A clone shares no storage, whichever slice holds the elements.
func TestCloneSharesNothing(t *testing.T) {
	for _, dt := range []DType{U8, I32, I64, F32, BF16, Bool} {
		x := NewTensor(dt, Shape{3})
		x.SetInt(1, 1)
		c := x.Clone()
		require.Equal(t, x, c, dt)
		c.SetInt(1, 0)
		assert.Equal(t, int64(1), x.Int(1), "%s: the clone's write reached the original", dt)
	}
	f, err := TensorOfFloat32(F32, Shape{1}, []float32{2})
	require.NoError(t, err)
	c := f.Clone()
	c.Set(0, 3)
	assert.Equal(t, 2.0, f.At(0))
}
