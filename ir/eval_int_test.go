package ir

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Integer tensors, constants and arithmetic are exact: values beyond 2^53
// (torch's 2^63-1 open slice end above all) survive every step.

const p53Plus = 1<<53 + 1 // the least positive integer float64 cannot hold

// evalOut builds a one-output graph and evaluates it on feeds.
func evalOut(t *testing.T, build func(b *Builder) Value, feeds map[string]*Tensor) (*Tensor, error) {
	t.Helper()
	b := NewBuilder("t")
	b.Output("y", build(b))
	g, err := b.Build()
	require.NoError(t, err)
	res, err := Eval(context.Background(), g, feeds, EvalOptions{Magnitude: true})
	if err != nil {
		return nil, err
	}
	return res.Outputs["y"], nil
}

func TestTensorIntsAreExact(t *testing.T) {
	tests := []struct {
		dt   DType
		in   []int64
		want []int64
	}{
		{I64, []int64{math.MaxInt64, math.MinInt64, p53Plus}, []int64{math.MaxInt64, math.MinInt64, p53Plus}},
		{I32, []int64{math.MaxInt32 + 1, -1 << 32, 7}, []int64{math.MinInt32, 0, 7}}, // wrapped
		{Bool, []int64{0, -5, math.MinInt64}, []int64{0, 1, 1}},
	}
	for _, tt := range tests {
		x, err := TensorOfInts(tt.dt, Shape{3}, tt.in...)
		require.NoError(t, err)
		assert.Equal(t, tt.want, append([]int64{}, x.Int64s()...), "%s", tt.dt)
	}
	_, err := TensorOfInts(F32, Shape{1}, 1)
	assert.ErrorContains(t, err, "integer values for a f32 tensor")
	_, err = TensorOfInts(I64, Shape{2}, 1, 2, 3)
	assert.ErrorContains(t, err, "3 values; want 2")
}

// A constant holds its integers exactly; 2^63, which is what float64
// makes of 2^63-1, is refused rather than read as either.
func TestConstIntsAreExact(t *testing.T) {
	got, err := evalOut(t, func(b *Builder) Value {
		return b.ConstInts(I64, Shape{4}, math.MaxInt64, math.MinInt64, p53Plus, -p53Plus)
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MaxInt64, math.MinInt64, p53Plus, -p53Plus}, got.Int64s())

	b := NewBuilder("t")
	b.Output("y", b.Const(I64, Shape{1}, float64(math.MaxInt64)))
	_, err = b.Build()
	assert.ErrorContains(t, err, "is not a i64")

	b = NewBuilder("t")
	b.Output("y", b.ConstInts(I32, Shape{1}, math.MaxInt32+1))
	_, err = b.Build()
	assert.ErrorContains(t, err, "constant value 2147483648 is not a i32")
}

func TestIntArithmetic(t *testing.T) {
	tests := []struct {
		name    string
		op      Op
		dt      DType
		a, b    int64
		want    int64
		wantErr string
	}{
		{"add at the top", OpAdd, I64, math.MaxInt64 - 1, 1, math.MaxInt64, ""},
		{"add wraps", OpAdd, I64, math.MaxInt64, 1, math.MinInt64, ""},
		{"add past 2^53", OpAdd, I64, 1 << 53, 1, p53Plus, ""},
		{"sub wraps", OpSub, I64, math.MinInt64, 1, math.MaxInt64, ""},
		{"mul exact", OpMul, I64, p53Plus, 5, 45035996273704965, ""},
		{"mul wraps", OpMul, I64, 1 << 62, 2, math.MinInt64, ""},
		{"div truncates", OpDiv, I64, -7, 2, -3, ""},
		{"div exact past 2^53", OpDiv, I64, 2 * p53Plus, 2, p53Plus, ""},
		{"div -2^63 by -1 wraps", OpDiv, I64, math.MinInt64, -1, math.MinInt64, ""},
		{"mod takes the dividend's sign", OpMod, I64, -7, 3, -1, ""},
		{"mod of -2^63 by -1", OpMod, I64, math.MinInt64, -1, 0, ""},
		{"max", OpMax, I64, math.MinInt64, math.MaxInt64, math.MaxInt64, ""},
		{"min", OpMin, I64, p53Plus, 1 << 53, 1 << 53, ""},
		{"i32 add wraps", OpAdd, I32, math.MaxInt32, 1, math.MinInt32, ""},
		{"i32 mul wraps", OpMul, I32, 1 << 16, 1 << 16, 0, ""},
		{"div by zero", OpDiv, I64, 1, 0, 0, "integer division by zero at element 0"},
		{"mod by zero", OpMod, I32, 1, 0, 0, "integer division by zero at element 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := TensorOfInts(tt.dt, Shape{1}, tt.a)
			require.NoError(t, err)
			got, err := evalOut(t, func(b *Builder) Value {
				return b.Binary(tt.op, b.Input("a", tt.dt, 1), b.ConstInts(tt.dt, Shape{1}, tt.b))
			}, map[string]*Tensor{"a": a})
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []int64{tt.want}, got.Int64s())
		})
	}

	// Comparisons read the exact values: 2^53+1 > 2^53 although both are
	// 2^53 in float64.
	got, err := evalOut(t, func(b *Builder) Value {
		return b.Binary(OpGt, b.ConstInts(I64, Shape{2}, p53Plus, math.MaxInt64), b.ConstInts(I64, Shape{2}, 1<<53, math.MaxInt64-1))
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 1}, got.Float64s())

	// Negation wraps: -(-2^63) is -2^63.
	got, err = evalOut(t, func(b *Builder) Value { return b.Neg(b.ConstInts(I64, Shape{2}, math.MinInt64, -p53Plus)) }, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MinInt64, p53Plus}, got.Int64s())
}

// Casts between integers are exact and wrap; float to integer truncates
// and saturates (NaN gives 0).
func TestIntCasts(t *testing.T) {
	got, err := evalOut(t, func(b *Builder) Value {
		return b.Cast(b.ConstInts(I64, Shape{3}, math.MaxInt64, p53Plus, -1), I32)
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{-1, 1, -1}, got.Int64s())

	got, err = evalOut(t, func(b *Builder) Value {
		return b.Cast(b.Const(F32, Shape{4}, 0x1p100, -0x1p100, math.NaN(), -2.5), I64)
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MaxInt64, math.MinInt64, 0, -2}, got.Int64s())

	got, err = evalOut(t, func(b *Builder) Value {
		return b.Cast(b.ConstInts(I32, Shape{2}, math.MinInt32, 5), I64)
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MinInt32, 5}, got.Int64s())
}

// Data movement copies integers exactly; a gather index of -2^63 is an
// error, not a wrapped position.
func TestIntMovesAndGather(t *testing.T) {
	vals := []int64{math.MinInt64, p53Plus, math.MaxInt64}
	got, err := evalOut(t, func(b *Builder) Value {
		x := b.ConstInts(I64, Shape{3}, vals...)
		rev := b.Gather(x, b.ConstInts(I64, Shape{3}, -1, 1, 0), 0)
		return b.Concat(0, rev, b.Slice(x, 0, 1, 3, 1), b.Pad(b.Slice(x, 0, 0, 1, 1), []int64{0}, []int64{1}, 7))
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MaxInt64, p53Plus, math.MinInt64, p53Plus, math.MaxInt64, math.MinInt64, 7}, got.Int64s())

	got, err = evalOut(t, func(b *Builder) Value {
		c := b.Binary(OpGt, b.ConstInts(I64, Shape{2}, 1, 0), b.ConstInts(I64, Shape{}, 0))
		return b.Where(c, b.ConstInts(I64, Shape{2}, math.MaxInt64), b.ConstInts(I64, Shape{2}, p53Plus))
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{math.MaxInt64, p53Plus}, got.Int64s())

	_, err = evalOut(t, func(b *Builder) Value {
		return b.Gather(b.ConstInts(I64, Shape{3}, vals...), b.ConstInts(I64, Shape{1}, math.MinInt64), 0)
	}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "index -9223372036854775808 out of range for extent 3")
}

// A slice whose step is near 2^63 takes one element; its extent does not
// overflow.
func TestSliceHugeStep(t *testing.T) {
	got, err := evalOut(t, func(b *Builder) Value {
		return b.Slice(b.ConstInts(I64, Shape{4}, 10, 11, 12, 13), 0, 1, 4, math.MaxInt64)
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, Shape{1}, got.Shape)
	assert.Equal(t, []int64{11}, got.Int64s())
}

// Reductions over an empty axis give the empty fold: 0 for a sum; for a
// max, -inf (floats) or the dtype's least value (integers). Integer sums
// wrap, and integer maxima are exact.
func TestReduceEmptyAndExact(t *testing.T) {
	tests := []struct {
		name  string
		dt    DType
		op    Op
		shape Shape
		vals  []int64
		want  []float64 // floats
		wantI []int64   // integers
	}{
		{"f32 max of nothing", F32, OpMaxReduce, Shape{2, 0}, nil, []float64{math.Inf(-1), math.Inf(-1)}, nil},
		{"bf16 max of nothing", BF16, OpMaxReduce, Shape{3, 0}, nil, []float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)}, nil},
		{"f32 sum of nothing", F32, OpSum, Shape{1, 0}, nil, []float64{0}, nil},
		{"i64 max of nothing", I64, OpMaxReduce, Shape{2, 0}, nil, nil, []int64{math.MinInt64, math.MinInt64}},
		{"i32 max of nothing", I32, OpMaxReduce, Shape{1, 0}, nil, nil, []int64{math.MinInt32}},
		{"i64 sum of nothing", I64, OpSum, Shape{1, 0}, nil, nil, []int64{0}},
		{"i64 max exact", I64, OpMaxReduce, Shape{1, 3}, []int64{1 << 53, p53Plus, math.MinInt64}, nil, []int64{p53Plus}},
		{"i64 sum exact", I64, OpSum, Shape{1, 3}, []int64{1 << 53, 1, 1}, nil, []int64{1<<53 + 2}},
		{"i64 sum wraps", I64, OpSum, Shape{1, 2}, []int64{math.MaxInt64, 1}, nil, []int64{math.MinInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewTensor(tt.dt, tt.shape)
			for i, v := range tt.vals {
				x.SetInt(int64(i), v)
			}
			got, err := evalOut(t, func(b *Builder) Value {
				return b.Apply(tt.op, Attrs{Axis: -1}, b.Input("x", tt.dt, tt.shape...))
			}, map[string]*Tensor{"x": x})
			require.NoError(t, err)
			require.Equal(t, Shape{tt.shape[0], 1}, got.Shape)
			if tt.wantI != nil {
				assert.Equal(t, tt.wantI, got.Int64s())
			} else {
				assert.Equal(t, tt.want, got.Float64s())
			}
		})
	}
}
