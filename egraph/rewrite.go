package egraph

import (
	"fmt"
	"slices"
)

// Condition decides at apply time whether a match may be rewritten, from the
// classes it bound and their analysis data.
type Condition[D any] func(g *EGraph[D], m Match) bool

// ApplyFunc is a rewrite's right side written in Go, for what a pattern
// cannot say. It may add nodes; it returns the class to union with the
// match's first root, or false to leave the match alone. The union is made
// (and recorded) by the engine.
type ApplyFunc[D any] func(g *EGraph[D], m Match) (ClassID, bool)

// Rewrite is a named rule: a searcher, optional conditions, and a right side
// that is either patterns (one per searcher root) or a Go function.
type Rewrite[D any] struct {
	name   string
	search Searcher
	conds  []Condition[D]
	rhs    []*Pattern
	build  []*builder // the right-side patterns, compiled against the searcher's variables
	fn     ApplyFunc[D]
}

// Name is the rule's name.
func (r *Rewrite[D]) Name() string { return r.name }

// Searcher is the rule's left side.
func (r *Rewrite[D]) Searcher() Searcher { return r.search }

// String prints the rule as "name: lhs => rhs".
func (r *Rewrite[D]) String() string {
	rhs := "<go>"
	if r.fn == nil {
		rhs = ""
		for i, p := range r.rhs {
			if i > 0 {
				rhs += ", "
			}
			rhs += p.String()
		}
	}
	return fmt.Sprintf("%s: %s => %s", r.name, r.search, rhs)
}

// NewRewrite builds a rule from a searcher to right-side patterns, one per
// searcher root. A right side that uses a variable the left side does not
// bind is an error.
func NewRewrite[D any](name string, lhs Searcher, rhs []*Pattern, conds ...Condition[D]) (*Rewrite[D], error) {
	if name == "" {
		return nil, fmt.Errorf("rule without a name: %s", lhs)
	}
	if len(rhs) != lhs.NumRoots() {
		return nil, fmt.Errorf("rule %s: %d right-side patterns for %d left-side roots", name, len(rhs), lhs.NumRoots())
	}
	r := &Rewrite[D]{name: name, search: lhs, rhs: rhs, conds: conds}
	for _, p := range rhs {
		m := make([]int, len(p.vars))
		for i, v := range p.vars {
			j := slices.Index(lhs.Vars(), v)
			if j < 0 {
				return nil, fmt.Errorf("rule %s: right side %s uses %s, which the left side %s does not bind", name, p, v, lhs)
			}
			m[i] = j
		}
		pm := make([]int, len(p.pvars))
		for i, v := range p.pvars {
			j := slices.Index(lhs.PayloadVars(), v)
			if j < 0 {
				return nil, fmt.Errorf("rule %s: right side %s uses payload %s, which the left side %s does not bind", name, p, v, lhs)
			}
			pm[i] = j
		}
		r.build = append(r.build, newBuilder(p, m, pm))
	}
	return r, nil
}

// NewFuncRewrite builds a rule whose right side is Go code.
func NewFuncRewrite[D any](name string, lhs Searcher, fn ApplyFunc[D], conds ...Condition[D]) (*Rewrite[D], error) {
	if name == "" {
		return nil, fmt.Errorf("rule without a name: %s", lhs)
	}
	if fn == nil {
		return nil, fmt.Errorf("rule %s: nil applier", name)
	}
	return &Rewrite[D]{name: name, search: lhs, fn: fn, conds: conds}, nil
}

// ParseRewrite parses "lhs" => "rhs" with the default atom syntax.
func ParseRewrite[D any](name, lhs, rhs string, conds ...Condition[D]) (*Rewrite[D], error) {
	l, err := ParsePattern(lhs)
	if err != nil {
		return nil, fmt.Errorf("rule %s: left side: %w", name, err)
	}
	r, err := ParsePattern(rhs)
	if err != nil {
		return nil, fmt.Errorf("rule %s: right side: %w", name, err)
	}
	return NewRewrite(name, l, []*Pattern{r}, conds...)
}

// MustParseRewrite is ParseRewrite for rules written in the program itself,
// where an error is a bug.
func MustParseRewrite[D any](name, lhs, rhs string, conds ...Condition[D]) *Rewrite[D] {
	r, err := ParseRewrite(name, lhs, rhs, conds...)
	if err != nil {
		panic(err)
	}
	return r
}

// ParseBidirectional parses a two-way rule a <=> b into the rules a => b
// (named name) and b => a (named name+"-rev"). Each side must bind every
// variable of the other.
func ParseBidirectional[D any](name, a, b string, conds ...Condition[D]) ([]*Rewrite[D], error) {
	fwd, err := ParseRewrite(name, a, b, conds...)
	if err != nil {
		return nil, err
	}
	rev, err := ParseRewrite(name+"-rev", b, a, conds...)
	if err != nil {
		return nil, err
	}
	return []*Rewrite[D]{fwd, rev}, nil
}

// apply rewrites one match and reports how many unions merged classes.
func (r *Rewrite[D]) apply(g *EGraph[D], m Match, desc uint32) (int, error) {
	for _, c := range r.conds {
		if !c(g, m) {
			return 0, nil
		}
	}
	why := reason{kind: ByRule, desc: desc, root: m.Roots[0], match: m.Subst, from: uint32(len(g.nodes))}
	if r.fn != nil {
		id, ok := r.fn(g, m)
		if !ok {
			return 0, nil
		}
		if int(id) >= g.NumIDs() {
			return 0, fmt.Errorf("rule %s: applier returned class %d, which does not exist", r.name, id)
		}
		if g.union(m.Roots[0], id, why) {
			return 1, nil
		}
		return 0, nil
	}
	n := 0
	for i, b := range r.build {
		id := b.build(g, m.Subst, m.Payloads)
		if g.Find(m.Roots[i]) != g.Find(id) && g.union(m.Roots[i], id, why) {
			n++
		}
	}
	return n, nil
}

// applyAll applies every match in ms, stopping early when the e-graph
// grows past nodeLimit; it reports the merging unions made and whether it
// got through all the matches. The limit is checked per match, not per
// rule, because one exploding rule can otherwise overshoot it many times
// over.
func (r *Rewrite[D]) applyAll(g *EGraph[D], ms *matchSet, desc uint32, nodeLimit int) (int, bool, error) {
	n := ms.len()
	applied := 0
	if r.fn == nil && len(r.conds) == 0 && len(r.build) == 1 {
		// The common case, without the per-match Match and condition calls.
		b, w, pw := r.build[0], ms.nroots+ms.nvars, ms.npvars
		for j := range n {
			m := ms.data[j*w : (j+1)*w]
			root, subst := m[0], m[1:]
			from := uint32(len(g.nodes))
			id := b.build(g, subst, ms.payloads[j*pw:(j+1)*pw])
			if g.Find(root) != g.Find(id) && g.union(root, id, reason{kind: ByRule, desc: desc, root: root, match: subst, from: from}) {
				applied++
			}
			if g.NumNodes() > nodeLimit {
				return applied, j == n-1, nil
			}
		}
		return applied, true, nil
	}
	vars, pvars := r.search.Vars(), r.search.PayloadVars()
	for j := range n {
		roots, subst, payloads := ms.at(j)
		k, err := r.apply(g, Match{Roots: roots, Subst: subst, Payloads: payloads, vars: vars, pvars: pvars}, desc)
		applied += k
		if err != nil {
			return applied, false, err
		}
		if g.NumNodes() > nodeLimit {
			return applied, j == n-1, nil
		}
	}
	return applied, true, nil
}
