package corpus

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// Hugging Face checkpoint names of the llama family's and gpt2's modules.
const (
	llamaLayer = "model.layers.%d"
	gpt2Layer  = "transformer.h.%d"
)

// layerPrefix is the checkpoint name of layer i's module.
func (e *emitter) layerPrefix(i int) string {
	if e.cfg.Family() == GPT2 {
		return fmt.Sprintf(gpt2Layer, i)
	}
	return fmt.Sprintf(llamaLayer, i)
}

// layer is decoder layer i over hidden states h [batch, seq, hidden]:
// LlamaDecoderLayer (RMS norm, attention, residual add, RMS norm, gated
// MLP or mixture of experts, residual add; the mixture-of-experts models'
// layers are the same) or GPT2Block (the same with layer norms and gpt2's
// attention and MLP).
func (e *emitter) layer(h ir.Value, i int, p *pass) ir.Value {
	c := e.cfg
	pre := e.layerPrefix(i)
	if c.Family() == GPT2 {
		a := e.gpt2Attention(e.layerNorm(h, pre+".ln_1", c.LayerNormEps), pre+".attn", i, p)
		h = e.Add(h, a)
		m := e.gpt2MLP(e.layerNorm(h, pre+".ln_2", c.LayerNormEps), pre+".mlp")
		return e.Add(h, m)
	}
	a := e.llamaAttention(e.rmsNorm(h, pre+".input_layernorm", c.RMSNormEps), pre+".self_attn", i, e.passFor(p, i))
	h = e.Add(h, a)
	m := e.mlp(e.rmsNorm(h, pre+".post_attention_layernorm", c.RMSNormEps), pre)
	return e.Add(h, m)
}

// causalLM is a whole decoder-only model over input_ids i64[batch, seq]
// for queries at positions past..past+seq-1 (a prefill when past is 0 and
// decode is false): embeddings, every layer, the final norm and the LM
// head, with logits f32[batch, seq, vocab] as output "logits". In a decode
// step every layer reads and updates its KV caches.
func (e *emitter) causalLM(past, seq int, decode bool) {
	ids := e.Input("input_ids", ir.I64, ir.Dim(e.opt.Batch), ir.Dim(seq))
	e.causalLMPass(ids, e.newPass(past, seq, decode))
}

// PastSymbol names the runtime position of a decode step: the symbol,
// and the i32 scalar input that carries it.
const PastSymbol = "past"

// decodeAtRuntime is one decode step whose position is the runtime
// symbol past over Options.PastMin..PastMax: input "past" (i32 scalar);
// the new token's keys and values are written into the caches at past,
// its rotary angles (or GPT-2 position embedding) are taken at past, and
// attention reads the cache's keys 0..past. Batch is 1: the position is
// one scalar.
func (e *emitter) decodeAtRuntime() error {
	if e.opt.Batch != 1 {
		return fmt.Errorf("batch %d: a decode step with a runtime position serves batch 1 (one position); pin the position (--past or --dim past=P) for a batch", e.opt.Batch)
	}
	ids := e.Input("input_ids", ir.I64, 1, 1)
	at := e.Symbol(PastSymbol, int64(e.opt.PastMin), int64(e.opt.PastMax))
	e.causalLMPass(ids, e.newPassAt(0, 1, true, at))
	return nil
}

// causalLMPass is causalLM's body over input ids for pass p.
func (e *emitter) causalLMPass(ids ir.Value, p *pass) {
	c := e.cfg
	past, seq := p.past, p.seq
	var h, embed ir.Value
	if c.Family() == GPT2 {
		// GPT2Model: wte[ids] + wpe[positions].
		embed = e.weight("transformer.wte.weight", c.VocabSize, c.HiddenSize)
		wpe := e.weight("transformer.wpe.weight", c.MaxPositionEmbeddings, c.HiddenSize)
		pos := e.Iota(ir.I64, ir.Shape{ir.Dim(seq)}, 0)
		if p.runtime() {
			pos = e.Add(pos, e.Cast(p.at, ir.I64))
		} else if past > 0 {
			pos = e.Add(pos, e.scalar(ir.I64, float64(past)))
		}
		h = e.Add(e.Gather(embed, ids, 0), e.Gather(wpe, pos, 0))
	} else {
		embed = e.weight("model.embed_tokens.weight", c.VocabSize, c.HiddenSize)
		h = e.Gather(embed, ids, 0)
	}
	for i := range c.NumHiddenLayers {
		h = e.layer(h, i, p)
	}
	e.lmHead(h, embed)
}

// lmHead is the final norm and the LM head over hidden states h, with the
// logits cast to f32 as output "logits"; embed is the token embedding,
// the head when the config ties them.
func (e *emitter) lmHead(h, embed ir.Value) {
	c := e.cfg
	if c.Family() == GPT2 {
		h = e.layerNorm(h, "transformer.ln_f", c.LayerNormEps)
	} else {
		h = e.rmsNorm(h, "model.norm", c.RMSNormEps)
	}
	head := embed
	if !c.TieWordEmbeddings {
		head = e.weight("lm_head.weight", c.VocabSize, c.HiddenSize)
	}
	logits := e.affine(h, e.Transpose(head, 0, 1), ir.NoValue)
	if e.dt != ir.F32 {
		logits = e.Cast(logits, ir.F32)
	}
	e.Output("logits", logits)
}
