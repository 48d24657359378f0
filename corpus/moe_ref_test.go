package corpus

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// moeRef is the mixture-of-experts families' reference: a float64
// forward pass written here from transformers' modeling code
// (MixtralForCausalLM, Qwen3MoeForCausalLM, GptOssForCausalLM in eager
// mode), which shares nothing with the builders or with ir's route and
// experts: the router, its top-k and normalisation, the experts (SwiGLU,
// or gpt-oss's clamped SwiGLU over interleaved columns with biases), q/k
// norms, YaRN, attention sinks and per-layer windows.

// f32Tol is the allowance of an f32 graph against the float64 reference,
// relative to the reference's scale (1 + its largest magnitude): the
// interpreter rounds each f32 result to 2^-24, and a logit's longest chain
// of rounded results is a few hundred (two layers of norms, dot products
// of 64 terms, softmaxes and the experts' two products), so 2^-24 * 2^8
// bounds it with room.
const f32Tol = 0x1p-24 * 256

// moeRef is the reference model: a config and its weights.
type moeRef struct {
	c *Config
	w map[string]*ir.Tensor
	// sinkColumns is how many times each head's sink joins the softmax
	// (1 as gpt-oss has it; the planted-error test sets 2).
	sinkColumns int
	// noWindow makes every layer attend fully, and noYaRNFactor leaves
	// YaRN's attention factor off cos and sin (planted errors).
	noWindow, noYaRNFactor bool
}

func (m *moeRef) vec(name string) []float64 {
	if t, ok := m.w[name]; ok {
		return t.Float64s()
	}
	// A checkpoint's per-expert tensor [out, in], as Hugging Face names
	// it, cut out of the graph's stacked weight [experts, in, parts × out]
	// (independently of corpus's own assembly: by its name's pattern).
	for stacked, t := range m.w {
		before, after, ok := strings.Cut(stacked, ".*.")
		if !ok || !strings.HasPrefix(name, before+".") {
			continue
		}
		parts, suffix, _ := strings.Cut(after, ".")
		rest := strings.TrimPrefix(name, before+".")
		idx, tail, _ := strings.Cut(rest, ".")
		e, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		for p, part := range strings.Split(parts, "+") {
			if tail != part+"."+suffix {
				continue
			}
			in, cols := int(t.Shape[1]), int(t.Shape[2])
			out := cols / len(strings.Split(parts, "+"))
			v := make([]float64, out*in)
			for o := range out {
				for k := range in {
					v[o*in+k] = t.At(int64((e*in+k)*cols + p*out + o))
				}
			}
			return v
		}
	}
	panic("no weight " + name)
}

// linear is nn.Linear: x [in] times weight [out, in], plus bias [out].
func linear(x, w, b []float64, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for o := range out {
		s := 0.0
		if b != nil {
			s = b[o]
		}
		for k := range in {
			s += x[k] * w[o*in+k]
		}
		y[o] = s
	}
	return y
}

// rmsNormRef is LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight.
func rmsNormRef(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * r * w[i]
	}
	return y
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// topKRef is torch.topk's choice: the k largest, ties to the lower index.
func topKRef(x []float64, k int) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case x[a] > x[b]:
			return -1
		case x[a] < x[b]:
			return 1
		}
		return 0
	})
	return idx[:k]
}

func softmaxRef(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	y := make([]float64, len(x))
	sum := 0.0
	for i, v := range x {
		y[i] = math.Exp(v - mx)
		sum += y[i]
	}
	for i := range y {
		y[i] /= sum
	}
	return y
}

// moe is the sparse MoE block of layer i over one token x [hidden], with
// the margin of its router's choice (RouteMargin of its logits).
func (m *moeRef) moe(x []float64, i int) ([]float64, float64) {
	c, e := m.c, m.c.MoE
	H, E, I, k := c.HiddenSize, e.NumExperts, e.IntermediateSize, e.NumExpertsPerTok
	pre := fmt.Sprintf("model.layers.%d.", i)
	var logits []float64
	var chosen []int
	var weights []float64
	switch c.ModelType {
	case GPTOSS:
		// GptOssTopKRouter: top-k of the logits, softmax over them.
		logits = linear(x, m.vec(pre+"mlp.router.weight"), m.vec(pre+"mlp.router.bias"), E)
		chosen = topKRef(logits, k)
		top := make([]float64, k)
		for j, ex := range chosen {
			top[j] = logits[ex]
		}
		weights = softmaxRef(top)
	default:
		// MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock: softmax over
		// all logits, top-k of the probabilities, renormalised when
		// norm_topk_prob (always, for Mixtral).
		gate := pre + "mlp.gate.weight"
		if c.ModelType == Mixtral {
			gate = pre + "block_sparse_moe.gate.weight"
		}
		logits = linear(x, m.vec(gate), nil, E)
		probs := softmaxRef(logits)
		chosen = topKRef(probs, k)
		sum := 0.0
		for _, ex := range chosen {
			weights = append(weights, probs[ex])
			sum += probs[ex]
		}
		if e.NormTopKProb {
			for j := range weights {
				weights[j] /= sum
			}
		}
	}
	y := make([]float64, H)
	for j, ex := range chosen {
		var out []float64
		switch c.ModelType {
		case GPTOSS:
			// GptOssExperts: gate_up = x @ gate_up_proj[e] + bias; gate
			// the even columns, up the odd; clamp; (up + 1) * glu;
			// @ down_proj[e] + bias.
			gu, gub := m.vec(pre+"mlp.experts.gate_up_proj"), m.vec(pre+"mlp.experts.gate_up_proj_bias")
			dn, dnb := m.vec(pre+"mlp.experts.down_proj"), m.vec(pre+"mlp.experts.down_proj_bias")
			h := make([]float64, I)
			for col := range I {
				g, u := gub[ex*2*I+2*col], gub[ex*2*I+2*col+1]
				for r := range H {
					g += x[r] * gu[(ex*H+r)*2*I+2*col]
					u += x[r] * gu[(ex*H+r)*2*I+2*col+1]
				}
				g = math.Min(g, e.SwiGLULimit)
				u = math.Max(-e.SwiGLULimit, math.Min(u, e.SwiGLULimit))
				h[col] = (u + 1) * g / (1 + math.Exp(-1.702*g))
			}
			out = make([]float64, H)
			for o := range H {
				s := dnb[ex*H+o]
				for col := range I {
					s += h[col] * dn[(ex*I+col)*H+o]
				}
				out[o] = s
			}
		default:
			// MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x);
			// Qwen3MoeMLP: down(silu(gate x) * up x).
			names := [3]string{"gate_proj", "up_proj", "down_proj"}
			ep := fmt.Sprintf("%smlp.experts.%d.", pre, ex)
			if c.ModelType == Mixtral {
				names = [3]string{"w1", "w3", "w2"}
				ep = fmt.Sprintf("%sblock_sparse_moe.experts.%d.", pre, ex)
			}
			g := linear(x, m.vec(ep+names[0]+".weight"), nil, I)
			u := linear(x, m.vec(ep+names[1]+".weight"), nil, I)
			for col := range I {
				g[col] = silu(g[col]) * u[col]
			}
			out = linear(g, m.vec(ep+names[2]+".weight"), nil, H)
		}
		for o := range H {
			y[o] += weights[j] * out[o]
		}
	}
	return y, ir.RouteMargin(logits, k)
}

// invFreqRef is the rotary inverse frequencies: default, or YaRN as
// _compute_yarn_parameters computes them, with the attention factor.
func invFreqRef(c *Config) ([]float64, float64) {
	d := c.HeadDim
	base := make([]float64, d/2)
	for j := range base {
		base[j] = 1 / math.Pow(c.RopeTheta, float64(2*j)/float64(d))
	}
	s := c.RopeScaling
	if s == nil {
		return base, 1
	}
	if s.Type != "yarn" {
		panic("reference has no " + s.Type)
	}
	corr := func(rot float64) float64 {
		return float64(d) * math.Log(float64(s.OriginalMaxPositionEmbeddings)/(rot*2*math.Pi)) / (2 * math.Log(c.RopeTheta))
	}
	lo, hi := corr(s.BetaFast), corr(s.BetaSlow)
	if s.Truncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = math.Max(lo, 0), math.Min(hi, float64(d-1))
	if lo == hi {
		hi += 0.001
	}
	out := make([]float64, d/2)
	for j := range out {
		ramp := math.Min(math.Max((float64(j)-lo)/(hi-lo), 0), 1)
		extrapolation := 1 - ramp
		out[j] = base[j]/s.Factor*(1-extrapolation) + base[j]*extrapolation
	}
	return out, 0.1*math.Log(s.Factor) + 1
}

// rope applies the rotary embedding at position pos to one head x
// in place: x*cos + rotate_half(x)*sin, cos and sin times the factor.
func rope(x, inv []float64, factor float64, pos int) {
	half := len(x) / 2
	y := slices.Clone(x)
	for j := range x {
		a := float64(pos) * inv[j%half]
		var rot float64 // rotate_half: concat(-x2, x1)
		if j < half {
			rot = -y[j+half]
		} else {
			rot = y[j-half]
		}
		x[j] = y[j]*math.Cos(a)*factor + rot*math.Sin(a)*factor
	}
}

// attention is layer i's self-attention over x [seq][hidden].
func (m *moeRef) attention(x [][]float64, i int) [][]float64 {
	c := m.c
	pre := fmt.Sprintf("model.layers.%d.self_attn.", i)
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	bias := func(n string) []float64 {
		if !c.QKVBias {
			return nil
		}
		return m.vec(pre + n + ".bias")
	}
	inv, factor := invFreqRef(c)
	if m.noYaRNFactor {
		factor = 1
	}
	S := len(x)
	q, k, v := make([][]float64, S), make([][]float64, S), make([][]float64, S)
	for s := range S {
		q[s] = linear(x[s], m.vec(pre+"q_proj.weight"), bias("q_proj"), hq*hd)
		k[s] = linear(x[s], m.vec(pre+"k_proj.weight"), bias("k_proj"), hkv*hd)
		v[s] = linear(x[s], m.vec(pre+"v_proj.weight"), bias("v_proj"), hkv*hd)
		for h := range hq {
			head := q[s][h*hd : (h+1)*hd]
			if c.QKNorm {
				copy(head, rmsNormRef(head, m.vec(pre+"q_norm.weight"), c.RMSNormEps))
			}
			rope(head, inv, factor, s)
		}
		for h := range hkv {
			head := k[s][h*hd : (h+1)*hd]
			if c.QKNorm {
				copy(head, rmsNormRef(head, m.vec(pre+"k_norm.weight"), c.RMSNormEps))
			}
			rope(head, inv, factor, s)
		}
	}
	window := c.SlidingWindow
	if (c.LayerTypes != nil && c.LayerTypes[i] != slidingAttention) || m.noWindow {
		window = 0
	}
	var sinks []float64
	if c.AttentionSinks {
		sinks = m.vec(pre + "sinks")
	}
	scale := 1 / math.Sqrt(float64(hd))
	out := make([][]float64, S)
	for s := range S {
		o := make([]float64, hq*hd)
		for h := range hq {
			kvh := h / (hq / hkv)
			var keys []int
			var logits []float64
			for j := 0; j <= s; j++ {
				if window > 0 && s-j >= window {
					continue
				}
				d := 0.0
				for t := range hd {
					d += q[s][h*hd+t] * k[j][kvh*hd+t]
				}
				keys = append(keys, j)
				logits = append(logits, d*scale)
			}
			if sinks != nil {
				for range m.sinkColumns {
					logits = append(logits, sinks[h])
				}
			}
			p := softmaxRef(logits)
			for n, j := range keys {
				for t := range hd {
					o[h*hd+t] += p[n] * v[j][kvh*hd+t]
				}
			}
		}
		var ob []float64
		if c.OutBias {
			ob = m.vec(pre + "o_proj.bias")
		}
		out[s] = linear(o, m.vec(pre+"o_proj.weight"), ob, c.HiddenSize)
	}
	return out
}

// forward is the causal LM over ids: logits [seq][vocab], and the
// smallest router margin of each position over the layers.
func (m *moeRef) forward(ids []int) ([][]float64, []float64) {
	c := m.c
	H := c.HiddenSize
	emb := m.vec("model.embed_tokens.weight")
	h := make([][]float64, len(ids))
	margins := make([]float64, len(ids))
	for s, id := range ids {
		h[s] = slices.Clone(emb[id*H : (id+1)*H])
		margins[s] = math.Inf(1)
	}
	for i := range c.NumHiddenLayers {
		pre := fmt.Sprintf("model.layers.%d.", i)
		x := make([][]float64, len(h))
		for s := range h {
			x[s] = rmsNormRef(h[s], m.vec(pre+"input_layernorm.weight"), c.RMSNormEps)
		}
		a := m.attention(x, i)
		for s := range h {
			for j := range H {
				h[s][j] += a[s][j]
			}
			y, margin := m.moe(rmsNormRef(h[s], m.vec(pre+"post_attention_layernorm.weight"), c.RMSNormEps), i)
			margins[s] = math.Min(margins[s], margin)
			for j := range H {
				h[s][j] += y[j]
			}
		}
	}
	head := m.vec("lm_head.weight")
	if c.TieWordEmbeddings {
		head = emb
	}
	logits := make([][]float64, len(ids))
	for s := range h {
		logits[s] = linear(rmsNormRef(h[s], m.vec("model.norm.weight"), c.RMSNormEps), head, nil, c.VocabSize)
	}
	return logits, margins
}

// tieMargin is the router margin below which a choice is left out: the
// graph's f32 logits may choose the other expert.
const tieMargin = 1e-9

// compareRows compares rows of got [rows × width] with want, row r only
// while every earlier row's margin (and its own) clears tieMargin when
// causal (a wrong choice at one position reaches the later ones through
// attention), or its own otherwise; it returns the worst difference
// relative to the scale and the number of rows compared.
func compareRows(got *ir.Tensor, want [][]float64, margins []float64, causal bool) (float64, int) {
	worst, n := 0.0, 0
	for r, row := range want {
		if margins[r] < tieMargin {
			if causal {
				break
			}
			continue
		}
		scale := 1.0
		for _, v := range row {
			scale = math.Max(scale, 1+math.Abs(v))
		}
		for j, v := range row {
			worst = math.Max(worst, math.Abs(got.At(int64(r*len(row)+j))-v)/scale)
		}
		n++
	}
	return worst, n
}
