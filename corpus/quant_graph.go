package corpus

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// A quantized weight is declared as the checkpoint's own tensors, named
// after the float weight's tensor T (an nn.Linear's "P.weight", gpt-oss's
// "…experts.gate_up_proj", a stacked expert weight's name), and read
// through a dequant:
//
//   - mxfp4: an nn.Linear's T_packed u8 [N, K/2] (viewed as the dequant's
//     [N, K/32, 16]) and T_scale u8 [N, K/32], as compressed-tensors'
//     mxfp4-pack-quantized names them; gpt-oss's experts' T_blocks u8
//     [E, N, K/32, 16] and T_scales u8 [E, N, K/32].
//   - fp8: T itself, u8 [.., N, K] (F8_E4M3 in the file), and its scales
//     f32 T_scale_inv (transformers' fp8) or T_scale (compressed-tensors).
//   - awq, gptq: B.qweight, B.qzeros and f16 B.scales for B, T without
//     ".weight" (AutoAWQ's and AutoGPTQ's names); gptq's B.g_idx is
//     checked on load, not declared.
//
// N is the weight's outputs and K its inputs. mxfp4's and fp8's dequants
// give [.., N, K], the layout of an nn.Linear's weight, and are
// transposed as the float weight is; awq's and gptq's give [.., K, N],
// the layout the matmuls read.

// linearWeight is one quantizable weight of a decoder layer: the module
// that holds it (what quantization_config's exclusions name), its
// outputs N (those of one part, for a stacked weight: parts of N rows
// each) and its inputs K.
type linearWeight struct {
	module string
	n, k   int
	parts  int
	// experts says that the module holds a mixture's experts.
	experts bool
}

// layerWeights lists the quantizable weights of decoder layer i: the
// attention's and the MLP's projections, or the experts' stacked
// weights; never a router, which stays in the model's dtype.
func (c *Config) layerWeights(i int) []linearWeight {
	pre := fmt.Sprintf(llamaLayer, i)
	H, hq, hkv, hd := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	a := pre + ".self_attn."
	out := []linearWeight{
		{module: a + "q_proj", n: hq * hd, k: H, parts: 1}, {module: a + "k_proj", n: hkv * hd, k: H, parts: 1},
		{module: a + "v_proj", n: hkv * hd, k: H, parts: 1}, {module: a + "o_proj", n: H, k: hq * hd, parts: 1},
	}
	m := c.MoE
	switch {
	case m == nil:
		I := c.IntermediateSize
		out = append(out, linearWeight{module: pre + ".mlp.gate_proj", n: I, k: H, parts: 1},
			linearWeight{module: pre + ".mlp.up_proj", n: I, k: H, parts: 1}, linearWeight{module: pre + ".mlp.down_proj", n: H, k: I, parts: 1})
	case c.ModelType == GPTOSS:
		out = append(out, linearWeight{module: pre + ".mlp.experts", n: 2 * m.IntermediateSize, k: H, parts: 1, experts: true},
			linearWeight{module: pre + ".mlp.experts", n: H, k: m.IntermediateSize, parts: 1, experts: true})
	default:
		expert, gate, up, down := c.expertNames(i)
		e0 := fmt.Sprintf(expert, 0)
		out = append(out, linearWeight{module: e0 + "." + gate, n: m.IntermediateSize, k: H, parts: 2, experts: true},
			linearWeight{module: e0 + "." + up, n: m.IntermediateSize, k: H, parts: 2, experts: true},
			linearWeight{module: e0 + "." + down, n: H, k: m.IntermediateSize, parts: 1, experts: true})
	}
	return out
}

// expertNames are the per-expert modules of Mixtral's and Qwen3-MoE's
// layer i: a format of the expert's index, and the gate, up and down
// projections' names.
func (c *Config) expertNames(i int) (expert, gate, up, down string) {
	if c.ModelType == Mixtral {
		return fmt.Sprintf(llamaLayer, i) + ".block_sparse_moe.experts.%d", "w1", "w3", "w2"
	}
	return fmt.Sprintf(llamaLayer, i) + ".mlp.experts.%d", "gate_proj", "up_proj", "down_proj"
}

// checkQuantization refuses a quantization c's weights cannot take,
// naming the key or the weight at fault: a format for gpt2's Conv1D
// weights, mxfp4's experts on a model without gpt-oss's, and a weight
// whose extents the format's packing or the grouping do not divide.
func (c *Config) checkQuantization(q *Quantization) error {
	if q == nil {
		return nil
	}
	what := fmt.Sprintf("weights %s", q.Format)
	if q.Method != "" {
		what = fmt.Sprintf("%q %q", "quantization_config.quant_method", q.Method)
	}
	switch {
	case c.ModelType == GPT2:
		return fmt.Errorf("%s: gpt2's Conv1D weights are not quantized (lumsearch quantizes the llama family's nn.Linear weights)", what)
	case q.Method == MethodMXFP4 && c.ModelType != GPTOSS:
		return fmt.Errorf("%s quantizes gpt_oss's experts, and model_type %q has none", what, c.ModelType)
	}
	key := func(k string) string {
		if q.Method == "" {
			return "the format"
		}
		return fmt.Sprintf("%q", "quantization_config."+k)
	}
	for i := range c.NumHiddenLayers {
		for _, w := range c.layerWeights(i) {
			if !q.quantizes(w.module, w.experts) {
				continue
			}
			if w.experts && q.Acts != nil {
				return fmt.Errorf("%s: %s: the activations of experts quantized to e4m3 (W8A8) are not implemented (the experts kernels read fp8 weights alone)", what, w.module)
			}
			group, groupN := q.groups(w.n, w.k)
			if a := q.Acts; a != nil && !a.Static && a.Group > 0 && w.k%a.Group != 0 {
				return fmt.Errorf("%s: %s: %d inputs are not a whole number of the activations' scale groups of %d (%s)", what, w.module, w.k, a.Group, key("weight_block_size"))
			}
			var bad string
			switch q.Format {
			case quant.MXFP4:
				if w.k%32 != 0 {
					bad = fmt.Sprintf("%d inputs are not a whole number of mxfp4's blocks of 32", w.k)
				}
			case quant.FP8:
				if w.parts > 1 && w.n%groupN != 0 {
					bad = fmt.Sprintf("%d outputs of each expert's part are not a whole number of %s's scale blocks of %d rows (the parts are stacked)", w.n, key("weight_block_size"), groupN)
				}
			case quant.AWQ, quant.GPTQ:
				switch {
				case w.k%group != 0:
					bad = fmt.Sprintf("%d inputs are not a whole number of %s's groups of %d", w.k, key("group_size"), group)
				case w.n%8 != 0:
					bad = fmt.Sprintf("%d outputs are not a whole number of %s's words of 8", w.n, q.Format)
				case q.Format == quant.GPTQ && w.k%8 != 0:
					bad = fmt.Sprintf("%d inputs are not a whole number of gptq's words of 8", w.k)
				}
			}
			if bad != "" {
				return fmt.Errorf("%s: %s: %s", what, w.module, bad)
			}
		}
	}
	return nil
}

// weightQuantization is the quantization a build gives c's weights:
// none with Options.PlainWeights; the config's without Options.Weights or
// with its format; else Options.Weights' format, each weight grouped by
// its shape (Quantization.Auto), the config's exclusions kept.
func weightQuantization(c *Config, opt Options) (*Quantization, error) {
	q := c.Quantization
	switch {
	case opt.PlainWeights:
		return nil, nil
	case opt.Weights == quant.None, q != nil && opt.Weights == q.Format:
		return q, nil
	}
	nq := &Quantization{Format: opt.Weights, Auto: true}
	if q != nil {
		nq.Keep = slices.Clone(q.Keep)
		nq.Method = "" // the exclusions' style follows the config's method
		if q.ignoreStyle() {
			nq.Keep = nil
			for _, k := range q.Keep {
				if strings.HasPrefix(k, "re:") {
					nq.Keep = append(nq.Keep, k[3:])
				} else {
					nq.Keep = append(nq.Keep, "^"+regexpQuote(k)+"$")
				}
			}
		}
	}
	if err := c.checkQuantization(nq); err != nil {
		return nil, err
	}
	return nq, nil
}

// regexpQuote escapes a module name for a modules_to_not_convert pattern.
func regexpQuote(s string) string { return strings.ReplaceAll(s, ".", `\.`) }

// dequantized declares the checkpoint tensors of the quantized weight
// whose float tensor is named name (outputs n, of one part when parts
// stack, inputs k, leading axes lead) and returns its values in the
// model's dtype as [lead.., k, parts × n], the [in, out] layout the
// matmuls and the experts op read.
func (e *emitter) dequantized(name string, lead []int, n, k, parts int) ir.Value {
	return e.dequantizedAs(name, lead, n, k, parts, e.dt)
}

// dequantizedAs is dequantized with the values in dtype dt.
func (e *emitter) dequantizedAs(name string, lead []int, n, k, parts int, dt ir.DType) ir.Value {
	q := e.q
	group, groupN := q.groups(n, k)
	N := n * parts
	dims := func(tail ...int) []ir.Dim {
		out := make([]ir.Dim, 0, len(lead)+len(tail))
		for _, d := range append(slices.Clone(lead), tail...) {
			out = append(out, ir.Dim(d))
		}
		return out
	}
	switch q.Format {
	case quant.MXFP4:
		var blocks, scales ir.Value
		if strings.HasSuffix(name, ".weight") {
			blocks = e.Reshape(e.Weight(name+"_packed", ir.U8, dims(N, k/2)...), dims(N, k/32, 16)...)
			scales = e.Weight(name+"_scale", ir.U8, dims(N, k/32)...)
		} else {
			blocks = e.Weight(name+"_blocks", ir.U8, dims(N, k/32, 16)...)
			scales = e.Weight(name+"_scales", ir.U8, dims(N, k/32)...)
		}
		return e.swapLast(e.Dequant(quant.MXFP4, dt, 32, 0, blocks, scales))
	case quant.FP8:
		codes := e.Weight(name, ir.U8, dims(N, k)...)
		scales := e.Weight(name+q.fp8ScaleSuffix(groupN), ir.F32, dims(ceilDiv(N, groupN), ceilDiv(k, group))...)
		return e.swapLast(e.Dequant(quant.FP8, dt, int64(group), int64(groupN), codes, scales))
	}
	base := strings.TrimSuffix(name, ".weight")
	qshape := dims(k, N/8)
	if q.Format == quant.GPTQ {
		qshape = dims(k/8, N)
	}
	qweight := e.Weight(base+".qweight", ir.I32, qshape...)
	qzeros := e.Weight(base+".qzeros", ir.I32, dims(k/group, N/8)...)
	scales := e.Weight(base+".scales", ir.F16, dims(k/group, N)...)
	return e.Dequant(q.Format, dt, int64(group), 0, qweight, scales, qzeros)
}

// swapLast exchanges x's last two axes.
func (e *emitter) swapLast(x ir.Value) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	r := len(e.Shape(x))
	return e.Transpose(x, r-2, r-1)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// quantizedActs is x quantized to e4m3 as a W8A8 checkpoint's projection
// prefix quantizes its in inputs (Quantization.Acts), in f32: each row's
// values (or each group of a row's) divided by a scale, rounded to e4m3
// (saturating at 448) and multiplied back. The scale is the checkpoint's
// input_scale, or the group's largest magnitude over 448 (at least
// 2^-24/448, so that a row of zeros stays zeros), as vLLM's and
// transformers' per-token quantizers compute it. The matmul that reads it
// runs in f32 over the weight's f32 dequantization: the e4m3 products an
// fp8 tensor core would sum, exactly.
func (e *emitter) quantizedActs(x ir.Value, prefix string, in int) ir.Value {
	a := e.q.Acts
	xs := e.upcast(x)
	shape := e.Shape(xs)
	if a.Static {
		s := e.Weight(prefix+".input_scale", ir.F32, 1)
		return e.Mul(e.RoundE4M3(e.Div(xs, s)), s)
	}
	g := a.Group
	if g <= 0 {
		g = in // checkQuantization refused a group that does not divide in
	}
	rows := shape.NumElements() / int64(in)
	r := e.Reshape(xs, ir.Dim(rows), ir.Dim(in/g), ir.Dim(g))
	amax := e.Max(e.ReduceMax(e.Abs(r), -1), e.Scalar(ir.F32, 0x1p-24))
	s := e.Div(amax, e.Scalar(ir.F32, quant.MaxE4M3))
	return e.Reshape(e.Mul(e.RoundE4M3(e.Div(r, s)), s), shape...)
}
