package extract

import (
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
)

// CostFunc gives an e-node's own cost (not counting its children). It is
// called once per node. +Inf (or NaN) marks a node that cannot execute.
type CostFunc func(g *egraph.Graph, n egraph.NodeID) float64

// Problem is an e-graph in the dense form the algorithms work on: classes
// and nodes numbered from 0, costs evaluated once, and only executable
// nodes kept: a node is executable when its own cost is finite and every
// child class has an executable node. No infinite cost is ever stored.
type Problem struct {
	// Nodes are the executable nodes. Node i's children are class indexes,
	// in the node's order, repeats kept (tree cost counts them).
	Nodes []Node
	// ClassNodes lists each class's executable nodes by index.
	ClassNodes [][]int32
	// Roots are the classes to compute.
	Roots []int32
	// ClassIDs and NodeIDs map back to the e-graph.
	ClassIDs []egraph.ClassID
	NodeIDs  []egraph.NodeID
	// ClassNames names classes in messages (the file's names for an
	// imported e-graph, else the class id).
	ClassNames []string
}

// Node is an executable e-node.
type Node struct {
	Class    int32
	Cost     float64
	Children []int32
}

// NumClasses is the number of classes, executable or not.
func (p *Problem) NumClasses() int { return len(p.ClassNodes) }

// NewProblem evaluates costs and finds the executable nodes of a rebuilt
// e-graph. A root with no executable node is an error naming the class.
// names, if not nil, gives classes their names in messages. Costs may be
// negative (Tree then refuses an unbounded optimum).
func NewProblem(g *egraph.Graph, roots []egraph.ClassID, cost CostFunc, names map[egraph.ClassID]string) (*Problem, error) {
	classes := g.Classes()
	index := make(map[egraph.ClassID]int32, len(classes))
	classNames := make([]string, len(classes))
	for i, c := range classes {
		index[c] = int32(i)
		if n, ok := names[c]; ok {
			classNames[i] = n
		} else {
			classNames[i] = fmt.Sprint(c)
		}
	}
	var cands []candidate
	for ci, c := range classes {
		for _, nid := range g.ClassNodes(c) {
			cst := cost(g, nid)
			if math.IsInf(cst, 0) || math.IsNaN(cst) {
				continue
			}
			n := g.Node(nid)
			kids := make([]int32, len(n.Children))
			for k, ch := range n.Children {
				kids[k] = index[g.Find(ch)]
			}
			cands = append(cands, candidate{nid, Node{Class: int32(ci), Cost: cst, Children: kids}})
		}
	}
	var rs []int32
	for _, r := range roots {
		ri, ok := index[g.Find(r)]
		if !ok {
			return nil, fmt.Errorf("extract: root %d is not a class of the e-graph", r)
		}
		rs = append(rs, ri)
	}
	return buildProblem(classes, classNames, cands, rs)
}

// candidate is a node of finite cost before the executable ones are
// found: its id (Problem.NodeIDs) and its dense form.
type candidate struct {
	id   egraph.NodeID
	node Node
}

// buildProblem keeps the executable candidates (a node is executable when
// every child class has an executable node) of classes ids (named names)
// and checks that every root is computable.
func buildProblem(ids []egraph.ClassID, names []string, cands []candidate, roots []int32) (*Problem, error) {
	p := &Problem{ClassNodes: make([][]int32, len(ids)), ClassIDs: ids, ClassNames: names}
	parents := make([][]int32, len(ids)) // class -> candidates using it
	for k, c := range cands {
		for j, ch := range c.node.Children {
			if !slices.Contains(c.node.Children[:j], ch) {
				parents[ch] = append(parents[ch], int32(k))
			}
		}
	}
	// A node becomes executable when its count of distinct uncomputed
	// children reaches zero; a class becomes computable with its first
	// executable node.
	missing := make([]int, len(cands))
	var ready []int32
	for k, c := range cands {
		for j, ch := range c.node.Children {
			if !slices.Contains(c.node.Children[:j], ch) {
				missing[k]++
			}
		}
		if missing[k] == 0 {
			ready = append(ready, int32(k))
		}
	}
	computable := make([]bool, len(ids))
	exec := make([]bool, len(cands))
	for len(ready) > 0 {
		k := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		exec[k] = true
		c := cands[k].node.Class
		if computable[c] {
			continue
		}
		computable[c] = true
		for _, pk := range parents[c] {
			missing[pk]--
			if missing[pk] == 0 {
				ready = append(ready, pk)
			}
		}
	}
	for k, c := range cands {
		if !exec[k] {
			continue
		}
		p.ClassNodes[c.node.Class] = append(p.ClassNodes[c.node.Class], int32(len(p.Nodes)))
		p.Nodes = append(p.Nodes, c.node)
		p.NodeIDs = append(p.NodeIDs, c.id)
	}
	for _, ri := range roots {
		if !computable[ri] {
			return nil, fmt.Errorf("extract: root class %s cannot be computed: no choice of its nodes has finite cost all the way down", p.ClassNames[ri])
		}
		p.Roots = append(p.Roots, ri)
	}
	return p, nil
}
