package corpus

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// A kind is one graph a config gives: a whole model, one layer or a block
// of a layer.
type kind struct {
	name string
	// family limits the kind to GPT2 or Llama configs; "" is both.
	family string
	// decode says that Options.Past matters.
	decode bool
	// attends says that the kind's graph has attention.
	attends bool
	// unsupported, when not nil, says why a config cannot have the
	// kind; Kinds leaves such kinds out and BuildConfig refuses them.
	unsupported func(c *Config) error
	build       func(e *emitter) error
}

// kinds lists the kinds in the order Names and Kinds give them.
var kinds = []kind{
	{name: "layer", family: Llama, attends: true, build: buildLayer},
	{name: "block", family: GPT2, attends: true, build: buildLayer},
	{name: "model", attends: true, build: func(e *emitter) error {
		e.causalLM(0, e.opt.Seq, false)
		return nil
	}},
	{name: "decode", decode: true, attends: true, build: func(e *emitter) error {
		if e.opt.Past >= e.opt.Seq {
			return fmt.Errorf("past %d: want it below seq %d, the KV cache's capacity", e.opt.Past, e.opt.Seq)
		}
		if e.opt.Past < 0 {
			return e.decodeAtRuntime()
		}
		e.causalLM(e.opt.Past, 1, true)
		return nil
	}},
	{name: "prefill", attends: true, build: func(e *emitter) error {
		// The prompt's keys and values go into the caches, laid out as
		// the decode step's (capacity Options.Cache), which goes on
		// from position Seq.
		ids := e.Input("input_ids", ir.I64, ir.Dim(e.opt.Batch), ir.Dim(e.opt.Seq))
		p := e.newPass(0, e.opt.Seq, true)
		p.cacheLen = e.opt.Cache
		e.causalLMPass(ids, p)
		return nil
	}},
	{name: "step", attends: true, build: func(e *emitter) error { return e.stepKind() }},
	{name: "attention", attends: true, build: func(e *emitter) error {
		x := e.hiddenInput()
		p := e.newPass(0, e.opt.Seq, false)
		if e.cfg.Family() == GPT2 {
			e.Output("output", e.gpt2Attention(x, e.layerPrefix(0)+".attn", 0, p))
		} else {
			e.Output("output", e.llamaAttention(x, e.layerPrefix(0)+".self_attn", 0, p))
		}
		return nil
	}},
	{name: "mlp", build: func(e *emitter) error {
		x := e.hiddenInput()
		if e.cfg.Family() == GPT2 {
			e.Output("output", e.gpt2MLP(x, e.layerPrefix(0)+".mlp"))
		} else {
			e.Output("output", e.mlp(x, e.layerPrefix(0)))
		}
		return nil
	}},
	{name: "rmsnorm", family: Llama, build: func(e *emitter) error {
		e.Output("output", e.rmsNorm(e.hiddenInput(), e.layerPrefix(0)+".input_layernorm", e.cfg.RMSNormEps))
		return nil
	}},
	{name: "layernorm", family: GPT2, build: func(e *emitter) error {
		e.Output("output", e.layerNorm(e.hiddenInput(), e.layerPrefix(0)+".ln_1", e.cfg.LayerNormEps))
		return nil
	}},
	{name: "softmax", build: func(e *emitter) error {
		s := ir.Dim(e.opt.Seq)
		x := e.Input("scores", e.dt, ir.Dim(e.opt.Batch), ir.Dim(e.cfg.NumAttentionHeads), s, s)
		e.Output("output", e.softmax(x))
		return nil
	}},
	{name: "rotary", family: Llama, build: func(e *emitter) error {
		c := e.cfg
		b, s, hd := ir.Dim(e.opt.Batch), ir.Dim(e.opt.Seq), ir.Dim(c.HeadDim)
		q := e.Input("q", e.dt, b, ir.Dim(c.NumAttentionHeads), s, hd)
		k := e.Input("k", e.dt, b, ir.Dim(c.NumKeyValueHeads), s, hd)
		cos, sin := e.rotaryTables(&pass{seq: e.opt.Seq, at: ir.NoValue})
		e.Output("q_embed", e.applyRotary(q, cos, sin))
		e.Output("k_embed", e.applyRotary(k, cos, sin))
		return nil
	}},
	{name: "activation", unsupported: activationSupport, build: func(e *emitter) error {
		c := e.cfg
		x := e.Input("x", e.dt, ir.Dim(e.opt.Batch), ir.Dim(e.opt.Seq), ir.Dim(c.IntermediateSize))
		e.Output("output", e.activation(x, c.HiddenAct))
		return nil
	}},
}

// activationSupport refuses the activation kind where hidden_act is not
// the MLP's activation: gpt-oss's experts apply their own clamped SwiGLU.
func activationSupport(c *Config) error {
	if c.MoE != nil && c.MoE.SwiGLULimit > 0 {
		return fmt.Errorf("the experts apply a clamped SwiGLU, not %s alone (see the mlp kind)", c.HiddenAct)
	}
	return nil
}

// compositeSupport refuses Options.Composite for the kinds with attention
// where the attention op cannot express the config's.
func compositeSupport(c *Config) error {
	if c.AttentionSinks {
		return fmt.Errorf("composite attention (Options.Composite) needs attention sinks in the attention op, not supported yet")
	}
	return nil
}

// kindAliases are the names of the same kind in the other family.
var kindAliases = map[string]string{"layer": "block", "block": "layer", "layernorm": "rmsnorm", "rmsnorm": "layernorm"}

// activationKinds names the activation kind after the config's activation.
var activationKinds = map[string]string{ActSiLU: "silu", ActGELU: "gelu", ActGELUTanh: "gelu-tanh", ActReLU: "relu"}

// nameFor is k's name for config c.
func (k *kind) nameFor(c *Config) string {
	if k.name == "activation" {
		return activationKinds[c.HiddenAct]
	}
	return k.name
}

// buildLayer builds decoder layer 0 over input hidden_states
// [batch, seq, hidden], a prefill at positions 0..seq-1, with output
// hidden_states.
func buildLayer(e *emitter) error {
	x := e.hiddenInput()
	e.Output("hidden_states", e.layer(x, 0, e.newPass(0, e.opt.Seq, false)))
	return nil
}

// hiddenInput declares the input hidden_states [batch, seq, hidden].
func (e *emitter) hiddenInput() ir.Value {
	return e.Input("hidden_states", e.dt, ir.Dim(e.opt.Batch), ir.Dim(e.opt.Seq), ir.Dim(e.cfg.HiddenSize))
}

// PositionsError is a sequence longer than a model's positions: the
// config's max_position_embeddings (n_positions for gpt2), the length it
// was trained for, and for gpt2 the rows of its learned position
// embedding. Every kind is refused, not only those that embed positions:
// a graph of a layer at a length the model never runs describes no
// program the model needs.
type PositionsError struct {
	// Seq is the length asked for; Max the model's positions, Key the
	// config.json field that gives them.
	Seq, Max int
	Key      string
	// Decode says that Seq is a decode step's KV cache capacity.
	Decode bool
}

// Error names the length, the positions and the field that gives them.
func (e *PositionsError) Error() string {
	what := ""
	if e.Decode {
		what = " (the KV cache's capacity)"
	}
	return fmt.Sprintf("seq %d%s is more than the model's %d positions (%s)", e.Seq, what, e.Max, e.Key)
}

// checkPositions refuses a length beyond the config's positions.
func checkPositions(c *Config, k *kind, seq int) error {
	if seq > c.MaxPositionEmbeddings {
		return &PositionsError{Seq: seq, Max: c.MaxPositionEmbeddings, Key: c.fieldName("max_position_embeddings"), Decode: k.decode}
	}
	return nil
}

// Kinds lists the kinds of graph a config gives, in a fixed order:
// llama-family configs give layer, model, decode, prefill, step,
// attention, mlp, rmsnorm, softmax, rotary and their activation (silu);
// gpt2 configs give block, model, decode, prefill, step, attention, mlp,
// layernorm, softmax and their activation (gelu-tanh for gelu_new). The
// mixtures of experts are llama-family configs whose mlp is the experts
// block; gpt_oss has neither step (paged attention has no sinks nor
// per-layer windows) nor an activation kind (its experts clamp).
//
//   - layer, block: decoder layer 0 over input hidden_states
//     [batch, seq, hidden], a prefill, output hidden_states.
//   - model: the prefill of the whole model, input_ids i64[batch, seq] to
//     logits f32[batch, seq, vocab].
//   - decode: one decode step, input_ids i64[batch, 1] at position past,
//     to logits f32[batch, 1, vocab]; layer i's KV caches are the state
//     buffers past_key_values.i.key and past_key_values.i.value
//     [batch, kv heads, seq, head], updated in place, and the step attends
//     over positions 0..past. past is the runtime symbol of that name (an
//     i32 input; batch 1) unless Options.Past pins it, when the cache is
//     sliced to 0..past.
//   - prefill: the whole model over input_ids i64[batch, seq], writing
//     the KV caches at positions 0..seq-1 of caches laid out as a decode
//     step of capacity Options.Cache reads them.
//   - step: one serving step over a flat list of tokens of many
//     sequences with paged KV pools (package step's contract; sized by
//     Options.Step, sequences of up to Seq positions): inputs input_ids
//     i64[max tokens], positions, query_start, seq_lens, block_table,
//     slot_mapping and the symbol seqs; output logits f32[max seqs, vocab]
//     (each sequence's last token) or [max tokens, vocab]; layer i's pools
//     past_key_values.i.key and .value [slots, kv heads, head], updated in
//     place. Options.Batch does not apply.
//   - attention, mlp, rmsnorm, layernorm: layer 0's blocks over input
//     hidden_states, output output.
//   - softmax: input scores [batch, heads, seq, seq], output output.
//   - rotary: inputs q [batch, heads, seq, head] and k
//     [batch, kv heads, seq, head], outputs q_embed and k_embed.
//   - silu, gelu, gelu-tanh, relu: input x [batch, seq, intermediate],
//     output output.
func Kinds(c *Config) []string {
	var out []string
	for i := range kinds {
		k := &kinds[i]
		if (k.family == "" || k.family == c.Family()) && (k.unsupported == nil || k.unsupported(c) == nil) {
			out = append(out, k.nameFor(c))
		}
	}
	return out
}

// BuildConfig builds the graph of the given kind (see Kinds) of a model
// described by c, named name.
func BuildConfig(name string, c *Config, kindName string, opt Options) (*ir.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case opt.MaxSeq < 0:
		return nil, fmt.Errorf("%s: max-seq %d; want a positive capacity", name, opt.MaxSeq)
	case opt.MaxSeq > 0 && (kindName == "decode" || kindName == "step"):
		opt.Seq = opt.MaxSeq
	case opt.MaxSeq > 0 && kindName == "prefill":
		opt.Cache = opt.MaxSeq
	case opt.MaxSeq > 0:
		return nil, fmt.Errorf("%s: max-seq %d sizes a KV cache, which only decode, prefill and step have", name, opt.MaxSeq)
	}
	opt, err := opt.resolve()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for i := range kinds {
		k := &kinds[i]
		if (k.family != "" && k.family != c.Family()) || k.nameFor(c) != kindName {
			continue
		}
		if k.unsupported != nil {
			if err := k.unsupported(c); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if k.attends && opt.Composite {
			if err := compositeSupport(c); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := checkPositions(c, k, opt.Seq); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		q, err := weightQuantization(c, opt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		e := newEmitter(name, c, opt, q)
		if err := k.build(e); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		g, err := e.Build()
		if err != nil {
			return nil, fmt.Errorf("build %w", err) // the error names the graph
		}
		return g, nil
	}
	ks := Kinds(c)
	hint := suggest(kindName, ks)
	if alt, ok := kindAliases[kindName]; ok && slices.Contains(ks, alt) {
		hint = fmt.Sprintf("; did you mean %s?", alt)
	}
	return nil, fmt.Errorf("%s: a %s model has no kind %q (its kinds: %s)%s", name, c.ModelType, kindName, strings.Join(ks, ", "), hint)
}

// Names lists every registered graph, MODEL:KIND for each embedded config
// (see ConfigNames) and each of its kinds (see Kinds): models in name
// order, each model's kinds in Kinds' order.
func Names() []string {
	var out []string
	for _, m := range ConfigNames() {
		c, err := EmbeddedConfig(m)
		if err != nil {
			panic(err) // ConfigNames listed it
		}
		for _, k := range Kinds(c) {
			out = append(out, m+":"+k)
		}
	}
	return out
}

// Build builds the registered graph called name, MODEL:KIND (see Names),
// sized by opt. MODEL may also be the path of a config.json file (ending
// in .json). The graph is named name.
func Build(name string, opt Options) (*ir.Graph, error) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return nil, fmt.Errorf("graph name %q is not MODEL:KIND%s", name, suggest(name, Names()))
	}
	model, kindName := name[:i], name[i+1:]
	var c *Config
	var err error
	if strings.HasSuffix(model, ".json") {
		c, err = LoadConfig(model)
		if err != nil {
			return nil, err
		}
	} else {
		c, err = EmbeddedConfig(model)
		if err != nil {
			return nil, fmt.Errorf("unknown graph %q: no model %q%s", name, model, suggest(name, Names()))
		}
	}
	return BuildConfig(name, c, kindName, opt)
}

// suggest is "; did you mean a, b?" with the few candidates closest to s
// by edit distance, or "" when none is close.
func suggest(s string, candidates []string) string {
	type scored struct {
		name string
		d    int
	}
	var near []scored
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		limit := max(2, len(s)/3)
		if d <= limit || (len(s) >= 3 && strings.Contains(c, s)) {
			near = append(near, scored{c, d})
		}
	}
	if len(near) == 0 {
		return ""
	}
	slices.SortStableFunc(near, func(a, b scored) int { return a.d - b.d })
	if len(near) > 5 {
		near = near[:5]
	}
	names := make([]string, len(near))
	for i, c := range near {
		names[i] = c.name
	}
	return "; did you mean " + strings.Join(names, ", ") + "?"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
