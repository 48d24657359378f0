package corpus

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expectedParams counts a model's parameters from its config by the
// formulas of the transformers implementations, tied embeddings once.
func expectedParams(c *Config) (layer, model int64) {
	h, in, v := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	q, kv := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	embed := v * h
	if c.ModelType == GPT2 {
		attn := h*3*h + 3*h + h*h + h // c_attn, c_proj with biases
		mlp := h*in + in + in*h + h   // c_fc, c_proj with biases
		layer = attn + mlp + 4*h      // ln_1, ln_2 weights and biases
		model = embed + int64(c.MaxPositionEmbeddings)*h + int64(c.NumHiddenLayers)*layer + 2*h
	} else {
		attn := h*q + 2*h*kv + q*h
		if c.QKVBias {
			attn += q + 2*kv
		}
		if c.OutBias {
			attn += h
		}
		mlp := 3 * h * in
		if c.MLPBias {
			mlp += 2*in + h
		}
		if m := c.MoE; m != nil {
			e, ein := int64(m.NumExperts), int64(m.IntermediateSize)
			mlp = e*h + e*3*h*ein // router, experts
			if c.ModelType == GPTOSS {
				mlp += e + e*2*ein + e*h // router and experts' biases
			}
		}
		if c.QKNorm {
			attn += 2 * int64(c.HeadDim)
		}
		if c.AttentionSinks {
			attn += int64(c.NumAttentionHeads)
		}
		layer = attn + mlp + 2*h
		model = embed + int64(c.NumHiddenLayers)*layer + h
	}
	if !c.TieWordEmbeddings {
		model += embed
	}
	return layer, model
}

func TestParamCounts(t *testing.T) {
	// The published totals of the real models.
	known := map[string]int64{
		"llama-3-8b":   8_030_261_248,
		"llama-3.2-1b": 1_235_814_400,
		"qwen2.5-0.5b": 494_032_768,
		"mistral-7b":   7_241_732_096,
		"gpt2":         124_439_808,
		// The model cards' totals.
		"mixtral-8x7b":  46_702_792_704,
		"qwen3-30b-a3b": 30_532_122_624,
		"gpt-oss-20b":   20_914_757_184,
		"gpt-oss-120b":  116_829_156_672,
	}
	for _, name := range ConfigNames() {
		t.Run(name, func(t *testing.T) {
			c, err := EmbeddedConfig(name)
			require.NoError(t, err)
			layer, model := expectedParams(c)
			if k, ok := known[name]; ok {
				assert.Equal(t, k, model)
			}
			for _, tt := range []struct {
				kind string
				want int64
			}{
				{"model", model}, {"decode", model}, {Kinds(c)[0], layer},
			} {
				g, err := Build(name+":"+tt.kind, Options{Seq: 4, PlainWeights: true})
				require.NoError(t, err)
				assert.Equal(t, tt.want, g.NumParams(), tt.kind)
				// Quantized (gpt-oss's experts, or fp8 here), the
				// packed weights count the values they hold.
				if c.Family() == Llama {
					q, err := Build(name+":"+tt.kind, Options{Seq: 4, Weights: quant.FP8})
					require.NoError(t, err)
					assert.Equal(t, tt.want, Params(q), tt.kind)
				}
			}
		})
	}
}

// TestDecodeState checks that a decode step has one key and one value
// cache per layer, each updated once in place by a slice_update at the
// past position, and that the step attends over positions 0..past.
func TestDecodeState(t *testing.T) {
	for _, model := range []string{"tiny-llama", "tiny-qwen2", "tiny-gpt2", "llama-3-8b", "gpt2"} {
		for _, composite := range []bool{false, true} {
			c, err := EmbeddedConfig(model)
			require.NoError(t, err)
			const seq, past = 32, 9
			g, err := Build(model+":decode", Options{Batch: 2, Seq: seq, Past: past, Composite: composite})
			require.NoError(t, err)
			states := g.States()
			require.Len(t, states, 2*c.NumHiddenLayers)
			require.Len(t, g.Updates, len(states))
			want := ir.Shape{2, ir.Dim(c.NumKeyValueHeads), seq, ir.Dim(c.HeadDim)}
			for i := range c.NumHiddenLayers {
				for j, which := range []string{"key", "value"} {
					sv := states[2*i+j]
					st := g.Node(sv)
					assert.Equal(t, fmt.Sprintf("past_key_values.%d.%s", i, which), st.Name)
					assert.Equal(t, want, st.Shape)
					var updates []ir.StateUpdate
					for _, u := range g.Updates {
						if u.State == sv {
							updates = append(updates, u)
						}
					}
					require.Len(t, updates, 1, st.Name)
					up := g.Node(updates[0].Value)
					require.Equal(t, ir.OpSliceUpdate, up.Op)
					assert.Equal(t, sv, up.Inputs[0])
					assert.Equal(t, 2, up.Axis)
					assert.Equal(t, int64(past), up.Offset)
					assert.Equal(t, ir.Shape{2, ir.Dim(c.NumKeyValueHeads), 1, ir.Dim(c.HeadDim)}, g.Node(up.Inputs[1]).Shape)
					// The updated cache is read back sliced to the positions
					// attended.
					var reads []*ir.Node
					for _, n := range g.Nodes {
						if slices.Contains(n.Inputs, updates[0].Value) {
							reads = append(reads, n)
						}
					}
					require.Len(t, reads, 1)
					assert.Equal(t, ir.OpSlice, reads[0].Op)
					assert.Equal(t, ir.Shape{2, ir.Dim(c.NumKeyValueHeads), past + 1, ir.Dim(c.HeadDim)}, reads[0].Shape)
				}
			}
			counts := g.OpCounts()
			if composite {
				assert.Equal(t, c.NumHiddenLayers, counts[ir.OpAttention])
			} else {
				// One query sees every key kept: no mask.
				assert.Zero(t, counts[ir.OpWhere])
			}
		}
	}
}

// TestSlidingWindowDecode checks that a decode step past the window slices
// the cache to the window instead of masking it.
func TestSlidingWindowDecode(t *testing.T) {
	g, err := Build("tiny-mistral:decode", Options{Seq: 40, Past: 30})
	require.NoError(t, err)
	found := 0
	for _, n := range g.Nodes {
		if n.Op == ir.OpSlice && g.Node(n.Inputs[0]).Op == ir.OpSliceUpdate {
			assert.Equal(t, int64(30-16+1), n.Starts[2])
			assert.Equal(t, int64(31), n.Ends[2])
			found++
		}
	}
	assert.Equal(t, 4, found, "two layers' keys and values")
	assert.Zero(t, g.OpCounts()[ir.OpWhere])

	// A prefill longer than the window masks with the window too, and
	// stays decomposed even when composite ops are asked for.
	g, err = Build("tiny-mistral:layer", Options{Seq: 20, Composite: true})
	require.NoError(t, err)
	counts := g.OpCounts()
	assert.Zero(t, counts[ir.OpAttention])
	assert.Equal(t, 1, counts[ir.OpAnd])
	assert.Equal(t, 1, counts[ir.OpSoftmax])
	g, err = Build("tiny-mistral:layer", Options{Seq: 16, Composite: true})
	require.NoError(t, err)
	assert.Equal(t, 1, g.OpCounts()[ir.OpAttention])
}

// TestDecomposed checks that the builders use no composite op but matmul,
// and that Composite makes them use the composite ops instead.
func TestDecomposed(t *testing.T) {
	composites := []ir.Op{ir.OpSoftmax, ir.OpRMSNorm, ir.OpLayerNorm, ir.OpAttention}
	tests := []struct {
		name string
		want map[ir.Op]int // composite op counts with Composite
	}{
		{"tiny-llama:model", map[ir.Op]int{ir.OpRMSNorm: 5, ir.OpAttention: 2}},
		{"tiny-llama:decode", map[ir.Op]int{ir.OpRMSNorm: 5, ir.OpAttention: 2}},
		{"tiny-qwen2:layer", map[ir.Op]int{ir.OpRMSNorm: 2, ir.OpAttention: 1}},
		{"tiny-gpt2:model", map[ir.Op]int{ir.OpLayerNorm: 5, ir.OpAttention: 2}},
		{"tiny-gpt2:layernorm", map[ir.Op]int{ir.OpLayerNorm: 1}},
		{"tiny-llama:rmsnorm", map[ir.Op]int{ir.OpRMSNorm: 1}},
		{"tiny-llama:softmax", map[ir.Op]int{ir.OpSoftmax: 1}},
		{"tiny-llama:attention", map[ir.Op]int{ir.OpAttention: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dt := range []ir.DType{ir.F32, ir.BF16} {
				g, err := Build(tt.name, Options{Seq: 8, DType: dt})
				require.NoError(t, err)
				counts := g.OpCounts()
				for _, op := range composites {
					assert.Zero(t, counts[op], "%s in the decomposed %s", op, dt)
				}
				g, err = Build(tt.name, Options{Seq: 8, DType: dt, Composite: true})
				require.NoError(t, err)
				counts = g.OpCounts()
				for _, op := range composites {
					assert.Equal(t, tt.want[op], counts[op], "%s in the composite %s", op, dt)
				}
				if len(tt.want) > 0 && tt.want[ir.OpSoftmax] == 0 {
					assert.Zero(t, counts[ir.OpExp], "a composite graph still holds a decomposed softmax")
				}
			}
		})
	}
}

// TestLowPrecision checks the casts of a bf16 model: norms and softmax run
// in f32, as transformers runs them, and logits come out in f32.
func TestLowPrecision(t *testing.T) {
	g, err := Build("tiny-llama:model", Options{Seq: 8, DType: ir.BF16})
	require.NoError(t, err)
	counts := g.OpCounts()
	// Per layer: two RMS norms and one softmax, each cast up and back;
	// the final norm; cos and sin; the logits.
	assert.Equal(t, 2*(2*2+2)+2+2+1, counts[ir.OpCast])
	for _, n := range g.Nodes {
		switch n.Op {
		case ir.OpRsqrt, ir.OpExp, ir.OpCos, ir.OpSin:
			assert.Equal(t, ir.F32, n.DType, "%s", n.Op)
		case ir.OpMatMul:
			assert.Equal(t, ir.BF16, n.DType)
		}
	}
	assertOutput(t, g, "logits", ir.F32, ir.Shape{1, 8, 97})
}

// TestWeightNames spot-checks the Hugging Face checkpoint names and
// shapes ([out, in] for nn.Linear, [in, out] for gpt2's Conv1D).
func TestWeightNames(t *testing.T) {
	tests := []struct {
		graph string
		want  map[string]ir.Shape
		not   []string
	}{
		{"llama-3-8b:model", map[string]ir.Shape{
			"model.embed_tokens.weight":                       {128256, 4096},
			"model.layers.0.input_layernorm.weight":           {4096},
			"model.layers.0.self_attn.q_proj.weight":          {4096, 4096},
			"model.layers.0.self_attn.k_proj.weight":          {1024, 4096},
			"model.layers.0.self_attn.v_proj.weight":          {1024, 4096},
			"model.layers.0.self_attn.o_proj.weight":          {4096, 4096},
			"model.layers.0.post_attention_layernorm.weight":  {4096},
			"model.layers.0.mlp.gate_proj.weight":             {14336, 4096},
			"model.layers.0.mlp.up_proj.weight":               {14336, 4096},
			"model.layers.0.mlp.down_proj.weight":             {4096, 14336},
			"model.layers.31.self_attn.q_proj.weight":         {4096, 4096},
			"model.layers.31.post_attention_layernorm.weight": {4096},
			"model.norm.weight":                               {4096},
			"lm_head.weight":                                  {128256, 4096},
		}, []string{"model.layers.32.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias"}},
		{"qwen2.5-0.5b:layer", map[string]ir.Shape{
			"model.layers.0.self_attn.q_proj.bias": {896},
			"model.layers.0.self_attn.k_proj.bias": {128},
			"model.layers.0.self_attn.v_proj.bias": {128},
		}, []string{"model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.up_proj.bias"}},
		{"qwen2.5-0.5b:model", map[string]ir.Shape{"model.embed_tokens.weight": {151936, 896}}, []string{"lm_head.weight"}},
		{"gpt2:model", map[string]ir.Shape{
			"transformer.wte.weight":             {50257, 768},
			"transformer.wpe.weight":             {1024, 768},
			"transformer.h.0.ln_1.weight":        {768},
			"transformer.h.0.ln_1.bias":          {768},
			"transformer.h.0.attn.c_attn.weight": {768, 2304},
			"transformer.h.0.attn.c_attn.bias":   {2304},
			"transformer.h.0.attn.c_proj.weight": {768, 768},
			"transformer.h.0.attn.c_proj.bias":   {768},
			"transformer.h.0.ln_2.weight":        {768},
			"transformer.h.0.mlp.c_fc.weight":    {768, 3072},
			"transformer.h.0.mlp.c_fc.bias":      {3072},
			"transformer.h.0.mlp.c_proj.weight":  {3072, 768},
			"transformer.h.11.mlp.c_proj.bias":   {768},
			"transformer.ln_f.weight":            {768},
			"transformer.ln_f.bias":              {768},
		}, []string{"lm_head.weight", "transformer.h.12.ln_1.weight"}},
		{"gpt2:block", map[string]ir.Shape{"transformer.h.0.attn.c_attn.weight": {768, 2304}}, nil},
		{"llama-3.2-1b:layer", map[string]ir.Shape{"model.layers.0.self_attn.k_proj.weight": {512, 2048}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.graph, func(t *testing.T) {
			g, err := Build(tt.graph, Options{Seq: 2})
			require.NoError(t, err)
			weights := map[string]ir.Shape{}
			for _, v := range g.Weights() {
				weights[g.Node(v).Name] = g.Node(v).Shape
			}
			for name, shape := range tt.want {
				if assert.Contains(t, weights, name) {
					assert.Equal(t, shape, weights[name], name)
				}
			}
			for _, name := range tt.not {
				assert.NotContains(t, weights, name)
			}
		})
	}
}

// TestTiedHead checks that a tied LM head reads the embedding weight
// transposed.
func TestTiedHead(t *testing.T) {
	for _, name := range []string{"tiny-qwen2:model", "tiny-gpt2:model"} {
		g, err := Build(name, Options{Seq: 3})
		require.NoError(t, err)
		embed := g.Weights()[0]
		users := 0
		for _, n := range g.Nodes {
			if slices.Contains(n.Inputs, embed) {
				users++
			}
		}
		assert.Equal(t, 2, users, "%s: the gather and the head's transpose", name)
	}
}

func TestLlama3InvFreq(t *testing.T) {
	s := &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	f := llama3InvFreq(500000, 128, s)
	require.Len(t, f, 64)
	// High frequencies (wavelength under 8192/4) are kept, low ones (over
	// 8192) divided by the factor, and the ones between fall in between.
	assert.Equal(t, 1.0, f[0])
	for i, v := range f {
		plain := 1 / math.Pow(500000, float64(2*i)/128)
		wave := 2 * math.Pi / plain
		switch {
		case wave < 2048:
			assert.InDelta(t, plain, v, plain*1e-6, "%d", i)
		case wave > 8192:
			assert.InDelta(t, plain/8, v, plain*1e-6, "%d", i)
		default:
			assert.True(t, v <= plain*(1+1e-6) && v >= plain/8*(1-1e-6), "%d", i)
		}
		if i > 0 {
			assert.Less(t, v, f[i-1])
		}
	}
	g, err := Build("llama-3.2-1b:rotary", Options{Seq: 4})
	require.NoError(t, err)
	consts := 0
	for _, n := range g.Nodes {
		if n.Op == ir.OpConst && len(n.Data) == 32 {
			consts++
		}
	}
	assert.Equal(t, 1, consts, "llama3 frequencies are one constant")
}
