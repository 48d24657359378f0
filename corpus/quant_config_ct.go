package corpus

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/quant"
)

// compressedTensors reads llm-compressor's quantization_config: one
// config group that targets every Linear with float 8-bit weights
// (format float-quantized, quantization_status compressed), scaled per
// tensor, per output channel or per block (weights.strategy), the modules
// in ignore left in the model's dtype, and its input activations quantized
// to e4m3 where input_activations says so (W8A8). A quantized KV cache, sparsity or transforms are refused
// as unknown keys, unless off.
func (q *fieldParser) compressedTensors() *Quantization {
	q.fail(checkKeys(q.f, q.prefix, []string{"quant_method", "format", "config_groups", "ignore", "quantization_status"},
		// How much smaller the checkpoint is, and which library wrote it.
		[]string{"global_compression_ratio", "version"}))
	if s, ok := q.str("quantization_status"); ok && s != "compressed" {
		q.fail(fmt.Errorf("%q %q is not supported (want compressed: the weights stored in their quantized format)", q.prefix+"quantization_status", s))
	}
	format, _ := q.str("format")
	groups := q.object("config_groups")
	if q.err != nil {
		return nil
	}
	if groups == nil || len(groups.f) != 1 {
		n := 0
		if groups != nil {
			n = len(groups.f)
		}
		q.fail(fmt.Errorf("%q has %d groups; lumsearch reads one, which targets every Linear", q.prefix+"config_groups", n))
		return nil
	}
	name := mapKeys(groups.f)[0]
	g := groups.object(name)
	if g == nil {
		q.fail(groups.err)
		if q.err == nil {
			q.fail(fmt.Errorf("%q is null", groups.prefix+name))
		}
		return nil
	}
	g.fail(checkKeys(g.f, g.prefix, []string{"targets", "weights", "input_activations", "output_activations", "format"}, nil))
	if f, ok := g.str("format"); ok {
		format = f
	}
	if t := g.strings("targets"); g.err == nil && !slices.Equal(t, []string{"Linear"}) {
		g.fail(fmt.Errorf("%q %q is not supported (want [\"Linear\"])", g.prefix+"targets", t))
	}
	if raw, ok := g.lookup("output_activations"); ok && g.err == nil && !isOff("", raw) {
		g.fail(fmt.Errorf("%q %s is not supported (outputs quantized)", g.prefix+"output_activations", shortJSON(raw)))
	}
	var acts *ActQuant
	if raw, ok := g.lookup("input_activations"); ok && g.err == nil && !isOff("", raw) {
		ap := g.object("input_activations")
		acts = ap.ctActivations()
		if ap != nil {
			g.fail(ap.err)
		}
	}
	if g.err == nil && format != "float-quantized" {
		g.fail(fmt.Errorf("%q %q is not supported (want float-quantized: e4m3 weights)", q.prefix+"format", format))
	}
	w := g.object("weights")
	if g.err == nil && w == nil {
		g.fail(fmt.Errorf("missing %q", g.prefix+"weights"))
	}
	q.fail(g.err)
	if q.err != nil {
		return nil
	}
	qz := w.ctWeights()
	q.fail(w.err)
	if q.err != nil {
		return nil
	}
	qz.Keep = q.strings("ignore")
	qz.Acts = acts
	return qz
}

// ctActivations reads a compressed-tensors group's input_activations
// (W8A8): float 8-bit, symmetric, scaled per token at run time (strategy
// token, dynamic), per group of group_size inputs of a token (strategy
// group, dynamic), or by the checkpoint's input_scale (strategy tensor,
// static).
func (a *fieldParser) ctActivations() *ActQuant {
	if a == nil {
		return nil
	}
	a.fail(checkKeys(a.f, a.prefix, []string{"num_bits", "type", "symmetric", "strategy", "dynamic", "group_size", "block_structure", "actorder"},
		[]string{"observer", "observer_kwargs"}))
	a.ctFloat8("activations")
	strategy, _ := a.str("strategy")
	dynamic := a.boolOr("dynamic", false)
	var acts *ActQuant
	switch {
	case strategy == "token" && dynamic:
		acts = &ActQuant{}
	case strategy == "group" && dynamic:
		g, ok := a.integer("group_size")
		if !ok || g < 1 {
			a.fail(fmt.Errorf("%q: a dynamic group strategy needs a positive group_size", a.prefix+"group_size"))
		}
		acts = &ActQuant{Group: g}
	case strategy == "tensor" && !dynamic:
		acts = &ActQuant{Static: true}
	default:
		a.fail(fmt.Errorf("%q %q with %q %v is not supported (want token or group, dynamic; or tensor, static)", a.prefix+"strategy", strategy, a.prefix+"dynamic", dynamic))
	}
	if a.err != nil {
		return nil
	}
	return acts
}

// ctWeights reads a compressed-tensors group's weights: 8-bit, float,
// symmetric and static, scaled per tensor, channel or block.
func (w *fieldParser) ctWeights() *Quantization {
	w.fail(checkKeys(w.f, w.prefix, []string{"num_bits", "type", "symmetric", "strategy", "block_structure", "group_size", "dynamic", "actorder"},
		// How the scales were chosen.
		[]string{"observer", "observer_kwargs"}))
	w.ctFloat8("weights")
	if w.boolOr("dynamic", false) {
		w.fail(fmt.Errorf("%q true is not supported (weights scaled at run time)", w.prefix+"dynamic"))
	}
	if raw, ok := w.lookup("actorder"); ok && !isOff("", raw) {
		w.fail(fmt.Errorf("%q %s is not supported", w.prefix+"actorder", shortJSON(raw)))
	}
	if g, ok := w.integer("group_size"); ok {
		w.fail(fmt.Errorf("%q %d is not supported (groups: want strategy tensor, channel or block)", w.prefix+"group_size", g))
	}
	q := &Quantization{Method: MethodCompressedTensors, Format: quant.FP8}
	strategy, _ := w.str("strategy")
	block := w.ints("block_structure")
	if w.err != nil {
		return q
	}
	switch strategy {
	case "tensor":
	case "channel":
		q.GroupN = 1
	case "block":
		if len(block) != 2 || block[0] < 1 || block[1] < 1 {
			w.fail(fmt.Errorf("%q %v: want [rows, columns], two positive sizes", w.prefix+"block_structure", block))
		}
		if len(block) == 2 {
			q.GroupN, q.Group = block[0], block[1]
		}
	default:
		w.fail(fmt.Errorf("%q %q is not supported (want tensor, channel or block)", w.prefix+"strategy", strategy))
	}
	if strategy != "block" && block != nil {
		w.fail(fmt.Errorf("%q %v with strategy %q: blocks are strategy block's", w.prefix+"block_structure", block, strategy))
	}
	return q
}

// ctFloat8 checks what a compressed-tensors quantization of what (weights
// or activations) must say to be e4m3: num_bits 8, type float, symmetric.
func (p *fieldParser) ctFloat8(what string) {
	if b := p.intOr("num_bits", 8); b != 8 {
		p.fail(fmt.Errorf("%q %d is not supported (want 8)", p.prefix+"num_bits", b))
	}
	if t, _ := p.str("type"); t != "float" {
		p.fail(fmt.Errorf("%q %q is not supported (want float: e4m3 %s)", p.prefix+"type", t, what))
	}
	if !p.boolOr("symmetric", true) {
		p.fail(fmt.Errorf("%q false is not supported (e4m3 %s have no zero point)", p.prefix+"symmetric", what))
	}
}
