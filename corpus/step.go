package corpus

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
)

// StepLayout is the layout of the step kind that config c builds with
// options opt: its maxima and KV pool.
func StepLayout(c *Config, opt Options) (step.Layout, error) {
	if opt.MaxSeq > 0 {
		opt.Seq = opt.MaxSeq
	}
	opt, err := opt.resolve()
	if err != nil {
		return step.Layout{}, err
	}
	so, err := opt.Step.resolve(opt.Seq)
	if err != nil {
		return step.Layout{}, err
	}
	l := step.Layout{
		MaxTokens: so.MaxTokens, MaxSeqs: so.MaxSeqs, BlockSize: so.BlockSize, Blocks: so.KVBlocks,
		BlocksPerSeq: (opt.Seq + so.BlockSize - 1) / so.BlockSize,
		KVHeads:      c.NumKeyValueHeads, HeadDim: c.HeadDim, Layers: c.NumHiddenLayers, Vocab: c.VocabSize,
		Window: c.window(0), AllLogits: so.AllLogits,
	}
	if c.Family() == GPT2 {
		l.KVHeads = c.NumAttentionHeads
	}
	if c.mixedWindows() {
		// gpt-oss: sliding layers beside full ones, each layer's own.
		l.Window = 0
		for i := range c.NumHiddenLayers {
			l.LayerWindows = append(l.LayerWindows, c.window(i))
		}
	}
	if err := l.Validate(); err != nil {
		return step.Layout{}, err
	}
	return l, nil
}

// stepKind builds the step kind: one serving step over a flat list of
// tokens of many sequences, every layer's keys and values in paged pools
// (package step's contract). The graph is the causal LM over tokens
// [max tokens] with positions from the input, not from an iota: the
// projections, norms and MLPs treat the tokens as rows, the new keys and
// values are scattered into the pools at their slots, and attention is
// paged attention over each token's own sequence. The output is the
// logits of each sequence's last token [max seqs, vocab] (or of every
// token). The runtime symbol seqs carries S; T is query_start[S], the
// tokens past it belong to no sequence.
func (e *emitter) stepKind() error {
	l, err := StepLayout(e.cfg, e.opt)
	if err != nil {
		return err
	}
	c := e.cfg
	T, S, M := ir.Dim(l.MaxTokens), ir.Dim(l.MaxSeqs), ir.Dim(l.BlocksPerSeq)
	ids := e.Input(step.InputIDs, ir.I64, T)
	sp := &stepPass{layout: l}
	sp.positions = e.Input(step.Positions, ir.I32, T)
	sp.starts = e.Input(step.QueryStarts, ir.I32, S+1)
	sp.lens = e.Input(step.SeqLens, ir.I32, S)
	sp.table = e.Input(step.BlockTable, ir.I32, S, M)
	sp.slots = e.Input(step.SlotMapping, ir.I32, T)
	sp.seqs = e.Symbol(step.SeqsSymbol, 1, int64(l.MaxSeqs))

	var h, embed ir.Value
	if c.Family() == GPT2 {
		embed = e.weight("transformer.wte.weight", c.VocabSize, c.HiddenSize)
		wpe := e.weight("transformer.wpe.weight", c.MaxPositionEmbeddings, c.HiddenSize)
		h = e.Add(e.Gather(embed, ids, 0), e.Gather(wpe, sp.positions, 0))
	} else {
		embed = e.weight("model.embed_tokens.weight", c.VocabSize, c.HiddenSize)
		h = e.Gather(embed, ids, 0)
		sp.cos, sp.sin = e.stepRotary(sp.positions)
	}
	for i := range c.NumHiddenLayers {
		h = e.stepLayer(h, i, sp)
	}
	if !l.AllLogits {
		// Each sequence's last token is the one before the next start;
		// the final norm is per row, so it runs on those rows alone.
		last := e.Sub(e.Slice(sp.starts, 0, 1, int64(S)+1, 1), e.scalar(ir.I32, 1))
		h = e.Gather(h, last, 0)
	}
	e.lmHead(h, embed)
	return nil
}

// stepPass holds what a step's layers share: the metadata inputs and the
// rotary tables at the tokens' positions.
type stepPass struct {
	layout                                step.Layout
	positions, starts, lens, table, slots ir.Value
	seqs                                  ir.Value
	cos, sin                              ir.Value // [tokens, 1, head size] (llama family)
}

// stepRotary is rotaryTables at each token's own position: cos and sin
// [tokens, 1, head size] in the model's dtype.
func (e *emitter) stepRotary(positions ir.Value) (cos, sin ir.Value) {
	T := e.Shape(positions)[0]
	pos := e.Reshape(e.Cast(positions, ir.F32), T, 1)
	freqs := e.Mul(pos, e.invFreq()) // [tokens, head/2]
	emb := e.Concat(1, freqs, freqs)
	d := ir.Dim(e.cfg.HeadDim)
	cos, sin = e.rotaryCosSin(emb)
	return e.Reshape(cos, T, 1, d), e.Reshape(sin, T, 1, d)
}

// stepLayer is decoder layer i over the step's hidden states [tokens,
// hidden], as layer is over [batch, seq, hidden].
func (e *emitter) stepLayer(h ir.Value, i int, sp *stepPass) ir.Value {
	c := e.cfg
	pre := e.layerPrefix(i)
	if c.Family() == GPT2 {
		h = e.Add(h, e.stepAttention(e.layerNorm(h, pre+".ln_1", c.LayerNormEps), pre+".attn", i, sp))
		return e.Add(h, e.gpt2MLP(e.layerNorm(h, pre+".ln_2", c.LayerNormEps), pre+".mlp"))
	}
	h = e.Add(h, e.stepAttention(e.rmsNorm(h, pre+".input_layernorm", c.RMSNormEps), pre+".self_attn", i, sp))
	return e.Add(h, e.mlp(e.rmsNorm(h, pre+".post_attention_layernorm", c.RMSNormEps), pre))
}

// stepAttention is the attention block of layer i over x [tokens, hidden]:
// the projections as the model has them, heads as [tokens, heads, head
// size], rotary at each token's position (llama family), this step's keys
// and values scattered into the layer's pools at their slots (updated in
// place), paged attention (in the layer's own window, with the layer's
// sinks where the model has them), heads merged and the output
// projection.
func (e *emitter) stepAttention(x ir.Value, prefix string, layer int, sp *stepPass) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	c := e.cfg
	T := e.Shape(x)[0]
	hd := c.HeadDim
	heads := func(y ir.Value, n int) ir.Value { return e.Reshape(y, T, ir.Dim(n), ir.Dim(hd)) }
	var q, k, v ir.Value
	hq, hkv := c.NumAttentionHeads, c.NumKeyValueHeads
	if c.Family() == GPT2 {
		hkv = hq
		d := int64(c.HiddenSize)
		qkv := e.conv1d(x, prefix+".c_attn", c.HiddenSize, 3*c.HiddenSize)
		q = heads(e.Slice(qkv, 1, 0, d, 1), hq)
		k = heads(e.Slice(qkv, 1, d, 2*d, 1), hkv)
		v = heads(e.Slice(qkv, 1, 2*d, 3*d, 1), hkv)
	} else {
		q = heads(e.linear(x, prefix+".q_proj", c.HiddenSize, hq*hd, c.QKVBias), hq)
		k = heads(e.linear(x, prefix+".k_proj", c.HiddenSize, hkv*hd, c.QKVBias), hkv)
		v = heads(e.linear(x, prefix+".v_proj", c.HiddenSize, hkv*hd, c.QKVBias), hkv)
		q, k = e.qkNorm(q, k, prefix)
		q = e.applyRotary(q, sp.cos, sp.sin)
		k = e.applyRotary(k, sp.cos, sp.sin)
	}
	slots := ir.Dim(sp.layout.Slots())
	pool := func(name string, rows ir.Value) ir.Value {
		st := e.State(name, e.dt, slots, ir.Dim(hkv), ir.Dim(hd))
		full := e.Scatter(st, rows, sp.slots, 0)
		e.UpdateState(st, full)
		return full
	}
	kp := pool(step.KeyPool(layer), k)
	vp := pool(step.ValuePool(layer), v)
	scale := 1 / math.Sqrt(float64(hd))
	block, window := int64(sp.layout.BlockSize), int64(sp.layout.WindowOf(layer))
	var o ir.Value
	if sinks := e.sinks(prefix); sinks != ir.NoValue {
		// gpt-oss's sinks, the weight in the model's dtype (q's), as the
		// eager attention reads them.
		o = e.PagedAttentionSinks(q, k, v, kp, vp, sp.table, sp.lens, sp.starts, sp.seqs, sinks, scale, block, window)
	} else {
		o = e.PagedAttention(q, k, v, kp, vp, sp.table, sp.lens, sp.starts, sp.seqs, scale, block, window)
	}
	o = e.Reshape(o, T, ir.Dim(hq*hd))
	if c.Family() == GPT2 {
		return e.conv1d(o, prefix+".c_proj", c.HiddenSize, c.HiddenSize)
	}
	return e.linear(o, prefix+".o_proj", hq*hd, c.HiddenSize, c.OutBias)
}
