package cost

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// pagedShape is a paged attention kernel body's shape: tokens, heads,
// head size, pool slots, table rows and columns, block and window.
type pagedShape struct {
	T, Hq, Hkv, D, P, S, M ir.Dim
	block, window          int64
}

// llamaStep is a llama-3-8b serving step: 32 query heads on 8 key heads
// of 128, 2048 blocks of 16 slots, 256 sequences of up to 512 blocks.
var llamaStep = pagedShape{T: 256, Hq: 32, Hkv: 8, D: 128, P: 2048 * 16, S: 256, M: 512, block: 16}

func (s pagedShape) body(t testing.TB, dt ir.DType) *ir.Graph {
	return body(t, func(b *ir.Builder) ir.Value {
		in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
		return b.PagedAttention(in("$0", dt, s.T, s.Hq, s.D), in("$1", dt, s.T, s.Hkv, s.D), in("$2", dt, s.T, s.Hkv, s.D),
			in("$3", dt, s.P, s.Hkv, s.D), in("$4", dt, s.P, s.Hkv, s.D), in("$5", ir.I32, s.S, s.M), in("$6", ir.I32, s.S),
			in("$7", ir.I32, s.S+1), in("$8", ir.I32), 1/math.Sqrt(float64(s.D)), s.block, s.window)
	})
}

// TestPagedAttentionForm: the op alone is the paged form, read into its
// parts; anything fused with it is refused with the reason.
func TestPagedAttentionForm(t *testing.T) {
	g := llamaStep.body(t, ir.BF16)
	f, err := FormOf(g)
	require.NoError(t, err)
	assert.Equal(t, FormPagedAttention, f)
	p, err := Paged(g)
	require.NoError(t, err)
	assert.Equal(t, PagedParts{Node: p.Node, T: 256, Hq: 32, Hkv: 8, D: 128, Slots: 32768, Block: 16, Seqs: 256, Blocks: 512,
		Scale: 1 / math.Sqrt(128), DType: ir.BF16, MetaTypes: [4]ir.DType{ir.I32, ir.I32, ir.I32, ir.I32}}, p)
	assert.Equal(t, int64(4), p.Group())

	fused := body(t, func(b *ir.Builder) ir.Value {
		q := b.Neg(b.Input("q", ir.F32, 4, 2, 8))
		kv := func(n string, rows ir.Dim) ir.Value { return b.Input(n, ir.F32, rows, 1, 8) }
		return b.PagedAttention(q, kv("k", 4), kv("v", 4), kv("kp", 16), kv("vp", 16), b.Input("t", ir.I32, 2, 4),
			b.Input("l", ir.I32, 2), b.Input("s", ir.I32, 3), b.Input("n", ir.I32), 0.5, 4, 0)
	})
	_, err = FormOf(fused)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a neg in a paged attention kernel")
}

// TestPagedAttentionPricing: every listed schedule fits a llama step and
// is the split-keys layout; the price follows the context the sequences
// hold (AtPosition), not the pool's capacity or the table's width; a
// window bounds the keys priced; more tokens cost more.
func TestPagedAttentionPricing(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	ranked, err := m.Ranked(llamaStep.body(t, ir.BF16))
	require.NoError(t, err)
	unsplit := 0
	for _, e := range ranked {
		assert.True(t, e.Schedule.SplitKeys, "%s", e.Schedule)
		assert.Positive(t, e.Seconds)
		if e.Schedule.KeySplits == 0 {
			unsplit++
			assert.Equal(t, 256*8, e.Features.Blocks, "a block per token and key head")
		} else {
			assert.Equal(t, 256*8*e.Schedule.KeySplits, e.Features.Blocks, "a block per token, key head and split")
		}
	}
	assert.Equal(t, 4, unsplit, "2 to 16 warps: 32 warps' partials overflow static shared memory")
	assert.Zero(t, ranked[0].Schedule.KeySplits, "256 tokens fill the device without a split")
	at := func(s pagedShape, ctx int64) Estimate {
		e, err := m.AtPosition(ctx).Kernel(s.body(t, ir.BF16))
		require.NoError(t, err)
		return e
	}
	short, long := at(llamaStep, 256), at(llamaStep, 4096)
	assert.Greater(t, long.Features.Bytes, 8*short.Features.Bytes/2, "16 times the context reads several times the bytes")
	assert.Greater(t, long.Seconds, short.Seconds)
	// The step is one decode token a sequence (256 tokens, 256 rows):
	// over 4096 cached positions it reads each sequence's keys and values
	// once, 256 x 4096 x 8 x 128 x 2 bytes x 2.
	kv := 256.0 * 4096 * 8 * 128 * 2 * 2
	assert.InDelta(t, kv, long.Features.Bytes, 0.1*kv, "the bytes of the cached keys and values, and little else")

	bigPool, wideTable := llamaStep, llamaStep
	bigPool.P *= 2
	wideTable.M *= 2
	for _, s := range []pagedShape{bigPool, wideTable} {
		assert.InDelta(t, long.Features.Bytes, at(s, 4096).Features.Bytes, 1e-9*long.Features.Bytes, "capacity is not read")
	}
	windowed := llamaStep
	windowed.window = 512
	assert.Less(t, at(windowed, 4096).Features.Bytes, long.Features.Bytes/4, "a window of 512 reads an eighth of 4096 positions")

	prefill := llamaStep
	prefill.T = 2048
	assert.Greater(t, at(prefill, 4096).Seconds, long.Seconds)

	// Without a pinned context the assumption (half the pool, shared
	// evenly) prices 64 positions a sequence here: the table's 8192 are
	// not what is priced.
	def, err := m.Kernel(llamaStep.body(t, ir.BF16))
	require.NoError(t, err)
	assert.InDelta(t, at(llamaStep, 64).Features.Bytes, def.Features.Bytes, 1e-9*def.Features.Bytes)
}

// TestPagedAttentionSplits: splitting each token's keys across blocks
// (flash-decoding) wins where a step's few tokens over a long context
// leave the device idle, and nowhere else: with one decoding sequence the
// choice flips from no split at a short context to a split at 8191
// positions; 256 tokens fill the device at any context. Splits are listed
// only where half as many would not fill the device's resident blocks,
// and their workspace is each block's partial and each pair's counter.
func TestPagedAttentionSplits(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	decode := llamaStep
	decode.T = 1
	cases := []struct {
		name  string
		shape pagedShape
		ctx   int64
		split bool
	}{
		{"decode_ctx128", decode, 128, false},
		{"decode_ctx8191", decode, 8191, true},
		{"tokens256_ctx128", llamaStep, 128, false},
		{"tokens256_ctx8191", llamaStep, 8191, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ranked, err := m.AtPosition(tc.ctx).Ranked(tc.shape.body(t, ir.BF16))
			require.NoError(t, err)
			best := ranked[0]
			var unsplit *Estimate
			for i, e := range ranked {
				if e.Schedule.KeySplits == 0 && unsplit == nil {
					unsplit = &ranked[i]
				}
			}
			require.NotNil(t, unsplit)
			t.Logf("best %s %.2f us, best without a split %s %.2f us", best.Schedule, best.Seconds*1e6, unsplit.Schedule, unsplit.Seconds*1e6)
			if tc.split {
				assert.Greater(t, best.Schedule.KeySplits, 1, "a split wins")
				assert.Less(t, best.Seconds, unsplit.Seconds/2, "by far: 8 blocks cannot draw the bandwidth")
			} else {
				assert.Zero(t, best.Schedule.KeySplits, "no split wins")
			}
		})
	}

	// What is listed: for one token, every split count; for 2048 pairs
	// only those whose halves leave the resident blocks unfilled and
	// whose workspace fits.
	p, err := Paged(decode.body(t, ir.BF16))
	require.NoError(t, err)
	assert.Equal(t, int64(8*4*4*130*4+8*4), PagedWorkspace(p, 4), "8 pairs of 4 splits of 4 heads' 128 accumulators, max and sum; 8 counters")
	assert.Zero(t, PagedWorkspace(p, 1))
	splits := func(s pagedShape) (map[int]bool, int) {
		ranked, err := m.AtPosition(4096).Ranked(s.body(t, ir.BF16))
		require.NoError(t, err)
		out, perSM := map[int]bool{}, 0
		for _, e := range ranked {
			if e.Schedule.Threads == 64 {
				out[e.Schedule.KeySplits] = true
				if e.Schedule.KeySplits == 0 {
					perSM = e.Features.PerSM
				}
			}
		}
		return out, perSM
	}
	got, _ := splits(decode)
	assert.Equal(t, map[int]bool{0: true, 2: true, 4: true, 8: true, 16: true, 32: true}, got)
	got, perSM := splits(llamaStep)
	require.Positive(t, perSM)
	p, err = Paged(llamaStep.body(t, ir.BF16))
	require.NoError(t, err)
	want := map[int]bool{0: true}
	for n := 2; n <= PagedMaxSplits; n *= 2 {
		if 256*8*n/2 < d.SMs*perSM && PagedWorkspace(p, n) <= PagedMaxWorkspace {
			want[n] = true
		}
	}
	assert.Equal(t, want, got)
	assert.Less(t, len(want), 6, "not every split count is listed for 256 tokens")

	// The shares of a token's keys: whole tiles, the last ones empty for
	// a short context.
	for _, c := range []struct {
		keys  int64
		n     int
		chunk int64
	}{{1, 8, 32}, {300, 8, 64}, {8192, 16, 512}, {8191, 16, 512}, {33, 2, 32}, {5, 1, 32}} {
		assert.Equal(t, c.chunk, PagedSplitChunk(c.keys, c.n), "%d keys in %d splits", c.keys, c.n)
	}
}
