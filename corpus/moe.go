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
		gateUp = e.weight(pre+".experts.gate_up_proj", E, H, 2*I)
		gateUpBias = e.weight(pre+".experts.gate_up_proj_bias", E, 2*I)
		down = e.weight(pre+".experts.down_proj", E, I, H)
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
	logits := e.linear(rows, router, H, E, c.ModelType == GPTOSS)
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

// stackExperts stacks the experts' nn.Linear weights named expert
// (a format with the expert's index) + "." + gate, up or down + ".weight":
// gate and up [size, hidden] transposed and concatenated into
// [hidden, 2 × size] (gate's columns first, as ir.GatingSwiGLU reads
// them), down [hidden, size] transposed to [size, hidden], each given a
// leading expert axis and concatenated along it.
func (e *emitter) stackExperts(expert, gate, up, down string) (gateUp, downs ir.Value) {
	c, m := e.cfg, e.cfg.MoE
	H, I := c.HiddenSize, m.IntermediateSize
	gus := make([]ir.Value, m.NumExperts)
	dns := make([]ir.Value, m.NumExperts)
	for j := range m.NumExperts {
		pre := fmt.Sprintf(expert, j) + "."
		g := e.Transpose(e.weight(pre+gate+".weight", I, H), 0, 1)
		u := e.Transpose(e.weight(pre+up+".weight", I, H), 0, 1)
		gus[j] = e.Reshape(e.Concat(1, g, u), 1, ir.Dim(H), ir.Dim(2*I))
		d := e.Transpose(e.weight(pre+down+".weight", H, I), 0, 1)
		dns[j] = e.Reshape(d, 1, ir.Dim(I), ir.Dim(H))
	}
	return e.stack(gus), e.stack(dns)
}

// stackArity is the most pieces one concat of stack joins: the lowering
// gives a concat of up to four operands a kernel (rules.LowerRewrites).
const stackArity = 4

// stack joins pieces along axis 0 by a tree of concats of at most
// stackArity operands, so that every concat has a kernel (at load time:
// the pieces are weights).
func (e *emitter) stack(pieces []ir.Value) ir.Value {
	for len(pieces) > 1 {
		var next []ir.Value
		for i := 0; i < len(pieces); i += stackArity {
			group := pieces[i:min(i+stackArity, len(pieces))]
			if len(group) == 1 {
				next = append(next, group[0])
			} else {
				next = append(next, e.Concat(0, group...))
			}
		}
		pieces = next
	}
	return pieces[0]
}
