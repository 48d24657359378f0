package egraph

import (
	"fmt"
)

// EGraph is an e-graph whose classes carry analysis data of type D.
//
// Mutations (Add, Union) are cheap and leave congruence closure to Rebuild,
// which the runner calls once per iteration. An EGraph is not safe for
// concurrent mutation; reads that do not compress paths (matching) may run
// concurrently with each other between mutations.
type EGraph[D any] struct {
	Graph
	analysis Analysis[D]
	data     []D      // indexed by the class's pool slot
	dataWork []NodeID // nodes whose class data must take in their Make again
	scratch  []ClassID
}

// New returns an empty e-graph with the given analysis.
func New[D any](a Analysis[D]) *EGraph[D] {
	return &EGraph[D]{analysis: a}
}

// NewPlain returns an empty e-graph without analysis data.
func NewPlain() *EGraph[NoData] { return New[NoData](NoAnalysis{}) }

// Data returns the analysis data of the class id belongs to.
func (g *EGraph[D]) Data(id ClassID) D { return g.data[g.slot[g.find(id)]] }

// dataOf points at a canonical class's data.
func (g *EGraph[D]) dataOf(c ClassID) *D { return &g.data[g.slot[c]] }

// newClassData makes a class with zero data.
func (g *EGraph[D]) newClassData() ClassID {
	c, s := g.newClass()
	g.initData(s)
	return c
}

func (g *EGraph[D]) initData(s uint32) {
	var zero D
	if int(s) == len(g.data) {
		g.data = append(g.data, zero)
	} else {
		g.data[s] = zero
	}
}

// Add adds a node and returns its class. An equal node (after its children
// are canonicalized) is found instead of added. Children must be classes of
// this e-graph; anything else is an error, as is a node with more than 65535
// children.
func (g *EGraph[D]) Add(n Node) (ClassID, error) {
	kids, err := g.canonicalKids(n, g.scratch)
	if err != nil {
		return 0, err
	}
	g.scratch = kids
	h := hashNode(n.Op, n.Payload, kids)
	if id, ok := g.table.lookup(&g.Graph, h, n.Op, n.Payload, kids); ok {
		return g.Find(g.nodes[id].class), nil
	}
	return g.addHashed(h, n.Op, n.Payload, kids), nil
}

// MustAdd is Add for nodes the program builds itself from classes it got
// from this e-graph, where an error is a bug.
func (g *EGraph[D]) MustAdd(n Node) ClassID {
	id, err := g.Add(n)
	if err != nil {
		panic(err)
	}
	return id
}

func (g *EGraph[D]) graph() *Graph { return &g.Graph }

// addHashed adds a node known to be absent from the hash-cons, whose
// children are canonical and whose hash is h, in a class of its own, and
// runs the analysis on it.
func (g *EGraph[D]) addHashed(h uint64, op Symbol, p Payload, kids []ClassID) ClassID {
	c, s, nid := g.addNode(h, op, p, kids)
	g.initData(s)
	// kids may alias g.scratch, which Make may reuse through Add; read the
	// stored copy instead.
	d := g.analysis.Make(g, g.Node(nid))
	g.data[s] = d
	g.analysis.Modify(g, c)
	return c
}

// Union merges the classes of a and b and records why. It reports whether
// they were distinct. Congruence closure is deferred to Rebuild.
func (g *EGraph[D]) Union(a, b ClassID, why string) bool {
	return g.union(a, b, reason{kind: ByCaller, desc: g.prov.describe(why, nil)})
}

func (g *EGraph[D]) union(a, b ClassID, why reason) bool {
	ra, rb := g.Find(a), g.Find(b)
	if ra == rb {
		return false
	}
	root, child, split := g.link(ra, rb)
	g.prov.record(a, b, why, len(g.nodes))
	// Only the parents whose child's data changed need their Make again:
	// the root's own before split, the merged class's after it.
	parents := g.cls(root).parents
	dm := g.analysis.Merge(g.dataOf(root), g.data[g.slot[child]])
	if dm.To {
		g.dataWork = append(g.dataWork, parents[:split]...)
	}
	if dm.From {
		g.dataWork = append(g.dataWork, parents[split:]...)
	}
	var zero D
	g.data[g.slot[child]] = zero
	g.release(child)
	g.analysis.Modify(g, root)
	return true
}

// Rebuild restores the invariants: it recanonicalizes every node whose
// children were merged, unions the classes of nodes that became congruent,
// brings analysis data to its fixed point, sorts changed classes and
// rebuilds the per-operator index. It returns the number of congruence
// unions it made.
func (g *EGraph[D]) Rebuild() int {
	if g.clean && len(g.pending) == 0 && len(g.dataWork) == 0 {
		return 0
	}
	n := 0
	for len(g.pending) > 0 || len(g.dataWork) > 0 {
		for len(g.pending) > 0 {
			id := g.pending[len(g.pending)-1]
			g.pending = g.pending[:len(g.pending)-1]
			if other, dup := g.recanonicalize(id); dup {
				a, b := g.nodes[other].class, g.nodes[id].class
				if g.union(a, b, reason{kind: ByCongruence, match: []ClassID{ClassID(other), ClassID(id)}}) {
					n++
				}
			}
		}
		for len(g.dataWork) > 0 {
			id := g.dataWork[len(g.dataWork)-1]
			g.dataWork = g.dataWork[:len(g.dataWork)-1]
			if g.nodes[id].dead {
				continue
			}
			c := g.Find(g.nodes[id].class)
			d := g.analysis.Make(g, g.Node(id))
			if g.analysis.Merge(g.dataOf(c), d).To {
				g.dataWork = append(g.dataWork, g.cls(c).parents...)
				g.analysis.Modify(g, c)
			}
		}
	}
	g.tidy()
	return n
}

// AddExpr parses a ground s-expression (no variables) with the default atom
// syntax and adds it, returning the root's class.
func (g *EGraph[D]) AddExpr(src string) (ClassID, error) {
	p, err := ParsePattern(src)
	if err != nil {
		return 0, err
	}
	if len(p.Vars()) > 0 {
		return 0, fmt.Errorf("add %q: expression has variables", src)
	}
	return AddInstance(g, p, nil)
}
