package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// The model types the builders know, as config.json's model_type names them.
const (
	Llama   = "llama"
	Qwen2   = "qwen2"
	Mistral = "mistral"
	GPT2    = "gpt2"
	// The mixture-of-experts model types (see config_moe.go).
	Mixtral  = "mixtral"
	Qwen3MoE = "qwen3_moe"
	GPTOSS   = "gpt_oss"
)

// modelTypes lists the supported model types, for errors.
var modelTypes = []string{Llama, Qwen2, Mistral, GPT2, Mixtral, Qwen3MoE, GPTOSS}

// Activations, as config.json's hidden_act or activation_function names
// them.
const (
	ActSiLU     = "silu"     // x * sigmoid(x); also spelled "swish"
	ActGELU     = "gelu"     // 0.5 x (1 + erf(x / sqrt 2))
	ActGELUTanh = "gelu_new" // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); also "gelu_pytorch_tanh"
	ActReLU     = "relu"     // max(x, 0)
	actSwish    = "swish"    // alias of silu
	actGELUPT   = "gelu_pytorch_tanh"
)

// Config is the shape of a decoder-only model, read from a Hugging Face
// config.json by ParseConfig or LoadConfig. Fields keep the llama names;
// gpt2's n_embd, n_layer, n_head, n_positions and n_inner fill HiddenSize,
// NumHiddenLayers, NumAttentionHeads, MaxPositionEmbeddings and
// IntermediateSize. Defaults for absent fields are those of the
// transformers config classes. The json tags are for printing a Config;
// read a config.json with ParseConfig.
type Config struct {
	// Name says where the config came from: an embedded config's name or
	// a file's path.
	Name      string `json:"name,omitempty"`
	ModelType string `json:"model_type"`

	HiddenSize        int `json:"hidden_size"`
	IntermediateSize  int `json:"intermediate_size"`
	NumHiddenLayers   int `json:"num_hidden_layers"`
	NumAttentionHeads int `json:"num_attention_heads"`
	NumKeyValueHeads  int `json:"num_key_value_heads"`
	// HeadDim is each attention head's size: head_dim when the config
	// gives it, else HiddenSize / NumAttentionHeads.
	HeadDim int `json:"head_dim"`

	VocabSize             int  `json:"vocab_size"`
	MaxPositionEmbeddings int  `json:"max_position_embeddings"`
	TieWordEmbeddings     bool `json:"tie_word_embeddings"`

	// RMSNormEps is the RMS norms' epsilon (llama, qwen2, mistral);
	// LayerNormEps the layer norms' (gpt2's layer_norm_epsilon).
	RMSNormEps   float64 `json:"rms_norm_eps,omitempty"`
	LayerNormEps float64 `json:"layer_norm_epsilon,omitempty"`

	// RopeTheta is the rotary embedding's base; RopeScaling, when not nil,
	// how its frequencies are rescaled for long contexts.
	RopeTheta   float64      `json:"rope_theta,omitempty"`
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`

	// HiddenAct is the MLP's activation, one of the Act constants
	// (normalized: "swish" reads as silu, "gelu_pytorch_tanh" as gelu_new).
	// llama-style models gate it (down(act(gate(x)) * up(x))); gpt2 does not.
	HiddenAct string `json:"hidden_act"`

	// QKVBias and OutBias say whether the q, k, v projections and the
	// attention's output projection have biases (llama's attention_bias
	// sets both; qwen2 always has the first and never the second). MLPBias
	// is llama's mlp_bias. gpt2's projections always have biases.
	QKVBias bool `json:"qkv_bias,omitempty"`
	OutBias bool `json:"out_bias,omitempty"`
	MLPBias bool `json:"mlp_bias,omitempty"`

	// SlidingWindow, when positive, lets each query see only the last
	// SlidingWindow positions, itself included (mistral), in every layer
	// or, when LayerTypes is set, in its sliding_attention layers.
	SlidingWindow int `json:"sliding_window,omitempty"`
	// LayerTypes, when not nil, gives each layer's attention kind,
	// full_attention or sliding_attention (gpt-oss alternates them); nil
	// means that every layer has the same attention.
	LayerTypes []string `json:"layer_types,omitempty"`

	// QKNorm says that an RMS norm over each head's head_dim scales q
	// and k before the rotary embedding (Qwen3-MoE's q_norm and k_norm).
	QKNorm bool `json:"qk_norm,omitempty"`
	// AttentionSinks says that each attention head has a learned sink
	// logit (gpt-oss's self_attn.sinks) that joins every row's softmax
	// denominator and attends to nothing.
	AttentionSinks bool `json:"attention_sinks,omitempty"`

	// MoE, when not nil, makes every layer's MLP a mixture of experts.
	MoE *MoE `json:"moe,omitempty"`

	// Quantization, when not nil, is how the checkpoint stores the
	// linear weights (quantization_config; see quant_config.go).
	Quantization *Quantization `json:"quantization,omitempty"`
}

// MoE is the shape of a mixture-of-experts MLP: a router that weights the
// top NumExpertsPerTok of NumExperts experts for each token, and experts
// that are gated MLPs of IntermediateSize.
type MoE struct {
	NumExperts       int `json:"num_experts"`
	NumExpertsPerTok int `json:"num_experts_per_tok"`
	// IntermediateSize is each expert's: intermediate_size (Mixtral,
	// gpt-oss) or moe_intermediate_size (Qwen3-MoE).
	IntermediateSize int `json:"intermediate_size"`
	// NormTopKProb says that the chosen experts' weights are a softmax over
	// the chosen logits alone (ir.GatingChosen); otherwise they are the
	// softmax over all the logits, kept unnormalised (ir.GatingAll).
	// Mixtral and gpt-oss always normalise; Qwen3-MoE's norm_topk_prob.
	NormTopKProb bool `json:"norm_topk_prob"`
	// SwiGLULimit, when positive, makes the experts gpt-oss's clamped,
	// interleaved SwiGLU (ir.GatingClampedSwiGLU) with this clamp;
	// otherwise they are silu(gate) * up.
	SwiGLULimit float64 `json:"swiglu_limit,omitempty"`
}

// RopeScaling is config.json's rope_scaling: how the rotary frequencies
// are rescaled. Type "linear" divides every frequency by Factor; "llama3"
// is Llama 3.1's piecewise rescaling; "yarn" is YaRN (transformers'
// _compute_yarn_parameters): frequencies blended between the original and
// the interpolated ones by a ramp between the dimensions BetaFast and
// BetaSlow rotations fit in the original context, and cos and sin
// multiplied by AttentionFactor.
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`

	// YaRN's: the rotation counts that bound the ramp (defaults 32 and
	// 1), whether the ramp's ends are rounded outward to whole dimensions
	// (truncate, default true), and the factor on cos and sin, resolved at
	// parse time (attention_factor, else from mscale and mscale_all_dim,
	// else 0.1 ln(factor) + 1).
	BetaFast        float64 `json:"beta_fast,omitempty"`
	BetaSlow        float64 `json:"beta_slow,omitempty"`
	Truncate        bool    `json:"truncate,omitempty"`
	AttentionFactor float64 `json:"attention_factor,omitempty"`
}

// LoadConfig reads and validates a config.json file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Name = path
	return c, nil
}

// ParseConfig reads and validates the text of a config.json. Errors name
// the field at fault. A key lumsearch neither reads nor knows to be
// harmless (see ReadKeys and HarmlessKeys) is refused unless it is off.
func ParseConfig(data []byte) (*Config, error) {
	c, _, err := parseConfig(data)
	return c, err
}

// parseConfig is ParseConfig, also returning the top-level keys the parser
// read, for the test that keeps configKeys in step with the parser.
func parseConfig(data []byte) (*Config, map[string]bool, error) {
	var f fields
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("config: not a JSON object: %w", err)
	}
	if f == nil {
		return nil, nil, fmt.Errorf("config: not a JSON object")
	}
	p := &fieldParser{f: f, read: map[string]bool{}}
	c, err := p.config()
	if err != nil {
		return nil, p.read, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, p.read, err
	}
	return c, p.read, nil
}

// config reads the fields into a Config with the defaults of the model
// type's transformers config class, then refuses the keys it does not
// implement.
func (p *fieldParser) config() (*Config, error) {
	mt, ok := p.str("model_type")
	if p.err != nil {
		return nil, p.err
	}
	if !ok {
		return nil, fmt.Errorf("missing %q (want one of %s)", "model_type", strings.Join(modelTypes, ", "))
	}
	c := &Config{ModelType: mt}
	switch mt {
	case Llama, Qwen2, Mistral:
		p.llama(c)
	case Mixtral, Qwen3MoE, GPTOSS:
		p.moeModel(c)
	case GPT2:
		p.gpt2(c)
	default:
		return nil, fmt.Errorf("model_type %q is not supported (supported: %s)", mt, strings.Join(modelTypes, ", "))
	}
	p.quantization(c)
	if p.err != nil {
		return nil, p.err
	}
	if err := checkConfigKeys(mt, p.f); err != nil {
		return nil, err
	}
	return c, nil
}

// llama reads the fields of llama, qwen2 and mistral configs.
func (p *fieldParser) llama(c *Config) {
	c.HiddenSize = p.required("hidden_size")
	c.IntermediateSize = p.required("intermediate_size")
	c.NumHiddenLayers = p.required("num_hidden_layers")
	c.NumAttentionHeads = p.required("num_attention_heads")
	c.VocabSize = p.required("vocab_size")
	// An absent num_key_value_heads is the class's default (mistral 8,
	// qwen2 32); null means one per attention head.
	c.NumKeyValueHeads = p.intAbsentNull("num_key_value_heads",
		map[string]int{Llama: c.NumAttentionHeads, Qwen2: 32, Mistral: 8}[c.ModelType], c.NumAttentionHeads)
	if c.NumAttentionHeads > 0 {
		c.HeadDim = p.intOr("head_dim", c.HiddenSize/c.NumAttentionHeads)
	}
	c.MaxPositionEmbeddings = p.intOr("max_position_embeddings", map[string]int{Llama: 2048, Qwen2: 32768, Mistral: 4096 * 32}[c.ModelType])
	c.TieWordEmbeddings = p.boolOr("tie_word_embeddings", false)
	c.RMSNormEps = p.floatOr("rms_norm_eps", 1e-6)
	c.HiddenAct = p.activation("hidden_act", ActSiLU)
	c.RopeTheta, c.RopeScaling = p.rope(10000, c.MaxPositionEmbeddings)
	switch c.ModelType {
	case Llama:
		c.QKVBias = p.boolOr("attention_bias", false)
		c.OutBias = c.QKVBias
		c.MLPBias = p.boolOr("mlp_bias", false)
	case Qwen2:
		c.QKVBias = true
		c.SlidingWindow = p.qwen2Window(c.NumHiddenLayers)
	case Mistral:
		// Every layer slides; absent is MistralConfig's 4096, null none.
		c.SlidingWindow = p.intAbsentNull("sliding_window", 4096, 0)
	}
}

// Qwen2's attention kinds, as layer_types names them.
const (
	fullAttention    = "full_attention"
	slidingAttention = "sliding_attention"
)

// qwen2Window is the sliding window of a qwen2 config's layers, or 0 for
// none. As in Qwen2Config, a layer slides when use_sliding_window is set,
// sliding_window is not null, and layer_types says so or, without
// layer_types, the layer's index is at least max_window_layers. The
// builders give every layer the same attention, so a config that windows
// some layers and not others is refused.
func (p *fieldParser) qwen2Window(layers int) int {
	use := p.boolOr("use_sliding_window", false)
	window := p.intAbsentNull("sliding_window", 4096, 0)
	types := p.strings("layer_types")
	fromLayer := p.intOr("max_window_layers", 28)
	if p.err != nil {
		return 0
	}
	sliding := make([]bool, layers)
	if types != nil {
		if len(types) != layers {
			p.fail(fmt.Errorf("%q: %d entries for %d layers (num_hidden_layers)", "layer_types", len(types), layers))
			return 0
		}
		for i, t := range types {
			if t != fullAttention && t != slidingAttention {
				p.fail(fmt.Errorf("%q: entry %d is %q; want %s or %s", "layer_types", i, t, fullAttention, slidingAttention))
				return 0
			}
			sliding[i] = t == slidingAttention
		}
	} else {
		for i := range sliding {
			sliding[i] = i >= fromLayer
		}
	}
	if !use || window == 0 {
		return 0
	}
	n := 0
	for _, s := range sliding {
		if s {
			n++
		}
	}
	switch {
	case n == 0:
		return 0
	case n == layers:
		return window
	case types != nil:
		p.fail(fmt.Errorf("%q mixes %s and %s layers with %q: lumsearch does not implement layers of different attention kinds",
			"layer_types", fullAttention, slidingAttention, "use_sliding_window"))
	default:
		p.fail(fmt.Errorf("%q %d with %q: layers %d to %d would slide a window of %d and the first %d would not; lumsearch does not implement layers of different attention kinds",
			"max_window_layers", fromLayer, "use_sliding_window", fromLayer, layers-1, window, fromLayer))
	}
	return 0
}

// gpt2 reads the fields of a gpt2 config.
func (p *fieldParser) gpt2(c *Config) {
	c.HiddenSize = p.required("n_embd")
	c.NumHiddenLayers = p.required("n_layer")
	c.NumAttentionHeads = p.required("n_head")
	c.VocabSize = p.required("vocab_size")
	c.MaxPositionEmbeddings = p.intOr("n_positions", 1024)
	c.NumKeyValueHeads = c.NumAttentionHeads
	if c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.IntermediateSize = p.intOr("n_inner", 4*c.HiddenSize)
	c.LayerNormEps = p.floatOr("layer_norm_epsilon", 1e-5)
	c.TieWordEmbeddings = p.boolOr("tie_word_embeddings", true)
	c.HiddenAct = p.activation("activation_function", ActGELUTanh)
	c.QKVBias, c.OutBias, c.MLPBias = true, true, true
	if !p.boolOr("scale_attn_weights", true) {
		p.fail(fmt.Errorf("%q is false: lumsearch implements only true (scores scaled by 1/sqrt(head size))", "scale_attn_weights"))
	}
}

// rope reads rope_theta and rope_scaling, or their newer form, a
// rope_parameters object that holds both.
// defaultTheta is the config class's default base; maxPos the config's
// positions, YaRN's original context when rope_scaling omits it.
func (p *fieldParser) rope(defaultTheta float64, maxPos int) (float64, *RopeScaling) {
	key := "rope_scaling"
	raw, ok := p.lookup("rope_parameters")
	theta := p.floatOr("rope_theta", defaultTheta)
	if ok {
		key = "rope_parameters"
	} else {
		raw, ok = p.lookup("rope_scaling")
		if !ok {
			return theta, nil
		}
	}
	var sub fields
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&sub); err != nil || sub == nil {
		p.fail(fmt.Errorf("%q: want an object", key))
		return theta, nil
	}
	if err := checkKeys(sub, key+".", ropeKeys, nil); err != nil {
		p.fail(err)
		return theta, nil
	}
	q := &fieldParser{f: sub, prefix: key + "."}
	if key == "rope_parameters" {
		if !p.has("rope_theta") {
			theta = q.floatOr("rope_theta", defaultTheta)
		}
	}
	typ, ok := q.str("rope_type")
	if !ok {
		typ, _ = q.str("type") // the older spelling
	}
	if q.err != nil {
		p.fail(q.err)
		return theta, nil
	}
	switch typ {
	case "", "default":
		return theta, nil
	case "linear":
		return theta, &RopeScaling{Type: typ, Factor: q.required64("factor")}
	case "llama3":
		s := &RopeScaling{
			Type:                          typ,
			Factor:                        q.required64("factor"),
			LowFreqFactor:                 q.required64("low_freq_factor"),
			HighFreqFactor:                q.required64("high_freq_factor"),
			OriginalMaxPositionEmbeddings: q.required("original_max_position_embeddings"),
		}
		p.fail(q.err)
		return theta, s
	case "yarn":
		s := q.yarn(maxPos)
		p.fail(q.err)
		return theta, s
	}
	p.fail(fmt.Errorf("%q: rope_type %q is not supported (supported: default, linear, llama3, yarn)", key, typ))
	return theta, nil
}

// activation reads an activation name, normalizing its aliases.
func (p *fieldParser) activation(key, def string) string {
	s, ok := p.str(key)
	if !ok {
		return def
	}
	switch s {
	case ActSiLU, actSwish:
		return ActSiLU
	case ActGELU:
		return ActGELU
	case ActGELUTanh, actGELUPT:
		return ActGELUTanh
	case ActReLU:
		return ActReLU
	}
	p.fail(fmt.Errorf("%q: activation %q is not supported (supported: silu, gelu, gelu_new, gelu_pytorch_tanh, relu)", key, s))
	return def
}

// Validate checks that the config describes a model the builders can
// emit: positive sizes, heads that divide the hidden size, key-value heads
// that divide the heads, an even head size for the rotary embedding,
// positive epsilons and a known model type and activation. Errors name
// the config.json field at fault.
func (c *Config) Validate() error {
	name := c.fieldName
	if !slices.Contains(modelTypes, c.ModelType) {
		return fmt.Errorf("config: model_type %q is not supported (supported: %s)", c.ModelType, strings.Join(modelTypes, ", "))
	}
	for _, f := range []struct {
		key string
		v   int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim},
		{"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	} {
		if f.v <= 0 {
			return fmt.Errorf("config: %q is %d; want a positive number", name(f.key), f.v)
		}
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("config: %q %d is not a multiple of %q %d", name("hidden_size"), c.HiddenSize, name("num_attention_heads"), c.NumAttentionHeads)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("config: %q %d is not a multiple of %q %d", name("num_attention_heads"), c.NumAttentionHeads, name("num_key_value_heads"), c.NumKeyValueHeads)
	}
	if c.ModelType == GPT2 {
		if c.HeadDim*c.NumAttentionHeads != c.HiddenSize {
			return fmt.Errorf("config: head size %d times %q %d is not %q %d", c.HeadDim, name("num_attention_heads"), c.NumAttentionHeads, name("hidden_size"), c.HiddenSize)
		}
		if !(c.LayerNormEps > 0) {
			return fmt.Errorf("config: %q is %v; want a positive number", "layer_norm_epsilon", c.LayerNormEps)
		}
	} else {
		if c.HeadDim%2 != 0 {
			return fmt.Errorf("config: %q %d is odd; the rotary embedding needs an even head size", "head_dim", c.HeadDim)
		}
		if !(c.RMSNormEps > 0) {
			return fmt.Errorf("config: %q is %v; want a positive number", "rms_norm_eps", c.RMSNormEps)
		}
		if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
			return fmt.Errorf("config: %q is %v; want a finite number above 1", "rope_theta", c.RopeTheta)
		}
		if err := c.RopeScaling.validate(); err != nil {
			return err
		}
	}
	switch c.HiddenAct {
	case ActSiLU, ActGELU, ActGELUTanh, ActReLU:
	default:
		return fmt.Errorf("config: %q %q is not supported (supported: silu, gelu, gelu_new, relu)", name("hidden_act"), c.HiddenAct)
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("config: %q is %d; want a positive number or none", "sliding_window", c.SlidingWindow)
	}
	if err := c.validateMoE(); err != nil {
		return err
	}
	if err := c.checkQuantization(c.Quantization); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

func (s *RopeScaling) validate() error {
	if s == nil {
		return nil
	}
	if !(s.Factor >= 1) || math.IsInf(s.Factor, 0) {
		return fmt.Errorf("config: %q is %v; want a finite number of at least 1", "rope_scaling.factor", s.Factor)
	}
	switch s.Type {
	case "linear":
	case "yarn":
		if s.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("config: %q is %d; want a positive number", "rope_scaling.original_max_position_embeddings", s.OriginalMaxPositionEmbeddings)
		}
		if !(s.BetaFast > 0) || !(s.BetaSlow > 0) || math.IsInf(s.BetaFast, 0) || math.IsInf(s.BetaSlow, 0) {
			return fmt.Errorf("config: rope_scaling: want positive, finite beta_fast and beta_slow, got %v and %v", s.BetaFast, s.BetaSlow)
		}
		if !(s.AttentionFactor > 0) || math.IsInf(s.AttentionFactor, 0) {
			return fmt.Errorf("config: %q is %v; want a positive, finite number", "rope_scaling.attention_factor", s.AttentionFactor)
		}
	case "llama3":
		if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
			return fmt.Errorf("config: rope_scaling: want 0 < low_freq_factor < high_freq_factor, got %v and %v", s.LowFreqFactor, s.HighFreqFactor)
		}
		if s.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("config: %q is %d; want a positive number", "rope_scaling.original_max_position_embeddings", s.OriginalMaxPositionEmbeddings)
		}
	default:
		return fmt.Errorf("config: rope_scaling type %q is not supported (supported: default, linear, llama3, yarn)", s.Type)
	}
	return nil
}

// gpt2Names maps llama field names to gpt2's, for errors.
var gpt2Names = map[string]string{
	"hidden_size":             "n_embd",
	"num_hidden_layers":       "n_layer",
	"num_attention_heads":     "n_head",
	"num_key_value_heads":     "n_head",
	"max_position_embeddings": "n_positions",
	"intermediate_size":       "n_inner",
	"hidden_act":              "activation_function",
	"head_dim":                "n_embd / n_head",
}

// fieldName is the config.json name of a field in this config's model type.
func (c *Config) fieldName(key string) string {
	if c.ModelType == GPT2 {
		if n, ok := gpt2Names[key]; ok {
			return n
		}
	}
	return key
}

// Family is "gpt2" for gpt2 and "llama" for the llama-style models (llama,
// qwen2, mistral, and the mixtures of experts mixtral, qwen3_moe and
// gpt_oss: RMS norms, rotary embeddings, gated MLPs or experts).
func (c *Config) Family() string {
	if c.ModelType == GPT2 {
		return GPT2
	}
	return Llama
}
