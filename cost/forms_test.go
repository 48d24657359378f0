package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// eagerAttention is softmax(q k^T * 0.25) v over [1, 2, 4, 8] heads, the
// probabilities passed through then (a where, say) before the second
// matmul.
func eagerAttention(b *ir.Builder, then func(p ir.Value) ir.Value) ir.Value {
	q, k, v := b.Input("$0", ir.F32, 1, 2, 4, 8), b.Input("$1", ir.F32, 1, 2, 6, 8), b.Input("$2", ir.F32, 1, 2, 6, 8)
	s := b.Mul(b.MatMul(q, b.Transpose(k, 2, 3)), b.Scalar(ir.F32, 0.25))
	return b.MatMul(then(b.Softmax(s, 3)), v)
}

func TestFormOf(t *testing.T) {
	x := func(b *ir.Builder, dt ir.DType) ir.Value { return b.Input("$0", dt, 6, 5) }
	tests := []struct {
		name  string
		build func(b *ir.Builder) ir.Value
		form  Form
		err   string // a refusal, when set
	}{
		{"elementwise chain", func(b *ir.Builder) ir.Value { return b.Exp(b.Add(x(b, ir.F32), b.Input("$1", ir.F32, 6, 5))) }, FormElementwise, ""},
		{"sum across rows", func(b *ir.Builder) ir.Value { return b.Sum(x(b, ir.F32), 0) }, FormElementwise, ""},
		{"integer max along rows", func(b *ir.Builder) ir.Value { return b.ReduceMax(x(b, ir.I32), 1) }, FormElementwise, ""},
		{"i64 sum along rows", func(b *ir.Builder) ir.Value { return b.Sum(x(b, ir.I64), -1) }, FormElementwise, ""},
		{"softmax across rows", func(b *ir.Builder) ir.Value { return b.Softmax(x(b, ir.BF16), 0) }, FormElementwise, ""},
		{"float sum along rows", func(b *ir.Builder) ir.Value { return b.Sum(x(b, ir.F16), 1) }, FormRow, ""},
		{"softmax", func(b *ir.Builder) ir.Value { return b.Softmax(x(b, ir.F32), -1) }, FormRow, ""},
		{"norm broadcast past its rows", func(b *ir.Builder) ir.Value {
			n := b.RMSNorm(x(b, ir.F32), b.Input("$1", ir.F32, 5), 1e-6)
			return b.Expand(b.Reshape(n, 1, 6, 5), 4, 6, 5)
		}, FormRow, "row kernel output of 120 elements for 6 rows of 5"},
		{"sum after a row reduction", func(b *ir.Builder) ir.Value { return b.Sum(b.Sum(x(b, ir.F32), 1), 0) }, FormRow, "a sum after its row reduction"},
		{"rows of two shapes", func(b *ir.Builder) ir.Value {
			return b.Add(b.Sum(x(b, ir.F32), 1), b.Reshape(b.Sum(b.Input("$1", ir.F32, 2, 3, 5), 2), 6, 1))
		}, FormRow, "rows of shapes"},
		{"matmul with a norm prologue", func(b *ir.Builder) ir.Value {
			return b.Add(b.MatMul(b.RMSNorm(x(b, ir.BF16), b.Input("$1", ir.BF16, 5), 1e-6), b.Input("$2", ir.BF16, 5, 3)), b.Input("$3", ir.BF16, 6, 3))
		}, FormMatMul, ""},
		{"matmul reducing half rows", func(b *ir.Builder) ir.Value {
			a := x(b, ir.BF16)
			return b.MatMul(b.Mul(a, b.BroadcastTo(b.Sum(a, 1), ir.Shape{6, 5})), b.Input("$1", ir.BF16, 5, 3))
		}, FormMatMul, "reducing bf16 rows"},
		{"norm of the right operand", func(b *ir.Builder) ir.Value {
			return b.MatMul(b.Input("$0", ir.F32, 6, 5), b.RMSNorm(b.Input("$1", ir.F32, 5, 5), b.Input("$2", ir.F32, 5), 1e-6))
		}, FormMatMul, "outside its left operand's prologue"},
		{"slice after a matmul", func(b *ir.Builder) ir.Value {
			return b.Slice(b.MatMul(x(b, ir.F32), b.Input("$1", ir.F32, 5, 4)), 1, 1, 4, 1)
		}, FormMatMul, "a slice after its matmul"},
		{"eager attention", func(b *ir.Builder) ir.Value { return eagerAttention(b, func(p ir.Value) ir.Value { return p }) }, FormAttention, ""},
		{"a where between softmax and the second matmul", func(b *ir.Builder) ir.Value {
			return eagerAttention(b, func(p ir.Value) ir.Value {
				return b.Where(b.Binary(ir.OpGt, p, b.Scalar(ir.F32, 0.125)), p, b.Scalar(ir.F32, 0))
			})
		}, FormAttention, "probabilities are no softmax (a where"},
		{"attention op with grouped heads", func(b *ir.Builder) ir.Value {
			return b.Attention(b.Input("$0", ir.BF16, 1, 4, 3, 8), b.Input("$1", ir.BF16, 1, 2, 7, 8), b.Input("$2", ir.BF16, 1, 2, 7, 8), 0.35, true, 4)
		}, FormAttention, ""},
		{"three matmuls", func(b *ir.Builder) ir.Value {
			w := b.Input("$1", ir.F32, 5, 5)
			return b.MatMul(b.MatMul(b.MatMul(x(b, ir.F32), w), w), w)
		}, 0, "3 matmuls"},
		{"a constant table", func(b *ir.Builder) ir.Value {
			return b.Add(b.Input("$0", ir.F32, 3), b.Const(ir.F32, ir.Shape{3}, 1, 2, 3))
		}, 0, "a constant of 3 values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := FormOf(body(t, tt.build))
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.form, f)
		})
	}
}

// TestElementwiseOutputsShareAShape: one loop over the first output's
// elements writes every output.
func TestElementwiseOutputsShareAShape(t *testing.T) {
	b := ir.NewBuilder("kernel")
	x := b.Input("$0", ir.F32, 4, 3)
	b.Output("a", b.Exp(x))
	b.Output("b", b.Reshape(b.Neg(x), 3, 4))
	g, err := b.Build()
	require.NoError(t, err)
	_, err = FormOf(g)
	require.ErrorContains(t, err, "outputs of shapes [4,3] and [3,4]")
}

func TestRowReduces(t *testing.T) {
	tests := []struct {
		op   ir.Op
		axis int
		in   ir.Shape
		dt   ir.DType
		want bool
	}{
		{ir.OpSum, 1, ir.Shape{3, 5}, ir.F32, true},
		{ir.OpMaxReduce, -1, ir.Shape{3, 5}, ir.BF16, true},
		{ir.OpSum, 0, ir.Shape{3, 5}, ir.F32, false},
		{ir.OpMaxReduce, 1, ir.Shape{3, 5}, ir.I32, false},
		{ir.OpSum, 1, ir.Shape{3, 5}, ir.I64, false},
		{ir.OpSoftmax, 1, ir.Shape{3, 5}, ir.F32, false},
		{ir.OpSum, 0, ir.Shape{}, ir.F32, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, RowReduces(tt.op, tt.axis, tt.in, tt.dt), "%s axis %d of %s%v", tt.op, tt.axis, tt.dt, tt.in)
	}
}

// TestRankedFollowsTheForm: the model lists the schedules of the form
// FormOf names (the attention op as attention, an integer reduction as a
// loop per element) and prices no body FormOf refuses.
func TestRankedFollowsTheForm(t *testing.T) {
	m := NewModel(testDevice(t), Defaults(testDevice(t)))
	att, err := m.Ranked(body(t, func(b *ir.Builder) ir.Value {
		return b.Attention(b.Input("$0", ir.F16, 1, 4, 9, 16), b.Input("$1", ir.F16, 1, 2, 33, 16), b.Input("$2", ir.F16, 1, 2, 33, 16), 0.25, false, 0)
	}))
	require.NoError(t, err)
	tensor := false
	for _, e := range att {
		assert.Positive(t, e.Schedule.BN, "an attention schedule takes keys a tile: %s", e.Schedule)
		tensor = tensor || e.Schedule.Tensor
	}
	assert.True(t, tensor, "f16 attention is offered tensor cores")

	ints, err := m.Ranked(body(t, func(b *ir.Builder) ir.Value { return b.ReduceMax(b.Input("$0", ir.I32, 64, 100), 1) }))
	require.NoError(t, err)
	for _, e := range ints {
		assert.Zero(t, e.Schedule.Rows, "an integer reduction is no row kernel: %s", e.Schedule)
	}

	// A slice after a tiled matmul (more rows than the matrix-vector
	// kernel takes, which gathers such an epilogue) has no form.
	_, err = m.Ranked(body(t, func(b *ir.Builder) ir.Value {
		return b.Slice(b.MatMul(b.Input("$0", ir.F32, 16, 8), b.Input("$1", ir.F32, 8, 8)), 0, 1, 8, 1)
	}))
	require.ErrorContains(t, err, "no kernel form computes it")
	sliced, err := m.Ranked(body(t, func(b *ir.Builder) ir.Value {
		return b.Slice(b.MatMul(b.Input("$0", ir.F32, 8, 8), b.Input("$1", ir.F32, 8, 8)), 0, 1, 8, 1)
	}))
	require.NoError(t, err)
	for _, e := range sliced {
		assert.True(t, e.Schedule.GEMV, "only the matrix-vector kernel gathers an epilogue: %s", e.Schedule)
	}
}
