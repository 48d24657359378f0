package cost

import (
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llamaDecodeAttention is llama-3-8b's decode attention in bf16: one
// query row of 32 heads on 8 key heads of 128 over a cache of 1024 keys,
// causal at a runtime position.
func llamaDecodeAttention(t *testing.T) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	q := b.Input("$0", ir.BF16, 1, 32, 1, 128)
	k, v := b.Input("$1", ir.BF16, 1, 8, 1024, 128), b.Input("$2", ir.BF16, 1, 8, 1024, 128)
	b.Output("out0", b.CausalAttentionAt(q, k, v, 0.08838834764831843, 0, b.Input("$3", ir.I32)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestDecodeAttentionHeld is the issue's held test for attention: at
// position 1023 on an H200, the one-row split-keys layout (a lane a key,
// scalar bf16 loads 256 bytes apart, 64-bit divisions and remainders in
// every element's address, 32 blocks) is priced at least as slow as what
// Little's law and the integer pipe say of it, figures below, and ranks
// below its repair, the flash-decoding layout, which the model picks;
// the repair in turn is no faster than its own bytes at the achievable
// bandwidth.
//
// The figures: K and V are 2 x 8 x 1024 x 128 bf16 = 4 MiB. The scalar
// layout runs 32 blocks of 32 warps, one a multiprocessor, each warp with
// 32 lanes x 4 loads x 2 bytes = 256 bytes outstanding: 8 KiB a busy
// multiprocessor, 32 of them, so 4 MiB x 600 ns / (8 KiB x 32) = 9.6 us.
// Its 32 heads read each key and value element once per head through an
// index of at least 30 integer instructions (the SASS reading found
// about 37 an FMA): 32 x 1024 x 256 x 30 / 32 lanes = 7.9 M warp
// instructions on 32 multiprocessors' integer pipes at 2 a clock
// (64 lanes) and 1.98 GHz: 62 us.
func TestDecodeAttentionHeld(t *testing.T) {
	d, err := LookupDevice("h200")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d)).AtPosition(1023)
	body := llamaDecodeAttention(t)
	const kvBytes = 2 * 8 * 1024 * 128 * 2
	latency := d.latency()
	scalar := Schedule{BM: 1, BN: 32, Threads: 1024, SplitKeys: true}
	repaired := Schedule{BM: 1, BN: 8, Threads: 128, KeySplits: 16}
	price := func(s Schedule) (float64, Features) {
		f, err := m.Features(body, s)
		require.NoError(t, err, "%s", s)
		sec, err := Predict(d, Defaults(d), f)
		require.NoError(t, err)
		return sec, f
	}
	cases := []struct {
		name  string
		s     Schedule
		floor float64 // seconds the kernel cannot beat, from the figures
	}{
		{"scalar strided loads, 64-bit division: Little's law", scalar, kvBytes * latency / (32 * 256 * 32)},
		{"scalar strided loads, 64-bit division: the integer pipe", scalar, 32 * 1024 * 256 * 30 / 32 / (2 * 32 * 1.98e9)},
		{"flash-decoding: its bytes at the achievable bandwidth", repaired, kvBytes / (d.MemoryBandwidth * d.MemoryAchievable)},
	}
	for _, tc := range cases {
		sec, _ := price(tc.s)
		assert.GreaterOrEqual(t, sec, tc.floor, "%s (%s): predicted %.3g s", tc.name, tc.s, sec)
	}
	slow, fs := price(scalar)
	fast, ff := price(repaired)
	assert.Less(t, fast*4, slow, "the repair ranks well above the scalar layout: %.3g s against %.3g s", fast, slow)
	assert.Greater(t, ff.InFlight, 8*fs.InFlight, "16-byte rows keep more in flight than scalar loads")
	assert.Less(t, ff.Issue.IntPerFP(), 1.0, "the repair's addressing is a fraction of its arithmetic")
	assert.Greater(t, fs.Issue.IntPerFP(), 10.0, "the scalar layout's addressing dominates its arithmetic")
	best, err := m.Kernel(body)
	require.NoError(t, err)
	assert.Positive(t, best.Schedule.KeySplits, "the model picks flash-decoding, not %s", best.Schedule)
	assert.Greater(t, best.Features.Blocks, d.SMs/2, "its grid fills the device: %d blocks", best.Features.Blocks)
}
