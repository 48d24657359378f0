package egraph

import (
	"fmt"
	"slices"
	"strings"
)

// ReasonKind says what made a union happen.
type ReasonKind uint8

// The kinds of union reasons.
const (
	// ByCaller is a union the program asked for, with its own explanation.
	ByCaller ReasonKind = iota
	// ByRule is a union made by a rewrite rule applied to a match.
	ByRule
	// ByCongruence is a union rebuilding made because two nodes became equal
	// once their children were canonical.
	ByCongruence
)

// String names the kind.
func (k ReasonKind) String() string {
	switch k {
	case ByCaller:
		return "caller"
	case ByRule:
		return "rule"
	case ByCongruence:
		return "congruence"
	}
	return fmt.Sprintf("ReasonKind(%d)", uint8(k))
}

// Binding is one pattern variable's class in a match.
type Binding struct {
	Var   string
	Class ClassID
}

// UnionRecord says why two classes became one.
type UnionRecord struct {
	// A and B are the ids the union was called with.
	A, B ClassID
	Kind ReasonKind
	// Reason is the rule's name for ByRule and the caller's text for ByCaller.
	Reason string
	// Match is, for ByRule, the class the rule matched at (the first
	// pattern's for a multi-pattern) and the variable bindings it used, as
	// they were when the rule matched.
	MatchRoot ClassID
	Match     []Binding
	// Nodes are, for ByCongruence, the two nodes found equal.
	Nodes [2]NodeID
}

// String prints the record on one line, naming the rule and its match.
func (r UnionRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d = %d by %s", r.A, r.B, r.Kind)
	switch r.Kind {
	case ByRule:
		fmt.Fprintf(&b, " %q at class %d", r.Reason, r.MatchRoot)
		for _, m := range r.Match {
			fmt.Fprintf(&b, " %s=%d", m.Var, m.Class)
		}
	case ByCaller:
		fmt.Fprintf(&b, " %q", r.Reason)
	case ByCongruence:
		fmt.Fprintf(&b, " of nodes %d and %d", r.Nodes[0], r.Nodes[1])
	}
	return b.String()
}

// reason is a union's cause before it is recorded: the kind, an index into
// the provenance's reason table, and the match's classes.
type reason struct {
	kind  ReasonKind
	desc  uint32
	root  ClassID
	match []ClassID
	// from is, for a rule, the node count before its application added
	// its right side (MadeBy).
	from uint32
}

// provenance is the union log. It is compact because every union of a
// saturation run is recorded: twenty-eight bytes per union plus four per match
// class, with rule names and variable lists stored once.
type provenance struct {
	recs  []unionRec
	args  []ClassID // match bindings, addressed by unionRec.args
	descs []reasonDesc
	index map[string]uint32
}

type unionRec struct {
	a, b ClassID
	desc uint32
	// from and nodes are the e-graph's node count before the rule
	// application that made the union (rules only) and at the union:
	// the application added nodes from .. nodes-1.
	from, nodes uint32
	args        uint32 // offset in provenance.args: the match root, then the bindings (rules); two node ids (congruence)
	nargs       uint16
	kind        ReasonKind
}

type reasonDesc struct {
	text string
	vars []string
}

// describe interns a reason text (and, for rules, its variable names).
func (p *provenance) describe(text string, vars []string) uint32 {
	key := text + "\x00" + strings.Join(vars, "\x00")
	if id, ok := p.index[key]; ok {
		return id
	}
	if p.index == nil {
		p.index = map[string]uint32{}
	}
	id := uint32(len(p.descs))
	p.descs = append(p.descs, reasonDesc{text: text, vars: vars})
	p.index[key] = id
	return id
}

func (p *provenance) record(a, b ClassID, why reason, nodes int) {
	r := unionRec{a: a, b: b, kind: why.kind, desc: why.desc, args: uint32(len(p.args)), nargs: uint16(len(why.match)), from: why.from, nodes: uint32(nodes)}
	if why.kind == ByRule {
		p.args = append(p.args, why.root)
	}
	p.args = append(p.args, why.match...)
	p.recs = append(p.recs, r)
}

func (p *provenance) export(i int) UnionRecord {
	r := p.recs[i]
	out := UnionRecord{A: r.a, B: r.b, Kind: r.kind}
	args := p.args[r.args:]
	switch r.kind {
	case ByCongruence:
		out.Nodes = [2]NodeID{NodeID(args[0]), NodeID(args[1])}
	case ByCaller:
		out.Reason = p.descs[r.desc].text
	case ByRule:
		d := p.descs[r.desc]
		out.Reason = d.text
		out.MatchRoot = args[0]
		for j, c := range args[1 : 1+int(r.nargs)] {
			out.Match = append(out.Match, Binding{Var: d.vars[j], Class: c})
		}
	}
	return out
}

// MadeBy returns the index (UnionAt) of the union that ended the rule
// application which added node n (its right side), false when n was added
// otherwise (by the caller) or by an application that merged nothing.
func (g *Graph) MadeBy(n NodeID) (int, bool) {
	recs := g.prov.recs
	i, _ := slices.BinarySearchFunc(recs, uint32(n), func(r unionRec, n uint32) int {
		if r.nodes <= n {
			return -1
		}
		return 1
	})
	if i == len(recs) || recs[i].kind != ByRule || recs[i].from > uint32(n) {
		return 0, false
	}
	return i, true
}

// NumUnions is the number of unions that merged two classes.
func (g *Graph) NumUnions() int { return len(g.prov.recs) }

// UnionAt returns the i-th union record, in the order unions happened.
func (g *Graph) UnionAt(i int) UnionRecord { return g.prov.export(i) }

// Explain returns the unions that made a and b equal, in the order they
// happened: the path between a and b in the forest whose edges join the two
// ids each union was called with. Every union that merged two classes joined
// two trees of that forest, so the path is unique, and each of its records
// says which rule and match (or caller, or congruence) supplied that step.
// A wrong equality found later is traced to the rule that made it this way.
func (g *Graph) Explain(a, b ClassID) ([]UnionRecord, error) {
	if int(a) >= len(g.parent) || int(b) >= len(g.parent) {
		return nil, fmt.Errorf("explain %d = %d: no such class", a, b)
	}
	if g.find(a) != g.find(b) {
		return nil, fmt.Errorf("explain %d = %d: the classes are not equal", a, b)
	}
	p := &g.prov
	adj := make(map[ClassID][]int32, 2*len(p.recs))
	for i, r := range p.recs {
		adj[r.a] = append(adj[r.a], int32(i))
		adj[r.b] = append(adj[r.b], int32(i))
	}
	// Breadth-first search from a, remembering the edge that reached each id.
	via := map[ClassID]int32{a: -1}
	queue := []ClassID{a}
	for len(queue) > 0 && queue[0] != b {
		x := queue[0]
		queue = queue[1:]
		for _, e := range adj[x] {
			r := p.recs[e]
			y := r.a
			if y == x {
				y = r.b
			}
			if _, seen := via[y]; !seen {
				via[y] = e
				queue = append(queue, y)
			}
		}
	}
	var ids []int32
	for x := b; x != a; {
		e := via[x]
		ids = append(ids, e)
		if r := p.recs[e]; r.a == x {
			x = r.b
		} else {
			x = r.a
		}
	}
	slices.Sort(ids) // record indexes are chronological
	out := make([]UnionRecord, len(ids))
	for i, r := range ids {
		out[i] = p.export(int(r))
	}
	return out, nil
}
