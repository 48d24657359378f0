package rules

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The verifier checks a rule the way a sceptical reader would: it draws
// random legal instances of the left side (shapes for the class variables,
// attributes for the payload variables, random or stress values), keeps
// those the rule's condition accepts, builds both sides as one ir program
// and evaluates it with the reference interpreter. The sides must agree
// within ir.Tolerance, measured against the magnitudes of the terms.

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Instances is how many valid instances a rule needs (default 20); a
	// rule whose condition never holds fails.
	Instances int
	// Attempts bounds the random draws (default 60 per instance).
	Attempts int
	Seed     uint64
}

// Counterexample is an instance on which a rule's two sides disagree (or
// its right side does not even type-check).
type Counterexample struct {
	Rule    string
	Program *ir.Graph             // outputs "lhs" and "rhs"
	Feeds   map[string]*ir.Tensor // the values of the rule's variables
	LHS     *ir.Tensor
	RHS     *ir.Tensor
	Reason  string
}

// String prints the counterexample: the program, the values (when small),
// both results and why they disagree.
func (c *Counterexample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %s is unsound: %s\n", c.Rule, c.Reason)
	if c.Program != nil {
		b.WriteString(c.Program.String())
	}
	names := make([]string, 0, len(c.Feeds))
	for n := range c.Feeds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s = %v\n", n, c.Feeds[n])
	}
	if c.LHS != nil {
		fmt.Fprintf(&b, "lhs = %v\nrhs = %v\n", c.LHS, c.RHS)
	}
	return b.String()
}

// Side is one side of a rule: the patterns, one per root.
type Side []*egraph.Pattern

// VerifyRule checks lhs => rhs under cond (nil: always). It returns the
// number of valid instances checked, a counterexample if the rule is
// unsound, or an error if too few instances could be drawn.
func VerifyRule(ctx context.Context, name string, lhs, rhs Side, cond func(Facts) bool, opt VerifyOptions) (int, *Counterexample, error) {
	if opt.Instances <= 0 {
		opt.Instances = 20
	}
	if opt.Attempts <= 0 {
		opt.Attempts = 60 * opt.Instances
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0xa11ce))
	vars, pvars := sideVars(lhs)
	valid := 0
	for attempt := 0; attempt < opt.Attempts && valid < opt.Instances; attempt++ {
		if err := ctx.Err(); err != nil {
			return valid, nil, err
		}
		inst := drawInstance(rng, vars, pvars)
		b := ir.NewBuilder("verify-" + name)
		leaves := map[string]ir.Value{}
		for _, v := range vars {
			t := inst.types[v]
			if c, ok := inst.consts[v]; ok {
				leaves[v] = b.Const(t.DType, t.Shape, c)
			} else {
				leaves[v] = b.Input(strings.TrimPrefix(v, "?"), t.DType, t.Shape...)
			}
		}
		var lvals []ir.Value
		for _, p := range lhs {
			lvals = append(lvals, inst.build(b, p.Term(), leaves))
		}
		if b.Err() != nil {
			continue // the left side does not type-check with these shapes: not an instance
		}
		if cond != nil && !cond(&inst) {
			continue
		}
		var rvals []ir.Value
		for _, p := range rhs {
			rvals = append(rvals, inst.build(b, p.Term(), leaves))
		}
		if err := b.Err(); err != nil {
			return valid, &Counterexample{Rule: name, Reason: "the right side does not type-check where the left side does: " + err.Error()}, nil
		}
		for i := range lvals {
			b.Output(fmt.Sprint("lhs", i), lvals[i])
			b.Output(fmt.Sprint("rhs", i), rvals[i])
		}
		g, err := b.Build()
		if err != nil {
			return valid, &Counterexample{Rule: name, Reason: err.Error()}, nil
		}
		for i := range lvals {
			ln, rn := g.Node(lvals[i]), g.Node(rvals[i])
			if !ln.Shape.Equal(rn.Shape) || ln.DType != rn.DType {
				return valid, &Counterexample{Rule: name, Program: g, Reason: fmt.Sprintf("left side is %s%v, right side %s%v", ln.DType, ln.Shape, rn.DType, rn.Shape)}, nil
			}
		}
		for _, mode := range []ir.RandomMode{ir.Typical, ir.Stress} {
			feeds, err := ir.RandomLeaves(g, rng.Uint64(), mode, ir.OpInput)
			if err != nil {
				return valid, nil, fmt.Errorf("verify %s: %w", name, err)
			}
			res, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
			if err != nil {
				return valid, nil, fmt.Errorf("verify %s: %w", name, err)
			}
			for i := range lvals {
				l, r := res.Outputs[fmt.Sprint("lhs", i)], res.Outputs[fmt.Sprint("rhs", i)]
				ml, mr := res.Magnitudes[fmt.Sprint("lhs", i)], res.Magnitudes[fmt.Sprint("rhs", i)]
				mag := maxTensor(ml, mr)
				mm, err := ir.Compare(r, l, mag, maxExtent(g))
				if err != nil {
					return valid, nil, err
				}
				if mm != nil && !bothNonFinite(l, r, mm.Index) {
					return valid, &Counterexample{Rule: name, Program: g, Feeds: feeds, LHS: l, RHS: r,
						Reason: fmt.Sprintf("%s values: %s", modeName(mode), mm)}, nil
				}
			}
		}
		valid++
	}
	if valid < opt.Instances {
		return valid, nil, fmt.Errorf("verify %s: only %d valid instances in %d draws (want %d): does its condition ever hold?", name, valid, opt.Attempts, opt.Instances)
	}
	return valid, nil, nil
}

func modeName(m ir.RandomMode) string {
	if m == ir.Stress {
		return "stress"
	}
	return "typical"
}

// bothNonFinite excuses elements where both sides overflowed or are
// undefined: stress values can push a correct rewrite past float64 on
// both sides in different ways (inf versus nan).
func bothNonFinite(l, r *ir.Tensor, i int64) bool {
	a, b := l.At(i), r.At(i)
	return (math.IsInf(a, 0) || math.IsNaN(a)) && (math.IsInf(b, 0) || math.IsNaN(b))
}

func maxTensor(a, b *ir.Tensor) *ir.Tensor {
	// Magnitudes are float64 whatever the dtype.
	out := &ir.Tensor{DType: a.DType, Shape: a.Shape.Clone(), F64: make([]float64, a.Len())}
	for i := range out.F64 {
		out.F64[i] = math.Max(a.At(int64(i)), b.At(int64(i)))
	}
	return out
}

// maxExtent is the reduction length assumed for tolerances: the largest
// extent in the program.
func maxExtent(g *ir.Graph) int {
	m := 1
	for _, n := range g.Nodes {
		for _, d := range n.Shape {
			m = max(m, int(d))
		}
	}
	return m
}

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
	attrs    map[string]ir.Attrs
	payloads map[string]egraph.Payload
}

// drawInstance picks shapes around one random base shape, so that the
// variables of a rule often fit together (equal shapes for elementwise
// ops, a suffix for broadcasts, swapped axes for transposes, chained
// extents for matmuls), some variables as splat constants, and attributes
// for payload variables.
func drawInstance(rng *rand.Rand, vars []string, pvars map[string]ir.Op) instance {
	rank := 1 + rng.IntN(3)
	base := make(ir.Shape, rank)
	for i := range base {
		base[i] = ir.Dim(2 + rng.IntN(3))
	}
	if rng.IntN(3) == 0 { // square shapes make transposes and chains fit
		for i := range base {
			base[i] = base[0]
		}
	}
	dt := ir.F32
	inst := instance{types: map[string]ir.ValueType{}, consts: map[string]float64{}, attrs: map[string]ir.Attrs{}, payloads: map[string]egraph.Payload{}}
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
		if rng.IntN(4) == 0 {
			inst.consts[v] = []float64{0, 1, 2, -1, 0.5}[rng.IntN(5)]
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

// WeightOnly implements Facts: constants are.
func (inst *instance) WeightOnly(v string) bool {
	_, ok := inst.consts[v]
	return ok
}

// Axis implements Facts.
func (inst *instance) Axis(pv string) (int64, bool) {
	a, ok := inst.attrs[pv]
	return int64(a.Axis), ok
}
