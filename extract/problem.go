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
// names, if not nil, gives classes their names in messages.
func NewProblem(g *egraph.Graph, roots []egraph.ClassID, cost CostFunc, names map[egraph.ClassID]string) (*Problem, error) {
	classes := g.Classes()
	index := make(map[egraph.ClassID]int32, len(classes))
	p := &Problem{ClassNodes: make([][]int32, len(classes)), ClassIDs: classes, ClassNames: make([]string, len(classes))}
	for i, c := range classes {
		index[c] = int32(i)
		if n, ok := names[c]; ok {
			p.ClassNames[i] = n
		} else {
			p.ClassNames[i] = fmt.Sprint(c)
		}
	}
	// Candidate nodes with finite costs, then the fixpoint.
	type cand struct {
		id   egraph.NodeID
		node Node
	}
	var cands []cand
	parents := make([][]int32, len(classes)) // class -> candidates using it
	for ci, c := range classes {
		for _, nid := range g.ClassNodes(c) {
			cst := cost(g, nid)
			if math.IsInf(cst, 0) || math.IsNaN(cst) {
				continue
			}
			if cst < 0 {
				return nil, fmt.Errorf("extract: node %v of class %s has negative cost %v", g.Node(nid), p.ClassNames[ci], cst)
			}
			n := g.Node(nid)
			kids := make([]int32, len(n.Children))
			for k, ch := range n.Children {
				kids[k] = index[g.Find(ch)]
			}
			k := int32(len(cands))
			cands = append(cands, cand{nid, Node{Class: int32(ci), Cost: cst, Children: kids}})
			for j, ch := range kids {
				if !slices.Contains(kids[:j], ch) {
					parents[ch] = append(parents[ch], k)
				}
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
	computable := make([]bool, len(classes))
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
	for _, r := range roots {
		ri, ok := index[g.Find(r)]
		if !ok {
			return nil, fmt.Errorf("extract: root %d is not a class of the e-graph", r)
		}
		if !computable[ri] {
			return nil, fmt.Errorf("extract: root class %s cannot be computed: no choice of its nodes has finite cost all the way down", p.ClassNames[ri])
		}
		p.Roots = append(p.Roots, ri)
	}
	return p, nil
}
