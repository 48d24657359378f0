package ir

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompareUnderflowFloor: a result that the output dtype cannot
// represent (below half its smallest subnormal) may come back as zero; an
// f32 or bf16 result in the subnormal range (below 2^-126) may be flushed
// or off by any subnormal amount, as on a GPU in FTZ mode; an error above
// the floor still fails.
func TestCompareUnderflowFloor(t *testing.T) {
	tests := []struct {
		dt       DType
		got      float64
		want     float64
		mismatch bool
	}{
		{F16, 0, -1.7e-9, false},
		{F16, 0, -2.5e-8, false},
		{F16, 0, -4e-8, true},
		{F32, 0, -5e-46, false},
		{F32, 0, -1e-30, true},
		{BF16, 0, -1e-30, true},
		{F32, -1.0355595651360398e-42, -5.526997745342769e-43, false}, // silu of a large negative input
		{F32, 0, -1.1e-38, false},
		{F32, 0, -1.3e-38, true},
		{F32, 2.4e-38, 1.2e-38, true},
		{BF16, 0, -1e-39, false},
		{F16, 6e-6, 3e-6, true}, // f16 subnormals are values
	}
	for _, tt := range tests {
		got, err := TensorOf(tt.dt, Shape{1}, tt.got)
		require.NoError(t, err)
		want := NewTensor(tt.dt, Shape{1}) // the float64 truth, unrounded
		want.F64[0] = tt.want
		mm, err := Compare(got, want, nil, 16)
		require.NoError(t, err)
		assert.Equal(t, tt.mismatch, mm != nil, "%s: got %g want %g: %v", tt.dt, tt.got, tt.want, mm)
	}
}
