package corpus

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/quant"
)

// alternating is gpt-oss's layer_types default for n layers.
func alternating(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fullAttention
		if i%2 == 0 {
			out[i] = slidingAttention
		}
	}
	return out
}

// gptOSSYaRN is gpt-oss's rope_scaling over original positions.
func gptOSSYaRN(original int) *RopeScaling {
	return &RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPositionEmbeddings: original, BetaFast: 32, BetaSlow: 1,
		AttentionFactor: 0.1*math.Log(32) + 1}
}

func TestMoEEmbeddedConfigs(t *testing.T) {
	gptOSS := func(layers, experts int) Config {
		return Config{ModelType: GPTOSS, HiddenSize: 2880, IntermediateSize: 2880, NumHiddenLayers: layers,
			NumAttentionHeads: 64, NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 201088, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 150000, RopeScaling: gptOSSYaRN(4096), HiddenAct: ActSiLU, QKVBias: true, OutBias: true,
			SlidingWindow: 128, LayerTypes: alternating(layers), AttentionSinks: true,
			MoE: &MoE{NumExperts: experts, NumExpertsPerTok: 4, IntermediateSize: 2880, NormTopKProb: true, SwiGLULimit: 7},
			// The checkpoints' experts are MXFP4.
			Quantization: &Quantization{Method: MethodMXFP4, Format: quant.MXFP4, Group: 32, ExpertsOnly: true,
				Keep: []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}}
	}
	tests := []struct {
		name string
		want Config
	}{
		{"mixtral-8x7b", Config{ModelType: Mixtral, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 32000, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 1e6, HiddenAct: ActSiLU,
			MoE: &MoE{NumExperts: 8, NumExpertsPerTok: 2, IntermediateSize: 14336, NormTopKProb: true}}},
		{"qwen3-30b-a3b", Config{ModelType: Qwen3MoE, HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 48,
			NumAttentionHeads: 32, NumKeyValueHeads: 4, HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960,
			RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: ActSiLU, QKNorm: true,
			MoE: &MoE{NumExperts: 128, NumExpertsPerTok: 8, IntermediateSize: 768, NormTopKProb: true}}},
		{"gpt-oss-20b", gptOSS(24, 32)},
		{"gpt-oss-120b", gptOSS(36, 128)},
		{"tiny-gpt-oss", Config{ModelType: GPTOSS, HiddenSize: 64, IntermediateSize: 32, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 97, MaxPositionEmbeddings: 256,
			RMSNormEps: 1e-5, RopeTheta: 150000, RopeScaling: gptOSSYaRN(8), HiddenAct: ActSiLU, QKVBias: true, OutBias: true,
			SlidingWindow: 4, LayerTypes: alternating(2), AttentionSinks: true,
			MoE: &MoE{NumExperts: 4, NumExpertsPerTok: 2, IntermediateSize: 32, NormTopKProb: true, SwiGLULimit: 7}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := EmbeddedConfig(tt.name)
			require.NoError(t, err)
			tt.want.Name = tt.name
			assert.Equal(t, &tt.want, c)
		})
	}
	// A copy is deep: its experts and layer types are its own.
	c, err := EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	c.MoE.NumExperts, c.LayerTypes[0] = 1, fullAttention
	c, err = EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	assert.Equal(t, 32, c.MoE.NumExperts)
	assert.Equal(t, slidingAttention, c.LayerTypes[0])
}

// TestMoEConfigDefaults parses configs that give only the required keys:
// the rest are the transformers config classes' defaults.
func TestMoEConfigDefaults(t *testing.T) {
	tests := []struct {
		json string
		want Config
	}{
		{`{"model_type":"mixtral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":11}`,
			Config{ModelType: Mixtral, HiddenSize: 64, IntermediateSize: 14336, NumHiddenLayers: 2, NumAttentionHeads: 8,
				NumKeyValueHeads: 8, HeadDim: 8, VocabSize: 11, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 1e6,
				HiddenAct: ActSiLU, MoE: &MoE{NumExperts: 8, NumExpertsPerTok: 2, IntermediateSize: 14336, NormTopKProb: true}}},
		{`{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":11}`,
			Config{ModelType: Qwen3MoE, HiddenSize: 64, IntermediateSize: 6144, NumHiddenLayers: 2, NumAttentionHeads: 8,
				NumKeyValueHeads: 4, HeadDim: 8, VocabSize: 11, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 10000,
				HiddenAct: ActSiLU, QKNorm: true, MoE: &MoE{NumExperts: 128, NumExpertsPerTok: 8, IntermediateSize: 768}}},
		{`{"model_type":"gpt_oss","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":8,"vocab_size":11}`,
			Config{ModelType: GPTOSS, HiddenSize: 64, IntermediateSize: 2880, NumHiddenLayers: 3, NumAttentionHeads: 8,
				NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 11, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 150000,
				RopeScaling: gptOSSYaRN(4096), HiddenAct: ActSiLU, QKVBias: true, OutBias: true, SlidingWindow: 128,
				LayerTypes: alternating(3), AttentionSinks: true,
				MoE: &MoE{NumExperts: 128, NumExpertsPerTok: 4, IntermediateSize: 2880, NormTopKProb: true, SwiGLULimit: 7}}},
	}
	for _, tt := range tests {
		c, err := ParseConfig([]byte(tt.json))
		require.NoError(t, err, tt.json)
		assert.Equal(t, &tt.want, c, tt.json)
	}
	// Null key-value heads are one per head; Mixtral's null window is none.
	c, err := ParseConfig(withKey(t, tests[0].json, "num_key_value_heads", "null"))
	require.NoError(t, err)
	assert.Equal(t, 8, c.NumKeyValueHeads)
}

// TestMoEConfigRefusals checks that what the builders do not implement is
// refused by name.
func TestMoEConfigRefusals(t *testing.T) {
	mixtral, qwen, oss := smallConfigs[Mixtral][0], smallConfigs[Qwen3MoE][0], smallConfigs[GPTOSS][0]
	tests := []struct {
		name, json, want string
	}{
		{"qwen3 sparse step", string(withKey(t, qwen, "decoder_sparse_step", "2")), `qwen3_moe: "decoder_sparse_step" 2 is not supported`},
		{"qwen3 dense layers", string(withKey(t, qwen, "mlp_only_layers", "[3]")), `qwen3_moe: "mlp_only_layers" [3] is not supported`},
		{"qwen3 sliding window", string(withKey(t, qwen, "use_sliding_window", "true")), `qwen3_moe: "use_sliding_window" true is not supported`},
		{"mixtral jitter", string(withKey(t, mixtral, "router_jitter_noise", "0.1")), `"router_jitter_noise" is 0.1`},
		{"gpt-oss alpha", string(withKey(t, oss, "swiglu_alpha", "1.5")), `gpt_oss: "swiglu_alpha" 1.5 is not supported`},
		{"gpt-oss mxfp4 of 48 inputs", string(withKey(t, oss, "quantization_config", `{"quant_method":"mxfp4"}`)),
			`"quantization_config.quant_method" "mxfp4": model.layers.0.mlp.experts: 48 inputs are not a whole number of mxfp4's blocks of 32`},
		{"shared experts", string(withKey(t, qwen, "shared_expert_intermediate_size", "512")), `lumsearch does not implement "shared_expert_intermediate_size": 512`},
		{"k above experts", string(withKey(t, mixtral, "num_experts_per_tok", "5")), `"num_experts_per_tok" is 5; want 1 to 4 ("num_local_experts")`},
		{"no experts", string(withKey(t, qwen, "num_experts", "0")), `"num_experts" is 0`},
		{"layer types short", string(withKey(t, oss, "layer_types", `["sliding_attention"]`)), `"layer_types" has 1 entries for 2 layers`},
		{"layer type unknown", string(withKey(t, oss, "layer_types", `["sliding_attention","chunked_attention"]`)), `entry 1 is "chunked_attention"`},
		{"gelu experts", string(withKey(t, mixtral, "hidden_act", `"gelu"`)), `the experts implement only silu`},
		{"no clamp", string(withKey(t, oss, "swiglu_limit", "0")), `"swiglu_limit" is 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.json))
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	// Off values are accepted.
	for _, js := range [][]byte{
		withKey(t, qwen, "mlp_only_layers", "null"), withKey(t, qwen, "use_sliding_window", "false"),
		withKey(t, mixtral, "router_jitter_noise", "0.0"), withKey(t, oss, "swiglu_alpha", "1.702"),
	} {
		_, err := ParseConfig(js)
		assert.NoError(t, err, string(js))
	}
}

// TestMoEKindRefusals checks that gpt-oss's kinds that would need sinks
// in an op that has none are refused by name; the step kind (paged
// attention has sinks and per-layer windows) is not.
func TestMoEKindRefusals(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"tiny-gpt-oss:model", Options{Seq: 4, Composite: true}, "tiny-gpt-oss:model: composite attention (Options.Composite) needs attention sinks in the attention op"},
		{"tiny-gpt-oss:decode", Options{Seq: 8, Past: -1, Composite: true}, "needs attention sinks"},
		{"tiny-gpt-oss:silu", Options{Seq: 4}, "tiny-gpt-oss:silu: the experts apply a clamped SwiGLU"},
	}
	for _, tt := range tests {
		_, err := Build(tt.name, tt.opt)
		require.Error(t, err, tt.name)
		assert.ErrorContains(t, err, tt.want)
	}
	// Per-layer windows without sinks, and gpt-oss: steps.
	c, err := EmbeddedConfig("tiny-mixtral")
	require.NoError(t, err)
	c.SlidingWindow, c.LayerTypes = 4, alternating(2)
	_, err = BuildConfig("windows", c, "step", Options{Seq: 8})
	assert.NoError(t, err)
	assert.Contains(t, Kinds(c), "step")
	_, err = Build("gpt-oss-20b:step", Options{})
	assert.NoError(t, err)
	// Composite rmsnorm and softmax have no attention: allowed.
	for _, kind := range []string{"rmsnorm", "softmax", "mlp"} {
		_, err := Build("tiny-gpt-oss:"+kind, Options{Seq: 4, Composite: true})
		assert.NoError(t, err, kind)
	}
}

// TestMoEReduced checks Reduced's mixture-of-experts shapes.
func TestMoEReduced(t *testing.T) {
	for _, name := range []string{"mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"} {
		c, err := EmbeddedConfig(name)
		require.NoError(t, err)
		r := Reduced(c)
		require.NoError(t, r.Validate(), name)
		assert.Equal(t, min(c.MoE.NumExperts, 8), r.MoE.NumExperts, name)
		assert.Equal(t, min(c.MoE.NumExpertsPerTok, r.MoE.NumExperts), r.MoE.NumExpertsPerTok, name)
		assert.Equal(t, 32, r.MoE.IntermediateSize, name)
		assert.Equal(t, c.MoE.NormTopKProb, r.MoE.NormTopKProb, name)
		assert.Equal(t, c.MoE.SwiGLULimit, r.MoE.SwiGLULimit, name)
		assert.Equal(t, c.QKNorm, r.QKNorm, name)
		assert.Equal(t, c.AttentionSinks, r.AttentionSinks, name)
		assert.Equal(t, c.RopeScaling, r.RopeScaling, name)
		if c.LayerTypes != nil {
			assert.Equal(t, []string{slidingAttention, fullAttention}, r.LayerTypes, name)
			assert.Equal(t, 3, r.SlidingWindow, name)
		}
		assert.NotSame(t, c.MoE, r.MoE, "a deep copy")
	}
}
