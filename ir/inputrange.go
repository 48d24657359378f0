package ir

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// Meaning is what a leaf's values stand for, as InputRanges infers it
// from the ops that read the leaf or as a user states it.
type Meaning uint8

// The meanings.
const (
	// MeaningIndex: indices into a gather's axis, [0, extent).
	MeaningIndex Meaning = iota + 1
	// MeaningPosition: positions compared against an iota (a causal
	// mask's query or key position), [0, length).
	MeaningPosition
	// MeaningMask: a 0/1 mask ({0, 1}): compared to zero, cast to bool,
	// a where's condition, flipped as 1 - x, or scaled into a large
	// constant such as an additive attention mask's finfo.min.
	MeaningMask
	// MeaningStated: a range the caller gave (--input-range).
	MeaningStated
	// MeaningSymbol: the value of a runtime extent, within the range
	// its symbol declares.
	MeaningSymbol
	// MeaningSlot: a scatter's destinations, [-1, extent): distinct
	// positions along the scattered axis, -1 where a slice is not
	// written (a token of no sequence). Drawn as a whole (RandomSlots):
	// two equal slots would write one position twice.
	MeaningSlot
)

// String names the meaning as reports print it.
func (m Meaning) String() string {
	switch m {
	case MeaningIndex:
		return "index"
	case MeaningPosition:
		return "position"
	case MeaningMask:
		return "mask"
	case MeaningStated:
		return "stated"
	case MeaningSymbol:
		return "symbol"
	case MeaningSlot:
		return "slot"
	}
	return "meaning(" + strconv.Itoa(int(m)) + ")"
}

// Range is the closed interval [Lo, Hi] a leaf's random values are drawn
// from: integers within it for an integer or bool leaf, uniform reals
// (rounded to the dtype) for a float leaf.
type Range struct {
	Lo, Hi  float64
	Meaning Meaning
}

// String is "LO..HI (meaning)".
func (r Range) String() string {
	return fmt.Sprintf("%s..%s (%s)", strconv.FormatFloat(r.Lo, 'g', -1, 64), strconv.FormatFloat(r.Hi, 'g', -1, 64), r.Meaning)
}

// largeScale is the smallest constant factor whose product with a value
// marks that value as a mask: an additive attention mask scales 1 - mask
// by finfo.min or -10000, which no meaningful integer input in [-9, 9]
// survives in f16 and which overflows f32 at finfo.min.
const largeScale = 1e4

// leafUse is what the ops reading one leaf say about it.
type leafUse struct {
	index    int64 // smallest gather extent it indexes, less what is added to it first (0: none)
	slot     int64 // smallest extent it scatters into (0: none)
	position int64 // smallest iota length it is compared with (0: none)
	mask     bool  // evidence that holds for any dtype
	intMask  bool  // evidence that holds for integer and bool leaves only
}

// InputRanges infers, for every input, weight and state of g whose
// values mean something narrower than "a number", the range they must be
// drawn from, keyed by the leaf's name: indices into a gather stay within
// the gathered axis's extent, positions compared against an iota stay
// within its length, and masks are 0 or 1. The inference follows each
// leaf forward through the ops that keep its values (views, casts,
// concatenations, a gather's data, a slice update, a where's branches)
// and never looks at names, which exporters choose freely. A leaf
// without such a meaning is absent: it keeps the ordinary distribution.
//
// Why: random values of the ordinary range are not valid inputs of every
// graph. An attention mask drawn from [-9, 9] makes (1 - mask) * finfo.min
// overflow f32 where the float64 reference does not, so every program,
// the naive one too, "disagrees"; an index drawn past its table is an
// error, not a test.
func InputRanges(g *Graph) map[string]Range {
	uses := leafUses(g)
	out := map[string]Range{}
	for i, n := range g.Nodes {
		u, ok := uses[i]
		if !ok {
			continue
		}
		switch {
		case u.slot > 0 && n.DType.IsInt():
			out[n.Name] = Range{-1, float64(u.slot - 1), MeaningSlot}
		case u.index > 0:
			out[n.Name] = Range{0, float64(u.index - 1), MeaningIndex}
		case u.position > 0:
			out[n.Name] = Range{0, float64(u.position - 1), MeaningPosition}
		case n.DType != Bool && (u.mask || u.intMask && n.DType.IsInt()):
			out[n.Name] = Range{0, 1, MeaningMask}
		}
	}
	// A symbol's declared range is the truth about its input, whatever
	// its readers suggest.
	for _, s := range g.Symbols {
		out[s.Name] = s.Range()
	}
	return out
}

// leafUses walks forward from every leaf and collects what its readers
// say about it.
func leafUses(g *Graph) map[int]leafUse {
	users := make([][][2]int, len(g.Nodes)) // (consumer, operand position)
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			users[in] = append(users[in], [2]int{i, k})
		}
	}
	out := map[int]leafUse{}
	for i, n := range g.Nodes {
		if n.Op != OpInput && n.Op != OpWeight && n.Op != OpState {
			continue
		}
		var u leafUse
		w := useWalk{g: g, users: users, use: &u, seen: map[[2]int64]bool{}}
		w.visit(i, 0, false)
		if u != (leafUse{}) {
			out[i] = u
		}
	}
	return out
}

// useWalk is one leaf's forward walk.
type useWalk struct {
	g     *Graph
	users [][][2]int
	use   *leafUse
	seen  map[[2]int64]bool // (node, flipped<<62 | slack) visited
}

// visit looks at the readers of node v, which holds the leaf's values
// plus slack (a non-negative amount added on the way: an iota, a
// constant offset) when flipped is false, or a function of them that
// keeps only their 0/1-ness (1 - x, -x) when flipped is true.
func (w *useWalk) visit(v int, slack int64, flipped bool) {
	key := [2]int64{int64(v), slack}
	if flipped {
		key[1] |= 1 << 62
	}
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	for _, uk := range w.users[v] {
		c, pos := w.g.Nodes[uk[0]], uk[1]
		other := func() *Node { return w.g.Nodes[c.Inputs[1-pos]] }
		switch {
		case pos == c.Op.Arity() && c.Op.HasPosition():
			// A runtime position: the update must fit, the causal queries
			// must have their keys.
			if flipped {
				break
			}
			if n := positionLimit(w.g, c); n > 0 {
				w.use.position = minPositive(w.use.position, max(1, n-slack))
			}
		case c.Op == OpGather && pos == 1:
			if flipped {
				break
			}
			data := w.g.Nodes[c.Inputs[0]].Shape
			if ax, err := normAxis(c.Axis, len(data)); err == nil {
				w.use.index = minPositive(w.use.index, max(1, int64(data[ax])-slack))
			}
		case c.Op == OpScatter && pos == 2:
			// The leaf's values themselves (through casts and views): with
			// something added on the way they are not the slots.
			if flipped || slack != 0 {
				break
			}
			base := w.g.Nodes[c.Inputs[0]].Shape
			if ax, err := normAxis(c.Axis, len(base)); err == nil {
				w.use.slot = minPositive(w.use.slot, max(1, int64(base[ax])))
			}
		case c.Op == OpGather, c.Op.Class() == ClassView, c.Op == OpConcat, c.Op == OpSliceUpdate, c.Op == OpScatter:
			w.visit(uk[0], slack, flipped)
		case c.Op == OpCast && c.DType == Bool, c.Op == OpWhere && pos == 0:
			w.use.mask = true
		case c.Op == OpCast, c.Op == OpWhere:
			w.visit(uk[0], slack, flipped)
		case c.Op.Class() == ClassCompare:
			o := w.g.Nodes[c.Inputs[1-pos]]
			if n := iotaLength(w.g, o); n > 0 && !flipped {
				w.use.position = minPositive(w.use.position, max(1, n-slack))
			} else if isConst(w.g, o, 0) {
				w.use.intMask = true
			}
		case c.Op == OpSub && pos == 1 && isConst(w.g, w.g.Nodes[c.Inputs[0]], 1):
			w.use.intMask = true
			w.visit(uk[0], 0, true)
		case c.Op == OpNeg:
			w.visit(uk[0], 0, true)
		case c.Op == OpMul:
			if constAtLeast(w.g, other(), largeScale) {
				// A float leaf scaled by a large constant is a mask only
				// when it was flipped first (the (1 - mask) * min idiom):
				// a plain float times 1e4 can be anything.
				if flipped {
					w.use.mask = true
				} else {
					w.use.intMask = true
				}
			}
		case c.Op == OpAdd && !flipped:
			o := other()
			if n := iotaLength(w.g, o); n > 0 {
				w.visit(uk[0], slack+n-1, false)
			} else if k, ok := constInt(w.g, o); ok && k >= 0 {
				w.visit(uk[0], slack+k, false)
			}
		}
	}
}

// positionLimit is one more than the largest runtime position node c
// (a slice_update or attention) accepts: the update's rows must fit the
// base, the last causal query must have its key.
func positionLimit(g *Graph, c *Node) int64 {
	switch c.Op {
	case OpSliceUpdate:
		base, up := g.Nodes[c.Inputs[0]].Shape, g.Nodes[c.Inputs[1]].Shape
		if ax, err := normAxis(c.Axis, len(base)); err == nil && len(up) == len(base) {
			return int64(base[ax]) - int64(up[ax]) - c.Offset + 1
		}
	case OpAttention:
		q, k := g.Nodes[c.Inputs[0]].Shape, g.Nodes[c.Inputs[1]].Shape
		if len(q) == 4 && len(k) == 4 {
			return int64(k[2]) - int64(q[2]) - c.Offset + 1
		}
	}
	return 0
}

// iotaLength is the length of the iota n holds through views and casts
// (its values are 0..length-1), or 0 when n is not an iota.
func iotaLength(g *Graph, n *Node) int64 {
	for range len(g.Nodes) {
		switch {
		case n.Op == OpIota:
			ax, err := normAxis(n.Axis, len(n.Shape))
			if err != nil {
				return 0
			}
			return int64(n.Shape[ax])
		case (n.Op.Class() == ClassView && n.Op != OpPad) || n.Op == OpCast:
			n = g.Nodes[n.Inputs[0]]
		default:
			return 0
		}
	}
	return 0
}

// constNode is the constant n holds through views and casts (a broadcast
// scalar is a reshaped and expanded constant), or nil.
func constNode(g *Graph, n *Node) *Node {
	for range len(g.Nodes) {
		switch {
		case n.Op == OpConst:
			return n
		case (n.Op.Class() == ClassView && n.Op != OpPad) || n.Op == OpCast:
			n = g.Nodes[n.Inputs[0]]
		default:
			return nil
		}
	}
	return nil
}

// constAll says whether n is a constant (through views and casts) with
// at least one value, every value of which satisfies ok.
func constAll(g *Graph, n *Node, ok func(float64) bool) bool {
	c := constNode(g, n)
	if c == nil || c.ConstLen() == 0 {
		return false
	}
	for i := range int64(c.ConstLen()) {
		if !ok(c.ConstAt(i)) {
			return false
		}
	}
	return true
}

// isConst says whether n is a constant all of whose elements are v.
func isConst(g *Graph, n *Node, v float64) bool {
	return constAll(g, n, func(x float64) bool { return x == v })
}

// constAtLeast says whether n is a constant every element of which has
// magnitude at least limit.
func constAtLeast(g *Graph, n *Node, limit float64) bool {
	return constAll(g, n, func(x float64) bool { return math.Abs(x) >= limit })
}

// constInt is the one integer value of the constant n, when it is one
// that float64 holds exactly.
func constInt(g *Graph, n *Node) (int64, bool) {
	c := constNode(g, n)
	if c == nil {
		return 0, false
	}
	v, ok := c.ConstSplat()
	if !ok || v != math.Trunc(v) || math.Abs(v) > 1<<53 {
		return 0, false
	}
	return int64(v), true
}

func minPositive(a, b int64) int64 {
	if a <= 0 || b < a {
		return b
	}
	return a
}

// CheckRanges checks ranges a caller states for g's leaves: each must
// name an input, weight or state of g, have LO <= HI (neither NaN nor
// infinite), hold an integer for an integer leaf, stay within {0, 1}
// for a bool leaf, and within the dtype's range (finite, for a float).
// The error names the leaf and the range: "NAME=LO..HI: why".
func CheckRanges(g *Graph, ranges map[string]Range) error {
	leaves := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.Op == OpInput || n.Op == OpWeight || n.Op == OpState {
			leaves[n.Name] = n
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ranges)) {
		r := ranges[name]
		n, ok := leaves[name]
		if !ok {
			return fmt.Errorf("%s=%s: the graph %s has no input, weight or state %q", name, r.text(), g.Name, name)
		}
		switch {
		case math.IsNaN(r.Lo) || math.IsNaN(r.Hi) || math.IsInf(r.Lo, 0) || math.IsInf(r.Hi, 0):
			return fmt.Errorf("%s=%s: bounds must be finite numbers", name, r.text())
		case r.Lo > r.Hi:
			return fmt.Errorf("%s=%s: LO is above HI", name, r.text())
		case n.DType == Bool && (r.Lo < 0 || r.Hi > 1):
			return fmt.Errorf("%s=%s: %s %q is bool, so its range lies within 0..1", name, r.text(), n.Op, name)
		case !n.DType.IsFloat() && math.Floor(r.Hi) < math.Ceil(r.Lo):
			return fmt.Errorf("%s=%s: %s %q is %s and the range holds no integer", name, r.text(), n.Op, name, n.DType)
		case n.DType.IsInt() && (r.Lo < float64(n.DType.MinInt()) || r.Hi > float64(n.DType.MaxInt())):
			return fmt.Errorf("%s=%s: beyond the range of %s %q's dtype %s (%d..%d)", name, r.text(), n.Op, name, n.DType, n.DType.MinInt(), n.DType.MaxInt())
		case n.DType.IsFloat() && (math.IsInf(n.DType.Round(r.Lo), 0) || math.IsInf(n.DType.Round(r.Hi), 0)):
			return fmt.Errorf("%s=%s: beyond the finite range of %s %q's dtype %s", name, r.text(), n.Op, name, n.DType)
		}
	}
	return nil
}

// text is the range as --input-range takes it, LO..HI.
func (r Range) text() string {
	return strconv.FormatFloat(r.Lo, 'g', -1, 64) + ".." + strconv.FormatFloat(r.Hi, 'g', -1, 64)
}
