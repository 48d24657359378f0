package cost

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// boundBody is eager attention over q [1, 2, S, 8] and k, v [1, 2, T, 8]
// whose scaled scores pass through mask (given the builder, the scores
// and the i32 scalar input $3) before the softmax, decomposed, with its
// parts and the value of $3 there.
func boundBody(t *testing.T, S, T ir.Dim, mask func(b *ir.Builder, s, pos ir.Value) ir.Value) (*ir.Graph, AttentionParts, ir.Value) {
	t.Helper()
	b := ir.NewBuilder("kernel")
	q, k, v := b.Input("$0", ir.F32, 1, 2, S, 8), b.Input("$1", ir.F32, 1, 2, T, 8), b.Input("$2", ir.F32, 1, 2, T, 8)
	pos := b.Input("$3", ir.I32)
	s := b.Mul(b.MatMul(q, b.Transpose(k, 2, 3)), b.Scalar(ir.F32, 0.25))
	b.Output("out0", b.MatMul(b.Softmax(mask(b, s, pos), 3), v))
	g, err := b.Build()
	require.NoError(t, err)
	return decomposed(t, g)
}

// decomposed is a body's eager form, its attention parts and its input $3.
func decomposed(t *testing.T, g *ir.Graph) (*ir.Graph, AttentionParts, ir.Value) {
	t.Helper()
	d, err := Decompose(g)
	require.NoError(t, err)
	p, err := Attention(d)
	require.NoError(t, err)
	pos := ir.NoValue
	for _, v := range d.Inputs() {
		if d.Node(v).Name == "$3" {
			pos = v
		}
	}
	return d, p, pos
}

// TestAttentionKeyBound reads the key bounds of masks as models and the
// decomposition write them (causal at a static offset or a runtime
// position, compares either way round, a flipped where, a sliding
// window), and refuses masks that bound nothing it can use (a mask read
// from memory, a fill too small to zero a probability, a mask that varies
// along the heads, keys scaled, a negative scale after the mask).
func TestAttentionKeyBound(t *testing.T) {
	const S, T = 4, 16
	lowest := func(b *ir.Builder) ir.Value { return b.Scalar(ir.F32, -math.MaxFloat32) }
	iota := func(b *ir.Builder, axis int) ir.Value { return b.Iota(ir.I64, ir.Shape{S, T}, axis) }
	add := func(b *ir.Builder, s, see ir.Value) ir.Value {
		return b.Add(s, b.Where(see, b.Scalar(ir.F32, 0), lowest(b)))
	}
	at := func(b *ir.Builder, pos ir.Value) ir.Value { return b.Cast(pos, ir.I64) }
	diff := func(b *ir.Builder, pos ir.Value) ir.Value { return b.Add(b.Sub(iota(b, 0), iota(b, 1)), at(b, pos)) }
	causalAt := func(b *ir.Builder, s, pos ir.Value) ir.Value {
		return add(b, s, b.Binary(ir.OpGe, diff(b, pos), b.Scalar(ir.I64, 0)))
	}
	type want struct {
		row, key, c int64
		pos         int64 // the coefficient of $3
	}
	tests := []struct {
		name string
		mask func(b *ir.Builder, s, pos ir.Value) ir.Value
		want []want // nil: no bound
	}{
		{"causal at a runtime position", causalAt, []want{{1, -1, 0, 1}}},
		{"static causal, two iotas compared", func(b *ir.Builder, s, _ ir.Value) ir.Value {
			return add(b, s, b.Binary(ir.OpGe, b.Add(iota(b, 0), b.Scalar(ir.I64, 3)), iota(b, 1)))
		}, []want{{1, -1, 3, 0}}},
		{"mirrored compare", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			return add(b, s, b.Binary(ir.OpLe, iota(b, 1), b.Add(at(b, pos), iota(b, 0))))
		}, []want{{1, -1, 0, 1}}},
		{"flipped where on the scores", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			past := b.Binary(ir.OpGt, iota(b, 1), b.Add(iota(b, 0), at(b, pos)))
			return b.Where(past, lowest(b), s)
		}, []want{{1, -1, 0, 1}}},
		{"sliding window", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			d := diff(b, pos)
			return add(b, s, b.Binary(ir.OpAnd, b.Binary(ir.OpGe, d, b.Scalar(ir.I64, 0)), b.Binary(ir.OpLt, d, b.Scalar(ir.I64, 4))))
		}, []want{{1, -1, 0, 1}, {-1, 1, 3, -1}}},
		{"scaled after the mask", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			return b.Mul(causalAt(b, s, pos), b.Scalar(ir.F32, 0.5))
		}, []want{{1, -1, 0, 1}}},
		{"a mask read from memory", func(b *ir.Builder, s, _ ir.Value) ir.Value {
			return b.Add(s, b.Input("$4", ir.F32, S, T))
		}, nil},
		{"a fill too small", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			return b.Add(s, b.Where(b.Binary(ir.OpGe, diff(b, pos), b.Scalar(ir.I64, 0)), b.Scalar(ir.F32, 0), b.Scalar(ir.F32, -1)))
		}, nil},
		{"a mask along the heads", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			heads := b.Iota(ir.I64, ir.Shape{1, 2, S, T}, 1)
			return add(b, s, b.Binary(ir.OpGe, b.BroadcastTo(diff(b, pos), ir.Shape{1, 2, S, T}), heads))
		}, nil},
		{"keys scaled", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			j2 := b.Mul(iota(b, 1), b.Scalar(ir.I64, 2))
			return add(b, s, b.Binary(ir.OpGe, b.Add(iota(b, 0), at(b, pos)), j2))
		}, nil},
		{"a negative scale after the mask", func(b *ir.Builder, s, pos ir.Value) ir.Value {
			return b.Mul(causalAt(b, s, pos), b.Scalar(ir.F32, -0.5))
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, p, pos := boundBody(t, S, T, tc.mask)
			kb, ok := AttentionKeyBound(body, p)
			if tc.want == nil {
				assert.False(t, ok, "%v", kb)
				return
			}
			require.True(t, ok)
			var got []want
			for _, c := range kb.Constraints {
				w := want{row: c.Row, key: c.Key, c: c.Const}
				for _, term := range c.Terms {
					require.Equal(t, pos, term.Input)
					w.pos = term.Coef
				}
				got = append(got, w)
			}
			assert.Equal(t, tc.want, got)
		})
	}
	// The attention op's decomposition, at a runtime position and an
	// offset.
	b := ir.NewBuilder("kernel")
	q, k, v := b.Input("$0", ir.BF16, 1, 4, 2, 16), b.Input("$1", ir.BF16, 1, 2, 40, 16), b.Input("$2", ir.BF16, 1, 2, 40, 16)
	b.Output("out0", b.CausalAttentionAt(q, k, v, 0.25, 2, b.Input("$3", ir.I32)))
	g, err := b.Build()
	require.NoError(t, err)
	body, p, pos := decomposed(t, g)
	kb, ok := AttentionKeyBound(body, p)
	require.True(t, ok)
	assert.Equal(t, []KeyConstraint{{Row: 1, Key: -1, Const: 2, Terms: []KeyTerm{{Input: pos, Coef: 1}}}}, kb.Constraints)
	assert.True(t, kb.Runtime())
	assert.Equal(t, []ir.Value{pos}, kb.Inputs())
}

// TestKeyBoundBlock: the keys a block of rows sees are the union of its
// rows' (a window's start included), or every key when a row sees none.
func TestKeyBoundBlock(t *testing.T) {
	const pos ir.Value = 7
	causal := KeyConstraint{Row: 1, Key: -1, Terms: []KeyTerm{{Input: pos, Coef: 1}}}
	window := KeyConstraint{Row: -1, Key: 1, Const: 3, Terms: []KeyTerm{{Input: pos, Coef: -1}}} // j >= i + pos - 3
	tests := []struct {
		name        string
		kb          KeyBound
		at          int64
		first, last int64
		lo, hi      int64
	}{
		{"causal, one row", KeyBound{[]KeyConstraint{causal}}, 5, 0, 0, 0, 6},
		{"causal, four rows", KeyBound{[]KeyConstraint{causal}}, 5, 0, 3, 0, 9},
		{"causal past the keys", KeyBound{[]KeyConstraint{causal}}, 30, 0, 3, 0, 16},
		{"window", KeyBound{[]KeyConstraint{causal, window}}, 5, 0, 3, 2, 9},
		{"a row sees nothing", KeyBound{[]KeyConstraint{causal}}, -2, 0, 3, 0, 16},
		{"every row sees a key", KeyBound{[]KeyConstraint{causal}}, -2, 2, 3, 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := tc.kb.Block(tc.first, tc.last, 16, func(v ir.Value) int64 {
				require.Equal(t, pos, v)
				return tc.at
			})
			assert.Equal(t, [2]int64{tc.lo, tc.hi}, [2]int64{lo, hi})
		})
	}
}

// TestAttentionPricedAtExpectedKeys: a decode step's attention over a KV
// cache of T keys at a runtime position in [0, T-1] is priced on average
// over the geometric buckets of the range (keys read: the position plus
// one), where the same attention at a static position sees every key; a
// model AtPosition prices it at that position alone.
func TestAttentionPricedAtExpectedKeys(t *testing.T) {
	const heads, T, D = 8, 4096, 64
	build := func(runtime bool) *ir.Graph {
		b := ir.NewBuilder("kernel")
		q, k, v := b.Input("$0", ir.F32, 1, heads, 1, D), b.Input("$1", ir.F32, 1, heads, T, D), b.Input("$2", ir.F32, 1, heads, T, D)
		if runtime {
			b.Output("out0", b.CausalAttentionAt(q, k, v, 0.125, 0, b.Input("$3", ir.I32)))
		} else {
			b.Output("out0", b.Apply(ir.OpAttention, ir.Attrs{Scale: 0.125, Causal: true, Offset: T - 1}, q, k, v))
		}
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	dev, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(dev, Defaults(dev))
	oneRow := Schedule{BM: 1, BN: 32, Threads: 128}
	estimate := func(g *ir.Graph) Estimate {
		ranked, err := m.Ranked(g)
		require.NoError(t, err)
		for _, e := range ranked {
			if e.Schedule == oneRow {
				return e
			}
		}
		require.FailNow(t, "no one-row schedule listed")
		return Estimate{}
	}
	se, de := estimate(build(false)), estimate(build(true))
	t.Logf("%d keys on %s, %s: %.2f us at a static last position, %.2f us at a runtime one", T, dev.Name, oneRow, se.Seconds*1e6, de.Seconds*1e6)
	static, dynamic := se.Features, de.Features
	qo := 2.0 * heads * D * 4 // the query row and the output
	kv := 2.0 * heads * T * D * 4
	buckets := ir.Symbol{Lo: 0, Hi: T - 1}.Buckets()
	mean := 0.0
	for _, b := range buckets {
		mean += float64(b+1) / float64(len(buckets))
	}
	assert.InDelta(t, qo+kv, static.Bytes, 1)
	assert.InDelta(t, qo+4+kv*mean/T, dynamic.Bytes, 1, "the keys of the buckets of [0, %d] on average", T-1)
	assert.Less(t, dynamic.Work[0].FLOPs, 0.2*static.Work[0].FLOPs)

	at := func(p int64) Features {
		r, err := m.AtPosition(p).Ranked(build(true))
		require.NoError(t, err)
		for _, e := range r {
			if e.Schedule == oneRow {
				return e.Features
			}
		}
		require.FailNow(t, "no one-row schedule listed")
		return Features{}
	}
	assert.InDelta(t, qo+4+kv, at(T-1).Bytes, 1, "the last position reads every key")
	assert.InDelta(t, qo+4+kv/T, at(0).Bytes, 1, "the first reads one")
	assert.InDelta(t, qo+4+kv, at(1<<40).Bytes, 1, "held to the range")
	assert.Equal(t, static.TileBytes, at(T-1).TileBytes)
}

// TestAttentionPricedAtExpectedRange: --expect narrows the positions an
// attention is priced over: a deployment expected at long contexts prices
// the same kernel higher than one expected at short ones.
func TestAttentionPricedAtExpectedRange(t *testing.T) {
	const T = 4096
	b := ir.NewBuilder("kernel")
	q, k, v := b.Input("$0", ir.F32, 1, 8, 1, 64), b.Input("$1", ir.F32, 1, 8, T, 64), b.Input("$2", ir.F32, 1, 8, T, 64)
	b.Output("out0", b.CausalAttentionAt(q, k, v, 0.125, 0, b.Input("$3", ir.I32)))
	g, err := b.Build()
	require.NoError(t, err)
	dev, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(dev, Defaults(dev))
	price := func(m *Model) float64 {
		e, err := m.Kernel(g)
		require.NoError(t, err)
		return e.Seconds
	}
	short, long, whole := price(m.Expecting(0, 255)), price(m.Expecting(2048, 4095)), price(m)
	assert.Less(t, short, whole)
	assert.Less(t, whole, long)
	assert.InDelta(t, price(m.AtPosition(4095)), price(m.Expecting(4095, 1<<20)), 1e-12, "held to the position's range")
}
