package corpus

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// Ranges of RandomWeights: the initializer_range of the Hugging Face
// configs for matrices and embeddings, and small deviations from the
// identity for norm scales.
const (
	weightStd     = 0.02 // linear weights and embeddings: normal, std 0.02
	biasStd       = 0.02 // biases: normal, std 0.02
	normScaleSpan = 0.1  // norm scales: uniform in [1-0.1, 1+0.1]
	// Attention sinks: normal, std 1. Trained sinks are logits of the
	// scores' size; transformers' initializer_range would leave a sink
	// near 0, the weight of one more key of score 0.
	sinkStd = 1.0
)

// RandomWeights draws a seeded tensor for every weight of g, keyed by the
// weight's name: norm scales (1-D weights whose name holds "norm" or
// "ln_", Qwen3's q_norm and k_norm included) uniform in 1 ± 0.1,
// attention sinks (".sinks") normal with std 1, biases (".bias", and
// gpt-oss's experts' "_bias") and every other weight (routers and experts
// too) normal with std 0.02, clipped at three standard deviations. Each
// weight's values depend only on the seed, its name and its shape, so a
// layer's weights are the same in the layer graph and in the whole model.
// Tensors keep float32 storage (ir.TensorOfFloat32), rounded to the
// weight's dtype; none is all zeros. A W8A8 checkpoint's activation
// scales (".input_scale") are uniform in [1/448, 8/448]. A whole 8B model takes 32 GB this way.
// A quantized weight's codes, scales and zero points (the operands of a
// dequant) are drawn together: its float values as any other weight's,
// keyed by the codes' name, packed into the format as its checkpoint
// would hold them.
func RandomWeights(g *ir.Graph, seed uint64) (map[string]*ir.Tensor, error) {
	if g == nil {
		return nil, fmt.Errorf("random weights: no graph")
	}
	out, err := RandomPackedWeights(g, seed)
	if err != nil {
		return nil, err
	}
	for _, v := range g.Weights() {
		n := g.Node(v)
		if out[n.Name] != nil {
			continue
		}
		if !n.DType.IsFloat() {
			return nil, fmt.Errorf("random weights: weight %q is %s; want a float type", n.Name, n.DType)
		}
		h := fnv.New64a()
		h.Write([]byte(n.Name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		vals := make([]float32, n.Shape.NumElements())
		switch {
		case isNormScale(n):
			for i := range vals {
				vals[i] = float32(1 + normScaleSpan*(2*rng.Float64()-1))
			}
		case strings.HasSuffix(n.Name, ".sinks"):
			fillNormal(rng, vals, sinkStd)
		case strings.HasSuffix(n.Name, ".bias"), strings.HasSuffix(n.Name, "_bias"):
			fillNormal(rng, vals, biasStd)
		case strings.HasSuffix(n.Name, ".input_scale"):
			// A W8A8 checkpoint's static activation scale: what maps
			// an activation of magnitude 1 to 8 to e4m3's 448.
			for i := range vals {
				vals[i] = float32((1 + 7*rng.Float64()) / quant.MaxE4M3)
			}
		default:
			fillNormal(rng, vals, weightStd)
		}
		t, err := ir.TensorOfFloat32(n.DType, n.Shape, vals)
		if err != nil {
			return nil, fmt.Errorf("random weights: weight %q: %w", n.Name, err)
		}
		if len(vals) > 0 && allZero(t.F32) {
			t.F32[0] = float32(n.DType.Round(std(n)))
		}
		out[n.Name] = t
	}
	return out, nil
}

// isNormScale reports whether a weight is a norm's scale.
func isNormScale(n *ir.Node) bool {
	return len(n.Shape) == 1 && strings.HasSuffix(n.Name, ".weight") &&
		(strings.Contains(n.Name, "norm") || strings.Contains(n.Name, "ln_"))
}

// std is a weight's typical magnitude, for the all-zero fallback.
func std(n *ir.Node) float64 {
	if isNormScale(n) || strings.HasSuffix(n.Name, ".sinks") {
		return 1
	}
	return weightStd
}

// fillNormal fills vals with normal values of standard deviation s,
// redrawing any beyond three deviations.
func fillNormal(rng *rand.Rand, vals []float32, s float64) {
	for i := range vals {
		z := rng.NormFloat64()
		for z > 3 || z < -3 {
			z = rng.NormFloat64()
		}
		vals[i] = float32(z * s)
	}
}

func allZero(vals []float32) bool {
	for _, v := range vals {
		if v != 0 {
			return false
		}
	}
	return true
}

// RandomPackedWeights draws, as RandomWeights does, only the packed
// weights of g: the codes, scales and zero points its dequants read, the
// bytes a checkpoint of each weight's format holds. Feeds that draw the
// other weights their own way use it so that a quantized weight's
// scales are a checkpoint's, not random bytes (an e8m0 scale of 0xFF is
// NaN).
func RandomPackedWeights(g *ir.Graph, seed uint64) (map[string]*ir.Tensor, error) {
	out := map[string]*ir.Tensor{}
	for _, p := range packedWeights(g) {
		ts, err := randomPacked(g, p, seed)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, ts)
	}
	return out, nil
}
