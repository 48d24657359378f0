package corpus

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// quantCase is one quantized build: a config (embedded, edited) and the
// options' weights.
type quantCase struct {
	name   string
	model  string
	kind   string
	dtype  ir.DType
	format quant.Format
	// qc, when set, is the config's quantization_config.
	qc string
}

var quantCases = []quantCase{
	{"llama mxfp4", "tiny-llama", "layer", ir.F32, quant.MXFP4, ""},
	{"llama fp8 per channel", "tiny-llama", "layer", ir.F32, quant.FP8, ""},
	{"llama awq", "tiny-llama", "layer", ir.BF16, quant.AWQ, ""},
	{"llama gptq", "tiny-llama", "layer", ir.F32, quant.GPTQ, ""},
	{"llama fp8 blocks", "tiny-llama", "layer", ir.BF16, quant.None,
		`{"quant_method":"compressed-tensors","format":"float-quantized","quantization_status":"compressed","ignore":["lm_head"],
		  "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,32]}}}}`},
	{"llama fp8 per tensor", "tiny-llama", "layer", ir.F16, quant.None,
		`{"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head","re:.*v_proj$"],
		  "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"}}}}`},
	{"llama awq group 32", "tiny-llama", "layer", ir.F32, quant.None,
		`{"quant_method":"awq","bits":4,"group_size":32,"zero_point":true,"version":"gemm","modules_to_not_convert":["o_proj"]}`},
	{"llama gptq one group", "tiny-llama", "layer", ir.F32, quant.None,
		`{"quant_method":"gptq","bits":4,"group_size":-1,"desc_act":false,"sym":true,"checkpoint_format":"gptq"}`},
	{"gpt-oss mxfp4", "tiny-gpt-oss", "mlp", ir.BF16, quant.None,
		`{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}`},
	{"gpt-oss layer mxfp4", "tiny-gpt-oss", "layer", ir.F32, quant.None,
		`{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}`},
	{"gpt-oss decode mxfp4", "tiny-gpt-oss", "decode", ir.BF16, quant.None,
		`{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}`},
	{"gpt-oss awq", "tiny-gpt-oss", "mlp", ir.F32, quant.AWQ, ""},
	{"gpt-oss fp8", "tiny-gpt-oss", "mlp", ir.F32, quant.FP8, ""},
	{"mixtral fp8", "tiny-mixtral", "mlp", ir.F32, quant.FP8, ""},
	{"mixtral fp8 blocks", "tiny-mixtral", "mlp", ir.F32, quant.None,
		`{"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head","re:.*block_sparse_moe.gate$"],
		  "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,16]}}}}`},
	{"mixtral mxfp4", "tiny-mixtral", "mlp", ir.BF16, quant.MXFP4, ""},
	{"qwen3 gptq", "tiny-qwen3-moe", "mlp", ir.F32, quant.GPTQ, ""},
	{"qwen3 awq", "tiny-qwen3-moe", "layer", ir.F32, quant.AWQ, ""},
}

// build is the case's quantized graph and the same model's float graph.
func (qc quantCase) build(t *testing.T, opt Options) (q, f *ir.Graph) {
	t.Helper()
	c, err := EmbeddedConfig(qc.model)
	require.NoError(t, err)
	if qc.qc != "" {
		data, err := configFS.ReadFile("configs/" + qc.model + ".json")
		require.NoError(t, err)
		c, err = ParseConfig(withKey(t, string(data), "quantization_config", qc.qc))
		require.NoError(t, err)
	}
	opt.DType, opt.Weights = qc.dtype, qc.format
	q, err = BuildConfig(qc.name, c, qc.kind, opt)
	require.NoError(t, err)
	opt.Weights, opt.PlainWeights = quant.None, true
	f, err = BuildConfig(qc.name+" (float)", c, qc.kind, opt)
	require.NoError(t, err)
	return q, f
}

// TestQuantizedGraphsMatchTheDecodedWeights: a quantized graph on random
// packed weights computes exactly what the float graph computes on the
// weights those bytes mean, decoded independently of the dequant op (the
// truth of a quantized model), for every format, grouping, exclusion and
// weight layout (nn.Linear, gpt-oss's experts, stacked experts).
func TestQuantizedGraphsMatchTheDecodedWeights(t *testing.T) {
	for _, qc := range quantCases {
		t.Run(qc.name, func(t *testing.T) {
			q, f := qc.build(t, Options{Seq: 3, Batch: 2})
			counts := q.OpCounts()
			require.Positive(t, counts[ir.OpDequant], "the quantized graph dequantizes")
			assert.Zero(t, f.OpCounts()[ir.OpDequant])

			ws, err := RandomWeights(q, 7)
			require.NoError(t, err)
			fw := floatWeights(t, f, q, ws)
			inputs, err := ir.RandomLeaves(q, 11, ir.Typical, ir.OpInput, ir.OpState)
			require.NoError(t, err)
			maps.Copy(ws, inputs)
			maps.Copy(fw, inputs)
			rq, rf := eval(t, q, ws), eval(t, f, fw)
			for _, o := range f.Outputs {
				want, got := rf.Outputs[o.Name], rq.Outputs[o.Name]
				assert.Equal(t, want.Shape, got.Shape)
				assert.Zero(t, maxAbsDiff(want, got, 0), "%s: the dequantized graph differs from the decoded weights' graph", o.Name)
				assert.Positive(t, maxAbsDiff(want, ir.NewTensor(want.DType, want.Shape), 0), "nonzero outputs")
			}
		})
	}
}

// TestQuantizedLeaves checks the checkpoint names, dtypes and shapes a
// quantized graph declares, and what stays in the model's dtype.
func TestQuantizedLeaves(t *testing.T) {
	leaves := func(g *ir.Graph) map[string]string {
		out := map[string]string{}
		for _, v := range g.Weights() {
			n := g.Node(v)
			out[n.Name] = n.DType.String() + n.Shape.String()
		}
		return out
	}
	byName := map[string]quantCase{}
	for _, qc := range quantCases {
		byName[qc.name] = qc
	}
	tests := []struct {
		cse  string
		want map[string]string // a few of the leaves
		none []string          // names that must be absent
	}{
		{"llama mxfp4", map[string]string{
			"model.layers.0.self_attn.q_proj.weight_packed": "u8[64,32]", "model.layers.0.self_attn.q_proj.weight_scale": "u8[64,2]",
			"model.layers.0.mlp.down_proj.weight_packed": "u8[64,64]", "model.layers.0.input_layernorm.weight": "f32[64]",
		}, []string{"model.layers.0.self_attn.q_proj.weight"}},
		{"llama fp8 per channel", map[string]string{
			"model.layers.0.self_attn.k_proj.weight": "u8[32,64]", "model.layers.0.self_attn.k_proj.weight_scale": "f32[32,1]",
		}, nil},
		{"llama awq", map[string]string{
			"model.layers.0.mlp.gate_proj.qweight": "i32[64,16]", "model.layers.0.mlp.gate_proj.qzeros": "i32[1,16]",
			"model.layers.0.mlp.gate_proj.scales": "f16[1,128]", "model.layers.0.mlp.down_proj.qweight": "i32[128,8]",
			"model.layers.0.mlp.down_proj.scales": "f16[1,64]",
		}, []string{"model.layers.0.mlp.gate_proj.weight"}},
		{"llama gptq", map[string]string{"model.layers.0.mlp.down_proj.qweight": "i32[16,64]", "model.layers.0.mlp.down_proj.qzeros": "i32[1,8]"}, nil},
		{"llama fp8 blocks", map[string]string{
			"model.layers.0.self_attn.q_proj.weight": "u8[64,64]", "model.layers.0.self_attn.q_proj.weight_scale": "f32[4,2]",
			"model.layers.0.mlp.down_proj.weight_scale": "f32[4,4]",
		}, nil},
		{"llama fp8 per tensor", map[string]string{
			"model.layers.0.self_attn.q_proj.weight_scale": "f32[1,1]", "model.layers.0.self_attn.v_proj.weight": "f16[32,64]",
		}, []string{"model.layers.0.self_attn.v_proj.weight_scale"}},
		{"llama awq group 32", map[string]string{
			"model.layers.0.mlp.up_proj.scales": "f16[2,128]", "model.layers.0.self_attn.o_proj.weight": "f32[64,64]",
		}, nil},
		{"gpt-oss layer mxfp4", map[string]string{
			"model.layers.0.mlp.experts.gate_up_proj_blocks": "u8[4,64,2,16]", "model.layers.0.mlp.experts.gate_up_proj_scales": "u8[4,64,2]",
			"model.layers.0.mlp.experts.down_proj_blocks": "u8[4,64,1,16]", "model.layers.0.mlp.experts.down_proj_scales": "u8[4,64,1]",
			"model.layers.0.mlp.experts.gate_up_proj_bias": "f32[4,64]", "model.layers.0.mlp.router.weight": "f32[4,64]",
			"model.layers.0.self_attn.q_proj.weight": "f32[64,64]",
		}, []string{"model.layers.0.mlp.experts.gate_up_proj"}},
		{"gpt-oss awq", map[string]string{
			"model.layers.0.mlp.experts.gate_up_proj.qweight": "i32[4,64,8]", "model.layers.0.mlp.experts.down_proj.scales": "f16[4,1,64]",
		}, nil},
		{"mixtral fp8 blocks", map[string]string{
			"model.layers.0.block_sparse_moe.experts.*.w1+w3.weight":       "u8[4,64,64]",
			"model.layers.0.block_sparse_moe.experts.*.w1+w3.weight_scale": "f32[4,4,4]",
			"model.layers.0.block_sparse_moe.experts.*.w2.weight_scale":    "f32[4,4,2]",
			"model.layers.0.block_sparse_moe.gate.weight":                  "f32[4,64]",
		}, nil},
		{"qwen3 gptq", map[string]string{"model.layers.0.mlp.experts.*.gate_proj+up_proj.qweight": "i32[8,8,64]"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.cse, func(t *testing.T) {
			qc, ok := byName[tt.cse]
			require.True(t, ok)
			q, _ := qc.build(t, Options{Seq: 2})
			got := leaves(q)
			for name, want := range tt.want {
				assert.Equal(t, want, got[name], name)
			}
			for _, name := range tt.none {
				assert.NotContains(t, got, name)
			}
			for name := range got {
				assert.False(t, strings.Contains(name, "embed") && !strings.HasSuffix(name, "embed_tokens.weight"), name)
			}
		})
	}
}

// TestQuantizedModelKeepsEmbeddingsAndHead: a whole quantized model's
// embedding and LM head stay in the model's dtype.
func TestQuantizedModelKeepsEmbeddingsAndHead(t *testing.T) {
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		g, err := Build("tiny-llama:decode", Options{Seq: 8, Past: -1, DType: ir.BF16, Weights: f})
		require.NoError(t, err)
		dtypes := map[string]ir.DType{}
		for _, v := range g.Weights() {
			dtypes[g.Node(v).Name] = g.Node(v).DType
		}
		assert.Equal(t, ir.BF16, dtypes["model.embed_tokens.weight"], f)
		assert.Equal(t, ir.BF16, dtypes["lm_head.weight"], f)
		if dt, ok := dtypes["model.layers.1.mlp.up_proj.weight"]; ok {
			assert.Equal(t, ir.U8, dt, "fp8's codes keep the weight's name")
		}
		assert.Equal(t, 2*7, g.OpCounts()[ir.OpDequant], "seven projections a layer, %s", f)
	}
}
