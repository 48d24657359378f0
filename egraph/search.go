package egraph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Searcher finds matches in an e-graph: a Pattern, or a MultiPattern whose
// patterns share variables.
type Searcher interface {
	// Vars lists the variables a match binds; Match.Subst follows this order.
	Vars() []string
	// PayloadVars lists the payload variables; Match.Payloads follows it.
	PayloadVars() []string
	// NumRoots is the number of patterns, hence of roots per match.
	NumRoots() int
	String() string
	program() *program
}

// Match is one match of a searcher: the class each pattern matched at and
// the class of each variable, in the order of the searcher's Vars.
type Match struct {
	Roots    []ClassID
	Subst    []ClassID
	Payloads []Payload
	vars     []string
	pvars    []string
}

// Vars names the variables of Subst, in order.
func (m Match) Vars() []string { return m.vars }

// PayloadVars names the payload variables of Payloads, in order.
func (m Match) PayloadVars() []string { return m.pvars }

// Root is the class the (first) pattern matched at.
func (m Match) Root() ClassID { return m.Roots[0] }

// Get returns the class bound to a variable of the searcher. Asking for a
// variable the searcher does not have is a bug in the caller and panics.
func (m Match) Get(name string) ClassID {
	i := slices.Index(m.vars, name)
	if i < 0 {
		panic(fmt.Sprintf("egraph: match has no variable %s (has %s)", name, strings.Join(m.vars, " ")))
	}
	return m.Subst[i]
}

// GetPayload returns the payload bound to a payload variable of the
// searcher. Asking for one it does not have is a bug in the caller and
// panics.
func (m Match) GetPayload(name string) Payload {
	i := slices.Index(m.pvars, name)
	if i < 0 {
		panic(fmt.Sprintf("egraph: match has no payload variable %s (has %s)", name, strings.Join(m.pvars, " ")))
	}
	return m.Payloads[i]
}

func (p *Pattern) program() *program { return &p.prog }

// NumRoots implements Searcher.
func (p *Pattern) NumRoots() int { return 1 }

// ErrNeedsRebuild is returned by Search on an e-graph mutated since its last
// Rebuild: matching relies on the invariants Rebuild restores.
var ErrNeedsRebuild = errors.New("egraph: the e-graph was changed since its last Rebuild")

// Search returns every match of s in g in a deterministic order. g must be
// rebuilt.
func Search(g *Graph, s Searcher) ([]Match, error) {
	if !g.clean {
		return nil, fmt.Errorf("search %s: %w", s, ErrNeedsRebuild)
	}
	ms := &matchSet{nroots: s.NumRoots(), nvars: len(s.Vars()), npvars: len(s.PayloadVars())}
	s.program().search(g, ms)
	out := make([]Match, ms.len())
	for i := range out {
		r, sub, pay := ms.at(i)
		out[i] = Match{Roots: r, Subst: sub, Payloads: pay, vars: s.Vars(), pvars: s.PayloadVars()}
	}
	return out, nil
}

// MultiPattern is several patterns that must all match, with shared
// variables meaning the same class in each (Tensat's multi-pattern rules:
// two matmuls that share an input).
type MultiPattern struct {
	pats  []*Pattern
	vars  []string
	pvars []string
	prog  program
}

// NewMultiPattern combines patterns into one searcher. A later pattern may be
// a lone variable only if an earlier one binds it.
func NewMultiPattern(pats ...*Pattern) (*MultiPattern, error) {
	if len(pats) == 0 {
		return nil, fmt.Errorf("multi-pattern with no patterns")
	}
	mp := &MultiPattern{pats: pats}
	seen := map[string]bool{}
	pseen := map[string]bool{}
	for i, p := range pats {
		root := p.nodes[p.root()]
		if i > 0 && root.v >= 0 && !seen[p.vars[root.v]] {
			return nil, fmt.Errorf("multi-pattern part %d is the lone variable %s, which no earlier part binds", i+1, p.vars[root.v])
		}
		for _, v := range p.vars {
			if !seen[v] {
				seen[v] = true
				mp.vars = append(mp.vars, v)
			}
		}
		for _, v := range p.pvars {
			if !pseen[v] {
				pseen[v] = true
				mp.pvars = append(mp.pvars, v)
			}
		}
	}
	for _, v := range mp.vars {
		if pseen[v] {
			return nil, fmt.Errorf("multi-pattern: %s is both a class variable and a payload variable", v)
		}
	}
	mp.prog = compile(pats, mp.vars, mp.pvars)
	return mp, nil
}

// ParseMultiPattern parses each source as a pattern and combines them.
func ParseMultiPattern(srcs ...string) (*MultiPattern, error) {
	pats := make([]*Pattern, len(srcs))
	for i, s := range srcs {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("multi-pattern part %d: %w", i+1, err)
		}
		pats[i] = p
	}
	return NewMultiPattern(pats...)
}

// Vars implements Searcher.
func (mp *MultiPattern) Vars() []string { return mp.vars }

// PayloadVars implements Searcher.
func (mp *MultiPattern) PayloadVars() []string { return mp.pvars }

// NumRoots implements Searcher.
func (mp *MultiPattern) NumRoots() int { return len(mp.pats) }

// Patterns returns the parts.
func (mp *MultiPattern) Patterns() []*Pattern { return mp.pats }

// String prints the parts, separated by commas.
func (mp *MultiPattern) String() string {
	parts := make([]string, len(mp.pats))
	for i, p := range mp.pats {
		parts[i] = p.String()
	}
	return strings.Join(parts, ", ")
}

func (mp *MultiPattern) program() *program { return &mp.prog }

// AddInstance adds the pattern with its variables replaced by the classes in
// subst (indexed like p.Vars()) and returns the root's class.
func AddInstance[D any](g *EGraph[D], p *Pattern, subst []ClassID) (ClassID, error) {
	if len(subst) < len(p.vars) {
		return 0, fmt.Errorf("instantiate %s: %d classes for %d variables", p, len(subst), len(p.vars))
	}
	for _, c := range subst {
		if int(c) >= g.NumIDs() {
			return 0, fmt.Errorf("instantiate %s: class %d does not exist", p, c)
		}
	}
	if len(p.pvars) > 0 {
		return 0, fmt.Errorf("instantiate %s: payload variables %s have no values", p, strings.Join(p.pvars, " "))
	}
	b := newBuilder(p, nil, nil)
	return b.build(g, subst, nil), nil
}

// builder is a right-side pattern compiled for instantiation: a list of
// nodes to add bottom-up, each child taken from the match (source >= 0, an
// index into the substitution) or from an earlier step (source < 0, step
// -source-1). It owns its scratch space, so one builder must not be used
// by two goroutines at once.
type builder struct {
	steps []buildStep
	srcs  []int32
	root  int32 // the source of the result
	out   []ClassID
	kids  []ClassID
}

type buildStep struct {
	op      Symbol
	payload Payload
	psrc    int32  // the match's payload variable giving the payload, or -1 for payload
	off, n  uint32 // the step's children in srcs
}

// newBuilder compiles p. varMap and pvarMap map p's variable and payload
// variable indexes to the match's; nil means the identity.
func newBuilder(p *Pattern, varMap, pvarMap []int) *builder {
	b := &builder{}
	src := make([]int32, len(p.nodes))
	maxArity := 0
	for i, n := range p.nodes {
		if n.v >= 0 {
			v := n.v
			if varMap != nil {
				v = varMap[v]
			}
			src[i] = int32(v)
			continue
		}
		st := buildStep{op: n.op, payload: n.payload, psrc: -1, off: uint32(len(b.srcs)), n: uint32(len(n.kids))}
		if n.pv >= 0 {
			st.psrc = int32(n.pv)
			if pvarMap != nil {
				st.psrc = int32(pvarMap[n.pv])
			}
		}
		for _, k := range n.kids {
			b.srcs = append(b.srcs, src[k])
		}
		maxArity = max(maxArity, len(n.kids))
		b.steps = append(b.steps, st)
		src[i] = -int32(len(b.steps))
	}
	b.root = src[len(src)-1]
	b.out = make([]ClassID, len(b.steps))
	b.kids = make([]ClassID, maxArity)
	return b
}

// build adds the instance for subst and returns its class. Nodes that
// already exist are found without leaving the Graph; only new ones go
// through the analysis. Most nodes a saturating rule builds already exist,
// so this is the hot path of rule application.
func (b *builder) build(eg interface {
	graph() *Graph
	addHashed(uint64, Symbol, Payload, []ClassID) ClassID
}, subst []ClassID, payloads []Payload) ClassID {
	g := eg.graph()
	out := b.out
	for i := range b.steps {
		st := &b.steps[i]
		kids := b.kids[:st.n]
		for j, s := range b.srcs[st.off : st.off+st.n] {
			var c ClassID
			if s >= 0 {
				c = subst[s]
			} else {
				c = out[-s-1]
			}
			kids[j] = g.Find(c)
		}
		pay := st.payload
		if st.psrc >= 0 {
			pay = payloads[st.psrc]
		}
		h := hashNode(st.op, pay, kids)
		if id, ok := g.table.lookup(g, h, st.op, pay, kids); ok {
			out[i] = g.Find(g.nodes[id].class)
		} else {
			out[i] = eg.addHashed(h, st.op, pay, kids)
		}
	}
	if b.root >= 0 {
		return subst[b.root]
	}
	return out[-b.root-1]
}
