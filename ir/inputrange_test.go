package ir

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// maskedScores is a BERT-style attention score block: an integer mask
// named nothing like attention_mask, flipped, cast and scaled by f32's
// finfo.min, added to scores, softmax.
func maskedScores(t *testing.T, maskDType DType) *Graph {
	b := NewBuilder("bert-like")
	scores := b.Input("scores", F32, 2, 4, 8, 8)
	keep := b.Input("keep_tokens", maskDType, 2, 8)
	m := b.Cast(b.Reshape(keep, 2, 1, 1, 8), F32)
	bias := b.Mul(b.Sub(b.Scalar(F32, 1), m), b.Scalar(F32, -3.4028234663852886e38))
	b.Output("probs", b.Softmax(b.Add(scores, bias), 3))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestInputRanges(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *Builder)
		want  map[string]Range
	}{
		{"gather index through cast and expand", func(b *Builder) {
			table := b.Weight("table", F32, 30, 4)
			ids := b.Input("tok", I32, 1, 5)
			b.Output("e", b.Gather(table, b.Cast(b.Expand(ids, 3, 5), I64), 0))
		}, map[string]Range{"tok": {0, 29, MeaningIndex}}},
		{"the smallest of two gathered extents", func(b *Builder) {
			ids := b.Input("ids", I64, 4)
			b.Output("a", b.Gather(b.Weight("big", F32, 50, 2), ids, 0))
			b.Output("b", b.Gather(b.Weight("small", F32, 3, 7), ids, 1))
		}, map[string]Range{"ids": {0, 6, MeaningIndex}}},
		{"rotary table rows at a position plus an iota", func(b *Builder) {
			pos := b.Input("start", I64, 1)
			rows := b.Add(b.Iota(I64, Shape{4}, 0), pos)
			b.Output("cos", b.Gather(b.Weight("cos_table", F32, 16, 8), rows, 0))
		}, map[string]Range{"start": {0, 12, MeaningIndex}}},
		{"positions against an iota", func(b *Builder) {
			pos := b.Input("q_pos", I64, 6, 1)
			keys := b.Iota(I64, Shape{1, 10}, 1)
			b.Output("allowed", b.Binary(OpLe, keys, pos))
		}, map[string]Range{"q_pos": {0, 9, MeaningPosition}}},
		{"mask compared to zero", func(b *Builder) {
			m := b.Input("m", I64, 4)
			b.Output("o", b.Where(b.Binary(OpEq, m, b.Scalar(I64, 0)), b.Input("x", F32, 4), b.Scalar(F32, -1e9)))
		}, map[string]Range{"m": {0, 1, MeaningMask}}},
		{"mask cast to bool", func(b *Builder) {
			m := b.Input("m", I32, 4)
			b.Output("o", b.Where(b.Cast(m, Bool), b.Input("x", F32, 4), b.Scalar(F32, 0)))
		}, map[string]Range{"m": {0, 1, MeaningMask}}},
		{"float flipped then scaled large", func(b *Builder) {
			m := b.Input("m", F32, 4)
			b.Output("o", b.Mul(b.Sub(b.Scalar(F32, 1), m), b.Scalar(F32, -10000)))
		}, map[string]Range{"m": {0, 1, MeaningMask}}},
		{"renamed mask flipped then cast to bool", func(b *Builder) {
			m := b.Cast(b.Input("segment_keep", I64, 2, 6), F32)
			inv := b.Sub(b.Scalar(F32, 1), m)
			b.Output("o", b.Where(b.Cast(inv, Bool), b.Scalar(F32, -3.4028234663852886e38), inv))
		}, map[string]Range{"segment_keep": {0, 1, MeaningMask}}},
		{"integer mask scaled without a flip", func(b *Builder) {
			m := b.Input("pad", I32, 3)
			b.Output("o", b.Add(b.Input("s", F32, 3), b.Mul(b.Cast(m, F32), b.Scalar(F32, -1e4))))
		}, map[string]Range{"pad": {0, 1, MeaningMask}}},
		{"a decode step's position plus the query iota against the key iota", func(b *Builder) {
			past := b.Input("p", I64, 1, 1)
			q := b.Add(b.Iota(I64, Shape{4, 1}, 0), past)
			b.Output("causal", b.Binary(OpLe, b.Iota(I64, Shape{1, 16}, 1), q))
		}, map[string]Range{"p": {0, 12, MeaningPosition}}},
		{"an index shifted by a constant", func(b *Builder) {
			ids := b.Input("ids", I32, 5)
			b.Output("e", b.Gather(b.Weight("table", F32, 10, 2), b.Add(ids, b.Scalar(I32, 2)), 0))
		}, map[string]Range{"ids": {0, 7, MeaningIndex}}},
		{"a negated leaf indexes nothing", func(b *Builder) {
			ids := b.Input("ids", I64, 5)
			b.Output("e", b.Gather(b.Weight("table", F32, 30, 2), b.Neg(ids), 0))
		}, map[string]Range{}},
		{"scatter slots into a pool's rows", func(b *Builder) {
			pool := b.State("pool", F32, 12, 2, 4)
			b.Output("p", b.Scatter(pool, b.Input("rows", F32, 5, 2, 4), b.Input("slot_mapping", I32, 5), 0))
		}, map[string]Range{"slot_mapping": {-1, 11, MeaningSlot}}},
		{"scatter slots through a cast, the smallest extent", func(b *Builder) {
			slots := b.Cast(b.Input("slots", I64, 3), I32)
			b.Output("a", b.Scatter(b.Input("x", F32, 9, 2), b.Input("u", F32, 3, 2), slots, 0))
			b.Output("b", b.Scatter(b.Input("y", F32, 2, 4), b.Input("w", F32, 2, 3), slots, 1))
		}, map[string]Range{"slots": {-1, 3, MeaningSlot}}},
		{"plain floats keep the ordinary distribution", func(b *Builder) {
			x := b.Input("x", F32, 4)
			y := b.Input("y", F32, 4)
			b.Output("o", b.Mul(x, b.Scalar(F32, 1e5)))
			b.Output("r", b.Where(b.Binary(OpGt, y, b.Scalar(F32, 0)), y, b.Scalar(F32, 0)))
		}, map[string]Range{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(tt.name)
			tt.build(b)
			g, err := b.Build()
			require.NoError(t, err)
			require.Equal(t, tt.want, InputRanges(g))
			feeds, err := RandomFeeds(g, 5, Typical)
			require.NoError(t, err)
			for name, r := range tt.want {
				for _, v := range feeds[name].Float64s() {
					require.True(t, v >= r.Lo && v <= r.Hi && v == math.Trunc(v), "%s = %v outside %v", name, v, r)
				}
			}
			_, err = Eval(context.Background(), g, feeds, EvalOptions{})
			require.NoError(t, err)
		})
	}
}

// The BERT-like block's mask is drawn from {0, 1} whatever its name and
// integer dtype, so (1 - mask) * finfo.min stays finite in f32 and the
// softmax has no NaN.
func TestMaskedScoresDrawAMask(t *testing.T) {
	for _, dt := range []DType{I64, I32} {
		g := maskedScores(t, dt)
		require.Equal(t, map[string]Range{"keep_tokens": {0, 1, MeaningMask}}, InputRanges(g))
		feeds, err := RandomFeeds(g, 3, Typical)
		require.NoError(t, err)
		var ones int
		for _, v := range feeds["keep_tokens"].Float64s() {
			require.Contains(t, []float64{0, 1}, v)
			ones += int(v)
		}
		require.Positive(t, ones)
		res, err := Eval(context.Background(), g, feeds, EvalOptions{})
		require.NoError(t, err)
		for _, v := range res.Outputs["probs"].Float64s() {
			require.False(t, math.IsNaN(v))
		}
	}
}

func TestRandomLeavesIn(t *testing.T) {
	b := NewBuilder("stated")
	table := b.Weight("table", F32, 30, 4)
	b.Output("e", b.Gather(table, b.Input("ids", I64, 64), 0))
	b.Output("x", b.Input("x", F32, 64))
	b.Output("flag", b.Input("flag", Bool, 4))
	b.Output("small", b.Input("small", I32, 4))
	g, err := b.Build()
	require.NoError(t, err)

	feeds, err := RandomLeavesIn(g, 9, Typical, map[string]Range{"ids": {Lo: 5, Hi: 7}, "x": {Lo: -0.5, Hi: 0.5}}, OpInput)
	require.NoError(t, err)
	require.NotContains(t, feeds, "table")
	for _, v := range feeds["ids"].Float64s() {
		require.True(t, v >= 5 && v <= 7, "ids %v", v)
	}
	for _, v := range feeds["x"].Float64s() {
		require.True(t, v >= -0.5 && v <= 0.5, "x %v", v)
	}

	for _, tt := range []struct {
		name   string
		ranges map[string]Range
		want   string
	}{
		{"unknown name", map[string]Range{"attention_mask": {Lo: 0, Hi: 1}}, `no input, weight or state "attention_mask"`},
		{"lo above hi", map[string]Range{"ids": {Lo: 3, Hi: 2}}, "ids=3..2: LO is above HI"},
		{"no integer", map[string]Range{"ids": {Lo: 0.2, Hi: 0.8}}, `ids=0.2..0.8: input "ids" is i64 and the range holds no integer`},
		{"bool beyond 0..1", map[string]Range{"flag": {Lo: 0, Hi: 2}}, "flag=0..2: input \"flag\" is bool"},
		{"not finite", map[string]Range{"x": {Lo: math.Inf(-1), Hi: 0}}, "x=-Inf..0: bounds must be finite"},
		{"beyond the dtype", map[string]Range{"small": {Lo: 0, Hi: 1 << 40}}, `small=0..1.099511627776e+12: beyond the range of input "small"'s dtype i32`},
		{"beyond a float dtype", map[string]Range{"x": {Lo: 0, Hi: 1e39}}, `x=0..1e+39: beyond the finite range of input "x"'s dtype f32`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RandomLeavesIn(g, 9, Typical, tt.ranges, OpInput)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestRandomSlots: slots are distinct positions within the extent or -1,
// with both present (skip) or no -1 where the extent has room (no skip),
// and the same for the same seed.
func TestRandomSlots(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		extent int64
		skip   bool
	}{
		{"a step in a large pool", 40, 4096, true},
		{"every slot taken", 8, 8, true},
		{"more slices than slots", 10, 4, true},
		{"no skips", 16, 20, false},
		{"two slices", 2, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(20) {
				got := RandomSlots(rand.New(rand.NewPCG(seed, 1)), tt.n, tt.extent, tt.skip)
				require.Equal(t, got, RandomSlots(rand.New(rand.NewPCG(seed, 1)), tt.n, tt.extent, tt.skip))
				require.Len(t, got, tt.n)
				seen, skipped := map[int64]bool{}, 0
				for _, s := range got {
					if s == -1 {
						skipped++
						continue
					}
					require.True(t, s >= 0 && s < tt.extent, "slot %d outside %d", s, tt.extent)
					require.False(t, seen[s], "slot %d twice in %v", s, got)
					seen[s] = true
				}
				require.Positive(t, len(seen), "no slot in %v", got)
				if tt.skip {
					require.Positive(t, skipped, "no -1 in %v", got)
				} else {
					require.Equal(t, max(0, tt.n-int(tt.extent)), skipped, "%v", got)
				}
			}
		})
	}
}
