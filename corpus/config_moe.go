package corpus

import (
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// The mixture-of-experts model types share the llama family's layers and
// replace the MLP by experts (see moe.go):
//
//   - mixtral (MixtralConfig): mistral's attention, experts
//     block_sparse_moe.experts.j.{w1,w3,w2} behind router
//     block_sparse_moe.gate, softmax over the top-k logits.
//   - qwen3_moe (Qwen3MoeConfig): Qwen3's attention with an RMS norm over
//     each head of q and k, experts mlp.experts.j.{gate,up,down}_proj behind
//     router mlp.gate, renormalised when norm_topk_prob is set.
//   - gpt_oss (GptOssConfig): attention with biases, a learned sink per
//     head, sliding and full layers alternating and YaRN; stacked experts
//     with biases and a clamped SwiGLU behind a router with a bias.

// moeModel reads the fields of mixtral, qwen3_moe and gpt_oss configs,
// with the defaults of their transformers config classes.
func (p *fieldParser) moeModel(c *Config) {
	mt := c.ModelType
	c.HiddenSize = p.required("hidden_size")
	c.NumHiddenLayers = p.required("num_hidden_layers")
	c.NumAttentionHeads = p.required("num_attention_heads")
	c.VocabSize = p.required("vocab_size")
	c.NumKeyValueHeads = p.intAbsentNull("num_key_value_heads",
		map[string]int{Mixtral: 8, Qwen3MoE: 4, GPTOSS: 8}[mt], c.NumAttentionHeads)
	headDefault := 0
	if c.NumAttentionHeads > 0 {
		headDefault = c.HiddenSize / c.NumAttentionHeads
	}
	if mt == GPTOSS {
		headDefault = 64
	}
	c.HeadDim = p.intOr("head_dim", headDefault)
	c.MaxPositionEmbeddings = p.intOr("max_position_embeddings", map[string]int{Mixtral: 4096 * 32, Qwen3MoE: 32768, GPTOSS: 131072}[mt])
	c.TieWordEmbeddings = p.boolOr("tie_word_embeddings", false)
	c.RMSNormEps = p.floatOr("rms_norm_eps", map[string]float64{Mixtral: 1e-5, Qwen3MoE: 1e-6, GPTOSS: 1e-5}[mt])
	c.HiddenAct = p.activation("hidden_act", ActSiLU)
	m := &MoE{}
	c.MoE = m
	m.NumExpertsPerTok = p.intOr("num_experts_per_tok", map[string]int{Mixtral: 2, Qwen3MoE: 8, GPTOSS: 4}[mt])
	switch mt {
	case Mixtral:
		c.IntermediateSize = p.intOr("intermediate_size", 14336)
		c.RopeTheta, c.RopeScaling = p.rope(1e6, c.MaxPositionEmbeddings)
		c.SlidingWindow = p.intAbsentNull("sliding_window", 0, 0)
		m.NumExperts = p.intOr("num_local_experts", 8)
		m.IntermediateSize = c.IntermediateSize
		m.NormTopKProb = true
		if j := p.floatOr("router_jitter_noise", 0); j != 0 {
			p.fail(fmt.Errorf("%q is %v: lumsearch implements only 0 (the noise is drawn in training, but a nonzero value marks a model trained with it)", "router_jitter_noise", j))
		}
	case Qwen3MoE:
		c.IntermediateSize = p.intOr("intermediate_size", 6144)
		c.RopeTheta, c.RopeScaling = p.rope(10000, c.MaxPositionEmbeddings)
		c.QKVBias = p.boolOr("attention_bias", false)
		c.OutBias = c.QKVBias
		c.QKNorm = true
		m.NumExperts = p.intOr("num_experts", 128)
		m.IntermediateSize = p.intOr("moe_intermediate_size", 768)
		m.NormTopKProb = p.boolOr("norm_topk_prob", false)
		// Without use_sliding_window, sliding_window and
		// max_window_layers change nothing (Qwen3MoeConfig drops the
		// window); with it, some layers would slide.
		p.intAbsentNull("sliding_window", 4096, 0)
		p.intOr("max_window_layers", 28)
		if p.boolOr("use_sliding_window", false) {
			p.fail(fmt.Errorf("qwen3_moe: %q true is not supported (sliding-window layers)", "use_sliding_window"))
		}
		if s := p.intOr("decoder_sparse_step", 1); s != 1 {
			p.fail(fmt.Errorf("qwen3_moe: %q %d is not supported (dense MLP layers between the experts' layers); want 1", "decoder_sparse_step", s))
		}
		if l := p.ints("mlp_only_layers"); len(l) > 0 {
			p.fail(fmt.Errorf("qwen3_moe: %q %v is not supported (dense MLP layers)", "mlp_only_layers", l))
		}
	case GPTOSS:
		c.IntermediateSize = p.intOr("intermediate_size", 2880)
		c.RopeTheta, c.RopeScaling = p.gptOSSRope(c.MaxPositionEmbeddings)
		c.QKVBias = p.boolOr("attention_bias", true)
		c.OutBias = c.QKVBias
		c.AttentionSinks = true
		c.SlidingWindow = p.intAbsentNull("sliding_window", 128, 0)
		c.LayerTypes = p.layerTypes(c.NumHiddenLayers)
		m.NumExperts = p.intOr("num_local_experts", 128)
		m.IntermediateSize = c.IntermediateSize
		m.NormTopKProb = true
		m.SwiGLULimit = p.floatOr("swiglu_limit", 7)
		if a := p.floatOr("swiglu_alpha", ir.ClampedSwiGLUAlpha); a != ir.ClampedSwiGLUAlpha {
			p.fail(fmt.Errorf("gpt_oss: %q %v is not supported (want %v)", "swiglu_alpha", a, ir.ClampedSwiGLUAlpha))
		}
	}
}

// gptOSSRope is rope for gpt_oss, whose config class fills an absent
// rope_scaling (and rope_parameters) in with YaRN of factor 32 over 4096
// positions, and whose default base is 150000.
func (p *fieldParser) gptOSSRope(maxPos int) (float64, *RopeScaling) {
	if _, ok := p.lookup("rope_scaling"); ok {
		return p.rope(150000, maxPos)
	}
	if _, ok := p.lookup("rope_parameters"); ok {
		return p.rope(150000, maxPos)
	}
	theta := p.floatOr("rope_theta", 150000)
	return theta, &RopeScaling{Type: "yarn", Factor: 32, BetaFast: 32, BetaSlow: 1, Truncate: false,
		OriginalMaxPositionEmbeddings: 4096, AttentionFactor: yarnMscale(32, 1)}
}

// layerTypes reads gpt_oss's layer_types; absent, GptOssConfig's
// default: sliding_attention at even layers, full_attention at odd ones.
func (p *fieldParser) layerTypes(layers int) []string {
	types := p.strings("layer_types")
	if p.err != nil {
		return nil
	}
	if types == nil {
		types = make([]string, layers)
		for i := range types {
			types[i] = fullAttention
			if i%2 == 0 {
				types[i] = slidingAttention
			}
		}
	}
	return types
}

// yarn reads a rope_scaling object of type yarn, resolving its defaults
// as _compute_yarn_parameters does: factor from the positions when
// absent, beta_fast 32 and beta_slow 1 when absent or 0, truncate true,
// and the attention factor from mscale and mscale_all_dim or from factor.
func (q *fieldParser) yarn(maxPos int) *RopeScaling {
	s := &RopeScaling{Type: "yarn"}
	s.OriginalMaxPositionEmbeddings = q.intOr("original_max_position_embeddings", maxPos)
	f, ok := q.number("factor")
	if !ok && s.OriginalMaxPositionEmbeddings > 0 {
		f = float64(maxPos) / float64(s.OriginalMaxPositionEmbeddings)
	}
	s.Factor = f
	s.BetaFast = q.floatOr("beta_fast", 0)
	if s.BetaFast == 0 {
		s.BetaFast = 32
	}
	s.BetaSlow = q.floatOr("beta_slow", 0)
	if s.BetaSlow == 0 {
		s.BetaSlow = 1
	}
	s.Truncate = q.boolOr("truncate", true)
	mscale, mscaleAll := q.floatOr("mscale", 0), q.floatOr("mscale_all_dim", 0)
	if a, ok := q.number("attention_factor"); ok {
		s.AttentionFactor = a
	} else if mscale != 0 && mscaleAll != 0 {
		s.AttentionFactor = yarnMscale(f, mscale) / yarnMscale(f, mscaleAll)
	} else {
		s.AttentionFactor = yarnMscale(f, 1)
	}
	return s
}

// yarnMscale is YaRN's get_mscale: 0.1 m ln(scale) + 1, or 1 for a scale
// of at most 1.
func yarnMscale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// validateMoE checks the fields of the mixture-of-experts types: experts
// for exactly those types, 1 <= k <= experts, positive expert sizes, layer
// types for every layer, and the features each type's builders implement.
func (c *Config) validateMoE() error {
	moeType := c.ModelType == Mixtral || c.ModelType == Qwen3MoE || c.ModelType == GPTOSS
	m := c.MoE
	switch {
	case moeType && m == nil:
		return fmt.Errorf("config: model_type %q needs its experts (num_experts_per_tok and the experts' count)", c.ModelType)
	case !moeType && m != nil:
		return fmt.Errorf("config: model_type %q has no mixture of experts", c.ModelType)
	case !moeType && (c.QKNorm || c.AttentionSinks || c.LayerTypes != nil):
		return fmt.Errorf("config: model_type %q has no q/k norm, attention sinks or per-layer attention kinds", c.ModelType)
	}
	if c.LayerTypes != nil {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return fmt.Errorf("config: %q has %d entries for %d layers (num_hidden_layers)", "layer_types", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range c.LayerTypes {
			if t != fullAttention && t != slidingAttention {
				return fmt.Errorf("config: %q: entry %d is %q; want %s or %s", "layer_types", i, t, fullAttention, slidingAttention)
			}
		}
	}
	if m == nil {
		return nil
	}
	expertsKey := map[string]string{Mixtral: "num_local_experts", Qwen3MoE: "num_experts", GPTOSS: "num_local_experts"}[c.ModelType]
	sizeKey := "intermediate_size"
	if c.ModelType == Qwen3MoE {
		sizeKey = "moe_intermediate_size"
	}
	switch {
	case m.NumExperts <= 0:
		return fmt.Errorf("config: %q is %d; want a positive number", expertsKey, m.NumExperts)
	case m.NumExpertsPerTok <= 0 || m.NumExpertsPerTok > m.NumExperts:
		return fmt.Errorf("config: %q is %d; want 1 to %d (%q)", "num_experts_per_tok", m.NumExpertsPerTok, m.NumExperts, expertsKey)
	case m.IntermediateSize <= 0:
		return fmt.Errorf("config: %q is %d; want a positive number", sizeKey, m.IntermediateSize)
	case m.SwiGLULimit < 0 || math.IsInf(m.SwiGLULimit, 0) || math.IsNaN(m.SwiGLULimit):
		return fmt.Errorf("config: %q is %v; want a positive, finite number", "swiglu_limit", m.SwiGLULimit)
	case c.ModelType == GPTOSS && m.SwiGLULimit == 0:
		return fmt.Errorf("config: %q is 0; gpt_oss's experts clamp at a positive limit", "swiglu_limit")
	case c.ModelType != GPTOSS && m.SwiGLULimit != 0:
		return fmt.Errorf("config: %q is %v; only gpt_oss clamps its experts", "swiglu_limit", m.SwiGLULimit)
	case c.ModelType != GPTOSS && c.HiddenAct != ActSiLU:
		return fmt.Errorf("config: %q %q: the experts implement only silu (SwiGLU)", "hidden_act", c.HiddenAct)
	}
	return nil
}

// window is the sliding window of layer i's attention, 0 for none.
func (c *Config) window(i int) int {
	if c.LayerTypes != nil && c.LayerTypes[i] != slidingAttention {
		return 0
	}
	return c.SlidingWindow
}

// mixedWindows says that some layers slide a window and others do not.
func (c *Config) mixedWindows() bool {
	if c.LayerTypes == nil || c.SlidingWindow == 0 {
		return false
	}
	return slices.Contains(c.LayerTypes, fullAttention) && slices.Contains(c.LayerTypes, slidingAttention)
}

// clone is a deep copy of c.
func (c *Config) clone() *Config {
	cp := *c
	if c.RopeScaling != nil {
		s := *c.RopeScaling
		cp.RopeScaling = &s
	}
	if c.MoE != nil {
		m := *c.MoE
		cp.MoE = &m
	}
	cp.LayerTypes = slices.Clone(c.LayerTypes)
	cp.Quantization = c.Quantization.clone()
	return &cp
}
