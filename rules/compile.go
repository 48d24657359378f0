package rules

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
)

// Applier is a rule's right side written in Go, registered by name and
// referenced from rule files as @name: for what a pattern cannot say
// (building a fused kernel body, computing a constant).
type Applier = egraph.ApplyFunc[Data]

var appliers = struct {
	sync.RWMutex
	m map[string]Applier
}{m: map[string]Applier{}}

// RegisterApplier makes fn available to rule files as @name. Registering a
// name twice is a bug and panics.
func RegisterApplier(name string, fn Applier) {
	appliers.Lock()
	defer appliers.Unlock()
	if _, dup := appliers.m[name]; dup {
		panic("rules: applier " + name + " registered twice")
	}
	appliers.m[name] = fn
}

// Rule is a compiled rule: its declaration and the e-graph rewrites it
// makes (two for a two-way rule: NAME and NAME-rev).
type Rule struct {
	Decl     *RuleDecl
	Rewrites []*egraph.Rewrite[Data]
}

// Compile turns a parsed rule file into rewrites. Errors carry the rule's
// position.
func Compile(f *RuleFile) ([]*Rule, error) {
	var out []*Rule
	names := map[string]Pos{}
	for _, d := range f.Rules {
		r, err := compileRule(d)
		if err != nil {
			return nil, err
		}
		for _, rw := range r.Rewrites {
			if prev, dup := names[rw.Name()]; dup {
				return nil, &PosError{Pos: d.Pos, Msg: fmt.Sprintf("rule %s clashes with the rule at %s", rw.Name(), prev)}
			}
			names[rw.Name()] = d.Pos
		}
		out = append(out, r)
	}
	return out, nil
}

func compileRule(d *RuleDecl) (*Rule, error) {
	fail := func(err error) error { return &PosError{Pos: d.Pos, Msg: fmt.Sprintf("rule %s: %v", d.Name, err)} }
	searcher := func(pats []*egraph.Pattern) (egraph.Searcher, error) {
		if len(pats) == 1 {
			return pats[0], nil
		}
		return egraph.NewMultiPattern(pats...)
	}
	cond := condition(d.Cond)
	r := &Rule{Decl: d}
	lhs, err := searcher(d.LHS)
	if err != nil {
		return nil, fail(err)
	}
	if d.Applier != "" {
		appliers.RLock()
		fn, ok := appliers.m[d.Applier]
		appliers.RUnlock()
		if !ok {
			return nil, fail(fmt.Errorf("no Go applier named @%s is registered", d.Applier))
		}
		rw, err := egraph.NewFuncRewrite(d.Name, lhs, fn, cond...)
		if err != nil {
			return nil, fail(err)
		}
		r.Rewrites = append(r.Rewrites, rw)
		return r, nil
	}
	fwd, err := egraph.NewRewrite(d.Name, lhs, d.RHS, cond...)
	if err != nil {
		return nil, fail(err)
	}
	r.Rewrites = append(r.Rewrites, fwd)
	if d.TwoWay {
		rhs, err := searcher(d.RHS)
		if err != nil {
			return nil, fail(err)
		}
		rev, err := egraph.NewRewrite(d.Name+"-rev", rhs, d.LHS, cond...)
		if err != nil {
			return nil, fail(err)
		}
		r.Rewrites = append(r.Rewrites, rev)
	}
	return r, nil
}

// condition turns a parsed condition into an e-graph condition that asks
// the tensor analysis.
func condition(c *Cond) []egraph.Condition[Data] {
	if c == nil {
		return nil
	}
	return []egraph.Condition[Data]{func(g *egraph.EGraph[Data], m egraph.Match) bool {
		ok, err := c.Eval(matchFacts{g, m})
		return err == nil && ok
	}}
}

// matchFacts answers conditions from the analysis data of a match.
type matchFacts struct {
	g *egraph.EGraph[Data]
	m egraph.Match
}

func (f matchFacts) data(v string) (Data, bool) {
	if !slices.Contains(f.m.Vars(), v) {
		return Data{}, false
	}
	d := f.g.Data(f.m.Get(v))
	return d, d.Valid()
}

// Shape implements Facts.
func (f matchFacts) Shape(v string) ([]int64, bool) {
	d, ok := f.data(v)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(d.Shape))
	for i, x := range d.Shape {
		out[i] = int64(x)
	}
	return out, true
}

// DType implements Facts.
func (f matchFacts) DType(v string) (string, bool) {
	d, ok := f.data(v)
	return d.DType.String(), ok
}

// Const implements Facts.
func (f matchFacts) Const(v string) (float64, bool) {
	d, ok := f.data(v)
	return d.Const, ok && d.IsConst
}

// WeightOnly implements Facts.
func (f matchFacts) WeightOnly(v string) bool {
	d, ok := f.data(v)
	return ok && d.WeightOnly
}

// Axis implements Facts: the axis attribute of a payload variable.
func (f matchFacts) Axis(pv string) (int64, bool) {
	if !slices.Contains(f.m.PayloadVars(), pv) {
		return 0, false
	}
	a, ok := Attrs(f.m.GetPayload(pv))
	return int64(a.Axis), ok
}

//go:embed builtin/*.rules
var builtin embed.FS

// BuiltinSets lists the built-in rule sets (one file per family).
func BuiltinSets() []string {
	entries, _ := builtin.ReadDir("builtin")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".rules"))
	}
	return out
}

// Builtin parses and compiles built-in rule sets by name (all when none are
// named).
func Builtin(sets ...string) ([]*Rule, error) {
	if len(sets) == 0 {
		sets = BuiltinSets()
	}
	var out []*Rule
	for _, s := range sets {
		src, err := builtin.ReadFile(path.Join("builtin", s+".rules"))
		if err != nil {
			return nil, fmt.Errorf("no built-in rule set %q (have %s)", s, strings.Join(BuiltinSets(), ", "))
		}
		f, err := ParseRules(s+".rules", src, Atom)
		if err != nil {
			return nil, err
		}
		rs, err := Compile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// Rewrites flattens rules into the list the runner takes.
func Rewrites(rules []*Rule) []*egraph.Rewrite[Data] {
	var out []*egraph.Rewrite[Data]
	for _, r := range rules {
		out = append(out, r.Rewrites...)
	}
	return out
}

// Verify checks a rule with the verifier: both directions of a two-way rule
// (each side must type-check wherever the other does), or a rule with a Go
// applier through its rewrite (VerifyRewrite). Long dimensions its
// condition asks for are drawn (condExtents).
func (r *Rule) Verify(ctx context.Context, opt VerifyOptions) (Drawn, *Counterexample, error) {
	d := r.Decl
	if d.Applier != "" {
		return VerifyRewrite(ctx, r.Rewrites[0], d.Applier, d.LHS, d.Cond, opt)
	}
	var cond func(Facts) bool
	if d.Cond != nil {
		cond = func(f Facts) bool {
			ok, err := d.Cond.Eval(f)
			return err == nil && ok
		}
	}
	ext := condExtents(d.Cond)
	n, cx, err := verify(ctx, &ruleCheck{name: d.Name, lhs: d.LHS, rhs: d.RHS, cond: cond, extents: ext}, opt)
	if err != nil || cx != nil || !d.TwoWay {
		return n, cx, err
	}
	m, cx, err := verify(ctx, &ruleCheck{name: d.Name + "-rev", lhs: d.RHS, rhs: d.LHS, cond: cond, extents: ext}, opt)
	for dt, k := range m {
		n[dt] += k
	}
	return n, cx, err
}

// LoadFile reads, parses and compiles a rule file.
func LoadFile(name string) ([]*Rule, error) {
	src, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := ParseRules(name, src, Atom)
	if err != nil {
		return nil, err
	}
	return Compile(f)
}
