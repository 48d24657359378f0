package ir

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRandomFeedsShared: graphs drawn with one seed share a large leaf
// they draw alike (the same weight read by kernels printed for different
// row counts), the values those without sharing would draw; a leaf of
// another shape, another seed, or a small leaf is drawn for itself.
func TestRandomFeedsShared(t *testing.T) {
	build := func(rows int) *Graph {
		b := NewBuilder("kernel")
		x := b.Input("$0", BF16, Dim(rows), 1024)
		w := b.Input("$1", BF16, 1024, 1024)
		b.Output("out0", b.MatMul(x, w))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	one, many := build(1), build(1<<10)
	shared := LargeLeaves{}
	a, err := RandomFeedsShared(many, 7, Typical, nil, shared)
	require.NoError(t, err)
	b, err := RandomFeedsShared(one, 7, Typical, nil, shared)
	require.NoError(t, err)
	assert.Same(t, a["$1"], b["$1"], "the weight is drawn once")
	assert.NotSame(t, a["$0"], b["$0"])
	alone, err := RandomFeedsInto(one, 7, Typical, nil)
	require.NoError(t, err)
	assert.Equal(t, alone["$1"].Float64s()[:64], b["$1"].Float64s()[:64], "what it would draw alone")
	c, err := RandomFeedsShared(one, 8, Typical, nil, shared)
	require.NoError(t, err)
	assert.NotSame(t, a["$1"], c["$1"], "another seed draws its own")
	assert.Len(t, shared, 3, "the large leaves: the weight at two seeds, the 1024-row input")
}

// TestRandomStatisticIsPositive: a leaf read through a positive scale
// and offset into an rsqrt (a norm's sum of squares handed to a kernel as
// an argument) is drawn positive, so that the kernel's inputs are ones a
// run can give it.
func TestRandomStatisticIsPositive(t *testing.T) {
	b := NewBuilder("stat")
	sq := b.Input("sum_sq", F32, 64)
	b.Output("r", b.Rsqrt(b.Add(b.Mul(sq, b.BroadcastTo(b.Scalar(F32, 1.0/64), Shape{64})), b.BroadcastTo(b.Scalar(F32, F32.Round(1e-5)), Shape{64}))))
	g, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(g, 7, Typical)
	require.NoError(t, err)
	for i := range feeds["sum_sq"].Len() {
		require.Positive(t, feeds["sum_sq"].At(i))
	}
}
