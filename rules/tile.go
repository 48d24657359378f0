package rules

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The appliers of the tile rule set (builtin/tile.rules): structural
// tilings that change the kernel graph, written in tensor ops so that the
// reference interpreter checks them like any other term.
//
//   - split-K: a matmul with a long reduction becomes a batched matmul of
//     partial products over a leading split axis plus a sum over it.
//   - two-stage sum: a long last-axis sum becomes a sum of partial sums.
//   - K/V-blocked attention: softmax(s) v over a long key axis becomes, per
//     block of keys, the block's scores, max, exponentials, row sum and
//     partial output, combined with flash-decoding's split-KV rescaling.
//
// None of them loops: every split leaves chunks below the size that makes
// the rule match, and the blocked attention holds no softmax over the
// whole key axis.
//
// Every partial accumulation they introduce (split-K's partial products,
// the partial sums, a key block's row sum and partial output) is kept in
// f32, the accumulator a kernel sums in, and only the combined result is
// rounded to the dtype of the term it replaces: a partial rounded to bf16
// would add an error of bf16's precision that the model as given does not
// have. tileBody.add refuses a term that breaks this (narrowPartial).
func init() {
	RegisterApplier("tile_split_k", func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
		return applySplitK(g, m, 0)
	})
	RegisterApplier("tile_split_k_fine", func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
		return applySplitK(g, m, 1)
	})
	RegisterApplier("tile_split_sum", applySplitSum)
	RegisterApplier("tile_kv_attention", applyKVSoftmax)
	RegisterApplier("tile_kv_attention_op", applyKVAttentionOp)
}

// Sizes that decide where the tile rules apply and how finely they split.
// The rule file's conditions repeat the thresholds (so that stats and
// readers see them); the appliers check them again and pick the splits.
const (
	// SplitKMin is the shortest matmul reduction split-K applies to; a
	// chunk is at least SplitKChunkMin long and shorter than SplitKMin, so
	// a split matmul is never split again.
	SplitKMin      = 2048
	SplitKChunkMin = 512
	// SplitSumMin is the shortest last-axis sum made two-stage; its chunks
	// are at most SplitSumChunk long (and at least SplitSumChunkMin).
	SplitSumMin      = 4096
	SplitSumChunk    = 1024
	SplitSumChunkMin = 256
	// KVBlockMin is the shortest key axis blocked attention applies to,
	// KVBlock the length of a block, and KVMaxBlocks the most blocks.
	KVBlockMin  = 512
	KVBlock     = 256
	KVMaxBlocks = 64
)

// SplitKFactors returns the splits split-K makes of a reduction of length
// k, coarsest first: the powers of two S dividing k whose chunk k/S lies in
// [SplitKChunkMin, SplitKMin), at most two of them (the two coarsest).
func SplitKFactors(k int64) []int64 {
	if k < SplitKMin {
		return nil
	}
	var out []int64
	for s := int64(2); k/s >= SplitKChunkMin && len(out) < 2; s *= 2 {
		if k%s == 0 && k/s < SplitKMin {
			out = append(out, s)
		}
	}
	return out
}

// SplitSumFactor returns the number of chunks a last-axis sum of length k
// is cut into (0 when it is not): the smallest power of two S dividing k
// with k/S <= SplitSumChunk, if the chunk is at least SplitSumChunkMin.
func SplitSumFactor(k int64) int64 {
	if k < SplitSumMin {
		return 0
	}
	for s := int64(2); k/s >= SplitSumChunkMin; s *= 2 {
		if k%s == 0 && k/s <= SplitSumChunk {
			return s
		}
	}
	return 0
}

// KVBlocks returns the number of key blocks blocked attention cuts a key
// axis of length t into (0 when it does not apply).
func KVBlocks(t int64) int64 {
	if t < KVBlockMin || t%KVBlock != 0 {
		return 0
	}
	b := t / KVBlock
	for b > KVMaxBlocks && b%2 == 0 {
		b /= 2
	}
	return b
}

// tileBody is a term under construction: an ir builder whose inputs ("$0",
// "$1", ...) stand for e-classes.
type tileBody struct {
	b    *ir.Builder
	args []egraph.ClassID
}

func newTileBody() *tileBody { return &tileBody{b: ir.NewBuilder("tile")} }

// arg makes class c an input of the term.
func (t *tileBody) arg(g *egraph.EGraph[Data], c egraph.ClassID) (ir.Value, bool) {
	d := g.Data(c)
	if !d.Valid() {
		return ir.NoValue, false
	}
	name := fmt.Sprintf("$%d", len(t.args))
	t.args = append(t.args, c)
	return t.b.Input(name, d.DType, d.Shape...), true
}

// add puts the term computing out into the e-graph and returns its class,
// unless it rounds a partial accumulation narrower than f32
// (narrowPartial).
func (t *tileBody) add(g *egraph.EGraph[Data], out ir.Value) (egraph.ClassID, bool) {
	t.b.Output("out", out)
	gr, err := t.b.Build()
	if err != nil {
		return 0, false
	}
	if _, bad := narrowPartial(gr); bad {
		return 0, false
	}
	return t.insert(g, gr)
}

// insert puts gr's output, a term over t's arguments, into the e-graph and
// returns its class. Only the nodes the output depends on are added.
func (t *tileBody) insert(g *egraph.EGraph[Data], gr *ir.Graph) (egraph.ClassID, bool) {
	need := make([]bool, len(gr.Nodes))
	need[gr.Outputs[0].Value] = true
	for i := len(gr.Nodes) - 1; i >= 0; i-- {
		if need[i] {
			for _, in := range gr.Nodes[i].Inputs {
				need[in] = true
			}
		}
	}
	classes := make([]egraph.ClassID, len(gr.Nodes))
	for i, n := range gr.Nodes {
		if !need[i] {
			continue
		}
		if n.Op == ir.OpInput {
			var k int
			if _, err := fmt.Sscanf(n.Name, "$%d", &k); err != nil || k >= len(t.args) {
				return 0, false
			}
			classes[i] = t.args[k]
			continue
		}
		kids := make([]egraph.ClassID, len(n.Inputs))
		for j, in := range n.Inputs {
			kids[j] = classes[in]
		}
		op, pay := NodeOf(n)
		c, err := g.Add(egraph.Node{Op: op, Payload: pay, Children: kids})
		if err != nil {
			return 0, false
		}
		classes[i] = c
	}
	return classes[gr.Outputs[0].Value], true
}

// tileLastAxis reports whether a reduction payload's axis is the last of a
// tensor of rank r.
func tileLastAxis(p egraph.Payload, r int) bool {
	a, ok := Attrs(p)
	return ok && r > 0 && (a.Axis == r-1 || a.Axis == -1)
}

// tileToFront moves axis `from` of x to the front: the permutation that
// makes it axis 0, the others keeping their order. Identity permutations
// are left out.
func tileToFront(b *ir.Builder, x ir.Value, from int) ir.Value {
	if from == 0 {
		return x
	}
	r := len(b.Shape(x))
	perm := []int{from}
	for i := range r {
		if i != from {
			perm = append(perm, i)
		}
	}
	return b.Permute(x, perm...)
}

// tileDims returns s with axis i replaced by the dims given.
func tileDims(s ir.Shape, i int, dims ...ir.Dim) ir.Shape {
	out := append(ir.Shape{}, s[:i]...)
	out = append(out, dims...)
	return append(out, s[i+1:]...)
}

// applySplitK rewrites (matmul ?a ?b), a [.., M, K] and b [.., K, N], as
// reshape(sum over axis 0 of matmul(a', b')), where a' [S, .., M, K/S] and
// b' [S, .., K/S, N] hold the S chunks of the reduction on a leading batch
// axis. which picks the split (0: the coarsest, 1: the next).
func applySplitK(g *egraph.EGraph[Data], m egraph.Match, which int) (egraph.ClassID, bool) {
	da, db := g.Data(m.Get("?a")), g.Data(m.Get("?b"))
	if !da.Valid() || !db.Valid() || len(da.Shape) < 2 || len(da.Shape) != len(db.Shape) {
		return 0, false
	}
	r := len(da.Shape)
	k := int64(da.Shape[r-1])
	if int64(db.Shape[r-2]) != k {
		return 0, false
	}
	splits := SplitKFactors(k)
	if which >= len(splits) {
		return 0, false
	}
	s := ir.Dim(splits[which])
	chunk := ir.Dim(k) / s
	t := newTileBody()
	a, ok1 := t.arg(g, m.Get("?a"))
	bb, ok2 := t.arg(g, m.Get("?b"))
	if !ok1 || !ok2 {
		return 0, false
	}
	b := t.b
	// a [.., M, K] -> [.., M, S, K/S] -> [S, .., M, K/S]
	a2 := tileToFront(b, b.Reshape(a, tileDims(da.Shape, r-1, s, chunk)...), r-1)
	// b [.., K, N] -> [.., S, K/S, N] -> [S, .., K/S, N]
	b2 := tileToFront(b, b.Reshape(bb, tileDims(db.Shape, r-2, s, chunk)...), r-2)
	part := b.Apply(ir.OpMatMul, accumulate(da.DType), a2, b2) // [S, .., M, N], in f32
	root := g.Data(m.Root())
	out := b.Reshape(b.Sum(part, 0), root.Shape...)
	return t.add(g, narrow(b, out, root.DType))
}

// applySplitSum rewrites (sum[?p] ?x) over a long last axis K as a sum of
// S partial sums: reshape x to [.., S, K/S], sum the chunks, sum the
// partials, reshape back to [.., 1].
func applySplitSum(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	dx := g.Data(m.Get("?x"))
	if !dx.Valid() || !tileLastAxis(m.GetPayload("?p"), len(dx.Shape)) {
		return 0, false
	}
	r := len(dx.Shape)
	k := int64(dx.Shape[r-1])
	s := SplitSumFactor(k)
	if s == 0 {
		return 0, false
	}
	t := newTileBody()
	x, ok := t.arg(g, m.Get("?x"))
	if !ok {
		return 0, false
	}
	b := t.b
	xs := b.Reshape(widen(b, x), tileDims(dx.Shape, r-1, ir.Dim(s), ir.Dim(k/s))...) // [.., S, K/S], in f32
	inner := b.Sum(xs, r)                                                            // [.., S, 1]
	outer := b.Sum(inner, r-1)                                                       // [.., 1, 1]
	return t.add(g, narrow(b, b.Reshape(outer, tileDims(dx.Shape, r-1, 1)...), dx.DType))
}

// tileScores is how a scores tensor s [.., S, T] is computed, as far as
// blocked attention cares: s = matmul(q, kt) * scale + mask with scale and
// mask optional, or an opaque s.
type tileScores struct {
	q, kt, scale, mask egraph.ClassID
	hasQK              bool
	hasScale, hasMask  bool
}

// tileFindScores looks into the class of s for the attention scores'
// structure (matmul, then a scale, then an additive mask), in either
// operand order. Without it the blocked form slices s itself.
func tileFindScores(g *egraph.EGraph[Data], s egraph.ClassID) tileScores {
	shape := g.Data(s).Shape
	same := func(c egraph.ClassID) bool { return g.Data(c).Valid() && g.Data(c).Shape.Equal(shape) }
	qk := func(c egraph.ClassID) (tileScores, bool) {
		for _, id := range g.ClassNodes(c) {
			n := g.Node(id)
			if op, ok := OpOf(n.Op); ok && op == ir.OpMatMul {
				q, kt := g.Find(n.Children[0]), g.Find(n.Children[1])
				if g.Data(q).Valid() && g.Data(kt).Valid() {
					return tileScores{q: q, kt: kt, hasQK: true}, true
				}
			}
		}
		return tileScores{}, false
	}
	scaled := func(c egraph.ClassID) (tileScores, bool) {
		for _, id := range g.ClassNodes(c) {
			n := g.Node(id)
			if op, ok := OpOf(n.Op); !ok || op != ir.OpMul {
				continue
			}
			for i := range 2 {
				x, y := g.Find(n.Children[i]), g.Find(n.Children[1-i])
				if !same(y) {
					continue
				}
				if st, ok := qk(x); ok {
					st.scale, st.hasScale = y, true
					return st, true
				}
			}
		}
		return qk(c)
	}
	for _, id := range g.ClassNodes(s) {
		n := g.Node(id)
		if op, ok := OpOf(n.Op); !ok || op != ir.OpAdd {
			continue
		}
		for i := range 2 {
			x, y := g.Find(n.Children[i]), g.Find(n.Children[1-i])
			if !same(y) {
				continue
			}
			if st, ok := scaled(x); ok {
				st.mask, st.hasMask = y, true
				return st
			}
		}
	}
	st, _ := scaled(s)
	return st
}

// kvBlocks holds the pieces of a blocked attention under construction.
type kvBlocks struct {
	b   *ir.Builder
	nb  ir.Dim // blocks
	blk ir.Dim // keys per block
}

// cols cuts x [.., X, T] (rank len(lead)+2) into [nb, .., X, blk].
func (k *kvBlocks) cols(x ir.Value) ir.Value {
	s := k.b.Shape(x)
	r := len(s)
	return tileToFront(k.b, k.b.Reshape(x, tileDims(s, r-1, k.nb, k.blk)...), r-1)
}

// keyRows cuts v [.., T, D] into [nb, .., blk, D].
func (k *kvBlocks) keyRows(x ir.Value) ir.Value {
	s := k.b.Shape(x)
	r := len(s)
	return tileToFront(k.b, k.b.Reshape(x, tileDims(s, r-2, k.nb, k.blk)...), r-2)
}

// combine finishes a blocked attention from the blocked scores sb [nb, ..,
// S, blk] and v [.., T, D]: per block m_b, p_b = exp(s_b - m_b), l_b and
// o_b = p_b v_b; then m = max_b m_b and out = sum_b exp(m_b - m) o_b /
// sum_b exp(m_b - m) l_b, reshaped to [.., S, D]. The softmax is computed
// in f32 whatever the scores' dtype, as a flash-attention kernel does: the
// probabilities p_b are rounded to v's dtype only as the operand of p_b
// v_b (the tensor cores take them so); the partials l_b and o_b, their
// weights and sums are in f32, and the result is rounded once to v's
// dtype. A block's max is kept finite (at least f32's lowest): a block
// whose keys are all masked with -inf has p_b = exp(-inf - m_b) = 0, not
// exp(-inf + inf), a NaN, and its weight exp(m_b - m) is 0.
func (k *kvBlocks) combine(sb, v ir.Value) ir.Value {
	b := k.b
	dt := b.DType(v)
	sb = widen(b, sb)
	r := len(b.Shape(sb))
	mb := b.Max(b.ReduceMax(sb, r-1), b.Scalar(ir.F32, -math.MaxFloat32))       // [nb, .., S, 1]
	pb := b.Exp(b.Sub(sb, mb))                                                  // [nb, .., S, blk]
	lb := b.Sum(pb, r-1)                                                        // [nb, .., S, 1]
	ob := b.Apply(ir.OpMatMul, accumulate(dt), narrow(b, pb, dt), k.keyRows(v)) // [nb, .., S, D]
	mx := b.ReduceMax(mb, 0)                                                    // [1, .., S, 1]
	w := b.Exp(b.Sub(mb, mx))                                                   // [nb, .., S, 1]
	num := b.Sum(b.Mul(ob, w), 0)                                               // [1, .., S, D]
	den := b.Sum(b.Mul(lb, w), 0)                                               // [1, .., S, 1]
	out := narrow(b, b.Div(num, den), dt)
	return b.Reshape(out, b.Shape(out)[1:]...)
}

// accumulate is the attributes of a matmul of dt operands whose result
// is a partial product: accumulated and kept in f32.
func accumulate(dt ir.DType) ir.Attrs {
	if dt == ir.F32 {
		return ir.Attrs{}
	}
	return ir.Attrs{DType: ir.F32}
}

// widen is x in f32, the dtype partial accumulations are kept in.
func widen(b *ir.Builder, x ir.Value) ir.Value {
	if b.DType(x) == ir.F32 {
		return x
	}
	return b.Cast(x, ir.F32)
}

// narrow rounds a combined result x to dt, the dtype of the term it
// replaces.
func narrow(b *ir.Builder, x ir.Value, dt ir.DType) ir.Value {
	if b.DType(x) == dt {
		return x
	}
	return b.Cast(x, dt)
}

// narrowPartial returns a value of g that breaks the rule every tiling
// keeps: a reduction (a sum or a matmul) in a float dtype narrower than
// f32 whose result another sum combines, directly or through layout
// changes, casts and linear arithmetic (a partial output times its
// weight). A narrow reduction that a nonlinear op consumes first (the
// model's bf16 scores, whose exponentials a block sums) is a value of its
// own, not a partial of the sum.
func narrowPartial(g *ir.Graph) (ir.Value, bool) {
	// partial[v]: v is, or is a linear function of, a narrow reduction's
	// result.
	partial := make([]bool, len(g.Nodes))
	for i, n := range g.Nodes {
		if n.Op == ir.OpSum {
			for _, in := range n.Inputs {
				if partial[in] {
					return ir.Value(i), true
				}
			}
		}
		switch n.Op {
		case ir.OpSum, ir.OpMatMul:
			partial[i] = n.DType.IsFloat() && n.DType != ir.F32
		case ir.OpCast, ir.OpNeg, ir.OpAdd, ir.OpSub, ir.OpMul, ir.OpDiv:
			// A cast back to f32 does not undo the rounding.
			for _, in := range n.Inputs {
				partial[i] = partial[i] || partial[in]
			}
		default:
			if n.Op.Class() == ir.ClassView {
				partial[i] = partial[n.Inputs[0]]
			}
		}
	}
	return ir.NoValue, false
}

// applyKVSoftmax rewrites softmax(s) v over the last axis of s, matched as
// the decomposed chain or the composite softmax, as K/V-blocked attention.
// The scores are recomputed per block from q and k when the class of s
// shows how they were made; otherwise s is cut into blocks.
func applyKVSoftmax(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	sc, vc := m.Get("?s"), m.Get("?v")
	ds, dv := g.Data(sc), g.Data(vc)
	if !ds.Valid() || !dv.Valid() || len(ds.Shape) < 2 || len(ds.Shape) != len(dv.Shape) {
		return 0, false
	}
	r := len(ds.Shape)
	for _, pv := range m.PayloadVars() {
		if (pv == "?p" || pv == "?p1" || pv == "?p2") && !tileLastAxis(m.GetPayload(pv), r) {
			return 0, false
		}
	}
	tl := int64(ds.Shape[r-1])
	nb := KVBlocks(tl)
	if nb == 0 || int64(dv.Shape[r-2]) != tl {
		return 0, false
	}
	t := newTileBody()
	k := &kvBlocks{b: t.b, nb: ir.Dim(nb), blk: ir.Dim(tl / nb)}
	b := t.b
	st := tileFindScores(g, sc)
	var sb ir.Value
	if st.hasQK && g.Data(st.q).Shape.Rank() == r && g.Data(st.kt).Shape.Rank() == r {
		q, ok1 := t.arg(g, st.q)
		kt, ok2 := t.arg(g, st.kt)
		if !ok1 || !ok2 {
			return 0, false
		}
		qs := b.Shape(q)
		qb := b.Expand(b.Reshape(q, append(ir.Shape{1}, qs...)...), append(ir.Shape{k.nb}, qs...)...)
		sb = b.Apply(ir.OpMatMul, ir.Attrs{}, qb, k.cols(kt))
		if st.hasScale {
			x, ok := t.arg(g, st.scale)
			if !ok {
				return 0, false
			}
			sb = b.Mul(sb, k.cols(x))
		}
		if st.hasMask {
			x, ok := t.arg(g, st.mask)
			if !ok {
				return 0, false
			}
			sb = b.Add(sb, k.cols(x))
		}
	} else {
		s, ok := t.arg(g, sc)
		if !ok {
			return 0, false
		}
		sb = k.cols(s)
	}
	v, ok := t.arg(g, vc)
	if !ok {
		return 0, false
	}
	return t.add(g, k.combine(sb, v))
}

// tileLowest is the most negative finite value of a float dtype: the
// causal mask's fill, which keeps a fully masked block's max finite (so
// that its weight exp(m_b - m) is 0, not NaN).
func tileLowest(dt ir.DType) float64 {
	switch dt {
	case ir.F16:
		return -65504
	case ir.BF16:
		return -float64(ir.BFloat16(0x7f7f).Float32())
	}
	return -math.MaxFloat32
}

// applyKVAttentionOp rewrites the composite (attention[?a] ?q ?k ?v), q
// [B, Hq, S, D] and k, v [B, Hkv, T, D], as K/V-blocked attention in
// tensor ops: keys and values repeated to the query heads, scores scaled,
// the causal mask applied with the dtype's lowest finite value.
func applyKVAttentionOp(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	a, ok := Attrs(m.GetPayload("?a"))
	dq, dk, dv := g.Data(m.Get("?q")), g.Data(m.Get("?k")), g.Data(m.Get("?v"))
	if !ok || !dq.Valid() || !dk.Valid() || !dv.Valid() || len(dq.Shape) != 4 || len(dk.Shape) != 4 || !dk.Shape.Equal(dv.Shape) {
		return 0, false
	}
	bt, hq, sq, hd := dq.Shape[0], dq.Shape[1], dq.Shape[2], dq.Shape[3]
	hkv, tl := dk.Shape[1], dk.Shape[2]
	if hkv == 0 || hq%hkv != 0 {
		return 0, false
	}
	nb := KVBlocks(int64(tl))
	if nb == 0 {
		return 0, false
	}
	t := newTileBody()
	q, ok1 := t.arg(g, m.Get("?q"))
	kk, ok2 := t.arg(g, m.Get("?k"))
	vv, ok3 := t.arg(g, m.Get("?v"))
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	b := t.b
	repeat := func(x ir.Value) ir.Value {
		grp := hq / hkv
		if grp == 1 {
			return x
		}
		x = b.Reshape(x, bt, hkv, 1, tl, hd)
		x = b.Expand(x, bt, hkv, grp, tl, hd)
		return b.Reshape(x, bt, hq, tl, hd)
	}
	kk, vv = repeat(kk), repeat(vv)
	k := &kvBlocks{b: b, nb: ir.Dim(nb), blk: tl / ir.Dim(nb)}
	qb := b.Expand(b.Reshape(q, 1, bt, hq, sq, hd), k.nb, bt, hq, sq, hd)
	// The composite op's scores are never stored: they stay in the f32
	// accumulator, scaled and masked there (a score rounded to bf16 moves
	// its probability by the rounding times the score, which the op as
	// given does not do). The scale is f32's, as a kernel has it.
	sb := b.Apply(ir.OpMatMul, accumulate(dq.DType), qb, k.cols(b.Permute(kk, 0, 1, 3, 2))) // [nb, B, Hq, S, blk], f32
	sb = b.Mul(sb, b.Scalar(ir.F32, ir.F32.Round(a.Scale)))
	if a.Causal {
		shape := ir.Shape{sq, tl}
		d := b.Sub(b.Iota(ir.I64, shape, 0), b.Iota(ir.I64, shape, 1)) // i - j
		see := b.Binary(ir.OpGe, d, b.Scalar(ir.I64, float64(-a.Offset)))
		see = b.Reshape(see, 1, 1, sq, tl)
		see = b.Expand(see, bt, hq, sq, tl)
		sb = b.Where(k.cols(see), sb, b.Scalar(ir.F32, tileLowest(ir.F32)))
	}
	return t.add(g, k.combine(sb, vv))
}
