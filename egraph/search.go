package egraph

import (
	"fmt"
	"slices"
	"strings"
)

// Searcher finds matches in an e-graph: a Pattern, or a MultiPattern whose
// patterns share variables.
type Searcher interface {
	// Vars lists the variables a match binds; Match.Subst follows this order.
	Vars() []string
	// NumRoots is the number of patterns, hence of roots per match.
	NumRoots() int
	String() string
	program() *program
}

// Match is one match of a searcher: the class each pattern matched at and
// the class of each variable, in the order of the searcher's Vars.
type Match struct {
	Roots []ClassID
	Subst []ClassID
	vars  []string
}

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

func (p *Pattern) program() *program { return &p.prog }

// NumRoots implements Searcher.
func (p *Pattern) NumRoots() int { return 1 }

// Search returns every match of s in g, which must be rebuilt, in a
// deterministic order.
func Search(g *Graph, s Searcher) []Match {
	ms := searchSet(g, s, 0)
	out := make([]Match, ms.len())
	for i := range out {
		r, sub := ms.at(i)
		out[i] = Match{Roots: r, Subst: sub, vars: s.Vars()}
	}
	return out
}

func searchSet(g *Graph, s Searcher, limit int) *matchSet {
	ms := &matchSet{nroots: s.NumRoots(), nvars: len(s.Vars()), limit: limit}
	if !g.clean {
		panic("egraph: search of an e-graph that needs Rebuild")
	}
	s.program().search(g, ms)
	return ms
}

// MultiPattern is several patterns that must all match, with shared
// variables meaning the same class in each (Tensat's multi-pattern rules:
// two matmuls that share an input).
type MultiPattern struct {
	pats []*Pattern
	vars []string
	prog program
}

// NewMultiPattern combines patterns into one searcher. A later pattern may be
// a lone variable only if an earlier one binds it.
func NewMultiPattern(pats ...*Pattern) (*MultiPattern, error) {
	if len(pats) == 0 {
		return nil, fmt.Errorf("multi-pattern with no patterns")
	}
	mp := &MultiPattern{pats: pats}
	seen := map[string]bool{}
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
	}
	mp.prog = compile(pats, mp.vars)
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

// NumRoots implements Searcher.
func (mp *MultiPattern) NumRoots() int { return len(mp.pats) }

// Patterns returns the parts.
func (mp *MultiPattern) Patterns() []*Pattern { return mp.pats }

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
	var sc instanceScratch
	return instantiate(g, p, subst, nil, &sc)
}

// instanceScratch is reused across instantiations so that applying a rule
// to many matches does not allocate per match.
type instanceScratch struct {
	ids, kids []ClassID
}

// instantiate adds p bottom-up; the postorder of p.nodes means every child
// is added before its parent. Variable v takes subst[varMap[v]], or
// subst[v] when varMap is nil.
func instantiate[D any](g *EGraph[D], p *Pattern, subst []ClassID, varMap []int, sc *instanceScratch) (ClassID, error) {
	if g.adder == nil {
		g.adder = g.addNew
	}
	return g.Graph.instantiate(p, subst, varMap, sc, g.adder)
}

// instantiate is the analysis-free part of instantiation: nodes that are
// already present are found without leaving the Graph, and only new nodes
// go through add, which runs the analysis. Most nodes a saturating rule
// instantiates already exist, so this path is the hot one.
func (g *Graph) instantiate(p *Pattern, subst []ClassID, varMap []int, sc *instanceScratch, add func(uint64, Symbol, Payload, []ClassID) ClassID) (ClassID, error) {
	ids := slices.Grow(sc.ids[:0], len(p.nodes))[:len(p.nodes)]
	sc.ids = ids
	for i := range p.nodes {
		n := &p.nodes[i]
		if n.v >= 0 {
			if varMap != nil {
				ids[i] = subst[varMap[n.v]]
			} else {
				ids[i] = subst[n.v]
			}
			continue
		}
		kids := sc.kids[:0]
		for _, k := range n.kids {
			kids = append(kids, g.Find(ids[k]))
		}
		sc.kids = kids
		h := hashNode(n.op, n.payload, kids)
		if id, ok := g.table.lookup(g, h, n.op, n.payload, kids); ok {
			ids[i] = g.Find(g.nodes[id].class)
			continue
		}
		ids[i] = add(h, n.op, n.payload, kids)
	}
	return ids[len(ids)-1], nil
}
