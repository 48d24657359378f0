package onnx

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// Attention and RotaryEmbedding (opset 23 on), following the ONNX
// reference implementation (onnx/reference/ops/op_attention.py and
// op_rotary_embedding.py).

func init() {
	register("Attention", opAttention, 23, 24)
	register("RotaryEmbedding", opRotary, 23)
}

// opAttention computes softmax(Q K^T * scale (softcapped) + bias) V with
// grouped key and value heads, 3-D ([batch, length, heads*size]) or 4-D
// ([batch, heads, length, size]) inputs, a key/value cache (past_key and
// past_value are concatenated in front of K and V and returned as
// present_key and present_value), a boolean or additive attn_mask (its
// last axis padded as masked up to the total length), is_causal (query i
// sees key j when j <= i + past length), and, from version 24,
// nonpad_kv_seqlen (keys at or after it are masked; without a cache the
// causal frontier is bottom-right aligned to it).
//
// Without a mask, softcap or qk_matmul_output, and with value heads as
// wide as query heads, the IR's attention op is emitted; otherwise the
// decomposition. Masked scores take the dtype's lowest finite value rather
// than -inf, which softmax treats alike while magnitudes stay finite; a
// row with every key masked is NaN, as in ONNX.
func opAttention(c *nodeCtx) ([]ir.Value, error) {
	causal := c.attrInt("is_causal", 0) != 0
	qHeads := c.attrInt("q_num_heads", 0)
	kvHeads := c.attrInt("kv_num_heads", 0)
	mode := c.attrInt("qk_matmul_output_mode", 0)
	hasScale := c.hasAttr("scale")
	scale := c.attrFloat("scale", 0)
	softcap := c.attrFloat("softcap", 0)
	c.ignore("softmax_precision") // the reference computes in float64 anyway
	q, k, v := c.in(0), c.in(1), c.in(2)
	if q < 0 || k < 0 || v < 0 || c.err != nil {
		return nil, c.err
	}
	if c.n() > 7 || (c.version < 24 && c.n() > 6) {
		return nil, errorf("%d inputs", c.n())
	}
	mask, pastK, pastV, nonpad := ir.NoValue, ir.NoValue, ir.NoValue, ir.NoValue
	if c.has(3) {
		mask = c.in(3)
	}
	if c.has(4) != c.has(5) {
		return nil, errorf("past_key and past_value must be given together")
	}
	if c.has(4) {
		pastK, pastV = c.in(4), c.in(5)
	}
	if c.has(6) {
		nonpad = c.in(6)
	}
	dt := c.dtype(q)
	if !dt.IsFloat() || c.dtype(k) != dt || c.dtype(v) != dt {
		return nil, unsupported("Attention of %s, %s, %s is not supported", dt, c.dtype(k), c.dtype(v))
	}
	r := c.rank(q)
	if (r != 3 && r != 4) || c.rank(k) != r || c.rank(v) != r {
		return nil, errorf("Q, K, V of ranks %d, %d, %d; want all 3 or all 4", r, c.rank(k), c.rank(v))
	}
	// To [batch, heads, length, size].
	if r == 3 {
		if qHeads <= 0 || kvHeads <= 0 {
			return nil, errorf("3-D inputs need q_num_heads and kv_num_heads")
		}
		q = c.splitHeads(q, qHeads)
		k = c.splitHeads(k, kvHeads)
		v = c.splitHeads(v, kvHeads)
		if c.err != nil {
			return nil, c.err
		}
	}
	qs, ks, vs := c.shape(q), c.shape(k), c.shape(v)
	if qs[0] != ks[0] || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] || qs[3] != ks[3] {
		return nil, errorf("Q %v, K %v, V %v do not fit together", qs, ks, vs)
	}
	if ks[1] == 0 || qs[1]%ks[1] != 0 {
		return nil, errorf("%d query heads do not group into %d key/value heads", qs[1], ks[1])
	}
	B, Hq, S, D := qs[0], qs[1], qs[2], qs[3]
	Hkv, Dv := ks[1], vs[3]
	past := int64(0)
	if pastK >= 0 {
		if c.dtype(pastK) != dt || c.dtype(pastV) != dt {
			return nil, errorf("past_key and past_value must be %s", dt)
		}
		if c.rank(pastK) != 4 || c.rank(pastV) != 4 {
			return nil, errorf("past_key %v and past_value %v; want rank 4", c.shape(pastK), c.shape(pastV))
		}
		past = int64(c.shape(pastK)[2])
		k = c.b.Concat(2, pastK, k)
		v = c.b.Concat(2, pastV, v)
	}
	if k < 0 || v < 0 {
		return nil, c.err
	}
	T := c.shape(k)[2]
	presentK, presentV := k, v
	if !hasScale {
		scale = 1 / math.Sqrt(float64(D))
	}
	if !(scale > 0) {
		return nil, unsupported("scale %v is not supported", scale)
	}
	outNames := c.node.GetOutput()
	wantQK := len(outNames) > 3 && outNames[3] != ""
	if len(outNames) > 4 {
		return nil, errorf("%d outputs", len(outNames))
	}
	if wantQK && (mode < 0 || mode > 3) {
		return nil, errorf("qk_matmul_output_mode %d", mode)
	}
	if wantQK && mode == 0 && softcap > 0 {
		// The specification says mode 0 is the product before softcap;
		// the reference implementation returns it after. Refuse rather
		// than pick one.
		return nil, unsupported("qk_matmul_output_mode 0 with softcap is not supported")
	}
	if softcap < 0 {
		return nil, errorf("softcap %v", softcap)
	}

	var y, qk ir.Value
	if mask < 0 && nonpad < 0 && softcap == 0 && !wantQK && Dv == D && (!causal || past+int64(S) <= int64(T)) {
		y = c.b.Attention(q, k, v, scale, causal, past)
	} else {
		k, v = c.repeatHeads(k, Hq/Hkv), c.repeatHeads(v, Hq/Hkv)
		k4 := func(x float64) ir.Value { return c.scalar(dt, x) }
		scores := c.b.Mul(c.b.MatMul(q, c.b.Transpose(k, 2, 3)), k4(scale))
		if softcap > 0 {
			scores = c.b.Mul(k4(softcap), c.b.Tanh(c.b.Div(scores, k4(softcap))))
		}
		keep, add, err := c.attentionMask(mask, nonpad, causal, int64(B), int64(S), int64(T), past)
		if err != nil {
			return nil, err
		}
		biased := scores
		if add >= 0 {
			biased = c.b.Add(scores, add)
		}
		masked := biased
		if keep >= 0 {
			masked = c.b.Where(keep, biased, k4(lowest(dt)))
		}
		p := c.b.Softmax(masked, 3)
		if keep >= 0 {
			// A row whose every key is masked is NaN in ONNX (softmax of
			// -inf); the lowest-value stand-in would spread it evenly.
			anyKey := c.b.Binary(ir.OpGt, c.b.ReduceMax(c.b.Cast(keep, ir.I32), -1), c.scalar(ir.I32, 0))
			p = c.b.Where(anyKey, p, k4(math.NaN()))
		}
		y = c.b.MatMul(p, v)
		if wantQK {
			switch mode {
			case 0, 1:
				qk = scores
			case 2:
				qk = biased
				if keep >= 0 {
					qk = c.b.Where(keep, biased, k4(math.Inf(-1)))
				}
			case 3:
				qk = p
			}
		}
	}
	if r == 3 && y >= 0 {
		y = c.b.Reshape(c.b.Permute(y, 0, 2, 1, 3), B, S, Hq*Dv)
	}
	outs := []ir.Value{y, ir.NoValue, ir.NoValue, qk}
	if len(outNames) > 1 {
		outs[1], outs[2] = presentK, presentV
	}
	return outs[:len(outNames)], nil
}

// splitHeads turns [batch, length, heads*size] into [batch, heads, length,
// size].
func (c *nodeCtx) splitHeads(x ir.Value, heads int64) ir.Value {
	s := c.shape(x)
	if heads <= 0 || int64(s[2])%heads != 0 {
		return c.failf("hidden size %d does not split into %d heads", s[2], heads)
	}
	return c.b.Permute(c.b.Reshape(x, s[0], s[1], ir.Dim(heads), ir.Dim(int64(s[2])/heads)), 0, 2, 1, 3)
}

// repeatHeads repeats each head of [batch, heads, length, size] g times
// in a row (h0, h0, h1, h1, ...), the grouping that query head h reading
// key head h/g implies.
func (c *nodeCtx) repeatHeads(x ir.Value, g ir.Dim) ir.Value {
	if g == 1 || x < 0 {
		return x
	}
	s := c.shape(x)
	e := c.b.Expand(c.b.Reshape(x, s[0], s[1], 1, s[2], s[3]), s[0], s[1], g, s[2], s[3])
	return c.b.Reshape(e, s[0], s[1]*g, s[2], s[3])
}

// attentionMask builds what attn_mask, nonpad_kv_seqlen and is_causal ask
// for, as a boolean keep mask and a finite additive bias (either may be
// NoValue), each broadcastable to [batch, heads, S, T].
func (c *nodeCtx) attentionMask(mask, nonpad ir.Value, causal bool, B, S, T, past int64) (keep, add ir.Value, err error) {
	keep, add = ir.NoValue, ir.NoValue
	and := func(m ir.Value) {
		if keep < 0 {
			keep = m
		} else {
			keep = c.b.Binary(ir.OpAnd, keep, m)
		}
	}
	jT := func(shape ir.Shape, axis int) ir.Value { return c.b.Iota(ir.I64, shape, axis) }
	if mask >= 0 {
		ms := c.shape(mask)
		if len(ms) == 0 || len(ms) > 4 {
			return keep, add, errorf("attn_mask of shape %v", ms)
		}
		tm := int64(ms[len(ms)-1])
		if tm > T {
			return keep, add, errorf("attn_mask has %d keys; the total is %d", tm, T)
		}
		m := mask
		if tm < T {
			// Pad the key axis; the padded keys are masked.
			before := make([]int64, len(ms))
			after := make([]int64, len(ms))
			after[len(ms)-1] = T - tm
			m = c.b.Pad(m, before, after, 0)
			and(c.b.Binary(ir.OpLt, jT(ir.Shape{ir.Dim(T)}, 0), c.scalar(ir.I64, float64(tm))))
		}
		switch dt := c.dtype(mask); {
		case dt == ir.Bool:
			and(m)
		case dt.IsFloat():
			// -inf entries mask; the others add.
			inf := c.b.Binary(ir.OpEq, m, c.scalar(dt, math.Inf(-1)))
			and(c.b.Unary(ir.OpNot, inf))
			add = c.b.Where(inf, c.scalar(dt, 0), m)
			if dt != c.dtype(c.ins[0]) {
				return keep, add, errorf("attn_mask is %s; want bool or %s", dt, c.dtype(c.ins[0]))
			}
		default:
			return keep, add, errorf("attn_mask is %s; want bool or a float type", dt)
		}
	}
	st := ir.Shape{ir.Dim(S), ir.Dim(T)}
	var np4 ir.Value = ir.NoValue
	if nonpad >= 0 {
		ns := c.shape(nonpad)
		if c.dtype(nonpad) != ir.I64 || len(ns) != 1 || int64(ns[0]) != B {
			return keep, add, errorf("nonpad_kv_seqlen is %s%v; want i64[%d]", c.dtype(nonpad), ns, B)
		}
		np4 = c.b.Reshape(nonpad, ir.Dim(B), 1, 1, 1)
		and(c.b.Binary(ir.OpLt, c.b.Reshape(jT(ir.Shape{ir.Dim(T)}, 0), 1, 1, 1, ir.Dim(T)), np4))
	}
	if causal {
		i, j := jT(st, 0), jT(st, 1)
		if np4 >= 0 && past == 0 {
			off := c.b.Sub(np4, c.scalar(ir.I64, float64(S)))
			and(c.b.Binary(ir.OpLe, c.b.Reshape(j, 1, 1, ir.Dim(S), ir.Dim(T)), c.b.Add(c.b.Reshape(i, 1, 1, ir.Dim(S), ir.Dim(T)), off)))
		} else {
			and(c.b.Binary(ir.OpLe, j, c.b.Add(i, c.scalar(ir.I64, float64(past)))))
		}
	}
	return keep, add, nil
}

// opRotary rotates pairs of features by position-dependent angles: the
// two halves of the rotated part (or, interleaved, its even and odd
// features) become (cos x1 - sin x2, sin x1 + cos x2).
func opRotary(c *nodeCtx) ([]ir.Value, error) {
	interleaved := c.attrInt("interleaved", 0) != 0
	heads := c.attrInt("num_heads", 0)
	rotDim := c.attrInt("rotary_embedding_dim", 0)
	x, cosC, sinC := c.in(0), c.in(1), c.in(2)
	if x < 0 || cosC < 0 || sinC < 0 || c.err != nil {
		return nil, c.err
	}
	dt := c.dtype(x)
	if !dt.IsFloat() || c.dtype(cosC) != dt || c.dtype(sinC) != dt {
		return nil, unsupported("RotaryEmbedding of %s is not supported", dt)
	}
	orig := c.shape(x)
	var x4 ir.Value // [batch, length, heads, size]
	switch len(orig) {
	case 4:
		x4 = c.b.Permute(x, 0, 2, 1, 3)
	case 3:
		if heads <= 0 || int64(orig[2])%heads != 0 {
			return nil, errorf("3-D input of hidden size %d needs num_heads dividing it (num_heads %d)", orig[2], heads)
		}
		x4 = c.b.Reshape(x, orig[0], orig[1], ir.Dim(heads), ir.Dim(int64(orig[2])/heads))
	default:
		return nil, errorf("input of rank %d; want 3 or 4", len(orig))
	}
	if x4 < 0 {
		return nil, c.err
	}
	s := c.shape(x4)
	D := int64(s[3])
	rd := rotDim
	if rd == 0 {
		rd = D
	}
	if rd <= 0 || rd > D || rd%2 != 0 {
		return nil, errorf("rotary_embedding_dim %d for head size %d", rotDim, D)
	}
	half := rd / 2
	cos, sin := cosC, sinC
	if c.has(3) {
		pos := c.in(3)
		if pos < 0 {
			return nil, c.err
		}
		cos, sin = c.b.Gather(cosC, pos, 0), c.b.Gather(sinC, pos, 0)
	}
	for _, t := range []ir.Value{cos, sin} {
		if ts := c.shape(t); len(ts) != 3 || ts[0] != s[0] || ts[1] != s[1] || int64(ts[2]) != half {
			return nil, errorf("cos/sin of shape %v; want [%d, %d, %d]", ts, s[0], s[1], half)
		}
	}
	cos = c.b.Reshape(cos, s[0], s[1], 1, ir.Dim(half))
	sin = c.b.Reshape(sin, s[0], s[1], 1, ir.Dim(half))
	var x1, x2 ir.Value
	if interleaved {
		x1, x2 = c.b.Slice(x4, 3, 0, rd, 2), c.b.Slice(x4, 3, 1, rd, 2)
	} else {
		x1, x2 = c.b.Slice(x4, 3, 0, half, 1), c.b.Slice(x4, 3, half, rd, 1)
	}
	real := c.b.Sub(c.b.Mul(cos, x1), c.b.Mul(sin, x2))
	imag := c.b.Add(c.b.Mul(sin, x1), c.b.Mul(cos, x2))
	var rot ir.Value
	if interleaved {
		hs := ir.Shape{s[0], s[1], s[2], ir.Dim(half), 1}
		rot = c.b.Reshape(c.b.Concat(4, c.b.Reshape(real, hs...), c.b.Reshape(imag, hs...)), s[0], s[1], s[2], ir.Dim(rd))
	} else {
		rot = c.b.Concat(3, real, imag)
	}
	if rd < D {
		rot = c.b.Concat(3, rot, c.b.Slice(x4, 3, rd, D, 1))
	}
	if len(orig) == 3 {
		return c.outs(c.b.Reshape(rot, orig...))
	}
	return c.outs(c.b.Permute(rot, 0, 2, 1, 3))
}
