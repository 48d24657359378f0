package corpus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// weightBytes is the bytes of g's weight leaves, each at its dtype's size:
// packed codes, scales and zero points count as the checkpoint stores
// them.
func weightBytes(g *ir.Graph) int64 {
	var n int64
	for _, v := range g.Weights() {
		w := g.Node(v)
		n += w.Shape.NumElements() * int64(w.DType.Size())
	}
	return n
}

// TestQuantizedWeightBytes checks the weight bytes of whole quantized
// models, summed over the built graph's leaves (a decode step declares
// every weight once; building one takes no weight memory), against the
// public checkpoints' sizes, within 1%.
func TestQuantizedWeightBytes(t *testing.T) {
	const GiB = 1 << 30
	tests := []struct {
		model string
		opt   Options
		// public is the checkpoint's size in bytes, and source where it
		// is published.
		public float64
		source string
	}{
		// The model cards: "the gpt-oss-120b model ... 60.8 GiB" and
		// "gpt-oss-20b ... 12.8 GiB" (MXFP4 experts, the rest bf16).
		{"gpt-oss-120b", Options{DType: ir.BF16}, 60.8 * GiB, "openai/gpt-oss-120b"},
		{"gpt-oss-20b", Options{DType: ir.BF16}, 12.8 * GiB, "openai/gpt-oss-20b"},
		// A compressed-tensors FP8 Llama 3.1 8B (per-channel scales,
		// embeddings and LM head bf16): its card gives "Quantized Model:
		// ~8.5GB", 8.5 GiB (JongYeop/Llama-3.1-8B-Instruct-FP8-W8A8-Dynamic-
		// Per-Token; Llama 3's shapes are 3.1's). Its activations' scales
		// are computed at run time, so the file holds the weights alone.
		{"llama-3-8b", Options{DType: ir.BF16, Weights: quant.FP8}, 8.5 * GiB, "an FP8 Llama 3.1 8B"},
		// AWQ INT4 of Llama 3.1 8B in groups of 128, embeddings and LM
		// head f16 (hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4):
		// 5.73 GB on the Hub's file listing.
		{"llama-3-8b", Options{DType: ir.F16, Weights: quant.AWQ}, 5.73e9, "hugging-quants' AWQ Llama 3.1 8B"},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			tt.opt.Seq = 8
			g, err := Build(tt.model+":decode", tt.opt)
			require.NoError(t, err)
			got := float64(weightBytes(g))
			t.Logf("%s (%s): %.4g GiB of weights (%.0f bytes); the checkpoint %.4g GiB", tt.model, tt.source, got/GiB, got, tt.public/GiB)
			assert.InEpsilon(t, tt.public, got, 0.01)
		})
	}
	// The same models with plain bf16 weights are their parameters twice.
	for _, m := range []string{"gpt-oss-120b", "llama-3-8b"} {
		g, err := Build(m+":decode", Options{DType: ir.BF16, Seq: 8, PlainWeights: true})
		require.NoError(t, err)
		assert.Equal(t, 2*g.NumParams(), weightBytes(g), m)
	}
}
