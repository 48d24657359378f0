package ir

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScatterRefusesWhatHasNoMeaning: an index below -1, past the extent
// or given twice is an evaluation error naming it, and -1 writes nothing.
func TestScatterRefusesWhatHasNoMeaning(t *testing.T) {
	b := NewBuilder("scatter")
	base := b.Input("base", F32, 4, 2)
	up := b.Input("up", F32, 3, 2)
	idx := b.Input("idx", I32, 3)
	b.Output("out", b.Scatter(base, up, idx, 0))
	g, err := b.Build()
	require.NoError(t, err)
	baseT, err := TensorOf(F32, Shape{4, 2}, 0, 1, 2, 3, 4, 5, 6, 7)
	require.NoError(t, err)
	upT, err := TensorOf(F32, Shape{3, 2}, 10, 11, 12, 13, 14, 15)
	require.NoError(t, err)
	for _, c := range []struct {
		idx  []int64
		want []float64
		err  string
	}{
		{[]int64{2, -1, 0}, []float64{14, 15, 2, 3, 10, 11, 6, 7}, ""},
		{[]int64{3, 1, -1}, []float64{0, 1, 12, 13, 4, 5, 10, 11}, ""},
		{[]int64{4, 1, 0}, nil, "index 4 of slice 0 is outside extent 4"},
		{[]int64{-2, 1, 0}, nil, "index -2 of slice 0 is outside"},
		{[]int64{1, 2, 1}, nil, "slices 0 and 2 are both written at 1"},
	} {
		it, err := TensorOfInts(I32, Shape{3}, c.idx...)
		require.NoError(t, err)
		feeds := map[string]*Tensor{"base": baseT, "up": upT, "idx": it}
		r, err := Eval(context.Background(), g, feeds, EvalOptions{})
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			_, _, err = EvalAt(context.Background(), g, feeds, map[string][]int64{"out": {0, 3}}, EvalOptions{})
			require.Error(t, err, "point evaluation refuses it too")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, r.Outputs["out"].F64)
	}
}

// TestPagedAttentionRefusesBadMetadata: metadata the op has no meaning
// for is an evaluation error naming what is wrong.
func TestPagedAttentionRefusesBadMetadata(t *testing.T) {
	b := NewBuilder("paged")
	q := b.Input("q", F32, 4, 2, 4)
	k, v := b.Input("k", F32, 4, 1, 4), b.Input("v", F32, 4, 1, 4)
	kp, vp := b.Input("kp", F32, 8, 1, 4), b.Input("vp", F32, 8, 1, 4)
	tab, lens, starts := b.Input("tab", I32, 2, 2), b.Input("lens", I32, 2), b.Input("starts", I32, 3)
	seqs := b.Input("seqs", I32)
	b.Output("o", b.PagedAttention(q, k, v, kp, vp, tab, lens, starts, seqs, 0.5, 2, 0))
	g, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(g, 1, Typical)
	require.NoError(t, err)
	ints := func(dt DType, s Shape, xs ...int64) *Tensor {
		x, err := TensorOfInts(dt, s, xs...)
		require.NoError(t, err)
		return x
	}
	for _, c := range []struct {
		tab, lens, starts []int64
		seqs              int64
		err               string
	}{
		{[]int64{0, 3, 1, 2}, []int64{3, 2}, []int64{0, 1, 3}, 2, ""},
		{[]int64{0, 3, 1, 2}, []int64{3, 2}, []int64{0, 1, 3}, 3, "3 sequences present"},
		{[]int64{0, 3, 1, 2}, []int64{3, 2}, []int64{1, 1, 3}, 2, "query start of sequence 0 is 1"},
		{[]int64{0, 3, 1, 2}, []int64{3, 2}, []int64{0, 3, 1}, 2, "want non-decreasing starts"},
		{[]int64{0, 3, 1, 2}, []int64{3, 2}, []int64{0, 1, 5}, 2, "within 4 tokens"},
		{[]int64{0, 3, 1, 2}, []int64{0, 2}, []int64{0, 1, 3}, 2, "shorter than its 1 tokens"},
		{[]int64{0, 3, 1, 2}, []int64{5, 2}, []int64{0, 1, 3}, 2, "needs 3 blocks"},
		{[]int64{0, 4, 1, 2}, []int64{4, 2}, []int64{0, 1, 3}, 2, "block 1 of its table is 4, outside the pool's 4 blocks"},
	} {
		feeds["tab"], feeds["lens"] = ints(I32, Shape{2, 2}, c.tab...), ints(I32, Shape{2}, c.lens...)
		feeds["starts"], feeds["seqs"] = ints(I32, Shape{3}, c.starts...), ints(I32, Shape{}, c.seqs)
		_, err := Eval(context.Background(), g, feeds, EvalOptions{})
		if c.err == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, c.err)
	}
}
