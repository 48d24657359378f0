package rules

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The verifier checks a rule the way a sceptical reader would: it draws
// random legal instances of the left side (shapes for the class variables,
// attributes for the payload variables, random or stress values, in f32,
// bf16 and f16), keeps those the rule's condition accepts, builds both
// sides as one ir program and evaluates it with the reference
// interpreter: the left side in float64 for the truth, and both sides
// with every value rounded to its declared dtype, as kernels materialize
// them. The rounded right side must meet the truth within the allowance
// of the left side's own roundings (see verify_round.go), so that a
// rewrite which rounds where the term as given does not (a partial sum
// kept in bf16) fails. A Go rule's right side is made by applying it
// through an e-graph (verify_rewrite.go).

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Instances is how many valid instances a rule needs (default 20); a
	// rule whose condition never holds fails.
	Instances int
	// Attempts bounds the random draws (default 100 per instance).
	Attempts int
	Seed     uint64
	// DTypes are the float dtypes the draws take in turn (default f32,
	// bf16, f16): a draw that does not type-check in its dtype is no
	// instance.
	DTypes []ir.DType
}

// DefaultDTypes are the dtypes instances are drawn in by default.
var DefaultDTypes = []ir.DType{ir.F32, ir.BF16, ir.F16}

// Drawn counts the valid instances a rule was checked on, by dtype.
type Drawn map[ir.DType]int

// Total is the number of instances of every dtype.
func (d Drawn) Total() int {
	n := 0
	for _, k := range d {
		n += k
	}
	return n
}

// String lists the counts by dtype, "f32 7, bf16 7, f16 6", in
// DefaultDTypes' order then the others'.
func (d Drawn) String() string {
	dts := make([]ir.DType, 0, len(d))
	for dt := range d {
		dts = append(dts, dt)
	}
	rank := func(dt ir.DType) int {
		if i := slices.Index(DefaultDTypes, dt); i >= 0 {
			return i
		}
		return len(DefaultDTypes) + int(dt)
	}
	slices.SortFunc(dts, func(a, b ir.DType) int { return rank(a) - rank(b) })
	parts := make([]string, 0, len(dts))
	for _, dt := range dts {
		if d[dt] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", dt, d[dt]))
		}
	}
	return strings.Join(parts, ", ")
}

// Counterexample is an instance on which a rule's two sides disagree (or
// its right side does not even type-check).
type Counterexample struct {
	Rule    string
	Program *ir.Graph             // outputs "lhs0", "rhs0", ...
	Feeds   map[string]*ir.Tensor // the values of the rule's variables
	// LHS is the left side's float64 truth, RHS the right side with every
	// value rounded to its dtype.
	LHS    *ir.Tensor
	RHS    *ir.Tensor
	Reason string
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
		fmt.Fprintf(&b, "lhs (truth) = %v\nrhs (rounded) = %v\n", c.LHS, c.RHS)
	}
	return b.String()
}

// Side is one side of a rule: the patterns, one per root.
type Side []*egraph.Pattern

// VerifyRule checks lhs => rhs under cond (nil: always). It returns the
// valid instances checked, a counterexample if the rule is unsound, or an
// error if too few instances could be drawn.
func VerifyRule(ctx context.Context, name string, lhs, rhs Side, cond func(Facts) bool, opt VerifyOptions) (Drawn, *Counterexample, error) {
	return verify(ctx, &ruleCheck{name: name, lhs: lhs, rhs: rhs, cond: cond}, opt)
}

// VerifyRewrite checks a rewrite whose right side is Go code (an applier):
// instances of lhs, its left side, under cond (nil: always) and extents
// (long dimensions to draw, from its condition; see condExtents), plus the
// examples registered for applier (RegisterExamples), are rewritten by rw
// in an e-graph and the right side extracted. Instances rw declines are
// not counted.
func VerifyRewrite(ctx context.Context, rw *egraph.Rewrite[Data], applier string, lhs Side, cond *Cond, opt VerifyOptions) (Drawn, *Counterexample, error) {
	c := &ruleCheck{name: rw.Name(), lhs: lhs, rewrite: rw, applier: applier, extents: condExtents(cond)}
	if cond != nil {
		c.cond = func(f Facts) bool {
			ok, err := cond.Eval(f)
			return err == nil && ok
		}
	}
	return verify(ctx, c, opt)
}

// ruleCheck is what verify checks: a left side and condition, and either
// right-side patterns or a Go rewrite.
type ruleCheck struct {
	name    string
	lhs     Side
	cond    func(Facts) bool
	extents []extent
	rhs     Side                  // pattern rules
	rewrite *egraph.Rewrite[Data] // Go rules
	applier string                // the Go rule's applier, for its examples
}

// verify checks c on its examples, then on random instances, then on its
// examples again with fresh values, until it has opt.Instances of them.
func verify(ctx context.Context, c *ruleCheck, opt VerifyOptions) (Drawn, *Counterexample, error) {
	if opt.Instances <= 0 {
		opt.Instances = 20
	}
	if opt.Attempts <= 0 {
		opt.Attempts = 100 * opt.Instances
	}
	if len(opt.DTypes) == 0 {
		opt.DTypes = DefaultDTypes
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0xa11ce))
	drawn := Drawn{}
	if cx, err := c.examples(ctx, rng, opt, drawn, 1); err != nil || cx != nil {
		return drawn, cx, err
	}
	vars, pvars := sideVars(c.lhs)
	for attempt := 0; attempt < opt.Attempts && drawn.Total() < opt.Instances; attempt++ {
		if err := ctx.Err(); err != nil {
			return drawn, nil, err
		}
		dt := opt.DTypes[attempt%len(opt.DTypes)]
		inst := drawInstance(rng, dt, vars, pvars, c.extents)
		b := ir.NewBuilder("verify-" + c.name)
		leaves := inst.leaves(b, vars)
		var lvals []ir.Value
		for _, p := range c.lhs {
			lvals = append(lvals, inst.build(b, p.Term(), leaves))
		}
		if b.Err() != nil {
			continue // the left side does not type-check with these shapes: not an instance
		}
		if c.cond != nil && !c.cond(&inst) {
			continue
		}
		ok, cx, err := c.instance(ctx, rng, b, &inst, leaves, lvals, dt)
		if err != nil || cx != nil {
			return drawn, cx, err
		}
		if ok {
			drawn[dt]++
		}
	}
	if cx, err := c.examples(ctx, rng, opt, drawn, 0); err != nil || cx != nil {
		return drawn, cx, err
	}
	if drawn.Total() < opt.Instances {
		return drawn, nil, fmt.Errorf("verify %s: only %d valid instances in %d draws (want %d): does its condition ever hold?", c.name, drawn.Total(), opt.Attempts, opt.Instances)
	}
	return drawn, nil, nil
}

// examples checks a Go rule's examples (RegisterExamples), the instances
// it is written for, counting them in drawn: each example in every dtype
// before the next, up to the instances asked for. After the first round
// (rounds 1) they are checked again on fresh values (rounds 0: until
// there are enough instances, or a round adds none).
func (c *ruleCheck) examples(ctx context.Context, rng *rand.Rand, opt VerifyOptions, drawn Drawn, rounds int) (*Counterexample, error) {
	if c.rewrite == nil || c.applier == "" {
		return nil, nil
	}
	byDType := make([][]*ir.Graph, len(opt.DTypes))
	for i, dt := range opt.DTypes {
		gs, err := examplesOf(c.applier, dt)
		if err != nil {
			return nil, err
		}
		byDType[i] = gs
	}
	for round := 0; rounds == 0 || round < rounds; round++ {
		before := drawn.Total()
		for k := 0; ; k++ {
			more := false
			for i, dt := range opt.DTypes {
				if k >= len(byDType[i]) || drawn.Total() >= opt.Instances {
					continue
				}
				more = true
				ok, cx, err := c.check(ctx, rng, byDType[i][k], dt, false)
				if err != nil || cx != nil {
					return cx, err
				}
				if ok {
					drawn[dt]++
				}
			}
			if !more {
				break
			}
		}
		if drawn.Total() >= opt.Instances || drawn.Total() == before {
			return nil, nil
		}
	}
	return nil, nil
}

// instance checks one drawn instance, whose left side is built in b: the
// right side is built from the rule's patterns, or by its rewrite.
func (c *ruleCheck) instance(ctx context.Context, rng *rand.Rand, b *ir.Builder, inst *instance, leaves map[string]ir.Value, lvals []ir.Value, dt ir.DType) (bool, *Counterexample, error) {
	if c.rewrite != nil {
		for i, v := range lvals {
			b.Output(fmt.Sprint("lhs", i), v)
		}
		gl, err := b.Build()
		if err != nil {
			return false, nil, nil
		}
		return c.check(ctx, rng, gl, dt, true)
	}
	var rvals []ir.Value
	for _, p := range c.rhs {
		rvals = append(rvals, inst.build(b, p.Term(), leaves))
	}
	if err := b.Err(); err != nil {
		return false, &Counterexample{Rule: c.name, Reason: "the right side does not type-check where the left side does: " + err.Error()}, nil
	}
	for i := range lvals {
		b.Output(fmt.Sprint("lhs", i), lvals[i])
		b.Output(fmt.Sprint("rhs", i), rvals[i])
	}
	g, err := b.Build()
	if err != nil {
		return false, &Counterexample{Rule: c.name, Reason: err.Error()}, nil
	}
	if programElements(g) > maxInstanceElements {
		return false, nil, nil // too slow to evaluate: not an instance
	}
	return c.judge(ctx, rng, g, lvals, rvals, dt)
}

// check checks the left side gl (outputs: its roots) of a Go rule: the
// rewrite makes the right side, and both are joined into one program to
// judge. An instance the rewrite declines is not checked (false), nor is a
// drawn one too large to evaluate quickly (an example is sized by hand).
func (c *ruleCheck) check(ctx context.Context, rng *rand.Rand, gl *ir.Graph, dt ir.DType, drawn bool) (bool, *Counterexample, error) {
	if drawn && programElements(gl) > maxInstanceElements {
		return false, nil, nil
	}
	gr, applied, reason, err := applyRewrite(ctx, c.rewrite, gl)
	switch {
	case err != nil:
		return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
	case reason != "":
		return false, &Counterexample{Rule: c.name, Program: gl, Reason: reason}, nil
	case !applied:
		return false, nil, nil
	}
	g, lvals, rvals, err := joinSides("verify-"+c.name, gl, gr)
	if err != nil {
		return false, &Counterexample{Rule: c.name, Program: gl, Reason: "the right side does not type-check where the left side does: " + err.Error()}, nil
	}
	if drawn && programElements(g) > maxInstanceElements {
		return false, nil, nil
	}
	return c.judge(ctx, rng, g, lvals, rvals, dt)
}

// judge evaluates program g, whose outputs lhsI and rhsI are the values
// lvals and rvals, on random values (typical ones, and stress ones unless
// dt is f16, whose range the stress values' products leave), and compares
// each rounded right side with the left side's truth. Only the elements
// where the left side rounded meets its own allowance are judged: where
// the term as given, computed as its kernels would, is off its truth by
// more (it overflows its dtype, or its errors grow past first order, as
// bf16 scores of stress values in an exponential do), the allowance does
// not describe it and the right side cannot be judged by it. An instance
// with no element judged is no instance.
func (c *ruleCheck) judge(ctx context.Context, rng *rand.Rand, g *ir.Graph, lvals, rvals []ir.Value, dt ir.DType) (bool, *Counterexample, error) {
	for i := range lvals {
		ln, rn := g.Node(lvals[i]), g.Node(rvals[i])
		if !ln.Shape.Equal(rn.Shape) || ln.DType != rn.DType {
			return false, &Counterexample{Rule: c.name, Program: g, Reason: fmt.Sprintf("left side is %s%v, right side %s%v", ln.DType, ln.Shape, rn.DType, rn.Shape)}, nil
		}
	}
	modes := []ir.RandomMode{ir.Typical, ir.Stress}
	if dt == ir.F16 {
		modes = modes[:1]
	}
	r := roundingsOf(g)
	n := maxExtent(g)
	judged := false
	for _, mode := range modes {
		feeds, err := ir.RandomLeaves(g, rng.Uint64(), mode, ir.OpInput, ir.OpWeight)
		if err != nil {
			return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
		}
		truth, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
		if err != nil {
			return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
		}
		rounded, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{RoundEach: true})
		if err != nil {
			return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
		}
		for i := range lvals {
			ln, rn := fmt.Sprint("lhs", i), fmt.Sprint("rhs", i)
			want, mag := truth.Outputs[ln], truth.Magnitudes[ln]
			lr, rr := rounded.Outputs[ln], rounded.Outputs[rn]
			described, err := r.within(g, lvals[i], lr, want, mag, n)
			if err != nil {
				return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
			}
			judged = judged || slices.Contains(described, true)
			// Where the term as given overflows its dtype or the truth
			// float64, a right side that does too is right.
			mm, err := r.judge(g, lvals[i], rr, want, mag, n, func(j int64) bool {
				return !described[j] || nonFinite(rr, j) && (nonFinite(lr, j) || nonFinite(want, j))
			})
			if err != nil {
				return false, nil, fmt.Errorf("verify %s: %w", c.name, err)
			}
			if mm != nil {
				return false, &Counterexample{Rule: c.name, Program: g, Feeds: feeds, LHS: want, RHS: rr,
					Reason: fmt.Sprintf("%s %s values: %s (the right side, every value rounded to its dtype, against the left side's float64 truth)", dt, modeName(mode), mm)}, nil
			}
		}
	}
	return judged, nil, nil
}

func modeName(m ir.RandomMode) string {
	if m == ir.Stress {
		return "stress"
	}
	return "typical"
}

// maxInstanceElements bounds the elements of all the values of an
// instance's program, so that an instance evaluates in milliseconds: a
// draw around a long dimension can make every axis of an attention's
// blocked scores long.
const maxInstanceElements = 1 << 18

// programElements is the number of elements of all g's values.
func programElements(g *ir.Graph) int64 {
	var n int64
	for _, nd := range g.Nodes {
		n += nd.Shape.NumElements()
	}
	return n
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
