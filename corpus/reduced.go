package corpus

import "github.com/lumsearch/lumsearch/quant"

// Reduced is the same architecture as c at a size the CPU emulation runs in
// seconds: two layers, hidden size 64 in four heads of 16, an MLP of 128, a
// vocabulary of 97, the grouping of key/value heads kept where four query
// heads allow it, and everything else (activation, biases, norms, rotary
// settings, a sliding window shrunk to 3) as c has it; a mixture of
// experts keeps 4 to 8 experts of 32, as many chosen per token as fit, and
// its first two layer types (gpt-oss's sliding and full); a quantized
// model keeps its format, its groups and blocks cut to 16. Compiled
// programs are verified on it: the kernels differ only in their sizes.
func Reduced(c *Config) *Config {
	r := c.clone()
	r.Name = c.Name + "-reduced"
	groups := 1
	if c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads == 0 {
		groups = c.NumAttentionHeads / c.NumKeyValueHeads
	}
	r.NumAttentionHeads, r.HeadDim, r.HiddenSize = 4, 16, 64
	r.NumKeyValueHeads = 4
	for groups > 1 && 4%groups != 0 {
		groups--
	}
	r.NumKeyValueHeads = 4 / groups
	r.IntermediateSize = 128
	r.NumHiddenLayers = min(c.NumHiddenLayers, 2)
	r.VocabSize = 97
	if r.SlidingWindow > 0 {
		r.SlidingWindow = 3
	}
	if m := r.MoE; m != nil {
		// Four to eight experts of 32, as many chosen as fit.
		m.NumExperts = min(max(m.NumExperts, 4), 8)
		m.NumExpertsPerTok = min(m.NumExpertsPerTok, m.NumExperts)
		m.IntermediateSize = 32
		if c.ModelType != Qwen3MoE {
			r.IntermediateSize = m.IntermediateSize // the experts' size
		}
	}
	if r.LayerTypes != nil {
		r.LayerTypes = r.LayerTypes[:r.NumHiddenLayers]
	}
	if q := r.Quantization; q != nil && !q.Auto {
		// Groups and blocks that the reduced extents (multiples of 16,
		// inputs of 32) divide, so that the same format packs them.
		if q.Group > 16 && q.Format != quant.MXFP4 {
			q.Group = 16
		}
		if q.GroupN > 16 {
			q.GroupN = 16
		}
	}
	return r
}
