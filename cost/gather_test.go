package cost

import (
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatheredEpilogue: the column map each epilogue's reads need, and the
// bodies no matrix-vector kernel gathers (named in the error).
func TestGatheredEpilogue(t *testing.T) {
	silu := func(b *ir.Builder, x ir.Value) ir.Value { return b.Mul(x, b.Sigmoid(x)) }
	tests := []struct {
		name  string
		build func(b *ir.Builder)
		want  ColumnMap
		err   string // a FormOf error, when not ""
	}{
		{"gate and up of a product with a unit batch axis", func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, 1, 1, 32), b.Input("$1", ir.F32, 1, 32, 64)
			mm := b.MatMul(x, w)
			b.Output("out0", b.Mul(silu(b, b.Slice(mm, 2, 0, 32, 1)), b.Slice(mm, 2, 32, 64, 1)))
		}, ColumnMap{P: 2, I: 32}, ""},
		{"a value after the product that does not read it", func(b *ir.Builder) {
			x, w, y := b.Input("$0", ir.F32, 1, 32), b.Input("$1", ir.F32, 32, 64), b.Input("$2", ir.F32, 3, 32)
			mm := b.MatMul(x, w)
			r := b.Reshape(b.Sum(y, 0), 1, 32) // built after the matmul, reads none of it
			b.Output("out0", b.Add(b.Slice(mm, 1, 0, 32, 1), b.Mul(b.Slice(mm, 1, 32, 64, 1), r)))
		}, ColumnMap{P: 2, I: 32}, ""},
		{"slices of one's own columns", func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, 2, 32), b.Input("$1", ir.F32, 32, 64)
			mm := b.MatMul(x, w)
			b.Output("out0", b.Exp(b.Slice(mm, 1, 8, 40, 1)))
		}, ColumnMap{}, ""},
		{"rows of 16, past the matrix-vector kernel", func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, 16, 32), b.Input("$1", ir.F32, 32, 64)
			mm := b.MatMul(x, w)
			b.Output("out0", b.Mul(b.Slice(mm, 1, 0, 32, 1), b.Slice(mm, 1, 32, 64, 1)))
		}, ColumnMap{}, "at most 8 rows"},
		{"a window over 16 rows", func(b *ir.Builder) {
			x, w, pos := b.Input("$0", ir.F32, 16, 32), b.Input("$1", ir.F32, 32, 64), b.Input("$2", ir.I32)
			_ = pos
			b.Output("out0 into [40,64] at 0 plus $2 along axis 0", b.MatMul(x, w))
		}, ColumnMap{}, "window"},
		{"a weight that is no plain buffer", func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, 2, 32), b.Input("$1", ir.F32, 32, 64)
			mm := b.MatMul(x, b.Exp(w))
			b.Output("out0", b.Mul(b.Slice(mm, 1, 0, 32, 1), b.Slice(mm, 1, 32, 64, 1)))
		}, ColumnMap{}, "plain f32"},
		{"reads across rows", func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, 2, 32), b.Input("$1", ir.F32, 32, 64)
			mm := b.MatMul(x, w)
			b.Output("out0", b.Add(b.Slice(mm, 0, 0, 1, 1), b.Slice(mm, 0, 1, 2, 1)))
		}, ColumnMap{}, "reads row"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			tt.build(b)
			body, err := b.Build()
			require.NoError(t, err)
			_, ferr := FormOf(body)
			if tt.err != "" {
				assert.ErrorContains(t, ferr, tt.err)
				return
			}
			require.NoError(t, ferr)
			var mm ir.Value
			for i, n := range body.Nodes {
				if n.Op == ir.OpMatMul {
					mm = ir.Value(i)
				}
			}
			g, err := GatheredEpilogue(body, mm)
			require.NoError(t, err)
			assert.Equal(t, tt.want, g.Map)
			_, ok := GatheredSchedule(body, mm)
			assert.True(t, ok)
		})
	}
}

// TestColumnMap: Column inverts Pos and the part, and Fits asks for
// whole groups and whole 16-byte loads.
func TestColumnMap(t *testing.T) {
	m := ColumnMap{P: 2, I: 64}
	for n := int64(0); n < 384; n++ {
		p := n / m.I % m.P
		require.Equal(t, n, m.Column(m.Pos(n), p))
	}
	assert.Equal(t, m.Pos(5), m.Pos(69))
	assert.NotEqual(t, m.Pos(5), m.Pos(133))
	assert.True(t, m.Fits(64, 8))
	assert.False(t, m.Fits(8, 8), "4 positions a part: half a 16-byte load")
	assert.False(t, m.Fits(1, 1))
	assert.True(t, ColumnMap{}.Fits(1, 8))
}
