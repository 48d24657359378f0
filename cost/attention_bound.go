package cost

import (
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// An attention's mask hides keys from query rows; a causal mask hides every
// key past the row's position, so a block of query rows needs only the keys
// up to its last row's position, however long the key axis (a KV cache's
// capacity) is. KeyBound is what the mask of an attention body says about
// that, as linear constraints a kernel evaluates at run time: the attention
// form loops over the keys its rows can see and the cost model prices
// that many.

// KeyConstraint is one condition a key must meet to be seen by a query
// row: Row*i + Key*j + Const + sum of Coef*value(Input) over Terms >= 0,
// for query row i (the scores' second last index), key j (their last) and
// the values of integer scalar inputs (a runtime position). Key is -1 (an
// upper bound on the keys, j <= Row*i + ...: causal), +1 (a lower bound: a
// sliding window's start) or 0 (a condition on the row alone).
type KeyConstraint struct {
	Row, Key, Const int64
	Terms           []KeyTerm
}

// KeyTerm is a multiple of an integer scalar input of the body.
type KeyTerm struct {
	Input ir.Value
	Coef  int64
}

// KeyBound is the conjunction of constraints under which a key's score is
// kept; a key that fails one has its score pushed to a fill so negative
// (at most -maskFill) that its probability is exactly zero whenever its
// row sees any key at all. A kernel may therefore skip, for a block of rows
// each of which sees at least one key, every key no row of the block sees;
// a block with a row that sees no key must loop over all of them, since
// such a row's softmax spreads over the masked keys alike.
type KeyBound struct {
	Constraints []KeyConstraint
}

// Runtime says whether the bound depends on an input's value (a runtime
// position).
func (kb KeyBound) Runtime() bool {
	for _, c := range kb.Constraints {
		if len(c.Terms) > 0 {
			return true
		}
	}
	return false
}

// Inputs are the inputs the bound reads, in the order they first appear.
func (kb KeyBound) Inputs() []ir.Value {
	var out []ir.Value
	for _, c := range kb.Constraints {
		for _, t := range c.Terms {
			if !slices.Contains(out, t.Input) {
				out = append(out, t.Input)
			}
		}
	}
	return out
}

// Visible is the keys [lo, hi) row i sees among keys 0..keys-1 with the
// inputs at the given values, and whether the row sees any (lo < hi).
func (kb KeyBound) Visible(i, keys int64, value func(ir.Value) int64) (lo, hi int64, ok bool) {
	lo, hi = 0, keys-1
	for _, c := range kb.Constraints {
		x := c.Row*i + c.Const
		for _, t := range c.Terms {
			x += t.Coef * value(t.Input)
		}
		switch c.Key {
		case -1:
			hi = min(hi, x)
		case 1:
			lo = max(lo, -x)
		default:
			if x < 0 {
				return 0, 0, false
			}
		}
	}
	return lo, hi + 1, lo <= hi
}

// Block is the keys [lo, hi) a block of query rows first..last sees with
// the inputs at the given values: the union of the rows' visible keys when
// every row sees one, else all keys 0..keys-1 (see KeyBound).
func (kb KeyBound) Block(first, last, keys int64, value func(ir.Value) int64) (lo, hi int64) {
	lo, hi = keys, 0
	for i := first; i <= last; i++ {
		a, z, ok := kb.Visible(i, keys, value)
		if !ok {
			return 0, keys
		}
		lo, hi = min(lo, a), max(hi, z)
	}
	if lo >= hi {
		return 0, keys
	}
	return lo, hi
}

// maskFill is the least magnitude of the fill a mask pushes hidden scores
// to: exp(-1e4) is zero in float64 as in f32, so a hidden key's probability
// is exactly zero next to a visible one's. Masks fill with the dtype's
// lowest value (-3.4e38, f16's -65504) or -inf.
const maskFill = 1e4

// affineLimit bounds the coefficients and constants of the mask's
// expressions the analysis accepts, so that the kernel's 64-bit arithmetic
// on them (with a position of up to 2^31) never overflows.
const affineLimit = 1 << 40

// AttentionKeyBound reads the mask of an eager attention body (Attention's
// parts): walking down from the scores toward QK through casts and
// multiplications by positive constants, every addition of a where(cond,
// c, fill) and every where(cond, scores, fill) (or its mirror, the fill
// where cond holds) with fill at most -maskFill contributes cond's
// constraints, when cond is an and of comparisons of affine integer
// expressions in the row and key indices (iotas, through views), integer
// constants and integer scalar inputs. It returns false when it finds no
// key bound there: a mask it does not read keeps every key.
func AttentionKeyBound(body *ir.Graph, p AttentionParts) (KeyBound, bool) {
	fromQK := make([]bool, len(body.Nodes))
	for i, n := range body.Nodes {
		fromQK[i] = ir.Value(i) == p.QK
		for _, in := range n.Inputs {
			fromQK[i] = fromQK[i] || fromQK[in]
		}
	}
	scores := body.Node(p.Scores).Shape
	r := len(scores)
	if r < 2 {
		return KeyBound{}, false
	}
	// The scores' index: batch dims unknown (a mask that varies along
	// them has no one bound), the row i and the key j.
	ix := make([]affine, r)
	for d := range ix {
		ix[d] = affine{batch: true}
	}
	ix[r-2], ix[r-1] = affine{row: 1}, affine{key: 1}
	for d := range ix {
		if scores[d] == 1 {
			ix[d] = affine{}
		}
	}
	m := maskReader{body: body}
	var kb KeyBound
	v, scale := p.Scores, 1.0
	for v != p.QK {
		n := body.Node(v)
		next := ir.NoValue
		switch {
		case n.Op == ir.OpCast && n.DType.IsFloat():
			next = n.Inputs[0]
		case n.Op == ir.OpMul:
			for k, in := range n.Inputs {
				if c, ok := constScalar(body, n.Inputs[1-k]); ok && fromQK[in] && c > 0 {
					next, scale = in, scale*c
				}
			}
		case n.Op == ir.OpAdd:
			for k, in := range n.Inputs {
				other := n.Inputs[1-k]
				if !fromQK[in] || fromQK[other] {
					continue
				}
				cs, ok := m.additiveMask(other, ix, scale)
				if !ok {
					return KeyBound{}, false
				}
				kb.Constraints = append(kb.Constraints, cs...)
				next = in
			}
		case n.Op == ir.OpWhere:
			cond, x, y := n.Inputs[0], n.Inputs[1], n.Inputs[2]
			if fromQK[cond] {
				return KeyBound{}, false
			}
			var cs []KeyConstraint
			var ok bool
			switch {
			case fromQK[x] && !fromQK[y] && m.fill(y, scale):
				cs, ok = m.condition(cond, ix)
				next = x
			case fromQK[y] && !fromQK[x] && m.fill(x, scale):
				cs, ok = m.condition(cond, ix)
				if ok && len(cs) == 1 {
					cs = []KeyConstraint{negate(cs[0])}
				} else {
					ok = false
				}
				next = y
			}
			if !ok {
				return KeyBound{}, false
			}
			kb.Constraints = append(kb.Constraints, cs...)
		}
		if next == ir.NoValue || !body.Node(next).Shape.Equal(n.Shape) {
			break
		}
		v = next
	}
	for _, c := range kb.Constraints {
		if c.Key != 0 {
			return kb, true
		}
	}
	return KeyBound{}, false
}

// negate is the constraint that holds where c does not: not (x >= 0) is
// -x - 1 >= 0 over the integers.
func negate(c KeyConstraint) KeyConstraint {
	out := KeyConstraint{Row: -c.Row, Key: -c.Key, Const: -c.Const - 1}
	for _, t := range c.Terms {
		out.Terms = append(out.Terms, KeyTerm{Input: t.Input, Coef: -t.Coef})
	}
	return out
}

// constScalar is the one value of a constant seen through views and casts.
func constScalar(body *ir.Graph, v ir.Value) (float64, bool) {
	for {
		n := body.Node(v)
		switch {
		case n.Op == ir.OpConst:
			return n.Attrs.ConstSplat()
		case n.Op == ir.OpCast, n.Op.Class() == ir.ClassView && n.Op != ir.OpPad:
			v = n.Inputs[0]
		default:
			return 0, false
		}
	}
}

// affine is an integer expression Row*i + Key*j + Const + sum of terms;
// batch marks one that depends on a batch index, which no bound takes.
type affine struct {
	row, key, c int64
	terms       []KeyTerm
	batch       bool
}

func (a affine) add(b affine, sign int64) (affine, bool) {
	out := affine{row: a.row + sign*b.row, key: a.key + sign*b.key, c: a.c + sign*b.c, batch: a.batch || b.batch}
	out.terms = slices.Clone(a.terms)
	for _, t := range b.terms {
		at := slices.IndexFunc(out.terms, func(u KeyTerm) bool { return u.Input == t.Input })
		if at < 0 {
			out.terms = append(out.terms, KeyTerm{Input: t.Input, Coef: sign * t.Coef})
		} else {
			out.terms[at].Coef += sign * t.Coef
		}
	}
	out.terms = slices.DeleteFunc(out.terms, func(t KeyTerm) bool { return t.Coef == 0 })
	return out, out.bounded()
}

func (a affine) scale(k int64) (affine, bool) {
	if k > affineLimit || k < -affineLimit {
		return affine{}, false
	}
	out := affine{row: a.row * k, key: a.key * k, c: a.c * k, batch: a.batch}
	for _, t := range a.terms {
		out.terms = append(out.terms, KeyTerm{Input: t.Input, Coef: t.Coef * k})
	}
	out.terms = slices.DeleteFunc(out.terms, func(t KeyTerm) bool { return t.Coef == 0 })
	return out, out.bounded()
}

// constant says whether a is a number, and which.
func (a affine) constant() (int64, bool) {
	return a.c, a.row == 0 && a.key == 0 && len(a.terms) == 0 && !a.batch
}

func (a affine) bounded() bool {
	ok := func(x int64) bool { return x <= affineLimit && x >= -affineLimit }
	for _, t := range a.terms {
		if !ok(t.Coef) {
			return false
		}
	}
	return ok(a.row) && ok(a.key) && ok(a.c)
}

// maskReader evaluates a mask's expressions at an index of affine
// expressions (one per dim of the value read).
type maskReader struct {
	body *ir.Graph
}

// viewIndex is the index of a view's operand in that the view reads at
// ix, when it is affine.
func (m maskReader) viewIndex(n *ir.Node, in ir.Value, ix []affine) ([]affine, bool) {
	inShape := m.body.Node(in).Shape
	switch n.Op {
	case ir.OpExpand:
		if len(inShape) != len(ix) {
			return nil, false
		}
		out := slices.Clone(ix)
		for d := range out {
			if inShape[d] == 1 {
				out[d] = affine{}
			}
		}
		return out, true
	case ir.OpReshape:
		// Dims of extent 1 added or dropped: the others keep their index.
		var keep []affine
		for d, x := range ix {
			if n.Shape[d] != 1 {
				keep = append(keep, x)
			}
		}
		out := make([]affine, len(inShape))
		k := 0
		for d, e := range inShape {
			if e == 1 {
				continue
			}
			if k >= len(keep) {
				return nil, false
			}
			out[d] = keep[k]
			k++
		}
		if k != len(keep) || !slices.Equal(nonUnit(inShape), nonUnit(n.Shape)) {
			return nil, false
		}
		return out, true
	case ir.OpPermute:
		out := make([]affine, len(ix))
		for d, p := range n.Attrs.Perm {
			out[p] = ix[d]
		}
		return out, true
	case ir.OpSlice:
		a := n.Attrs
		if len(a.Starts) != len(ix) || len(a.Steps) != len(ix) || len(inShape) != len(ix) {
			return nil, false
		}
		out := slices.Clone(ix)
		for d := range out {
			if a.Starts[d] < 0 || a.Steps[d] < 1 {
				return nil, false
			}
			var ok bool
			if out[d], ok = out[d].scale(n.Attrs.Steps[d]); !ok {
				return nil, false
			}
			if out[d], ok = out[d].add(affine{c: n.Attrs.Starts[d]}, 1); !ok {
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}

func nonUnit(s ir.Shape) ir.Shape {
	var out ir.Shape
	for _, d := range s {
		if d != 1 {
			out = append(out, d)
		}
	}
	return out
}

// value is v's element at ix as an affine expression, when v is an exact
// integer computation of iotas, integer constants and integer scalar
// inputs (in i32, i64 or f32, which holds the integers of any key axis
// exactly).
func (m maskReader) value(v ir.Value, ix []affine) (affine, bool) {
	n := m.body.Node(v)
	if n.DType != ir.I32 && n.DType != ir.I64 && n.DType != ir.F32 {
		return affine{}, false
	}
	switch n.Op {
	case ir.OpIota:
		if n.Attrs.Axis < 0 || n.Attrs.Axis >= len(ix) {
			return affine{}, false
		}
		return ix[n.Attrs.Axis], true
	case ir.OpConst:
		c, ok := n.Attrs.ConstSplat()
		if !ok || c != math.Trunc(c) || math.Abs(c) > affineLimit {
			return affine{}, false
		}
		return affine{c: int64(c)}, true
	case ir.OpInput:
		if !n.DType.IsInt() || n.Shape.NumElements() != 1 {
			return affine{}, false
		}
		return affine{terms: []KeyTerm{{Input: v, Coef: 1}}}, true
	case ir.OpCast:
		return m.value(n.Inputs[0], ix)
	case ir.OpNeg:
		x, ok := m.value(n.Inputs[0], ix)
		if !ok {
			return affine{}, false
		}
		return x.scale(-1)
	case ir.OpAdd, ir.OpSub, ir.OpMul:
		var xs [2]affine
		for k, in := range n.Inputs {
			if !m.body.Node(in).Shape.Equal(n.Shape) {
				return affine{}, false
			}
			x, ok := m.value(in, ix)
			if !ok {
				return affine{}, false
			}
			xs[k] = x
		}
		switch n.Op {
		case ir.OpAdd:
			return xs[0].add(xs[1], 1)
		case ir.OpSub:
			return xs[0].add(xs[1], -1)
		}
		if c, ok := xs[0].constant(); ok {
			return xs[1].scale(c)
		}
		if c, ok := xs[1].constant(); ok {
			return xs[0].scale(c)
		}
		return affine{}, false
	}
	if n.Op.Class() != ir.ClassView {
		return affine{}, false
	}
	in, ok := m.viewIndex(n, n.Inputs[0], ix)
	if !ok {
		return affine{}, false
	}
	return m.value(n.Inputs[0], in)
}

// condition is a bool value's element at ix as a conjunction of
// constraints.
func (m maskReader) condition(v ir.Value, ix []affine) ([]KeyConstraint, bool) {
	n := m.body.Node(v)
	if n.DType != ir.Bool {
		return nil, false
	}
	switch n.Op {
	case ir.OpAnd:
		var out []KeyConstraint
		for _, in := range n.Inputs {
			if !m.body.Node(in).Shape.Equal(n.Shape) {
				return nil, false
			}
			cs, ok := m.condition(in, ix)
			if !ok {
				return nil, false
			}
			out = append(out, cs...)
		}
		return out, true
	case ir.OpNot:
		cs, ok := m.condition(n.Inputs[0], ix)
		if !ok || len(cs) != 1 {
			return nil, false
		}
		return []KeyConstraint{negate(cs[0])}, true
	case ir.OpGe, ir.OpGt, ir.OpLe, ir.OpLt:
		var xs [2]affine
		for k, in := range n.Inputs {
			if !m.body.Node(in).Shape.Equal(n.Shape) {
				return nil, false
			}
			x, ok := m.value(in, ix)
			if !ok {
				return nil, false
			}
			xs[k] = x
		}
		// x >= 0 over the integers: a >= b, a > b (a - b - 1 >= 0), and
		// the mirrors.
		if n.Op == ir.OpLe || n.Op == ir.OpLt {
			xs[0], xs[1] = xs[1], xs[0]
		}
		x, ok := xs[0].add(xs[1], -1)
		if ok && (n.Op == ir.OpGt || n.Op == ir.OpLt) {
			x, ok = x.add(affine{c: 1}, -1)
		}
		if !ok || x.batch || x.key < -1 || x.key > 1 {
			return nil, false
		}
		return []KeyConstraint{{Row: x.row, Key: x.key, Const: x.c, Terms: x.terms}}, true
	}
	if n.Op.Class() != ir.ClassView {
		return nil, false
	}
	in, ok := m.viewIndex(n, n.Inputs[0], ix)
	if !ok {
		return nil, false
	}
	return m.condition(n.Inputs[0], in)
}

// fill says whether v is a constant so negative, scaled by the positive
// factor applied above it, that a score it replaces or is added to has a
// probability of exactly zero.
func (m maskReader) fill(v ir.Value, scale float64) bool {
	c, ok := constScalar(m.body, v)
	return ok && c*scale <= -maskFill
}

// additiveMask reads a mask added to the scores: views (and casts) of
// where(cond, keep, fill) with keep a finite constant, read at ix.
func (m maskReader) additiveMask(v ir.Value, ix []affine, scale float64) ([]KeyConstraint, bool) {
	for {
		n := m.body.Node(v)
		switch {
		case n.Op == ir.OpWhere:
			cond, x, y := n.Inputs[0], n.Inputs[1], n.Inputs[2]
			for _, in := range n.Inputs {
				if !m.body.Node(in).Shape.Equal(n.Shape) {
					return nil, false
				}
			}
			keep := func(v ir.Value) bool {
				c, ok := constScalar(m.body, v)
				return ok && !math.IsInf(c, 0) && !math.IsNaN(c) && math.Abs(c) < maskFill/2
			}
			cs, ok := m.condition(cond, ix)
			switch {
			case !ok:
				return nil, false
			case keep(x) && m.fill(y, scale):
				return cs, true
			case keep(y) && m.fill(x, scale) && len(cs) == 1:
				return []KeyConstraint{negate(cs[0])}, true
			}
			return nil, false
		case n.Op == ir.OpCast:
			v = n.Inputs[0]
		case n.Op.Class() == ir.ClassView:
			in, ok := m.viewIndex(n, n.Inputs[0], ix)
			if !ok {
				return nil, false
			}
			v, ix = n.Inputs[0], in
		default:
			return nil, false
		}
	}
}

// expectedKeys prices an attention whose keys follow a runtime position:
// its key bound, with each input it reads at the values the price
// averages over.
type expectedKeys struct {
	bound KeyBound
	// values are each input's values the price averages over: the
	// geometric buckets of its range (ir.Symbol.Buckets), so that a short
	// cache counts as much as a long one, or the one value pin gave.
	values map[ir.Value][]int64
	// ranges are each input's [lo, hi].
	ranges map[ir.Value][2]int64
}

// pin prices every position input at p alone, held to its range.
func (e *expectedKeys) pin(p int64) {
	for v, r := range e.ranges {
		e.values[v] = []int64{min(max(p, r[0]), r[1])}
	}
}

// expectIn prices every position input on average over the geometric
// buckets of [lo, hi], held to its own range.
func (e *expectedKeys) expectIn(lo, hi int64) {
	for v, r := range e.ranges {
		a, b := min(max(lo, r[0]), r[1]), min(max(hi, r[0]), r[1])
		if a < 0 {
			e.values[v] = []int64{a + (b-a)/2}
			continue
		}
		e.values[v] = ir.Symbol{Lo: a, Hi: b}.Buckets()
	}
}

// samples is the most values any input is averaged over.
func (e *expectedKeys) samples() int {
	n := 1
	for _, vs := range e.values {
		n = max(n, len(vs))
	}
	return n
}

// runtimeKeys reads the key bound of an attention body (body, the eager
// form of raw) when it depends on a runtime position, which it prices on
// average over the geometric buckets of the position's range: the range ir.InputRanges gives the
// input in raw (the attention op's runtime position runs over the keys
// its queries can have; a declared symbol's range where the body carries
// one), else the positions over which the last query row's bound runs
// through the keys. A static bound (a causal mask at a fixed offset)
// prices the keys each block loops over, which the kernel's keyLoop skips
// past; an input with no range, or no bound, gives nil: every key is
// priced.
func runtimeKeys(raw, body *ir.Graph) *expectedKeys {
	p, err := Attention(body)
	if err != nil {
		return nil
	}
	kb, ok := AttentionKeyBound(body, p)
	if !ok {
		return nil
	}
	if !kb.Runtime() {
		// A static bound (a causal mask at a fixed offset): the keys
		// each block loops over are known, no position to average.
		return &expectedKeys{bound: kb, values: map[ir.Value][]int64{}, ranges: map[ir.Value][2]int64{}}
	}
	scores := body.Node(p.Scores).Shape
	S, T := int64(scores[len(scores)-2]), int64(scores[len(scores)-1])
	ranges := ir.InputRanges(raw)
	e := &expectedKeys{bound: kb, values: map[ir.Value][]int64{}, ranges: map[ir.Value][2]int64{}}
	for _, v := range kb.Inputs() {
		var lo, hi int64
		if r, ok := ranges[body.Node(v).Name]; ok {
			lo, hi = int64(math.Ceil(r.Lo)), int64(math.Floor(r.Hi))
		} else if lo, hi, ok = kb.naturalRange(v, S, T); !ok {
			return nil
		}
		if lo > hi {
			return nil
		}
		if lo >= 0 {
			e.values[v] = ir.Symbol{Lo: lo, Hi: hi}.Buckets()
		} else {
			e.values[v] = []int64{lo + (hi-lo)/2} // a range below zero has no geometric buckets
		}
		e.ranges[v] = [2]int64{lo, hi}
	}
	return e
}

// naturalRange is the values of input v over which the first upper bound
// on the keys that reads it (with coefficient 1 or -1, other inputs at
// zero) runs, at the last query row, over keys 0..T-1.
func (kb KeyBound) naturalRange(v ir.Value, S, T int64) (lo, hi int64, ok bool) {
	for _, c := range kb.Constraints {
		if c.Key != -1 {
			continue
		}
		for _, t := range c.Terms {
			if t.Input != v || (t.Coef != 1 && t.Coef != -1) {
				continue
			}
			base := c.Row*(S-1) + c.Const
			lo, hi = -base*t.Coef, (T-1-base)*t.Coef
			return min(lo, hi), max(lo, hi), true
		}
	}
	return 0, 0, false
}

// perBlock is the keys a block of bm query rows (of S) loops over, on
// average over the blocks: exactly (the keys it loads) and in whole tiles
// of bn from its first (the keys it computes).
func (e *expectedKeys) perBlock(S, T int64, bm, bn int) (keys, keysPad float64) {
	blocks := (S + int64(bm) - 1) / int64(bm)
	n := e.samples()
	var sum, sumPad int64
	for k := range n {
		value := func(v ir.Value) int64 {
			vs := e.values[v]
			return vs[min(k, len(vs)-1)]
		}
		for b := range blocks {
			first := b * int64(bm)
			lo, hi := e.bound.Block(first, min(first+int64(bm), S)-1, T, value)
			sum += hi - lo
			sumPad += (hi - lo + int64(bn) - 1) / int64(bn) * int64(bn)
		}
	}
	return float64(sum) / float64(blocks*int64(n)), float64(sumPad) / float64(blocks*int64(n))
}
