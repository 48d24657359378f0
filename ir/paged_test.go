package ir

import (
	"context"
	"fmt"
	"math"
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

// TestPagedAttentionSinks: with sinks, each query head's softmax has one
// more term in its denominator, exp(sink - m), and nothing more in its
// numerator; checked against a float64 loop over two sequences (one with
// cached keys in the pool) and a window, and sinks of the wrong shape or
// dtype are refused.
func TestPagedAttentionSinks(t *testing.T) {
	const T, Hq, Hkv, D, P, block, window = 5, 4, 2, 4, 8, 2, 3
	b := NewBuilder("sinks")
	q := b.Input("q", F32, T, Hq, D)
	k, v := b.Input("k", F32, T, Hkv, D), b.Input("v", F32, T, Hkv, D)
	kp, vp := b.Input("kp", F32, P, Hkv, D), b.Input("vp", F32, P, Hkv, D)
	tab, lens, starts := b.Input("tab", I32, 2, 3), b.Input("lens", I32, 2), b.Input("starts", I32, 3)
	seqs := b.Input("seqs", I32)
	sinks := b.Input("sinks", F32, Hq)
	for _, w := range []int64{0, window} {
		b.Output(fmt.Sprintf("o%d", w), b.PagedAttentionSinks(q, k, v, kp, vp, tab, lens, starts, seqs, sinks, 0.5, block, w))
	}
	g, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(g, 3, Typical)
	require.NoError(t, err)
	ints := func(dt DType, s Shape, xs ...int64) *Tensor {
		x, err := TensorOfInts(dt, s, xs...)
		require.NoError(t, err)
		return x
	}
	// Sequence 0: 3 cached positions (blocks 2, 0) and 2 step tokens;
	// sequence 1: 3 step tokens, nothing cached.
	feeds["tab"], feeds["lens"] = ints(I32, Shape{2, 3}, 2, 0, 3, 1, 3, 2), ints(I32, Shape{2}, 5, 3)
	feeds["starts"], feeds["seqs"] = ints(I32, Shape{3}, 0, 2, 5), ints(I32, Shape{}, 2)
	feeds["sinks"], err = TensorOf(F32, Shape{Hq}, 0.7, -3, 2.5, 0)
	require.NoError(t, err)
	res, err := Eval(context.Background(), g, feeds, EvalOptions{})
	require.NoError(t, err)
	type tok struct{ seq, pos, ctx, first int }
	toks := []tok{{0, 3, 3, 0}, {0, 4, 3, 0}, {1, 0, 0, 2}, {1, 1, 0, 2}, {1, 2, 0, 2}}
	table := [][]int{{2, 0, 3}, {1, 3, 2}}
	row := func(t tok, j int) (kk, vv *Tensor, r int) {
		if j < t.ctx {
			return feeds["kp"], feeds["vp"], table[t.seq][j/block]*block + j%block
		}
		return feeds["k"], feeds["v"], t.first + j - t.ctx
	}
	for _, w := range []int{0, window} {
		got := res.Outputs[fmt.Sprintf("o%d", w)]
		for ti, tk := range toks {
			lo := 0
			if w > 0 {
				lo = max(0, tk.pos-w+1)
			}
			for h := range Hq {
				kh := h / (Hq / Hkv)
				sink := feeds["sinks"].At(int64(h))
				var s []float64
				m := sink
				for j := lo; j <= tk.pos; j++ {
					kk, _, r := row(tk, j)
					dot := 0.0
					for d := range D {
						dot += feeds["q"].At(int64((ti*Hq+h)*D+d)) * kk.At(int64((r*Hkv+kh)*D+d))
					}
					s = append(s, dot*0.5)
					m = math.Max(m, dot*0.5)
				}
				den := math.Exp(sink - m)
				for _, x := range s {
					den += math.Exp(x - m)
				}
				for d := range D {
					num := 0.0
					for i, x := range s {
						_, vv, r := row(tk, lo+i)
						num += math.Exp(x-m) * vv.At(int64((r*Hkv+kh)*D+d))
					}
					require.InDelta(t, num/den, got.At(int64((ti*Hq+h)*D+d)), 1e-6, "window %d token %d head %d column %d", w, ti, h, d)
				}
			}
		}
	}
	for _, bad := range []ValueType{{Shape{Hq + 1}, F32}, {Shape{Hq}, I32}, {Shape{Hq}, BF16}, {Shape{1, Hq}, F32}} {
		b := NewBuilder("bad")
		q := b.Input("q", F32, T, Hq, D)
		k, v := b.Input("k", F32, T, Hkv, D), b.Input("v", F32, T, Hkv, D)
		kp, vp := b.Input("kp", F32, P, Hkv, D), b.Input("vp", F32, P, Hkv, D)
		tab, lens, starts := b.Input("tab", I32, 2, 3), b.Input("lens", I32, 2), b.Input("starts", I32, 3)
		b.Output("o", b.PagedAttentionSinks(q, k, v, kp, vp, tab, lens, starts, b.Input("seqs", I32), b.Input("sinks", bad.DType, bad.Shape...), 0.5, block, 0))
		_, err := b.Build()
		require.ErrorContains(t, err, "sinks", "sinks %s%v", bad.DType, bad.Shape)
	}
}
