package corpus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// A checkpoint of Mixtral or Qwen3-MoE stores each expert's projections
// as tensors of their own (model.layers.0.mlp.experts.5.gate_proj.weight,
// [size, hidden]); the experts op reads them stacked, [experts, hidden,
// 2 × size] for the gate and up projections side by side and [experts,
// size, hidden] for the down projection. A graph declares the stacked
// tensors as weights of their own, so that the compiler sees two leaves a
// layer rather than thousands of tensors and the views that would stack
// them; the weight's name says how a checkpoint's tensors make it: the
// per-expert name with the expert's index written "*" and the projections
// joined by "+" (model.layers.0.mlp.experts.*.gate_proj+up_proj.weight).
// Expert e's part p, an nn.Linear weight [out_p, in], is transposed into
// rows [e, 0..in) and the columns after the earlier parts'.

// Stacked is a stacked expert weight's recipe, read from its name.
type Stacked struct {
	prefix, suffix string   // around the expert's index
	parts          []string // the projections, in column order
}

// ParseStacked reads a weight name as a stacked expert weight's.
func ParseStacked(name string) (Stacked, bool) {
	before, after, ok := strings.Cut(name, ".*.")
	if !ok || strings.Contains(after, "*") {
		return Stacked{}, false
	}
	parts, suffix, ok := strings.Cut(after, ".")
	if !ok || parts == "" {
		return Stacked{}, false
	}
	return Stacked{prefix: before + ".", suffix: "." + suffix, parts: strings.Split(parts, "+")}, true
}

// stackedName is the name of the weight stacking the per-expert tensors
// named expert (a format with the expert's index) + "." + part + ".weight".
func stackedName(expert string, parts ...string) string {
	return strings.Replace(expert, "%d", "*", 1) + "." + strings.Join(parts, "+") + ".weight"
}

// Names are the checkpoint's tensors of expert e, one per part.
func (s Stacked) Names(e int) []string {
	out := make([]string, len(s.parts))
	for i, p := range s.parts {
		out[i] = s.prefix + strconv.Itoa(e) + "." + p + s.suffix
	}
	return out
}

// Assemble makes the stacked weight n (shape [experts, in, Σ out_p], its
// dtype) from the checkpoint's tensors, which tensor returns by name as
// float32 values of a given shape [out_p, in]: out_p is the stacked
// columns split evenly among the parts.
func (s Stacked) Assemble(n *ir.Node, tensor func(name string, shape ir.Shape) ([]float32, error)) (*ir.Tensor, error) {
	if len(n.Shape) != 3 || int(n.Shape[2])%len(s.parts) != 0 {
		return nil, fmt.Errorf("stacked weight %s: shape %v is not [experts, in, %d parts of columns]", n.Name, n.Shape, len(s.parts))
	}
	E, in, cols := int(n.Shape[0]), int(n.Shape[1]), int(n.Shape[2])
	out := cols / len(s.parts)
	vals := make([]float32, E*in*cols)
	for e := range E {
		for p, name := range s.Names(e) {
			src, err := tensor(name, ir.Shape{ir.Dim(out), ir.Dim(in)})
			if err != nil {
				return nil, fmt.Errorf("stacked weight %s: %w", n.Name, err)
			}
			for o := range out {
				for k := range in {
					vals[(e*in+k)*cols+p*out+o] = src[o*in+k]
				}
			}
		}
	}
	return ir.TensorOfFloat32(n.DType, n.Shape, vals)
}
