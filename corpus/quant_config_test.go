package corpus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// ossKeep is gpt-oss's modules_to_not_convert.
var ossKeep = []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}

// TestQuantizationConfigs checks the quantization_configs the parser
// accepts, as the checkpoints write them.
func TestQuantizationConfigs(t *testing.T) {
	llama, oss := smallConfigs[Llama][0], smallConfigs[GPTOSS][0]
	// smallConfigs' gpt-oss has 48 inputs: 64 make whole mxfp4 blocks.
	oss = string(withKey(t, string(withKey(t, oss, "hidden_size", "64")), "intermediate_size", "32"))
	// Every projection's inputs a whole number of fp8's default blocks of
	// 128 (W8A8 scales its activations in such groups).
	llama128 := llama
	for _, kv := range [][2]string{{"hidden_size", "128"}, {"intermediate_size", "256"}, {"num_attention_heads", "2"}, {"head_dim", "64"}} {
		llama128 = string(withKey(t, llama128, kv[0], kv[1]))
	}
	tests := []struct {
		name, base, qc string
		want           *Quantization
	}{
		{"gpt-oss mxfp4", oss, `{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}`,
			&Quantization{Method: MethodMXFP4, Format: quant.MXFP4, Group: 32, ExpertsOnly: true, Keep: ossKeep}},
		{"mxfp4 dequantized at load", oss, `{"quant_method":"mxfp4","dequantize":true}`,
			&Quantization{Method: MethodMXFP4, Format: quant.MXFP4, Group: 32, ExpertsOnly: true}},
		{"compressed-tensors per channel (FP8-dynamic's weights)", llama,
			`{"quant_method":"compressed-tensors","format":"float-quantized","quantization_status":"compressed","global_compression_ratio":1.24,
			  "version":"0.7.1","ignore":["lm_head"],"kv_cache_scheme":null,"sparsity_config":{},
			  "config_groups":{"group_0":{"targets":["Linear"],"output_activations":null,"input_activations":null,
			    "weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel","dynamic":false,"group_size":null,"block_structure":null,
			      "actorder":null,"observer":"minmax","observer_kwargs":{}}}}}`,
			&Quantization{Method: MethodCompressedTensors, Format: quant.FP8, GroupN: 1, Keep: []string{"lm_head"}}},
		{"compressed-tensors per tensor", llama,
			`{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"}}}}`,
			&Quantization{Method: MethodCompressedTensors, Format: quant.FP8}},
		{"compressed-tensors blocks", llama,
			`{"quant_method":"compressed-tensors","config_groups":{"g":{"format":"float-quantized","targets":["Linear"],
			  "weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,32]}}},"ignore":["lm_head","re:.*mlp.gate$"]}`,
			&Quantization{Method: MethodCompressedTensors, Format: quant.FP8, GroupN: 16, Group: 32, Keep: []string{"lm_head", "re:.*mlp.gate$"}}},
		{"awq", llama, `{"quant_method":"awq","bits":4,"group_size":16,"zero_point":true,"version":"GEMM","backend":"autoawq","modules_to_not_convert":null}`,
			&Quantization{Method: MethodAWQ, Format: quant.AWQ, Group: 16}},
		{"awq defaults", llama, `{"quant_method":"awq"}`, nil}, // group 128 does not divide 48 inputs: refused below
		{"gptq", llama, `{"quant_method":"gptq","bits":4,"group_size":16,"desc_act":false,"sym":true,"checkpoint_format":"gptq","damp_percent":0.01,
			  "true_sequential":true,"static_groups":false,"model_name_or_path":null,"model_file_base_name":null,"use_exllama":true}`,
			&Quantization{Method: MethodGPTQ, Format: quant.GPTQ, Group: 16}},
		{"gptq one group", llama, `{"quant_method":"gptq","bits":4,"group_size":-1,"desc_act":false,"sym":false}`,
			&Quantization{Method: MethodGPTQ, Format: quant.GPTQ}},
		{"fp8 (W8A8: activations per token and block)", llama, `{"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[16,16]}`,
			&Quantization{Method: MethodFP8, Format: quant.FP8, GroupN: 16, Group: 16, Acts: &ActQuant{Group: 16}}},
		{"fp8 default activations", llama128, `{"quant_method":"fp8","fmt":"e4m3"}`,
			&Quantization{Method: MethodFP8, Format: quant.FP8, GroupN: 128, Group: 128, Acts: &ActQuant{Group: 128}}},
		{"W8A8 dynamic per token", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],
			"weights":{"num_bits":8,"type":"float","strategy":"channel"},"input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true,"symmetric":true}}}}`,
			&Quantization{Method: MethodCompressedTensors, Format: quant.FP8, GroupN: 1, Acts: &ActQuant{}}},
		{"W8A8 static per tensor", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],
			"weights":{"num_bits":8,"type":"float","strategy":"tensor"},"input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false}}}}`,
			&Quantization{Method: MethodCompressedTensors, Format: quant.FP8, Acts: &ActQuant{Static: true}}},
		{"empty", llama, `{}`, nil},
		{"null", llama, `null`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(withKey(t, tt.base, "quantization_config", tt.qc))
			if tt.want == nil && tt.name == "awq defaults" {
				require.ErrorContains(t, err, `"quantization_config.group_size"'s groups of 128`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.Quantization)
		})
	}
}

// TestQuantizationConfigRefusals checks that what lumsearch does not
// implement, or a config that does not fit its model, is refused naming
// the key and its value.
func TestQuantizationConfigRefusals(t *testing.T) {
	llama, oss, gpt2 := smallConfigs[Llama][0], smallConfigs[GPTOSS][0], smallConfigs[GPT2][0]
	ct := func(weights string) string {
		return `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":` + weights + `}}}`
	}
	ct8 := func(acts string) string {
		return `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],` +
			`"weights":{"num_bits":8,"type":"float","strategy":"channel"},"input_activations":` + acts + `}}}`
	}
	tests := []struct {
		name, base, qc, want string
	}{
		{"unknown method", llama, `{"quant_method":"bitsandbytes","load_in_4bit":true}`, `"quantization_config.quant_method" "bitsandbytes" is not supported`},
		{"not an object", llama, `"awq"`, `"quantization_config": want an object`},
		{"mxfp4 without gpt-oss's experts", llama, `{"quant_method":"mxfp4"}`, `"quantization_config.quant_method" "mxfp4" quantizes gpt_oss's experts, and model_type "llama" has none`},
		{"mxfp4 unknown key", oss, `{"quant_method":"mxfp4","block_size":64}`, `lumsearch does not implement "quantization_config.block_size": 64`},
		{"fp8 static activations", llama, `{"quant_method":"fp8","activation_scheme":"static"}`,
			`"quantization_config.activation_scheme" "static" is not supported (want dynamic`},
		{"fp8 e5m2", llama, `{"quant_method":"fp8","fmt":"e5m2"}`, `"quantization_config.fmt" "e5m2" is not supported`},
		{"fp8 bad blocks", llama, `{"quant_method":"fp8","weight_block_size":[128]}`, `"quantization_config.weight_block_size" [128]: want [rows, columns]`},
		{"W8A8 per channel activations", llama, ct8(`{"num_bits":8,"type":"float","strategy":"channel","dynamic":true}`),
			`"quantization_config.config_groups.g.input_activations.strategy" "channel" with`},
		{"W8A8 int activations", llama, ct8(`{"num_bits":8,"type":"int","strategy":"token","dynamic":true}`),
			`"quantization_config.config_groups.g.input_activations.type" "int" is not supported`},
		{"W8A8 experts", smallConfigs[Mixtral][0], ct8(`{"num_bits":8,"type":"float","strategy":"token","dynamic":true}`),
			`the activations of experts quantized to e4m3 (W8A8) are not implemented`},
		{"W8A8 groups past the inputs", llama, `{"quant_method":"fp8","weight_block_size":[128,128]}`,
			`inputs are not a whole number of the activations' scale groups of 128`},
		{"W8A8 outputs", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],
			"weights":{"num_bits":8,"type":"float","strategy":"channel"},"output_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true}}}}`,
			`"quantization_config.config_groups.g.output_activations" {"num_bits":8`},
		{"int8 weights", llama, ct(`{"num_bits":8,"type":"int","strategy":"channel"}`), `"quantization_config.config_groups.g.weights.type" "int" is not supported`},
		{"4-bit weights", llama, ct(`{"num_bits":4,"type":"float","strategy":"channel"}`), `"quantization_config.config_groups.g.weights.num_bits" 4 is not supported`},
		{"group strategy", llama, ct(`{"num_bits":8,"type":"float","strategy":"group","group_size":128}`), `"quantization_config.config_groups.g.weights.group_size" 128 is not supported`},
		{"token strategy", llama, ct(`{"num_bits":8,"type":"float","strategy":"token"}`), `"quantization_config.config_groups.g.weights.strategy" "token" is not supported`},
		{"asymmetric", llama, ct(`{"num_bits":8,"type":"float","strategy":"tensor","symmetric":false}`), `"quantization_config.config_groups.g.weights.symmetric" false`},
		{"dynamic weights", llama, ct(`{"num_bits":8,"type":"float","strategy":"tensor","dynamic":true}`), `"quantization_config.config_groups.g.weights.dynamic" true`},
		{"blocks without a structure", llama, ct(`{"num_bits":8,"type":"float","strategy":"block"}`), `"quantization_config.config_groups.g.weights.block_structure" []: want [rows, columns]`},
		{"pack-quantized", llama, `{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"}}}}`,
			`"quantization_config.format" "pack-quantized" is not supported`},
		{"frozen", llama, `{"quant_method":"compressed-tensors","quantization_status":"frozen"}`, `"quantization_config.quantization_status" "frozen" is not supported`},
		{"two groups", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"a":{},"b":{}}}`, `"quantization_config.config_groups" has 2 groups`},
		{"targets", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["re:.*q_proj"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"}}}}`,
			`"quantization_config.config_groups.g.targets" ["re:.*q_proj"] is not supported`},
		{"kv cache", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","kv_cache_scheme":{"num_bits":8},"config_groups":{"g":{}}}`,
			`lumsearch does not implement "quantization_config.kv_cache_scheme": {"num_bits":8}`},
		{"bad ignore", llama, `{"quant_method":"compressed-tensors","format":"float-quantized","ignore":["re:(lm_head"],
			"config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"}}}}`, `"quantization_config.ignore": entry "re:(lm_head" is not a regular expression`},
		{"awq 8 bits", llama, `{"quant_method":"awq","bits":8,"group_size":16}`, `"quantization_config.bits" 8 is not supported`},
		{"awq gemv", llama, `{"quant_method":"awq","group_size":16,"version":"gemv"}`, `"quantization_config.version" "gemv" is not supported`},
		{"awq exllama", llama, `{"quant_method":"awq","group_size":16,"version":"exllama"}`, `"quantization_config.version" "exllama" is not supported`},
		{"awq without zero points", llama, `{"quant_method":"awq","group_size":16,"zero_point":false}`, `"quantization_config.zero_point" false is not supported`},
		{"awq group", llama, `{"quant_method":"awq","group_size":32}`, `model.layers.0.self_attn.q_proj: 48 inputs are not a whole number of "quantization_config.group_size"'s groups of 32`},
		{"gptq act order", llama, `{"quant_method":"gptq","group_size":16,"desc_act":true}`, `"quantization_config.desc_act" true is not supported`},
		{"gptq v2", llama, `{"quant_method":"gptq","group_size":16,"checkpoint_format":"gptq_v2"}`, `"quantization_config.checkpoint_format" "gptq_v2" is not supported`},
		{"gptq marlin", llama, `{"quant_method":"gptq","group_size":16,"format":"marlin"}`, `"quantization_config.format" "marlin" is not supported`},
		{"gptq 3 bits", llama, `{"quant_method":"gptq","bits":3,"group_size":16}`, `"quantization_config.bits" 3 is not supported`},
		{"gptq lm_head", llama, `{"quant_method":"gptq","group_size":16,"lm_head":true}`, `"quantization_config.lm_head" true is not supported`},
		{"gptq partial", llama, `{"quant_method":"gptq","group_size":16,"modules_in_block_to_quantize":[["self_attn.q_proj"]]}`,
			`"quantization_config.modules_in_block_to_quantize" [["self_attn.q_proj"]] is not supported`},
		{"gptq unknown", llama, `{"quant_method":"gptq","group_size":16,"exotic":1}`, `lumsearch does not implement "quantization_config.exotic": 1`},
		{"gpt2", gpt2, `{"quant_method":"gptq","group_size":16}`, `gpt2's Conv1D weights are not quantized`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(withKey(t, tt.base, "quantization_config", tt.qc))
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// TestWeightsOption checks Options.Weights and PlainWeights against a
// config's quantization: the option's format wins, grouped by each
// weight's shape, with the config's exclusions; plain weights drop it;
// a format the weights' extents do not take is refused.
func TestWeightsOption(t *testing.T) {
	oss, err := EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	count := func(c *Config, opt Options) (dequants int, byFormat map[quant.Format]int) {
		g, err := BuildConfig("g", c, "layer", opt)
		require.NoError(t, err)
		byFormat = map[quant.Format]int{}
		for _, n := range g.Nodes {
			if n.Op == ir.OpDequant {
				dequants++
				byFormat[n.Format]++
			}
		}
		return dequants, byFormat
	}
	n, f := count(oss, Options{Seq: 2, DType: ir.BF16})
	assert.Equal(t, 2, n, "gpt-oss's experts alone, as its config says")
	assert.Equal(t, 2, f[quant.MXFP4])
	n, _ = count(oss, Options{Seq: 2, DType: ir.BF16, PlainWeights: true})
	assert.Zero(t, n, "--weights none")
	_, f = count(oss, Options{Seq: 2, DType: ir.BF16, Weights: quant.FP8})
	assert.Equal(t, map[quant.Format]int{quant.FP8: 2}, f, "fp8 experts; the attention stays excluded")
	llama, err := EmbeddedConfig("llama-3-8b")
	require.NoError(t, err)
	n, f = count(llama, Options{Seq: 2, DType: ir.BF16, Weights: quant.GPTQ})
	assert.Equal(t, 7, n)
	assert.Equal(t, 7, f[quant.GPTQ])

	_, err = BuildConfig("g", llama, "layer", Options{Weights: quant.FP8, PlainWeights: true})
	assert.ErrorContains(t, err, "weights fp8: want one of mxfp4, fp8, awq and gptq, or plain weights")
	bad := llama.clone()
	bad.HiddenSize, bad.NumAttentionHeads, bad.HeadDim = 48, 3, 16
	bad.NumKeyValueHeads = 1
	_, err = BuildConfig("g", bad, "layer", Options{Weights: quant.MXFP4})
	assert.ErrorContains(t, err, "weights mxfp4: model.layers.0.self_attn.q_proj: 48 inputs are not a whole number of mxfp4's blocks of 32")
	_, err = Build("gpt2:block", Options{Weights: quant.AWQ})
	assert.ErrorContains(t, err, "gpt2's Conv1D weights are not quantized")
}

// TestReducedKeepsTheFormat: the reduced configuration of a quantized
// model is quantized the same way, in groups its extents divide.
func TestReducedKeepsTheFormat(t *testing.T) {
	c, err := ParseConfig(withKey(t, smallConfigs[Llama][0], "quantization_config", `{"quant_method":"awq","group_size":16}`))
	require.NoError(t, err)
	c.HiddenSize, c.NumAttentionHeads, c.IntermediateSize = 256, 16, 512
	c.Quantization.Group = 128
	require.NoError(t, c.Validate())
	r := Reduced(c)
	require.NoError(t, r.Validate())
	assert.Equal(t, 16, r.Quantization.Group)
	assert.Equal(t, 128, c.Quantization.Group, "a deep copy")
	oss, err := EmbeddedConfig("gpt-oss-120b")
	require.NoError(t, err)
	ro := Reduced(oss)
	require.NoError(t, ro.Validate())
	assert.Equal(t, oss.Quantization, ro.Quantization)
	g, err := BuildConfig("r", ro, "decode", Options{Seq: 8, Past: -1})
	require.NoError(t, err)
	assert.Equal(t, 4, g.OpCounts()[ir.OpDequant], "two layers' experts")
}
