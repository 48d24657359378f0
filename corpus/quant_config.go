package corpus

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/quant"
)

// The quantization methods, as config.json's quantization_config names
// them in quant_method.
const (
	// MethodMXFP4 is gpt-oss's: its experts in MXFP4 (transformers'
	// Mxfp4Config), the rest in the model's dtype.
	MethodMXFP4 = "mxfp4"
	// MethodFP8 is transformers' FineGrainedFP8Config: e4m3 weights with
	// f32 scales per 128 × 128 block (weight_scale_inv).
	MethodFP8 = "fp8"
	// MethodCompressedTensors is llm-compressor's format; lumsearch
	// reads its float 8-bit weights (weight_scale per tensor, channel or
	// block).
	MethodCompressedTensors = "compressed-tensors"
	// MethodAWQ is AutoAWQ's GEMM packing of 4-bit weights.
	MethodAWQ = "awq"
	// MethodGPTQ is GPTQ's original checkpoint format of 4-bit weights.
	MethodGPTQ = "gptq"
)

// Quantization says how a model's linear weights are stored: the
// format of its decoder layers' projections (attention, MLP and experts;
// never the embeddings, the LM head or the routers), the grouping of
// their scales, and the modules left in the model's dtype. A config.json's
// quantization_config gives it (Config.Quantization), or Options.Weights
// asks for it without a checkpoint.
type Quantization struct {
	// Method is the quant_method the config names (Method*), or ""
	// when Options.Weights asked for the format.
	Method string `json:"quant_method,omitempty"`
	// Format is the weights' format.
	Format quant.Format `json:"-"`
	// Group is how many inputs of a weight (elements along its
	// reduction) share a scale: 32 for mxfp4, group_size for awq and
	// gptq, a block's width for fp8; 0 means a whole row (fp8 per tensor
	// or per channel, gptq's group_size -1).
	Group int `json:"group,omitempty"`
	// GroupN is how many outputs share an fp8 scale: a block's height,
	// 1 per channel, 0 all of them (per tensor).
	GroupN int `json:"group_n,omitempty"`
	// Auto says that each weight's grouping is chosen by its shape, as
	// Options.Weights does: fp8 in 128 × 128 blocks where both extents
	// divide by 128, else per channel; awq and gptq in groups of 128
	// where the inputs divide by 128, else one group.
	Auto bool `json:"auto,omitempty"`
	// Keep lists the modules whose weights stay in the model's dtype:
	// modules_to_not_convert (a module's name, a regular expression that
	// matches a name's start, or a name's last parts) or
	// compressed-tensors' ignore (a name, or "re:" and a regular
	// expression of the whole name).
	Keep []string `json:"keep,omitempty"`
	// ExpertsOnly says that only the experts are quantized: mxfp4, which
	// transformers applies to gpt-oss's experts alone.
	ExpertsOnly bool `json:"experts_only,omitempty"`
	// Acts, when set, says the checkpoint quantizes the activations its
	// fp8 weights multiply (W8A8), which the graph then does too.
	Acts *ActQuant `json:"activations,omitempty"`
}

// ActQuant is how a W8A8 checkpoint quantizes a projection's input
// activations to e4m3 before its fp8 weights multiply them: scaled by
// the checkpoint's input_scale (Static), or at run time by the largest
// magnitude of each token's row, or of each group of Group inputs of it
// (the scale mapping it to e4m3's 448).
type ActQuant struct {
	Static bool `json:"static,omitempty"`
	Group  int  `json:"group,omitempty"`
}

// clone is a deep copy of q (nil for nil).
func (q *Quantization) clone() *Quantization {
	if q == nil {
		return nil
	}
	cp := *q
	cp.Keep = slices.Clone(q.Keep)
	return &cp
}

// ignoreStyle says that Keep holds compressed-tensors' ignore entries.
func (q *Quantization) ignoreStyle() bool { return q.Method == MethodCompressedTensors }

// keeps reports whether the module named m stays in the model's dtype.
// modules_to_not_convert matches as transformers' should_convert_module
// does: a pattern that matches the start of the name as a regular
// expression, or the name's last dotted parts.
func (q *Quantization) keeps(m string) bool {
	for _, k := range q.Keep {
		switch {
		case q.ignoreStyle() && strings.HasPrefix(k, "re:"):
			if re, err := regexp.Compile("^(?:" + k[3:] + ")$"); err == nil && re.MatchString(m) {
				return true
			}
		case q.ignoreStyle():
			if m == k {
				return true
			}
		case m == k || strings.HasSuffix(m, "."+k):
			return true
		default:
			if re, err := regexp.Compile("^(?:" + k + ")"); err == nil && re.MatchString(m) {
				return true
			}
		}
	}
	return false
}

// quantizes reports whether the weights of the layer module named m are
// quantized; experts says that m holds a mixture's experts.
func (q *Quantization) quantizes(m string, experts bool) bool {
	return q != nil && (experts || !q.ExpertsOnly) && !q.keeps(m)
}

// groups is the scale grouping of a weight of n outputs (of one part,
// for a stacked weight) and k inputs: the dequant's group and group_n.
func (q *Quantization) groups(n, k int) (group, groupN int) {
	switch q.Format {
	case quant.MXFP4:
		return 32, 0
	case quant.FP8:
		if q.Auto {
			if n%128 == 0 && k%128 == 0 {
				return 128, 128
			}
			return k, 1
		}
		group, groupN = q.Group, q.GroupN
		if group == 0 {
			group = k
		}
		if groupN == 0 {
			groupN = n
		}
		return group, groupN
	}
	if q.Auto {
		if k%128 == 0 {
			return 128, 0
		}
		return k, 0
	}
	if q.Group == 0 {
		return k, 0
	}
	return q.Group, 0
}

// fp8ScaleSuffix names an fp8 weight's scale after its codes' tensor, as
// the checkpoints of q's method do: transformers' fp8 stores the
// reciprocal scales of blocks (weight_scale_inv), compressed-tensors
// weight_scale; without a method, blocks take the first name and
// channels the second.
func (q *Quantization) fp8ScaleSuffix(groupN int) string {
	switch {
	case q.Method == MethodFP8:
		return "_scale_inv"
	case q.Method == MethodCompressedTensors:
		return "_scale"
	case groupN > 1:
		return "_scale_inv"
	}
	return "_scale"
}

// quantization reads quantization_config: an absent, null or empty one
// leaves the weights in the model's dtype.
func (p *fieldParser) quantization(c *Config) {
	raw, ok := p.lookup("quantization_config")
	if !ok {
		return
	}
	sub, err := subFields(raw)
	if err != nil {
		p.fail(fmt.Errorf("%q: want an object", "quantization_config"))
		return
	}
	if len(sub) == 0 {
		return
	}
	q := &fieldParser{f: sub, prefix: "quantization_config."}
	method, _ := q.str("quant_method")
	if q.err != nil {
		p.fail(q.err)
		return
	}
	var qz *Quantization
	switch method {
	case MethodMXFP4:
		qz = q.mxfp4()
	case MethodFP8:
		qz = q.fp8()
	case MethodCompressedTensors:
		qz = q.compressedTensors()
	case MethodAWQ:
		qz = q.awq()
	case MethodGPTQ:
		qz = q.gptq()
	default:
		p.fail(fmt.Errorf("%q %q is not supported (supported: %s, %s, %s, %s, %s)", "quantization_config.quant_method", method,
			MethodMXFP4, MethodFP8, MethodCompressedTensors, MethodAWQ, MethodGPTQ))
		return
	}
	if q.err == nil {
		q.fail(qz.checkKeep(q.prefix))
	}
	p.fail(q.err)
	c.Quantization = qz
}

// checkKeep refuses a Keep pattern that is not a regular expression.
func (q *Quantization) checkKeep(prefix string) error {
	key := prefix + "modules_to_not_convert"
	if q.ignoreStyle() {
		key = prefix + "ignore"
	}
	for _, k := range q.Keep {
		pat := k
		if q.ignoreStyle() {
			if !strings.HasPrefix(k, "re:") {
				continue
			}
			pat = k[3:]
		}
		if _, err := regexp.Compile(pat); err != nil {
			return fmt.Errorf("%q: entry %q is not a regular expression: %v", key, k, err)
		}
	}
	return nil
}

// mxfp4 reads gpt-oss's Mxfp4Config. Its dequantize asks transformers to
// decode the weights at load: the same values, so harmless.
func (q *fieldParser) mxfp4() *Quantization {
	q.fail(checkKeys(q.f, q.prefix, []string{"quant_method", "modules_to_not_convert"}, []string{"dequantize"}))
	return &Quantization{Method: MethodMXFP4, Format: quant.MXFP4, Group: 32, Keep: q.strings("modules_to_not_convert"), ExpertsOnly: true}
}

// fp8 reads transformers' FineGrainedFP8Config: e4m3 weights with a scale
// per weight_block_size block (default 128 × 128), and activations
// quantized at run time (activation_scheme "dynamic", the default) per
// token and block of weight_block_size[1] inputs (transformers'
// act_quant).
func (q *fieldParser) fp8() *Quantization {
	q.fail(checkKeys(q.f, q.prefix, []string{"quant_method", "activation_scheme", "weight_block_size", "modules_to_not_convert", "fmt"}, []string{"dequantize"}))
	if f, ok := q.str("fmt"); ok && f != "e4m3" {
		q.fail(fmt.Errorf("%q %q is not supported (want e4m3)", q.prefix+"fmt", f))
	}
	block := []int{128, 128}
	if q.has("weight_block_size") {
		block = q.ints("weight_block_size")
	}
	if q.err == nil && (len(block) != 2 || block[0] < 1 || block[1] < 1) {
		q.fail(fmt.Errorf("%q %v: want [rows, columns], two positive sizes", q.prefix+"weight_block_size", block))
	}
	scheme, ok := q.str("activation_scheme")
	if !ok {
		scheme = "dynamic"
	}
	if q.err == nil && scheme != "dynamic" {
		// transformers' FP8Linear quantizes activations per token and
		// block of inputs at run time, and implements nothing else.
		q.fail(fmt.Errorf("%q %q is not supported (want dynamic, transformers' only scheme)", q.prefix+"activation_scheme", scheme))
	}
	if q.err != nil {
		return nil
	}
	return &Quantization{Method: MethodFP8, Format: quant.FP8, GroupN: block[0], Group: block[1], Keep: q.strings("modules_to_not_convert"),
		Acts: &ActQuant{Group: block[1]}}
}

// awq reads transformers' AwqConfig: AutoAWQ's GEMM packing of 4-bit
// weights with zero points, in groups of group_size inputs.
func (q *fieldParser) awq() *Quantization {
	q.fail(checkKeys(q.f, q.prefix, []string{"quant_method", "bits", "group_size", "zero_point", "version", "modules_to_not_convert"},
		// Which kernels run and whether they fuse: the same weights.
		[]string{"backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"}))
	if b := q.intOr("bits", 4); b != 4 {
		q.fail(fmt.Errorf("%q %d is not supported (want 4)", q.prefix+"bits", b))
	}
	group := q.intOr("group_size", 128)
	if group < 1 {
		q.fail(fmt.Errorf("%q %d is not supported (want a positive group)", q.prefix+"group_size", group))
	}
	if !q.boolOr("zero_point", true) {
		q.fail(fmt.Errorf("%q false is not supported (AWQ's GEMM format stores zero points)", q.prefix+"zero_point"))
	}
	if v, ok := q.str("version"); ok && !strings.EqualFold(v, "gemm") {
		q.fail(fmt.Errorf("%q %q is not supported (want gemm: gemv, gemv_fast, exllama, ipex and marlin pack the weights otherwise)", q.prefix+"version", v))
	}
	return &Quantization{Method: MethodAWQ, Format: quant.AWQ, Group: group, Keep: q.strings("modules_to_not_convert")}
}

// gptq reads transformers' GPTQConfig: 4-bit weights in GPTQ's original
// checkpoint format, in groups of group_size inputs (-1: one group), in
// order (desc_act false).
func (q *fieldParser) gptq() *Quantization {
	q.fail(checkKeys(q.f, q.prefix,
		[]string{"quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format", "format", "lm_head",
			"modules_to_not_convert", "modules_in_block_to_quantize"},
		// How the weights were quantized, and which kernels run them.
		[]string{"damp_percent", "damp_auto_increment", "true_sequential", "static_groups", "model_name_or_path",
			"model_file_base_name", "tokenizer", "dataset", "use_exllama", "exllama_config", "use_cuda_fp16",
			"max_input_length", "module_name_preceding_first_block", "batch_size", "pad_token_id", "cache_block_outputs",
			"block_name_to_quantize", "backend", "meta", "quantizer", "act_group_aware", "hyb_act", "mse", "v2", "pack_dtype"}))
	if b := q.intOr("bits", 4); b != 4 {
		q.fail(fmt.Errorf("%q %d is not supported (want 4)", q.prefix+"bits", b))
	}
	group := q.intOr("group_size", 128)
	switch {
	case group == -1:
		group = 0
	case group < 1:
		q.fail(fmt.Errorf("%q %d is not supported (want a positive group, or -1)", q.prefix+"group_size", group))
	}
	if q.boolOr("desc_act", false) {
		q.fail(fmt.Errorf("%q true is not supported (act-order: the groups follow g_idx, not the inputs' order)", q.prefix+"desc_act"))
	}
	q.boolOr("sym", true) // both store their zero points
	for _, key := range []string{"checkpoint_format", "format"} {
		if f, ok := q.str(key); ok && f != "gptq" {
			q.fail(fmt.Errorf("%q %q is not supported (want gptq: gptq_v2 stores zero points otherwise, marlin and bitblas pack otherwise)", q.prefix+key, f))
		}
	}
	if q.boolOr("lm_head", false) {
		q.fail(fmt.Errorf("%q true is not supported (lumsearch keeps the LM head in the model's dtype)", q.prefix+"lm_head"))
	}
	if m, ok := q.lookup("modules_in_block_to_quantize"); ok && !isOff("", m) {
		q.fail(fmt.Errorf("%q %s is not supported (some of a layer's projections left in the model's dtype)", q.prefix+"modules_in_block_to_quantize", shortJSON(m)))
	}
	return &Quantization{Method: MethodGPTQ, Format: quant.GPTQ, Group: group, Keep: q.strings("modules_to_not_convert")}
}
