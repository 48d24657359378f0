package ir

import (
	"fmt"
	"math"
)

// A serving step runs the tokens of many sequences through one graph with
// their keys and values in a paged pool: slots of [kv heads, head size]
// grouped Block to a block, a sequence's positions mapped to blocks by its
// row of the block table. Two ops express it. Scatter writes the step's new
// rows into the pool at their slots; paged attention attends each token to
// its own sequence's keys, the cached ones through the block table and the
// step's own ones from the step's k and v.

// Scatter writes update into base along axis: slice i of update (along
// axis) goes to position index[i]; an index of -1 writes nothing.
func (b *Builder) Scatter(base, update, index Value, axis int) Value {
	return b.Apply(OpScatter, Attrs{Axis: axis}, base, update, index)
}

// PagedAttention is causal attention of a step's tokens over their
// sequences: q [T, Hq, D]; the step's own keys and values k, v [T, Hkv, D];
// the pools [P, Hkv, D] of Block slots a block; the block table [S, M], the
// sequence lengths (this step's tokens included) [S], the query starts
// [S+1] and the number of sequences present seqs (a scalar, at most S).
func (b *Builder) PagedAttention(q, k, v, kpool, vpool, table, lens, starts, seqs Value, scale float64, block, window int64) Value {
	return b.Apply(OpPagedAttention, Attrs{Scale: scale, Block: block, Window: window}, q, k, v, kpool, vpool, table, lens, starts, seqs)
}

// PagedAttentionSinks is PagedAttention with learned sinks [Hq] (f32 or
// q's dtype; gpt-oss's self_attn.sinks): one more logit a query head that
// enters each softmax's denominator once and the output not at all,
//
//	p_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sink - m)),
//
// m the larger of the scores' max and the sink. It is paged attention's
// tenth operand, after the metadata; a graph without it means what it
// meant before (no sinks).
func (b *Builder) PagedAttentionSinks(q, k, v, kpool, vpool, table, lens, starts, seqs, sinks Value, scale float64, block, window int64) Value {
	return b.Apply(OpPagedAttention, Attrs{Scale: scale, Block: block, Window: window}, q, k, v, kpool, vpool, table, lens, starts, seqs, sinks)
}

// PagedSinks is the operand that holds paged attention n's sinks, if it
// has them.
func PagedSinks(n *Node) (Value, bool) {
	if n.Op == OpPagedAttention && len(n.Inputs) > 9 {
		return n.Inputs[9], true
	}
	return NoValue, false
}

// PagedToken is where one token of a step sits: its sequence, its position
// in that sequence, and the sequence's cached context (the positions before
// this step's first token, read from the pool).
type PagedToken struct {
	Seq      int   // -1: the token belongs to no sequence present
	Pos      int64 // its position
	Context  int64 // positions 0..Context-1 are in the pool
	First    int64 // the step's first token of the sequence
	Lo       int64 // the first position it attends (the window's start)
	rowTable int64 // offset of its sequence's row of the block table
}

// PagedMeta is the metadata paged attention reads, decoded and checked.
type PagedMeta struct {
	Block, Window int64
	Slots         int64 // pool extent
	Blocks        int64 // block table columns
	Table         func(j int64) int64
	Tokens        []PagedToken
}

// PagedTokens decodes paged attention's metadata for tokens tokens: value
// reads element j of operand k (5: table, 6: lengths, 7: starts, 8: seqs).
// It checks what the op's meaning needs: seqs within the table's rows,
// query starts that begin at 0, never decrease and stay within the tokens,
// lengths that hold their step tokens, and every cached position's block
// within the table's row and the pool. Tokens past the last sequence's end
// belong to none.
func PagedTokens(n *Node, in []ValueType, value func(k int, j int64) int64) (*PagedMeta, error) {
	T := int64(in[0].Shape[0])
	S, M := int64(in[5].Shape[0]), int64(in[5].Shape[1])
	slots := int64(in[3].Shape[0])
	m := &PagedMeta{Block: n.Block, Window: n.Window, Slots: slots, Blocks: M, Table: func(j int64) int64 { return value(5, j) }}
	seqs := value(8, 0)
	if seqs < 0 || seqs > S {
		return nil, fmt.Errorf("%d sequences present; the block table has %d rows", seqs, S)
	}
	m.Tokens = make([]PagedToken, T)
	for t := range m.Tokens {
		m.Tokens[t] = PagedToken{Seq: -1}
	}
	if v := value(7, 0); v != 0 {
		return nil, fmt.Errorf("query start of sequence 0 is %d; want 0", v)
	}
	for s := range seqs {
		q0, q1 := value(7, s), value(7, s+1)
		if q1 < q0 || q1 > T {
			return nil, fmt.Errorf("query starts of sequence %d are %d..%d; want non-decreasing starts within %d tokens", s, q0, q1, T)
		}
		L := value(6, s)
		ctx := L - (q1 - q0)
		if ctx < 0 {
			return nil, fmt.Errorf("sequence %d has length %d, shorter than its %d tokens in the step", s, L, q1-q0)
		}
		if need := (L + n.Block - 1) / n.Block; need > M {
			return nil, fmt.Errorf("sequence %d has length %d, which needs %d blocks; the block table holds %d", s, L, need, M)
		}
		for j := int64(0); j*n.Block < ctx; j++ {
			if b := value(5, s*M+j); b < 0 || (b+1)*n.Block > slots {
				return nil, fmt.Errorf("sequence %d: block %d of its table is %d, outside the pool's %d blocks", s, j, b, slots/n.Block)
			}
		}
		for t := q0; t < q1; t++ {
			pos := ctx + t - q0
			lo := int64(0)
			if n.Window > 0 {
				lo = max(0, pos-n.Window+1)
			}
			m.Tokens[t] = PagedToken{Seq: int(s), Pos: pos, Context: ctx, First: q0, Lo: lo, rowTable: s * M}
		}
	}
	return m, nil
}

// Slot is the pool slot that holds cached position j of token t's
// sequence (j < its context).
func (m *PagedMeta) Slot(t int, j int64) int64 {
	tok := m.Tokens[t]
	return m.Table(tok.rowTable+j/m.Block)*m.Block + j%m.Block
}

// KeyRow says where the key and value of position j of token t's sequence
// are: the pool's slot (fromPool) or the step's own row.
func (m *PagedMeta) KeyRow(t int, j int64) (row int64, fromPool bool) {
	tok := m.Tokens[t]
	if j < tok.Context {
		return m.Slot(t, j), true
	}
	return tok.First + j - tok.Context, false
}

// pagedAttention evaluates paged attention token by token: each token's
// query heads attend over positions Lo..Pos of its sequence, the
// grouped key head Hq/Hkv heads share, each head's sink (when the node
// has sinks) one more softmax term with no value; a token of no sequence
// gets zeros.
func (e *evaluator) pagedAttention() (*Tensor, *Tensor, error) {
	n := e.n
	ins := make([]ValueType, len(n.Inputs))
	for k := range ins {
		ins[k] = ValueType{e.in(k).Shape, e.in(k).DType}
	}
	meta, err := PagedTokens(n, ins, func(k int, j int64) int64 { return e.in(k).Int(j) })
	if err != nil {
		return nil, nil, err
	}
	q := e.in(0)
	Hq, D := int(q.Shape[1]), int(q.Shape[2])
	Hkv := int(e.in(1).Shape[1])
	group := Hq / Hkv
	v, m := e.out()
	mag := m != nil
	for t, tok := range meta.Tokens {
		if tok.Seq < 0 {
			continue
		}
		L := int(tok.Pos - tok.Lo + 1)
		kr, vt := make([]float64, L*D), make([]float64, L*D)
		var krm, vtm, qrm, pm []float64
		if mag {
			krm, vtm, qrm, pm = make([]float64, L*D), make([]float64, L*D), make([]float64, D), make([]float64, L)
		}
		qr, p := make([]float64, D), make([]float64, L)
		for kh := range Hkv {
			for i := range L {
				row, pool := meta.KeyRow(t, tok.Lo+int64(i))
				kk, vk := 1, 2
				if pool {
					kk, vk = 3, 4
				}
				off := (row*int64(Hkv) + int64(kh)) * int64(D)
				for d := range D {
					kr[i*D+d], vt[d*L+i] = e.in(kk).At(off+int64(d)), e.in(vk).At(off+int64(d))
					if mag {
						krm[i*D+d], vtm[d*L+i] = e.mag(kk).F64[off+int64(d)], e.mag(vk).F64[off+int64(d)]
					}
				}
			}
			for h := kh * group; h < (kh+1)*group; h++ {
				qo := (int64(t)*int64(Hq) + int64(h)) * int64(D)
				for d := range D {
					qr[d] = q.At(qo + int64(d))
					if mag {
						qrm[d] = e.mag(0).F64[qo+int64(d)]
					}
				}
				sink := e.pagedSink(h)
				avg := attentionProbsSink(qr, qrm, kr, krm, n.Scale, p, pm, sink)
				for d := range D {
					var col []float64
					if mag {
						col = vtm[d*L : (d+1)*L]
					}
					val, mg := attentionOut(p, pm, avg, vt[d*L:(d+1)*L], col)
					v.F64[qo+int64(d)] = val
					if mag {
						m.F64[qo+int64(d)] = mg
					}
				}
			}
		}
	}
	return v, m, nil
}

// pagedSink is query head h's sink (its value and magnitude) when the
// node has sinks, else nil.
func (e *evaluator) pagedSink(h int) *[2]float64 {
	if len(e.n.Inputs) <= 9 {
		return nil
	}
	s := &[2]float64{e.in(9).At(int64(h)), 0}
	if e.magnitude {
		s[1] = e.mag(9).F64[h]
	} else {
		s[1] = math.Abs(s[0])
	}
	return s
}

// scatter evaluates scatter: base copied, then each slice of update
// written at its index. An index outside base, below -1, or given twice
// is an error: the op has no meaning there.
func (e *evaluator) scatter() (*Tensor, *Tensor, error) {
	n := e.n
	base, up, index := e.in(0), e.in(1), e.in(2)
	ax, _ := normAxis(n.Axis, len(base.Shape))
	v, m := e.out()
	for i := range v.Len() {
		copyElem(v, i, base, i)
		if m != nil {
			m.F64[i] = e.mag(0).F64[i]
		}
	}
	extent := int64(base.Shape[ax])
	seen := map[int64]int64{}
	outer := int64(1)
	for d := range ax {
		outer *= int64(base.Shape[d])
	}
	inner := int64(1)
	for d := ax + 1; d < len(base.Shape); d++ {
		inner *= int64(base.Shape[d])
	}
	rows := int64(up.Shape[ax])
	for i := range rows {
		at := index.Int(i)
		if at == -1 {
			continue
		}
		if at < -1 || at >= extent {
			return nil, nil, fmt.Errorf("index %d of slice %d is outside extent %d on axis %d", at, i, extent, ax)
		}
		if first, dup := seen[at]; dup {
			return nil, nil, fmt.Errorf("slices %d and %d are both written at %d on axis %d", first, i, at, ax)
		}
		seen[at] = i
		for o := range outer {
			for j := range inner {
				dst := (o*extent+at)*inner + j
				src := (o*rows+i)*inner + j
				copyElem(v, dst, up, src)
				if m != nil {
					m.F64[dst] = e.mag(1).F64[src]
				}
			}
		}
	}
	return v, m, nil
}

// scatterSource is scatter's mover rule, one output element at a time:
// the update slice whose index names the element's position along the
// axis, else the base. It reads the index vector through get (operand 2)
// and so costs one pass over it per element; point evaluation asks for a
// few elements.
func (mp *mover) scatterSource(idx []int64, get func(k int, j int64) int64) (int, int64, error) {
	ax := mp.ax
	rows := int64(mp.ins[1].Shape[ax])
	extent := int64(mp.ins[0].Shape[ax])
	found := int64(-1)
	for i := range rows {
		at := get(2, i)
		if at < -1 || at >= extent {
			return 0, 0, fmt.Errorf("index %d of slice %d is outside extent %d on axis %d", at, i, extent, ax)
		}
		if at == idx[ax] {
			if found >= 0 {
				return 0, 0, fmt.Errorf("slices %d and %d are both written at %d on axis %d", found, i, at, ax)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, flatIndex(idx, mp.strides[0]), nil
	}
	var j int64
	for d, x := range idx {
		if d == ax {
			x = found
		}
		j += x * mp.strides[1][d]
	}
	return 1, j, nil
}
