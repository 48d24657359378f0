package ir

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConvertExact(t *testing.T) {
	ints := func(dt DType, v ...int64) *Tensor {
		x, err := TensorOfInts(dt, Shape{Dim(len(v))}, v...)
		require.NoError(t, err)
		return x
	}
	floats := func(dt DType, v ...float64) *Tensor {
		x, err := TensorOf(dt, Shape{Dim(len(v))}, v...)
		require.NoError(t, err)
		return x
	}
	tests := []struct {
		name string
		in   *Tensor
		to   DType
		want []float64 // nil: an error containing err
		err  string
	}{
		{"i32 to i64", ints(I32, -7, 1<<30), I64, []float64{-7, 1 << 30}, ""},
		{"i64 to i32 in range", ints(I64, 3, -4), I32, []float64{3, -4}, ""},
		{"i64 to i32 beyond it", ints(I64, 3, 1<<40), I32, nil, "element 1 is 1099511627776, which i32 does not hold"},
		{"i64 to f32 exact", ints(I64, 1<<24, -5), F32, []float64{1 << 24, -5}, ""},
		{"i64 to f32 rounding", ints(I64, 1<<24+1), F32, nil, "element 0 is 16777217, which f32 does not hold"},
		{"i64 to bool", ints(I64, 0, 1, 1), Bool, []float64{0, 1, 1}, ""},
		{"i64 to bool beyond 0 and 1", ints(I64, 0, 2), Bool, nil, "element 1 is 2, which bool does not hold"},
		{"bool to i64", floats(Bool, 1, 0), I64, []float64{1, 0}, ""},
		{"f32 to bf16 exact", floats(F32, 1.5, -256, math.Inf(-1)), BF16, []float64{1.5, -256, math.Inf(-1)}, ""},
		{"f32 to bf16 rounding", floats(F32, 1.5, 1.001), BF16, nil, "element 1 is 1.00100004673004"},
		{"f32 beyond f16", floats(F32, 70000), F16, nil, "which f16 does not hold"},
		{"f32 to i64 whole", floats(F32, 2, -3), I64, []float64{2, -3}, ""},
		{"f32 to i64 fraction", floats(F32, 2.5), I64, nil, "element 0 is 2.5"},
		{"f32 infinity to i32", floats(F32, math.Inf(1)), I32, nil, "element 0 is +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.ConvertExact(tt.to)
			if tt.want == nil {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.to, got.DType)
			require.Equal(t, tt.want, got.Float64s())
		})
	}
	same := floats(F16, 1)
	got, err := same.ConvertExact(F16)
	require.NoError(t, err)
	require.Same(t, same, got)
}
