package cost

import (
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadBytesFollowsDemand checks what the model prices a kernel's
// inputs at: the elements its outputs demand, traced back through slices,
// views, reductions and concatenations, and all of an input where the
// trace cannot narrow it.
func TestReadBytesFollowsDemand(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *ir.Builder) ir.Value
		want  float64 // bytes of $0
	}{
		{"the key columns of a fused projection", func(b *ir.Builder) ir.Value {
			qkv := b.Input("$0", ir.BF16, 1, 6144)
			return b.Cast(b.Slice(qkv, 1, 4096, 5120, 1), ir.F32)
		}, 1024 * 2},
		{"split-K partials summed, then sliced", func(b *ir.Builder) ir.Value {
			parts := b.Input("$0", ir.F32, 4, 1, 6144)
			return b.Slice(b.Sum(parts, 0), 2, 5120, 6144, 1)
		}, 4 * 1024 * 4},
		{"two slices read their bounding box", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 1, 6144)
			return b.Add(b.Slice(x, 1, 4096, 5120, 1), b.Slice(x, 1, 5120, 6144, 1))
		}, 2048 * 4},
		{"a strided slice reads its span", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 64)
			return b.Slice(x, 0, 8, 24, 2)
		}, 15 * 4},
		{"heads permuted, one head sliced", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 1, 8, 128)
			return b.Slice(b.Permute(x, 1, 0, 2), 0, 2, 3, 1)
		}, 128 * 4},
		{"a merged reshape, rows sliced", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 8, 128)
			return b.Slice(b.Reshape(x, 1024), 0, 256, 512, 1)
		}, 256 * 4},
		{"a split reshape, one head sliced", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 1, 1024)
			return b.Slice(b.Reshape(x, 1, 8, 128), 1, 3, 4, 1)
		}, 128 * 4},
		{"a concatenation's sliced half reads one input", func(b *ir.Builder) ir.Value {
			x, y := b.Input("$0", ir.F32, 1, 64), b.Input("$1", ir.F32, 1, 64)
			return b.Slice(b.Concat(1, y, x), 1, 0, 64, 1)
		}, 0},
		{"a broadcast row is read once", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 1, 128)
			return b.Mul(b.Expand(x, 8, 128), b.Input("$1", ir.F32, 8, 128))
		}, 128 * 4},
		{"a gathered row of a table", func(b *ir.Builder) ir.Value {
			table := b.Input("$0", ir.F32, 1000, 64)
			return b.Gather(table, b.Input("$1", ir.I64, 1), 0)
		}, 64 * 4},
		{"a transposed reshape the trace cannot narrow", func(b *ir.Builder) ir.Value {
			x := b.Input("$0", ir.F32, 8, 128)
			return b.Slice(b.Reshape(b.Permute(x, 1, 0), 16, 64), 1, 0, 8, 1)
		}, 8 * 128 * 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := body(t, tt.build)
			k, err := analyze(g)
			require.NoError(t, err)
			var in ir.Value = ir.NoValue
			for _, v := range g.Inputs() {
				if g.Node(v).Name == "$0" {
					in = v
				}
			}
			require.NotEqual(t, ir.NoValue, in)
			assert.Equal(t, tt.want, k.readBytes(in))
		})
	}
}

// TestRunBox checks the bounding box of a run of row-major offsets.
func TestRunBox(t *testing.T) {
	shape := ir.Shape{4, 8, 16}
	assert.Equal(t, box{{1, 2}, {2, 4}, {0, 16}}, runBox(shape, 128+32, 128+64))
	assert.Equal(t, box{{1, 2}, {2, 3}, {3, 9}}, runBox(shape, 128+32+3, 128+32+9))
	assert.Equal(t, box{{0, 2}, {0, 8}, {0, 16}}, runBox(shape, 100, 200))
	assert.Nil(t, runBox(shape, 5, 5))
}
