package corpus

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// mlp is the MLP of the decoder layer named layerPrefix over x (any rank,
// hidden last): the llama family's gated MLP, or the config's mixture of
// experts.
func (e *emitter) mlp(x ir.Value, layerPrefix string) ir.Value {
	if e.cfg.MoE == nil {
		return e.gatedMLP(x, layerPrefix+".mlp")
	}
	return e.moe(x, layerPrefix)
}

// moe is the mixture-of-experts block of the layer named layerPrefix over
// x [..., hidden]: the tokens flattened to rows, the router's logits as
// the family computes them (an nn.Linear in the model's dtype, with
// gpt-oss's bias) cast to f32, ir.Route's top-k weights and ir.Experts,
// reshaped back. Mixtral's and Qwen3-MoE's per-expert weights are stacked
// into the experts op's [experts, hidden, 2 × size] gate-up and
// [experts, size, hidden] down matrices by transposes, concats and
// reshapes of the weights alone, with zero biases.
func (e *emitter) moe(x ir.Value, layerPrefix string) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	c, m := e.cfg, e.cfg.MoE
	xs := e.Shape(x)
	H := c.HiddenSize
	rows := x
	if len(xs) != 2 {
		rows = e.Reshape(x, ir.Dim(xs[:len(xs)-1].NumElements()), ir.Dim(H))
	}
	var router string
	var gateUp, down ir.Value
	gateUpBias, downBias := ir.NoValue, ir.NoValue
	route, act, limit := ir.GatingChosen, ir.GatingSwiGLU, 0.0
	if !m.NormTopKProb {
		route = ir.GatingAll
	}
	E, I := m.NumExperts, m.IntermediateSize
	switch c.ModelType {
	case GPTOSS:
		pre := layerPrefix + ".mlp"
		router = pre + ".router"
		if e.q.quantizes(pre+".experts", true) {
			// The checkpoint's [E, 2I, H] and [E, H, I], transposed as
			// transformers does after decoding them.
			gateUp = e.dequantized(pre+".experts.gate_up_proj", []int{E}, 2*I, H, 1)
			down = e.dequantized(pre+".experts.down_proj", []int{E}, H, I, 1)
		} else {
			gateUp = e.weight(pre+".experts.gate_up_proj", E, H, 2*I)
			down = e.weight(pre+".experts.down_proj", E, I, H)
		}
		gateUpBias = e.weight(pre+".experts.gate_up_proj_bias", E, 2*I)
		downBias = e.weight(pre+".experts.down_proj_bias", E, H)
		act, limit = ir.GatingClampedSwiGLU, m.SwiGLULimit
	case Mixtral:
		pre := layerPrefix + ".block_sparse_moe"
		router = pre + ".gate"
		gateUp, down = e.stackExperts(pre+".experts.%d", "w1", "w3", "w2")
	default:
		pre := layerPrefix + ".mlp"
		router = pre + ".gate"
		gateUp, down = e.stackExperts(pre+".experts.%d", "gate_proj", "up_proj", "down_proj")
	}
	if gateUpBias == ir.NoValue {
		gateUpBias = e.Const(e.dt, ir.Shape{ir.Dim(E), ir.Dim(2 * I)}, 0)
		downBias = e.Const(e.dt, ir.Shape{ir.Dim(E), ir.Dim(H)}, 0)
	}
	logits := e.floatLinear(rows, router, H, E, c.ModelType == GPTOSS)
	if e.dt != ir.F32 {
		logits = e.Cast(logits, ir.F32)
	}
	weights := e.Route(logits, m.NumExpertsPerTok, route)
	y := e.Experts(rows, weights, gateUp, down, gateUpBias, downBias, m.NumExpertsPerTok, act, limit)
	if len(xs) != 2 {
		y = e.Reshape(y, xs...)
	}
	return y
}

// stackExperts declares the experts' nn.Linear weights named expert (a
// format with the expert's index) + "." + gate, up or down + ".weight" as
// the two stacked weights the experts op reads (stacked.go): gate and up
// [size, hidden] transposed side by side into [experts, hidden, 2 × size]
// (gate's columns first, as ir.GatingSwiGLU reads them), down [hidden,
// size] transposed into [experts, size, hidden]. Quantized, the stacked
// tensors keep the checkpoint's layout (each part's rows after the
// earlier parts') and their dequants are transposed.
func (e *emitter) stackExperts(expert, gate, up, down string) (gateUp, downs ir.Value) {
	c, m := e.cfg, e.cfg.MoE
	E, H, I := m.NumExperts, c.HiddenSize, m.IntermediateSize
	e0 := fmt.Sprintf(expert, 0) + "."
	if e.q.quantizes(e0+gate, true) {
		gateUp = e.dequantized(stackedName(expert, gate, up), []int{E}, I, H, 2)
	} else {
		gateUp = e.weight(stackedName(expert, gate, up), E, H, 2*I)
	}
	if e.q.quantizes(e0+down, true) {
		downs = e.dequantized(stackedName(expert, down), []int{E}, H, I, 1)
	} else {
		downs = e.weight(stackedName(expert, down), E, I, H)
	}
	return gateUp, downs
}
