package rules

import (
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// sideVars lists the class and payload variables of a side, each with the
// op its payload variable annotates.
func sideVars(side Side) ([]string, map[string]ir.Op) {
	var vars []string
	pvars := map[string]ir.Op{}
	var walk func(t egraph.PatternTerm)
	walk = func(t egraph.PatternTerm) {
		if t.Var != "" {
			if !slices.Contains(vars, t.Var) {
				vars = append(vars, t.Var)
			}
			return
		}
		if t.PayloadVar != "" {
			if op, ok := OpOf(t.Op); ok {
				pvars[t.PayloadVar] = op
			}
		}
		for _, c := range t.Children {
			walk(c)
		}
	}
	for _, p := range side {
		walk(p.Term())
	}
	return vars, pvars
}

// instance is one random assignment of a rule's variables.
type instance struct {
	types    map[string]ir.ValueType
	consts   map[string]float64
	weights  map[string]bool // leaves that are weights (random, weight-only)
	attrs    map[string]ir.Attrs
	payloads map[string]egraph.Payload
}

// extent is a long dimension a rule's condition asks for, as in
// "shape(?x)[-1] >= 2048 and shape(?x)[-1] % 256 == 0": the sizes to try
// at that index of the base shape (negative: from the end).
type extent struct {
	index int64
	sizes []ir.Dim
}

// smallExtent is the largest dimension the drawer picks by itself: a
// condition asking for more gets its thresholds tried (condExtents).
const smallExtent = 4

// condExtents finds the long dimensions c asks for: per shape index
// compared with an integer above smallExtent (>=, > or ==), the threshold,
// one and a half times it and twice it, each rounded up to every modulus
// the condition asks that index to be a multiple of. Conditions on
// different variables at one index share the sizes: the drawer puts a
// size into the base shape all variables are drawn around.
func condExtents(c *Cond) []extent {
	if c == nil {
		return nil
	}
	mins := map[int64][]int64{}
	mods := map[int64]int64{}
	var order []int64
	note := func(idx int64) {
		if !slices.Contains(order, idx) {
			order = append(order, idx)
		}
	}
	for _, cmp := range c.Cmps {
		l, r, op := cmp.Left, cmp.Right, cmp.Op
		if l == nil || r == nil {
			continue
		}
		if r.Kind == ExprDim && l.Kind == ExprInt { // N <= shape(?x)[i]
			l, r, op = r, l, mirrored(op)
		}
		switch {
		case l.Kind == ExprDim && r.Kind == ExprInt && r.Int > smallExtent && (op == CmpGe || op == CmpEq):
			mins[l.Index] = append(mins[l.Index], r.Int)
			note(l.Index)
		case l.Kind == ExprDim && r.Kind == ExprInt && r.Int >= smallExtent && op == CmpGt:
			mins[l.Index] = append(mins[l.Index], r.Int+1)
			note(l.Index)
		case l.Kind == ExprMod && l.X != nil && l.Y != nil && l.X.Kind == ExprDim && l.Y.Kind == ExprInt && l.Y.Int > 0 &&
			op == CmpEq && r.Kind == ExprInt && r.Int == 0:
			m := mods[l.X.Index]
			if m == 0 {
				m = 1
			}
			mods[l.X.Index] = lcm(m, l.Y.Int)
		}
	}
	var out []extent
	for _, idx := range order {
		m := max(mods[idx], 1)
		var sizes []ir.Dim
		for _, n := range mins[idx] {
			for _, s := range []int64{n, n + n/2, 2 * n} {
				s = (s + m - 1) / m * m
				if !slices.Contains(sizes, ir.Dim(s)) {
					sizes = append(sizes, ir.Dim(s))
				}
			}
		}
		out = append(out, extent{index: idx, sizes: sizes})
	}
	return out
}

// mirrored is op with its operands swapped: a < b is b > a.
func mirrored(op CmpOp) CmpOp {
	switch op {
	case CmpLt:
		return CmpGt
	case CmpLe:
		return CmpGe
	case CmpGt:
		return CmpLt
	case CmpGe:
		return CmpLe
	}
	return op
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// drawInstance picks shapes around one random base shape, so that the
// variables of a rule often fit together (equal shapes for elementwise
// ops, a suffix for broadcasts, swapped axes for transposes, chained
// extents for matmuls), some variables as splat constants or weights, all
// of dtype dt, and attributes for payload variables. With extents, most
// base shapes carry one of the long dimensions the rule's condition asks
// for.
func drawInstance(rng *rand.Rand, dt ir.DType, vars []string, pvars map[string]ir.Op, extents []extent) instance {
	rank := 1 + rng.IntN(4)
	base := make(ir.Shape, rank)
	for i := range base {
		base[i] = ir.Dim(2 + rng.IntN(smallExtent-1))
	}
	if rng.IntN(3) == 0 { // square shapes make transposes and chains fit
		for i := range base {
			base[i] = base[0]
		}
	}
	if len(extents) > 0 && rng.IntN(4) != 0 {
		e := extents[rng.IntN(len(extents))]
		pos := int(e.index)
		if pos < 0 {
			for rank+pos < 0 {
				base = append(ir.Shape{ir.Dim(2 + rng.IntN(smallExtent-1))}, base...)
				rank++
			}
			pos += rank
		}
		for pos >= rank {
			base = append(base, ir.Dim(2+rng.IntN(smallExtent-1)))
			rank++
		}
		base[pos] = e.sizes[rng.IntN(len(e.sizes))]
	}
	inst := instance{types: map[string]ir.ValueType{}, consts: map[string]float64{}, weights: map[string]bool{},
		attrs: map[string]ir.Attrs{}, payloads: map[string]egraph.Payload{}}
	for _, v := range vars {
		s := base.Clone()
		switch rng.IntN(8) {
		case 0:
			if rank > 1 {
				s[rank-1], s[rank-2] = s[rank-2], s[rank-1]
			}
		case 1:
			s = s[rng.IntN(rank):]
		case 2:
			s[rng.IntN(rank)] = 1
		case 3:
			s = ir.Shape{}
		}
		inst.types[v] = ir.ValueType{Shape: s, DType: dt}
		switch rng.IntN(8) {
		case 0, 1:
			inst.consts[v] = []float64{0, 1, 2, -1, 0.5}[rng.IntN(5)]
		case 2:
			inst.weights[v] = true
		}
	}
	names := make([]string, 0, len(pvars))
	for pv := range pvars {
		names = append(names, pv)
	}
	slices.Sort(names) // map order must not decide what the seeded draw is
	for _, pv := range names {
		op := pvars[pv]
		a := randomAttrs(rng, op, base)
		inst.attrs[pv] = a
		inst.payloads[pv] = AttrPayload(op, a)
	}
	return inst
}

// randomAttrs draws attributes for op that often fit values around base.
func randomAttrs(rng *rand.Rand, op ir.Op, base ir.Shape) ir.Attrs {
	r := len(base)
	var a ir.Attrs
	a.Axis = rng.IntN(2*r) - r
	perm := rng.Perm(r)
	a.Perm = perm
	switch rng.IntN(3) {
	case 0:
		a.To = base.Clone()
	case 1:
		a.To = ir.Shape{ir.Dim(base.NumElements())}
	default:
		a.To = append(ir.Shape{1}, base...)
	}
	a.DType = []ir.DType{ir.F32, ir.F16, ir.BF16}[rng.IntN(3)]
	a.Eps = 1e-5
	a.Scale = 0.5
	a.Causal = rng.IntN(2) == 0
	a.Offset = int64(rng.IntN(3))
	for _, d := range base {
		st := int64(rng.IntN(int(d)))
		a.Starts = append(a.Starts, st)
		a.Ends = append(a.Ends, st+1+int64(rng.IntN(int(d)-int(st))))
		a.Steps = append(a.Steps, 1)
		a.Before = append(a.Before, int64(rng.IntN(2)))
		a.After = append(a.After, int64(rng.IntN(2)))
	}
	return op.Normalize(a)
}

// leaves adds the instance's variables to b: splat constants, weights or
// inputs, named after the variables.
func (inst *instance) leaves(b *ir.Builder, vars []string) map[string]ir.Value {
	out := map[string]ir.Value{}
	for _, v := range vars {
		t := inst.types[v]
		name := strings.TrimPrefix(v, "?")
		switch c, isConst := inst.consts[v]; {
		case isConst:
			out[v] = b.Const(t.DType, t.Shape, c)
		case inst.weights[v]:
			out[v] = b.Weight(name, t.DType, t.Shape...)
		default:
			out[v] = b.Input(name, t.DType, t.Shape...)
		}
	}
	return out
}

// build adds a pattern term to b, with variables bound to leaves and
// payload variables to the instance's attributes.
func (inst *instance) build(b *ir.Builder, t egraph.PatternTerm, leaves map[string]ir.Value) ir.Value {
	if t.Var != "" {
		return leaves[t.Var]
	}
	op, ok := OpOf(t.Op)
	if !ok {
		return b.Apply(ir.InvalidOp, ir.Attrs{})
	}
	attrs, _ := Attrs(t.Payload)
	if t.PayloadVar != "" {
		attrs = inst.attrs[t.PayloadVar]
	}
	ins := make([]ir.Value, len(t.Children))
	for i, c := range t.Children {
		ins[i] = inst.build(b, c, leaves)
	}
	return b.Apply(op, attrs, ins...)
}

// The facts of an instance, for conditions.

// Shape implements Facts.
func (inst *instance) Shape(v string) ([]int64, bool) {
	t, ok := inst.types[v]
	if !ok {
		return nil, false
	}
	out := make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		out[i] = int64(d)
	}
	return out, true
}

// DType implements Facts.
func (inst *instance) DType(v string) (string, bool) {
	t, ok := inst.types[v]
	return t.DType.String(), ok
}

// Const implements Facts.
func (inst *instance) Const(v string) (float64, bool) {
	c, ok := inst.consts[v]
	return c, ok
}

// WeightOnly implements Facts: constants and weights are.
func (inst *instance) WeightOnly(v string) bool {
	_, ok := inst.consts[v]
	return ok || inst.weights[v]
}

// Axis implements Facts.
func (inst *instance) Axis(pv string) (int64, bool) {
	a, ok := inst.attrs[pv]
	return int64(a.Axis), ok
}
