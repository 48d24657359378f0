package corpus

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// pass describes the positions one forward pass covers and holds what its
// layers share, computed once per graph as Hugging Face's models compute
// them once per forward: the rotary tables and the attention mask.
type pass struct {
	past    int  // position of the first query (0 for a prefill)
	seq     int  // number of queries
	kvStart int  // position of the first key attended (above 0 when a sliding window lets a decode step slice the cache)
	decode  bool // keys and values go through the KV caches
	// cacheLen is the KV caches' capacity (decode only).
	cacheLen int
	// at is the runtime position input of a decode step whose past is a
	// symbol (past is then 0 and unused), NoValue when past is static.
	// Such a step attends over the whole cache with the attention op,
	// which reads only keys 0..at.
	at ir.Value

	// window is the sliding window of the layers this pass serves (0 for
	// none); other, when not nil, is the pass of the other layers' window
	// (see passFor).
	window int
	other  *pass
	// windowCuts says that the sliding window hides some attended keys
	// from some query; composite says that attention is the composite op.
	windowCuts, composite bool

	cos, sin ir.Value // [seq, head size] rotary tables (llama family)
	mask     ir.Value // additive [seq, keys] mask, or NoValue when nothing is hidden
}

// keys is the number of key positions each layer attends over.
func (p *pass) keys() int {
	if p.runtime() {
		return p.cacheLen
	}
	return p.past + p.seq - p.kvStart
}

// runtime says that the pass's position is a symbol's value.
func (p *pass) runtime() bool { return p.at != ir.NoValue }

// newPass prepares a forward pass over queries at positions
// past..past+seq-1.
func (e *emitter) newPass(past, seq int, decode bool) *pass {
	return e.newPassAt(past, seq, decode, ir.NoValue)
}

// newPassAt is newPass for a position that is either static (at is
// NoValue) or the runtime position at, the input of symbol "past". The
// pass serves the layers of layer 0's window; when the config's layers
// differ in their windows (gpt-oss), passFor makes the other layers'.
func (e *emitter) newPassAt(past, seq int, decode bool, at ir.Value) *pass {
	return e.passWindow(past, seq, decode, at, e.cfg.window(0), nil)
}

// passFor is the pass that layer i attends with: p, or the pass of the
// other window that shares p's rotary tables, made on first use so that a
// graph of one layer has no mask it does not use.
func (e *emitter) passFor(p *pass, i int) *pass {
	w := e.cfg.window(i)
	if w == p.window {
		return p
	}
	if p.other == nil {
		p.other = e.passWindow(p.past, p.seq, p.decode, p.at, w, p)
	}
	return p.other
}

// passWindow is newPassAt for layers with sliding window w (0 for none),
// sharing the rotary tables of shared when it is not nil.
func (e *emitter) passWindow(past, seq int, decode bool, at ir.Value, w int, shared *pass) *pass {
	cacheLen := e.opt.Seq
	if shared != nil {
		cacheLen = shared.cacheLen
	}
	p := &pass{past: past, seq: seq, decode: decode, cacheLen: cacheLen, at: at, window: w, cos: ir.NoValue, sin: ir.NoValue, mask: ir.NoValue}
	if decode && w > 0 && !p.runtime() {
		// The first query sees keys from past-w+1 on; older cache entries
		// are sliced away rather than masked.
		p.kvStart = max(0, past-w+1)
	}
	// The attention op has neither a window nor sinks: attention that
	// needs either keeps the masked, decomposed form.
	sinks := e.cfg.AttentionSinks
	if p.runtime() {
		// Whether the window cuts depends on the position: it can when
		// the cache is longer than the window.
		p.windowCuts = w > 0 && p.cacheLen > w
		p.composite = !p.windowCuts && !sinks
	} else {
		p.windowCuts = w > 0 && p.kvStart <= past+seq-1-w
		p.composite = e.opt.Composite && !p.windowCuts && !sinks
	}
	switch {
	case shared != nil:
		p.cos, p.sin = shared.cos, shared.sin
	case e.cfg.Family() == Llama:
		p.cos, p.sin = e.rotaryTables(p)
	}
	// A decomposed step at a runtime position masks the cache's slots
	// past it.
	if !p.composite && (seq > 1 || p.windowCuts || p.runtime()) {
		p.mask = e.causalMask(p)
	}
	return p
}

// causalMask is the additive mask [seq, keys] of a pass: 0 where query i
// (at position past+i) may see key j (at position kvStart+j), that is
// where 0 <= qpos-kpos (and, with a sliding window, qpos-kpos < window),
// and the dtype's lowest finite value elsewhere, as transformers' masks
// use torch.finfo(dtype).min. It is built from iotas, a compare and a
// where, so that rules can recognize it as causal.
func (e *emitter) causalMask(p *pass) ir.Value {
	shape := ir.Shape{ir.Dim(p.seq), ir.Dim(p.keys())}
	d := e.Sub(e.Iota(ir.I64, shape, 0), e.Iota(ir.I64, shape, 1)) // i - j
	if p.runtime() {
		d = e.Add(d, e.Cast(p.at, ir.I64)) // qpos - kpos
	} else if off := p.past - p.kvStart; off != 0 {
		d = e.Add(d, e.scalar(ir.I64, float64(off))) // qpos - kpos
	}
	see := e.Binary(ir.OpGe, d, e.scalar(ir.I64, 0))
	if p.windowCuts {
		see = e.Binary(ir.OpAnd, see, e.Binary(ir.OpLt, d, e.scalar(ir.I64, float64(p.window))))
	}
	return e.Where(see, e.scalar(e.dt, 0), e.scalar(e.dt, lowest(e.dt)))
}

// lowest is the most negative finite value of a float dtype.
func lowest(dt ir.DType) float64 {
	switch dt {
	case ir.F16:
		return -65504
	case ir.BF16:
		return -float64(ir.BFloat16(0x7f7f).Float32())
	}
	return -math.MaxFloat32
}

// invFreq is the rotary embedding's inverse frequencies, f32 [head/2]:
// 1 / theta^(2i/head), as ops on an iota, divided by the factor for linear
// scaling; Llama 3.1's piecewise scaling is a constant computed here.
func (e *emitter) invFreq() ir.Value {
	c := e.cfg
	d := c.HeadDim
	if s := c.RopeScaling; s != nil && s.Type == "llama3" {
		return e.Const(ir.F32, ir.Shape{ir.Dim(d / 2)}, llama3InvFreq(c.RopeTheta, d, s)...)
	}
	if s := c.RopeScaling; s != nil && s.Type == "yarn" {
		return e.Const(ir.F32, ir.Shape{ir.Dim(d / 2)}, yarnInvFreq(c.RopeTheta, d, s)...)
	}
	i := e.Iota(ir.F32, ir.Shape{ir.Dim(d / 2)}, 0)
	exp := e.Div(e.Mul(i, e.scalar(ir.F32, 2)), e.scalar(ir.F32, float64(d)))
	f := e.Recip(e.Pow(e.scalar(ir.F32, c.RopeTheta), exp))
	if s := c.RopeScaling; s != nil && s.Type == "linear" {
		f = e.Div(f, e.scalar(ir.F32, s.Factor))
	}
	return f
}

// llama3InvFreq is transformers' _compute_llama3_parameters: frequencies
// whose wavelength exceeds the original context over low_freq_factor are
// divided by factor, those under it over high_freq_factor are kept, and
// those between are interpolated smoothly. Values are rounded to f32 as
// torch computes them.
func llama3InvFreq(theta float64, d int, s *RopeScaling) []float64 {
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
	out := make([]float64, d/2)
	for i := range out {
		f := 1 / math.Pow(theta, float64(2*i)/float64(d))
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			f /= s.Factor
		default:
			smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f = (1-smooth)*f/s.Factor + smooth*f
		}
		out[i] = ir.F32.Round(f)
	}
	return out
}

// rotaryTables are cos and sin of the rotary angles for positions
// past..past+seq-1, [seq, head size] in the model's dtype: the angles
// position * inv_freq, computed in f32 and concatenated with themselves,
// as LlamaRotaryEmbedding does.
func (e *emitter) rotaryTables(p *pass) (cos, sin ir.Value) {
	pos := e.Iota(ir.F32, ir.Shape{ir.Dim(p.seq), 1}, 0)
	if p.runtime() {
		pos = e.Add(pos, e.Cast(p.at, ir.F32))
	} else if p.past > 0 {
		pos = e.Add(pos, e.scalar(ir.F32, float64(p.past)))
	}
	freqs := e.Mul(pos, e.invFreq()) // [seq, head/2]
	emb := e.Concat(1, freqs, freqs)
	return e.rotaryCosSin(emb)
}

// rotaryCosSin is cos and sin of the angles emb, in f32, times YaRN's
// attention factor when the config has one, cast to the model's dtype.
func (e *emitter) rotaryCosSin(emb ir.Value) (cos, sin ir.Value) {
	cos, sin = e.Unary(ir.OpCos, emb), e.Unary(ir.OpSin, emb)
	if s := e.cfg.RopeScaling; s != nil && s.Type == "yarn" && s.AttentionFactor != 1 {
		f := e.scalar(ir.F32, s.AttentionFactor)
		cos, sin = e.Mul(cos, f), e.Mul(sin, f)
	}
	return e.downcast(cos), e.downcast(sin)
}

// applyRotary is transformers' apply_rotary_pos_emb for one of q and k,
// x [batch, heads, seq, head]: x*cos + rotate_half(x)*sin, where
// rotate_half(x) = concat(-x2, x1) of the two halves of x's last axis.
func (e *emitter) applyRotary(x, cos, sin ir.Value) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	d := int64(e.last(x))
	ax := len(e.Shape(x)) - 1
	x1 := e.Slice(x, ax, 0, d/2, 1)
	x2 := e.Slice(x, ax, d/2, d, 1)
	rot := e.Concat(ax, e.Neg(x2), x1)
	return e.Add(e.Mul(x, cos), e.Mul(rot, sin))
}

// splitHeads turns [batch, seq, heads*head] into [batch, heads, seq, head].
func (e *emitter) splitHeads(x ir.Value, heads int) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	s := e.Shape(x)
	return e.Transpose(e.Reshape(x, s[0], s[1], ir.Dim(heads), ir.Dim(e.cfg.HeadDim)), 1, 2)
}

// mergeHeads turns [batch, heads, seq, head] into [batch, seq, heads*head].
func (e *emitter) mergeHeads(x ir.Value) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	s := e.Shape(x)
	return e.Reshape(e.Transpose(x, 1, 2), s[0], s[2], s[1]*s[3])
}

// repeatKV is transformers' repeat_kv: [batch, kv heads, len, head] to
// [batch, kv heads*n, len, head] by a reshape, an expand and a reshape.
func (e *emitter) repeatKV(x ir.Value, n int) ir.Value {
	if n == 1 || !ok(x) {
		return x
	}
	s := e.Shape(x)
	x = e.Reshape(x, s[0], s[1], 1, s[2], s[3])
	x = e.Expand(x, s[0], s[1], ir.Dim(n), s[2], s[3])
	return e.Reshape(x, s[0], s[1]*ir.Dim(n), s[2], s[3])
}

// cache writes this step's keys or values, [batch, kv heads, seq, head],
// into layer's KV cache at position past, in place, and returns the cache
// slice the step attends over: positions kvStart..past+seq-1. Outside a
// decode step it returns x.
func (e *emitter) cache(x ir.Value, layer int, which string, p *pass) ir.Value {
	if !p.decode || !ok(x) {
		return x
	}
	s := e.Shape(x)
	st := e.State(fmt.Sprintf("past_key_values.%d.%s", layer, which), e.dt, s[0], s[1], ir.Dim(p.cacheLen), s[3])
	if p.runtime() {
		full := e.SliceUpdateAt(st, x, 2, 0, p.at)
		e.UpdateState(st, full)
		return full
	}
	full := e.SliceUpdate(st, x, 2, int64(p.past))
	e.UpdateState(st, full)
	return e.Slice(full, 2, int64(p.kvStart), int64(p.past+p.seq), 1)
}

// attend is eager attention over q [batch, heads, seq, head] and k, v
// [batch, kv heads, keys, head]: repeat_kv, matmul(q, k^T) times the
// scale, plus the mask, softmax in f32, matmul with v. With
// Options.Composite it is the attention op instead. sinks, when not
// NoValue, are gpt-oss's [heads] sink logits: as its eager attention
// does, each row's scores get the head's sink as one more column before
// the softmax, which is dropped after it. (transformers runs that softmax
// in the model's dtype; here it is in f32 like every other, which differs
// only below bf16's rounding.)
func (e *emitter) attend(q, k, v, sinks ir.Value, p *pass) ir.Value {
	if !ok(q, k, v) {
		return ir.NoValue
	}
	scale := 1 / math.Sqrt(float64(e.cfg.HeadDim))
	if p.composite && p.runtime() {
		return e.CausalAttentionAt(q, k, v, scale, 0, p.at)
	}
	if p.composite {
		return e.Attention(q, k, v, scale, true, int64(p.past-p.kvStart))
	}
	n := int(e.Shape(q)[1] / e.Shape(k)[1])
	k, v = e.repeatKV(k, n), e.repeatKV(v, n)
	s := e.Mul(e.MatMul(q, e.Transpose(k, 2, 3)), e.scalar(e.dt, scale))
	if p.mask != ir.NoValue {
		s = e.Add(s, p.mask)
	}
	if sinks == ir.NoValue {
		return e.MatMul(e.softmax(s), v)
	}
	ss := e.Shape(s) // [batch, heads, seq, keys]
	col := e.Expand(e.Reshape(sinks, 1, ss[1], 1, 1), ss[0], ss[1], ss[2], 1)
	probs := e.softmax(e.Concat(3, s, col))
	return e.MatMul(e.Slice(probs, 3, 0, int64(ss[3]), 1), v)
}

// llamaAttention is LlamaAttention (and Qwen2's and Mistral's) named
// prefix, for layer layer: q, k, v projections, heads split, rotary
// embedding on q and k, the KV cache in a decode step, attention, heads
// merged, output projection.
func (e *emitter) llamaAttention(x ir.Value, prefix string, layer int, p *pass) ir.Value {
	c := e.cfg
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	q := e.splitHeads(e.linear(x, prefix+".q_proj", c.HiddenSize, hq*hd, c.QKVBias), hq)
	k := e.splitHeads(e.linear(x, prefix+".k_proj", c.HiddenSize, hkv*hd, c.QKVBias), hkv)
	v := e.splitHeads(e.linear(x, prefix+".v_proj", c.HiddenSize, hkv*hd, c.QKVBias), hkv)
	q, k = e.qkNorm(q, k, prefix)
	q = e.applyRotary(q, p.cos, p.sin)
	k = e.applyRotary(k, p.cos, p.sin)
	k = e.cache(k, layer, "key", p)
	v = e.cache(v, layer, "value", p)
	o := e.mergeHeads(e.attend(q, k, v, e.sinks(prefix), p))
	return e.linear(o, prefix+".o_proj", hq*hd, c.HiddenSize, c.OutBias)
}

// gpt2Attention is GPT2Attention named prefix, for layer layer: one fused
// c_attn projection [hidden, 3*hidden] split into q, k and v by slices,
// heads split, the KV cache in a decode step, attention, heads merged,
// c_proj.
func (e *emitter) gpt2Attention(x ir.Value, prefix string, layer int, p *pass) ir.Value {
	c := e.cfg
	d := int64(c.HiddenSize)
	qkv := e.conv1d(x, prefix+".c_attn", c.HiddenSize, 3*c.HiddenSize)
	q := e.splitHeads(e.Slice(qkv, 2, 0, d, 1), c.NumAttentionHeads)
	k := e.splitHeads(e.Slice(qkv, 2, d, 2*d, 1), c.NumAttentionHeads)
	v := e.splitHeads(e.Slice(qkv, 2, 2*d, 3*d, 1), c.NumAttentionHeads)
	k = e.cache(k, layer, "key", p)
	v = e.cache(v, layer, "value", p)
	o := e.mergeHeads(e.attend(q, k, v, ir.NoValue, p))
	return e.conv1d(o, prefix+".c_proj", c.HiddenSize, c.HiddenSize)
}

// qkNorm is Qwen3's q_norm and k_norm named prefix: an RMS norm over the
// last axis (each head's head_dim) of q and k, before the rotary
// embedding. Without QKNorm it returns q and k.
func (e *emitter) qkNorm(q, k ir.Value, prefix string) (ir.Value, ir.Value) {
	if !e.cfg.QKNorm {
		return q, k
	}
	return e.rmsNorm(q, prefix+".q_norm", e.cfg.RMSNormEps), e.rmsNorm(k, prefix+".k_norm", e.cfg.RMSNormEps)
}

// sinks is the attention's sink logits [heads] named prefix (gpt-oss's
// self_attn.sinks), or NoValue when the config has none.
func (e *emitter) sinks(prefix string) ir.Value {
	if !e.cfg.AttentionSinks {
		return ir.NoValue
	}
	return e.weight(prefix+".sinks", e.cfg.NumAttentionHeads)
}

// yarnInvFreq is transformers' _compute_yarn_parameters' inverse
// frequencies: each is a blend of the original frequency
// (extrapolation) and the frequency divided by factor (interpolation),
// weighted by a linear ramp over the frequency index that runs between the
// dimensions at which beta_fast and beta_slow rotations fit in the
// original context (rounded outward with truncate, clipped to the head),
// the original kept below the ramp and the interpolated above it. Values
// are rounded to f32 as torch computes them.
func yarnInvFreq(theta float64, d int, s *RopeScaling) []float64 {
	old := float64(s.OriginalMaxPositionEmbeddings)
	dim := float64(d)
	correction := func(rotations float64) float64 {
		return dim * math.Log(old/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := correction(s.BetaFast), correction(s.BetaSlow)
	if s.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, dim-1)
	if low == high {
		high += 0.001 // as transformers avoids a zero-width ramp
	}
	out := make([]float64, d/2)
	for i := range out {
		pos := math.Pow(theta, float64(2*i)/dim)
		extra, inter := 1/pos, 1/(s.Factor*pos)
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		keep := 1 - ramp // the extrapolation's share
		out[i] = ir.F32.Round(inter*(1-keep) + extra*keep)
	}
	return out
}
