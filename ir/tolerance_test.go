package ir

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompareUnderflowFloor: a result that the output dtype cannot
// represent (below half its smallest subnormal) may come back as zero,
// while an error above the floor still fails.
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
