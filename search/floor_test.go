package search

import (
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeFloorByHand checks llama-3-8b decode's floor bytes at past
// 1024 against a hand count: every weight once except the embedding
// table, of which the step reads one row; per layer and per K and V
// cache the 1025 rows attended and the one row written; the input ids,
// the position and the logits. The static step at the same position
// moves the same bytes.
func TestDecodeFloorByHand(t *testing.T) {
	const past = 1024
	c, err := corpus.EmbeddedConfig("llama-3-8b")
	require.NoError(t, err)
	h, inter, layers, vocab := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.NumHiddenLayers), float64(c.VocabSize)
	kv := float64(c.NumKeyValueHeads * c.HeadDim)
	const bf16 = 2
	perLayer := 2*h*h + 2*h*kv + 3*h*inter + 2*h // q, o; k, v; gate, up, down; two norms
	weights := bf16 * (layers*perLayer + h + vocab*h + h)
	caches := layers * 2 * (past + 1 + 1) * kv * bf16
	want := weights + caches + 8 + 4 + 4*vocab // input_ids i64, past i32, logits f32

	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	g, err := corpus.Build("llama-3-8b:decode", corpus.Options{Seq: 8192, Past: -1, DType: ir.BF16})
	require.NoError(t, err)
	f := programFloor(g, dev, map[string]int64{"past": past})
	assert.InDelta(t, want, f.Bytes, 0.5, "runtime decode at past %d", past)
	assert.InDelta(t, f.Bytes/dev.MemoryBandwidth, f.Hardware, 1e-12, "a decode step is bound by its bytes at peak bandwidth")
	assert.Greater(t, f.Achievable, f.Hardware)

	static, err := corpus.Build("llama-3-8b:decode", corpus.Options{Seq: 8192, Past: past, DType: ir.BF16})
	require.NoError(t, err)
	assert.InDelta(t, want-4, programFloor(static, dev, nil).Bytes, 0.5, "the static step has no position input")

	// The first position reads one row of each cache, the last all.
	first := programFloor(g, dev, map[string]int64{"past": 0}).Bytes
	last := programFloor(g, dev, map[string]int64{"past": 8191}).Bytes
	assert.InDelta(t, want-layers*2*past*kv*bf16, first, 0.5)
	assert.InDelta(t, want+layers*2*(8191-past)*kv*bf16, last, 0.5)
}

// TestFloorTiedEmbedding: a table that is also the LM head is read whole.
func TestFloorTiedEmbedding(t *testing.T) {
	g, err := corpus.Build("tiny-gpt2:decode", corpus.Options{Seq: 16, Past: 3})
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	f := programFloor(g, dev, nil)
	c, err := corpus.EmbeddedConfig("tiny-gpt2")
	require.NoError(t, err)
	wte := float64(c.VocabSize * c.HiddenSize * 4)
	wpeRow := float64(c.HiddenSize * 4)
	assert.Greater(t, f.Bytes, wte, "the tied table is read whole")
	// Without the tie the position table is read one row at a time.
	var wpe float64
	for _, v := range g.Weights() {
		if n := g.Node(v); n.Name == "transformer.wpe.weight" {
			wpe = weightBytes(g, n, readers(g)[v], func(ir.Value) float64 { return 1 })
		}
	}
	assert.Equal(t, wpeRow, wpe)
}

// TestStepFloorByHand: a llama-3-8b step's floor at S sequences is the
// weights (the embedding's gathered rows), the metadata inputs, the pools'
// written rows and the priced workload's cached rows (K and V, every
// layer), and the logits; its arithmetic the matmuls over every token
// plus attention over the workload's keys.
func TestStepFloorByHand(t *testing.T) {
	c, err := corpus.EmbeddedConfig("llama-3-8b")
	require.NoError(t, err)
	opt := corpus.Options{Seq: 4096, DType: ir.BF16, Step: corpus.StepOptions{MaxTokens: 256, MaxSeqs: 32, KVBlocks: 4096}}
	g, err := corpus.Build("llama-3-8b:step", opt)
	require.NoError(t, err)
	l, err := corpus.StepLayout(c, opt)
	require.NoError(t, err)
	h, inter, layers, vocab := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.NumHiddenLayers), float64(c.VocabSize)
	kv := float64(c.NumKeyValueHeads * c.HeadDim)
	const bf16 = 2
	T, S := float64(l.MaxTokens), float64(l.MaxSeqs)
	perLayer := 2*h*h + 2*h*kv + 3*h*inter + 2*h
	weights := bf16 * (layers*perLayer + h + T*h + vocab*h) // the embedding's T rows
	meta := 8*T + 4*T + 4*(S+1) + 4*S + 4*S*float64(l.BlocksPerSeq) + 4*T + 4
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	for _, seqs := range []int{1, 8, 32} {
		w := l.Priced(seqs)
		pools := layers * 2 * (T + w.Cached) * kv * bf16
		// The logits and the LM head: the rows of the sequences present.
		want := weights + meta + pools + 4*float64(seqs)*vocab
		f := programFloor(g, dev, map[string]int64{step.SeqsSymbol: int64(seqs)})
		assert.InDelta(t, want, f.Bytes, 0.5, "seqs %d", seqs)
		q := float64(c.NumAttentionHeads * c.HeadDim)
		matmuls := 2*T*layers*perLayerMACs(h, kv, inter) + 2*float64(seqs)*h*vocab
		assert.InDelta(t, matmuls+layers*4*q*w.Keys, f.FLOPs, 1, "seqs %d", seqs)
	}
}

// TestStepFloorAtWorkloads: llama-3-8b's bf16 step on an h100 (3.35 TB/s,
// 989 dense bf16 TFLOP/s) at a context of 1024, against floors computed
// by hand from the weights (15.0 GB read once a step) and the pools (128
// KiB a cached token: 32 layers of K and V, 8 heads of 128 in bf16):
// decoding sequences are bound by the bytes, a mixed step of a 512-token
// chunk and 31 decodes by the arithmetic.
func TestStepFloorAtWorkloads(t *testing.T) {
	opt := corpus.Options{Seq: 2048, DType: ir.BF16, Step: corpus.StepOptions{MaxTokens: 1024, MaxSeqs: 128, KVBlocks: 128 * 2048 / 16}}
	g, err := corpus.Build("llama-3-8b:step", opt)
	require.NoError(t, err)
	c, err := corpus.EmbeddedConfig("llama-3-8b")
	require.NoError(t, err)
	l, err := corpus.StepLayout(c, opt)
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	tests := []struct {
		seqs int
		want float64 // seconds, by hand
	}{{1, 4.52e-3}, {8, 4.80e-3}, {32, 5.76e-3}, {128, 9.61e-3}}
	for _, tc := range tests {
		f := StepFloor(g, dev, l.Decoding(tc.seqs, 1024))
		assert.InEpsilon(t, tc.want, f.Hardware, 0.02, "%d decoding sequences", tc.seqs)
		mma, ok := dev.Peak(cost.MMA, "bf16")
		require.True(t, ok)
		assert.Greater(t, f.Bytes/dev.MemoryBandwidth, f.FLOPs/mma.FLOPS, "%d decoding sequences are bound by the bytes", tc.seqs)
	}
	mixed := []step.SeqWork{{Tokens: 512, Context: 1024}}
	for range 31 {
		mixed = append(mixed, step.SeqWork{Tokens: 1, Context: 1024})
	}
	w, err := l.WorkloadOf(mixed)
	require.NoError(t, err)
	// 2 x 543 tokens x 7.5e9 parameters (all but the embedding) is
	// 8.24 ms: the LM head over every token, as with --all-logits. With
	// the logits of each sequence's last token, the LM head runs over
	// the 32 sequences alone; attention adds 4 x 4096 x 32 layers a key.
	h, inter := float64(c.HiddenSize), float64(c.IntermediateSize)
	layer := 2*h*h + 2*h*1024 + 3*h*inter
	keys := 512.0*1024 + 512*513/2 + 31*1025
	flops := 2*543*32*layer + 2*32*h*float64(c.VocabSize) + 4*4096*32*keys
	f := StepFloor(g, dev, w)
	mma, ok := dev.Peak(cost.MMA, "bf16")
	require.True(t, ok)
	assert.InEpsilon(t, flops/mma.FLOPS, f.Hardware, 0.02, "a mixed step is bound by its arithmetic")
	opt.Step.AllLogits = true
	all, err := corpus.Build("llama-3-8b:step", opt)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, StepFloor(all, dev, w).Hardware, 8.24e-3, "every token's logits")
	_, err = l.WorkloadOf(append(mixed, step.SeqWork{Tokens: 600}))
	assert.ErrorContains(t, err, "tokens; the step takes at most 1024")
}

// perLayerMACs is a llama layer's multiply-adds per token.
func perLayerMACs(h, kv, inter float64) float64 { return 2*h*h + 2*h*kv + 3*h*inter }

// TestFloorScatteredPool: a paged pool written by a scatter moves the
// step's rows written and the rows read back, not the pool twice.
func TestFloorScatteredPool(t *testing.T) {
	const slots, tokens, read, row = 4096, 16, 32, 8 * 128 * 2 // bf16 rows of 8 heads of 128
	b := ir.NewBuilder("step")
	pool := b.State("kpool", ir.BF16, slots, 8, 128)
	rows := b.Input("k", ir.BF16, tokens, 8, 128)
	upd := b.Scatter(pool, b.Neg(rows), b.Input("slot_mapping", ir.I32, tokens), 0)
	b.UpdateState(pool, upd)
	b.Output("y", b.Slice(upd, 0, 0, read, 1))
	g, err := b.Build()
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	inputs := float64(tokens*row + tokens*4)
	want := inputs + float64(read*row+tokens*row) + float64(read*row)
	assert.InDelta(t, want, programFloor(g, dev, nil).Bytes, 0.5)
}
