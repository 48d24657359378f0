package corpus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEmbeddedConfigs(t *testing.T) {
	tests := []struct {
		name string
		want Config
	}{
		{"llama-3-8b", Config{ModelType: Llama, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 128256, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-5, RopeTheta: 500000, HiddenAct: ActSiLU}},
		{"llama-3.2-1b", Config{ModelType: Llama, HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 128256, MaxPositionEmbeddings: 131072,
			TieWordEmbeddings: true, RMSNormEps: 1e-5, RopeTheta: 500000, HiddenAct: ActSiLU,
			RopeScaling: &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}}},
		{"qwen2.5-0.5b", Config{ModelType: Qwen2, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24,
			NumAttentionHeads: 14, NumKeyValueHeads: 2, HeadDim: 64, VocabSize: 151936, MaxPositionEmbeddings: 32768,
			TieWordEmbeddings: true, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: ActSiLU, QKVBias: true}},
		{"mistral-7b", Config{ModelType: Mistral, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 32000, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 10000, HiddenAct: ActSiLU, SlidingWindow: 4096}},
		{"gpt2", Config{ModelType: GPT2, HiddenSize: 768, IntermediateSize: 3072, NumHiddenLayers: 12,
			NumAttentionHeads: 12, NumKeyValueHeads: 12, HeadDim: 64, VocabSize: 50257, MaxPositionEmbeddings: 1024,
			TieWordEmbeddings: true, LayerNormEps: 1e-5, HiddenAct: ActGELUTanh, QKVBias: true, OutBias: true, MLPBias: true}},
		{"tiny-llama", Config{ModelType: Llama, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 97, MaxPositionEmbeddings: 256,
			RMSNormEps: 1e-5, RopeTheta: 10000, HiddenAct: ActSiLU}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := EmbeddedConfig(tt.name)
			require.NoError(t, err)
			tt.want.Name = tt.name
			assert.Equal(t, &tt.want, c)
		})
	}
	assert.Equal(t, []string{"gpt-oss-120b", "gpt-oss-20b", "gpt2", "llama-3-8b", "llama-3.2-1b", "mistral-7b", "mixtral-8x7b",
		"qwen2.5-0.5b", "qwen3-30b-a3b", "tiny-gpt-oss", "tiny-gpt2", "tiny-llama", "tiny-mistral", "tiny-mixtral", "tiny-qwen2",
		"tiny-qwen3-moe"}, ConfigNames())

	// Each embedded config is a copy: changing it changes no later one.
	c, err := EmbeddedConfig("llama-3.2-1b")
	require.NoError(t, err)
	c.HiddenSize, c.RopeScaling.Factor = 1, 1
	c, err = EmbeddedConfig("llama-3.2-1b")
	require.NoError(t, err)
	assert.Equal(t, 2048, c.HiddenSize)
	assert.Equal(t, 32.0, c.RopeScaling.Factor)

	_, err = EmbeddedConfig("llama-3-8")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "llama-3-8b")
}

func TestParseConfigDefaults(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(t *testing.T, c *Config)
	}{
		{"llama defaults", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 4, c.NumKeyValueHeads)
				assert.Equal(t, 16, c.HeadDim)
				assert.Equal(t, 1e-6, c.RMSNormEps)
				assert.Equal(t, 10000.0, c.RopeTheta)
				assert.Equal(t, 2048, c.MaxPositionEmbeddings)
				assert.Equal(t, ActSiLU, c.HiddenAct)
				assert.False(t, c.TieWordEmbeddings)
				assert.Nil(t, c.RopeScaling)
			}},
		{"integral floats and explicit head_dim", `{"model_type":"llama","hidden_size":64.0,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"head_dim":32,"vocab_size":10}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 64, c.HiddenSize)
				assert.Equal(t, 32, c.HeadDim)
			}},
		{"llama attention_bias", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"attention_bias":true,"mlp_bias":true}`,
			func(t *testing.T, c *Config) {
				assert.True(t, c.QKVBias)
				assert.True(t, c.OutBias)
				assert.True(t, c.MLPBias)
			}},
		{"qwen2 biases and unused sliding window", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":10,"sliding_window":32,"use_sliding_window":false,"max_window_layers":0}`,
			func(t *testing.T, c *Config) {
				assert.True(t, c.QKVBias)
				assert.False(t, c.OutBias)
				assert.Zero(t, c.SlidingWindow)
			}},
		{"qwen2 sliding window used", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":10,"sliding_window":32,"use_sliding_window":true,"max_window_layers":0}`,
			func(t *testing.T, c *Config) { assert.Equal(t, 32, c.SlidingWindow) }},
		{"qwen2 sliding window from a layer past the last", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":10,"sliding_window":32,"use_sliding_window":true}`,
			func(t *testing.T, c *Config) {
				assert.Zero(t, c.SlidingWindow, "max_window_layers defaults to 28: no layer of 3 slides")
			}},
		{"qwen2 layer_types all sliding", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":10,"use_sliding_window":true,"max_window_layers":5,"layer_types":["sliding_attention","sliding_attention"]}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 4096, c.SlidingWindow, "layer_types wins over max_window_layers; sliding_window defaults to 4096")
			}},
		{"qwen2 null sliding window", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":10,"use_sliding_window":true,"max_window_layers":0,"sliding_window":null}`,
			func(t *testing.T, c *Config) { assert.Zero(t, c.SlidingWindow) }},
		{"qwen2 class defaults", `{"model_type":"qwen2","hidden_size":256,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":64,"vocab_size":10}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 32, c.NumKeyValueHeads, "Qwen2Config's default")
				assert.Equal(t, 32768, c.MaxPositionEmbeddings)
			}},
		{"mistral null sliding window", `{"model_type":"mistral","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":null,"vocab_size":10,"sliding_window":null}`,
			func(t *testing.T, c *Config) {
				assert.Zero(t, c.SlidingWindow)
				assert.Equal(t, 4, c.NumKeyValueHeads, "null is one per head")
			}},
		{"mistral class defaults", `{"model_type":"mistral","hidden_size":128,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":16,"vocab_size":10}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 4096, c.SlidingWindow, "MistralConfig's default")
				assert.Equal(t, 8, c.NumKeyValueHeads)
				assert.Equal(t, 131072, c.MaxPositionEmbeddings)
			}},
		{"gpt2 n_inner null", `{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":2,"vocab_size":10,"n_inner":null}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 128, c.IntermediateSize)
				assert.Equal(t, 1024, c.MaxPositionEmbeddings)
				assert.Equal(t, 16, c.HeadDim)
				assert.Equal(t, 1e-5, c.LayerNormEps)
				assert.Equal(t, ActGELUTanh, c.HiddenAct)
				assert.True(t, c.TieWordEmbeddings)
			}},
		{"gpt2 n_inner and exact gelu", `{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":2,"vocab_size":10,"n_inner":100,"activation_function":"gelu"}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 100, c.IntermediateSize)
				assert.Equal(t, ActGELU, c.HiddenAct)
			}},
		{"activation aliases", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"hidden_act":"gelu_pytorch_tanh"}`,
			func(t *testing.T, c *Config) { assert.Equal(t, ActGELUTanh, c.HiddenAct) }},
		{"rope_scaling type spelling", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rope_scaling":{"type":"linear","factor":2}}`,
			func(t *testing.T, c *Config) { assert.Equal(t, &RopeScaling{Type: "linear", Factor: 2}, c.RopeScaling) }},
		{"rope_scaling default type", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rope_scaling":{"rope_type":"default"}}`,
			func(t *testing.T, c *Config) { assert.Nil(t, c.RopeScaling) }},
		{"rope_parameters", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,
			"rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`,
			func(t *testing.T, c *Config) {
				assert.Equal(t, 500000.0, c.RopeTheta)
				assert.Equal(t, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}, c.RopeScaling)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	const base = `"hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10`
	tests := []struct {
		name string
		json string
		want string // substring of the error
	}{
		{"not json", `{`, "not a JSON object"},
		{"not an object", `[1]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"no model_type", `{` + base + `}`, `missing "model_type"`},
		{"unsupported model_type", `{"model_type":"bert",` + base + `}`, `model_type "bert" is not supported`},
		{"model_type not a string", `{"model_type":3,` + base + `}`, `"model_type": want a string`},
		{"missing hidden_size", `{"model_type":"llama","intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`, `missing "hidden_size"`},
		{"missing vocab_size", `{"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4}`, `missing "vocab_size"`},
		{"string size", `{"model_type":"llama","hidden_size":"64","intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`, `"hidden_size": want a number`},
		{"fractional size", `{"model_type":"llama","hidden_size":64.5,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10}`, `"hidden_size": want an integer`},
		{"zero layers", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":0,"num_attention_heads":4,"vocab_size":10}`, `"num_hidden_layers" is 0`},
		{"heads do not divide hidden", `{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":6,"vocab_size":10}`, `"hidden_size" 64 is not a multiple of "num_attention_heads" 6`},
		{"kv heads do not divide heads", `{"model_type":"mistral",` + base + `,"num_key_value_heads":3}`, `"num_attention_heads" 4 is not a multiple of "num_key_value_heads" 3`},
		{"odd head_dim", `{"model_type":"llama",` + base + `,"head_dim":15}`, `"head_dim" 15 is odd`},
		{"bool as string", `{"model_type":"llama",` + base + `,"tie_word_embeddings":"yes"}`, `"tie_word_embeddings": want true or false`},
		{"negative eps", `{"model_type":"llama",` + base + `,"rms_norm_eps":-1}`, `"rms_norm_eps" is -1`},
		{"bad rope_theta", `{"model_type":"llama",` + base + `,"rope_theta":0.5}`, `"rope_theta" is 0.5`},
		{"unsupported activation", `{"model_type":"llama",` + base + `,"hidden_act":"mish"}`, `"hidden_act": activation "mish" is not supported`},
		{"unsupported rope scaling", `{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"longrope","factor":4}}`, `rope_type "longrope" is not supported`},
		{"rope scaling not an object", `{"model_type":"llama",` + base + `,"rope_scaling":4}`, `"rope_scaling": want an object`},
		{"llama3 scaling without factor", `{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"llama3","low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":64}}`, `missing "rope_scaling.factor"`},
		{"llama3 scaling factors swapped", `{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":64}}`, "low_freq_factor < high_freq_factor"},
		{"gpt2 missing n_embd", `{"model_type":"gpt2","n_layer":1,"n_head":2,"vocab_size":10}`, `missing "n_embd"`},
		{"gpt2 heads do not divide", `{"model_type":"gpt2","n_embd":30,"n_layer":1,"n_head":4,"vocab_size":10}`, `"n_embd" 30 is not a multiple of "n_head" 4`},
		{"gpt2 zero positions", `{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":4,"vocab_size":10,"n_positions":0}`, `"n_positions" is 0`},
		{"gpt2 activation", `{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":4,"vocab_size":10,"activation_function":"tanh"}`, `"activation_function": activation "tanh"`},
		{"gpt2 unscaled attention", `{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":4,"vocab_size":10,"scale_attn_weights":false}`, `"scale_attn_weights" is false`},
		{"qwen2 some layers slide", `{"model_type":"qwen2",` + base + `,"num_hidden_layers":4,"num_key_value_heads":2,"use_sliding_window":true,"max_window_layers":1}`, `"max_window_layers" 1 with "use_sliding_window": layers 1 to 3`},
		{"qwen2 layer_types mixed", `{"model_type":"qwen2",` + base + `,"num_hidden_layers":2,"num_key_value_heads":2,"use_sliding_window":true,"layer_types":["full_attention","sliding_attention"]}`, `"layer_types" mixes`},
		{"qwen2 layer_types too short", `{"model_type":"qwen2",` + base + `,"num_hidden_layers":2,"num_key_value_heads":2,"layer_types":["full_attention"]}`, `"layer_types": 1 entries for 2 layers`},
		{"qwen2 layer_types unknown kind", `{"model_type":"qwen2",` + base + `,"num_key_value_heads":2,"layer_types":["linear_attention"]}`, `entry 0 is "linear_attention"`},
		{"rope partial rotary", `{"model_type":"llama",` + base + `,"rope_parameters":{"rope_type":"default","rope_theta":10000,"partial_rotary_factor":0.5}}`, `"rope_parameters.partial_rotary_factor": 0.5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.json))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "config.json")
	data, err := configFS.ReadFile("configs/tiny-qwen2.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(good, data, 0o644))
	c, err := LoadConfig(good)
	require.NoError(t, err)
	assert.Equal(t, good, c.Name)
	assert.Equal(t, Qwen2, c.ModelType)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"model_type":"llama"}`), 0o644))
	_, err = LoadConfig(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
	assert.Contains(t, err.Error(), `missing "hidden_size"`)

	_, err = LoadConfig(filepath.Join(dir, "absent.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "absent.json")
}

func TestValidateHandMadeConfig(t *testing.T) {
	c, err := EmbeddedConfig("tiny-llama")
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	c.ModelType = "falcon"
	assert.ErrorContains(t, c.Validate(), `model_type "falcon" is not supported`)

	g, err := EmbeddedConfig("tiny-gpt2")
	require.NoError(t, err)
	g.NumHiddenLayers = -1
	assert.ErrorContains(t, g.Validate(), `"n_layer" is -1`)
}
