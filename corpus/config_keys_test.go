package corpus

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallConfigs are made-up configs of each model type, with the keys that
// steer the parser's branches, so that together they read every key the
// parser can read.
var smallConfigs = map[string][]string{
	Llama: {
		`{"model_type":"llama","hidden_size":48,"intermediate_size":80,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":1,"head_dim":16,
		  "vocab_size":11,"max_position_embeddings":40,"tie_word_embeddings":true,"rms_norm_eps":1e-5,"hidden_act":"silu","rope_theta":20000,
		  "rope_scaling":{"rope_type":"linear","factor":2},"attention_bias":true,"mlp_bias":false}`,
		`{"model_type":"llama","hidden_size":48,"intermediate_size":80,"num_hidden_layers":1,"num_attention_heads":3,"vocab_size":11,
		  "rope_parameters":{"rope_type":"default","rope_theta":20000}}`,
	},
	Qwen2: {
		`{"model_type":"qwen2","hidden_size":48,"intermediate_size":80,"num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":3,"head_dim":16,
		  "vocab_size":11,"max_position_embeddings":40,"tie_word_embeddings":false,"rms_norm_eps":1e-5,"hidden_act":"silu","rope_theta":20000,
		  "rope_scaling":null,"use_sliding_window":true,"sliding_window":8,"max_window_layers":0,"layer_types":null}`,
		`{"model_type":"qwen2","hidden_size":48,"intermediate_size":80,"num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":3,"vocab_size":11,
		  "rope_parameters":{"rope_theta":20000}}`,
	},
	Mistral: {
		`{"model_type":"mistral","hidden_size":48,"intermediate_size":80,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":1,"head_dim":16,
		  "vocab_size":11,"max_position_embeddings":40,"tie_word_embeddings":false,"rms_norm_eps":1e-5,"hidden_act":"silu","rope_theta":20000,
		  "rope_scaling":null,"sliding_window":7}`,
		`{"model_type":"mistral","hidden_size":48,"intermediate_size":80,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":3,"vocab_size":11,
		  "rope_parameters":{"rope_type":"linear","factor":3,"rope_theta":20000}}`,
	},
	Mixtral: {
		`{"model_type":"mixtral","hidden_size":48,"intermediate_size":80,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":1,"head_dim":16,
		  "vocab_size":11,"max_position_embeddings":40,"tie_word_embeddings":false,"rms_norm_eps":1e-5,"hidden_act":"silu","rope_theta":20000,
		  "rope_scaling":null,"sliding_window":null,"num_local_experts":4,"num_experts_per_tok":2,"router_jitter_noise":0}`,
		`{"model_type":"mixtral","hidden_size":48,"num_hidden_layers":1,"num_attention_heads":8,"vocab_size":11,
		  "rope_parameters":{"rope_type":"default","rope_theta":20000}}`,
	},
	Qwen3MoE: {
		`{"model_type":"qwen3_moe","hidden_size":48,"intermediate_size":80,"num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":1,"head_dim":32,
		  "vocab_size":11,"max_position_embeddings":40,"tie_word_embeddings":false,"rms_norm_eps":1e-6,"hidden_act":"silu","rope_theta":20000,
		  "rope_scaling":null,"attention_bias":false,"num_experts":6,"num_experts_per_tok":2,"moe_intermediate_size":24,"norm_topk_prob":true,
		  "use_sliding_window":false,"sliding_window":null,"max_window_layers":2,"decoder_sparse_step":1,"mlp_only_layers":[]}`,
		`{"model_type":"qwen3_moe","hidden_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":11,"num_experts":8,
		  "rope_parameters":{"rope_type":"linear","factor":2,"rope_theta":20000}}`,
	},
	GPTOSS: {
		`{"model_type":"gpt_oss","hidden_size":48,"intermediate_size":40,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
		  "vocab_size":11,"max_position_embeddings":64,"tie_word_embeddings":false,"rms_norm_eps":1e-5,"hidden_act":"silu","rope_theta":150000,
		  "rope_scaling":{"rope_type":"yarn","factor":4,"beta_fast":32,"beta_slow":1,"truncate":false,"original_max_position_embeddings":16},
		  "attention_bias":true,"sliding_window":4,"layer_types":["sliding_attention","full_attention"],"num_local_experts":4,"num_experts_per_tok":2,
		  "swiglu_limit":7.0,"swiglu_alpha":1.702}`,
		`{"model_type":"gpt_oss","hidden_size":48,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":11,"num_local_experts":4,
		  "rope_parameters":{"rope_type":"yarn","factor":8,"original_max_position_embeddings":16,"rope_theta":150000}}`,
	},
	GPT2: {
		`{"model_type":"gpt2","n_embd":48,"n_layer":1,"n_head":3,"vocab_size":11,"n_positions":40,"n_inner":64,"layer_norm_epsilon":1e-5,
		  "tie_word_embeddings":true,"activation_function":"gelu_new","scale_attn_weights":true}`,
	},
}

// TestConfigKeysFollowTheParser checks that the read lists are exactly the
// keys the parser reads: a key it reads but the list lacks would be
// refused as unknown, and a listed key it never reads would be accepted
// at any value without being implemented.
func TestConfigKeysFollowTheParser(t *testing.T) {
	for _, mt := range modelTypes {
		t.Run(mt, func(t *testing.T) {
			seen := map[string]bool{}
			for i, js := range smallConfigs[mt] {
				_, read, err := parseConfig([]byte(js))
				require.NoError(t, err, "config %d", i)
				for k := range read {
					assert.Contains(t, ReadKeys(mt), k, "config %d reads a key its model type does not list", i)
				}
				maps.Copy(seen, read)
			}
			for _, name := range ConfigNames() {
				data, err := configFS.ReadFile("configs/" + name + ".json")
				require.NoError(t, err)
				c, read, err := parseConfig(data)
				require.NoError(t, err, name)
				if c.ModelType != mt {
					continue
				}
				for k := range read {
					assert.Contains(t, ReadKeys(mt), k, "%s reads a key its model type does not list", name)
				}
			}
			assert.Equal(t, ReadKeys(mt), sorted(slices.Collect(maps.Keys(seen))), "keys listed as read but never read")
			for _, k := range HarmlessKeys(mt) {
				assert.NotContains(t, ReadKeys(mt), k, "a key is both read and harmless")
			}
		})
	}
	assert.Nil(t, ReadKeys("falcon"))
	assert.Nil(t, HarmlessKeys("falcon"))
}

// withKey is js with key set to the JSON value val.
func withKey(t *testing.T, js, key, val string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(js), &m))
	m[key] = json.RawMessage(val)
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

func TestUnknownConfigKeys(t *testing.T) {
	unknown := []struct {
		key     string
		on, off string
	}{
		{"num_local_experts", "6", "0"},
		{"num_experts_per_tok", "3", "null"},
		{"use_qk_norm", "true", "false"},
		{"attn_logit_softcapping", "30.5", "0.0"},
		{"quantization_config", `{"quant_method":"awq","bits":4}`, "{}"},
		{"pruned_heads", `{"0":[2]}`, "{}"},
		{"partial_rotary_factor", "0.25", "1.0"},
		{"norm_type", `"layernorm"`, `""`},
		{"moe_layers", "[1,3]", "[]"},
	}
	for _, mt := range modelTypes {
		base := smallConfigs[mt][0]
		want, err := ParseConfig([]byte(base))
		require.NoError(t, err)
		for _, u := range unknown {
			if slices.Contains(ReadKeys(mt), u.key) {
				continue // the mixtures of experts read theirs
			}
			t.Run(mt+"/"+u.key, func(t *testing.T) {
				_, err := ParseConfig(withKey(t, base, u.key, u.on))
				require.Error(t, err)
				var compact map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(withKey(t, "{}", "v", u.on), &compact))
				assert.ErrorContains(t, err, `model_type "`+mt+`"`)
				assert.ErrorContains(t, err, `lumsearch does not implement "`+u.key+`": `+string(compact["v"]))

				got, err := ParseConfig(withKey(t, base, u.key, u.off))
				require.NoError(t, err, "%s at its off value %s", u.key, u.off)
				assert.Equal(t, want, got)
			})
		}
	}

	t.Run("every offending key is named, in order", func(t *testing.T) {
		js := withKey(t, string(withKey(t, smallConfigs[Mistral][0], "zz_router", "2")), "aa_experts", "4")
		_, err := ParseConfig(js)
		require.Error(t, err)
		assert.ErrorContains(t, err, `"aa_experts": 4, "zz_router": 2`)
	})
	t.Run("nested rope keys", func(t *testing.T) {
		js := withKey(t, smallConfigs[Llama][0], "rope_scaling", `{"rope_type":"linear","factor":2,"mrope_section":[8,12]}`)
		_, err := ParseConfig(js)
		assert.ErrorContains(t, err, `"rope_scaling.mrope_section": [8,12]`)
		js = withKey(t, smallConfigs[Llama][0], "rope_scaling", `{"rope_type":"linear","factor":2,"mrope_section":null}`)
		_, err = ParseConfig(js)
		assert.NoError(t, err)
	})
	t.Run("long values are cut", func(t *testing.T) {
		long := `"` + string(slices.Repeat([]byte("é"), 100)) + `"`
		_, err := ParseConfig(withKey(t, smallConfigs[GPT2][0], "custom_kernel", long))
		require.Error(t, err)
		assert.ErrorContains(t, err, "...")
		assert.NotContains(t, err.Error(), long)
	})
}

// TestHarmlessConfigKeys sets harmless keys to values other than their
// off value: the config is the same as without them.
func TestHarmlessConfigKeys(t *testing.T) {
	harmless := map[string][][2]string{
		Llama:    {{"pretraining_tp", "4"}, {"attention_dropout", "0.1"}},
		Qwen2:    {{"attention_dropout", "0.2"}},
		Mistral:  {{"attention_dropout", "0.3"}},
		Mixtral:  {{"attention_dropout", "0.3"}, {"router_aux_loss_coef", "0.02"}, {"output_router_logits", "true"}},
		Qwen3MoE: {{"router_aux_loss_coef", "0.001"}, {"output_router_logits", "true"}},
		GPTOSS:   {{"router_aux_loss_coef", "0.9"}, {"experts_per_token", "4"}, {"initial_context_length", "4096"}},
		GPT2:     {{"resid_pdrop", "0.1"}, {"n_ctx", "40"}, {"summary_type", `"cls_index"`}, {"reorder_and_upcast_attn", "true"}},
	}
	common := [][2]string{
		{"architectures", `["SomethingForCausalLM"]`}, {"torch_dtype", `"float16"`}, {"transformers_version", `"4.99.0"`},
		{"bos_token_id", "5"}, {"eos_token_id", "[6,7]"}, {"use_cache", "true"}, {"initializer_range", "0.01"},
		{"temperature", "0.6"}, {"id2label", `{"0":"A"}`},
	}
	for _, mt := range modelTypes {
		base := smallConfigs[mt][0]
		want, err := ParseConfig([]byte(base))
		require.NoError(t, err)
		for _, kv := range append(slices.Clone(common), harmless[mt]...) {
			got, err := ParseConfig(withKey(t, base, kv[0], kv[1]))
			require.NoError(t, err, "%s %s=%s", mt, kv[0], kv[1])
			assert.Equal(t, want, got, "%s %s", mt, kv[0])
			assert.Contains(t, HarmlessKeys(mt), kv[0])
		}
	}
	// A key harmless to one model type is unknown to another.
	_, err := ParseConfig(withKey(t, smallConfigs[Llama][0], "resid_pdrop", "0.1"))
	assert.ErrorContains(t, err, `"resid_pdrop": 0.1`)
	_, err = ParseConfig(withKey(t, smallConfigs[Mistral][0], "mlp_bias", "true"))
	assert.ErrorContains(t, err, `model_type "mistral": lumsearch does not implement "mlp_bias": true`)
}
