package extract

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/egraph"
)

// LoadOptions say how an egraph-serialize file becomes a Problem.
type LoadOptions struct {
	// Congruence loads the file into a real e-graph (egraph.FromSerialized)
	// and extracts from that: classes holding identical nodes (same op,
	// cost and child classes) are merged, as congruence closure merges
	// them. That is a different problem from the file's when the file is
	// not closed under congruence (extraction-gym's files are not always),
	// and its costs are not comparable with published ones. By default
	// the file's own classes are the problem's.
	Congruence bool
}

// File is what a Problem loaded from a file keeps of it: the file's ids
// and ops of the problem's nodes, by Problem.NodeIDs, and its sizes.
type File struct {
	// NodeName and NodeOp are the file's id and op of node id.
	NodeName, NodeOp []string
	// EClasses and ENodes are the problem's sizes before the executable
	// nodes are kept (the e-graph's after merging, with Congruence).
	EClasses, ENodes int
}

// FromFile reads an egraph-serialize JSON file and makes it a Problem: the
// file's classes, nodes and costs (negative costs included), its root
// e-classes, and its names for classes in messages. Nodes the file marks
// subsumed are not executable, so no algorithm chooses them. A malformed
// file's error names the file and the JSON path of the problem.
func FromFile(path string, opt LoadOptions) (*Problem, *File, error) {
	s, err := egraph.ReadSerializedFile(path)
	if err != nil {
		return nil, nil, err // names the file and the JSON path
	}
	p, f, err := FromSerialized(s, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, f, nil
}

// FromSerialized is FromFile on a file already read.
func FromSerialized(s *egraph.Serialized, opt LoadOptions) (*Problem, *File, error) {
	if opt.Congruence {
		return fromEGraph(s)
	}
	classOf := map[string]int32{}
	var names []string
	for _, n := range s.Nodes {
		if _, ok := classOf[n.Class]; !ok {
			classOf[n.Class] = int32(len(names))
			names = append(names, n.Class)
		}
	}
	index := s.NodeIndex()
	f := &File{NodeName: make([]string, len(s.Nodes)), NodeOp: make([]string, len(s.Nodes)), EClasses: len(names), ENodes: len(s.Nodes)}
	var cands []candidate
	for i, n := range s.Nodes {
		f.NodeName[i], f.NodeOp[i] = n.ID, n.Op
		if math.IsNaN(n.Cost) || math.IsInf(n.Cost, 0) {
			return nil, nil, fmt.Errorf("$.nodes[%q].cost: %v is not a finite cost", n.ID, n.Cost)
		}
		kids := make([]int32, len(n.Children))
		for j, c := range n.Children {
			k, ok := index[c]
			if !ok {
				return nil, nil, fmt.Errorf("$.nodes[%q].children[%d]: unknown node %q", n.ID, j, c)
			}
			kids[j] = classOf[s.Nodes[k].Class]
		}
		if n.Subsumed {
			continue
		}
		cands = append(cands, candidate{egraph.NodeID(i), Node{Class: classOf[n.Class], Cost: n.Cost, Children: kids}})
	}
	roots := make([]int32, len(s.Roots))
	for i, r := range s.Roots {
		c, ok := classOf[r]
		if !ok {
			return nil, nil, fmt.Errorf("$.root_eclasses[%d]: unknown e-class %q", i, r)
		}
		roots[i] = c
	}
	ids := make([]egraph.ClassID, len(names))
	for i := range ids {
		ids[i] = egraph.ClassID(i)
	}
	p, err := buildProblem(ids, names, cands, roots)
	return p, f, err
}

// fromEGraph is FromSerialized through a real e-graph (Congruence).
func fromEGraph(s *egraph.Serialized) (*Problem, *File, error) {
	im, err := egraph.FromSerialized(s)
	if err != nil {
		return nil, nil, err
	}
	p, err := NewProblem(&im.Graph.Graph, im.Roots, ImportedCost(im), im.ClassName)
	if err != nil {
		return nil, nil, err
	}
	g := &im.Graph.Graph
	f := &File{NodeName: make([]string, g.NumNodeIDs()), NodeOp: make([]string, g.NumNodeIDs()), EClasses: g.NumClasses(), ENodes: g.NumNodes()}
	for id := range g.NumNodeIDs() {
		f.NodeName[id] = im.NodeName[egraph.NodeID(id)]
		if f.NodeName[id] == "" {
			f.NodeName[id] = fmt.Sprintf("n%d", id)
		}
		f.NodeOp[id] = g.Node(egraph.NodeID(id)).Op.String()
	}
	return p, f, nil
}

// ImportedCost is the cost function of an imported file: the file's cost,
// and +Inf for the nodes it marks subsumed.
func ImportedCost(im *egraph.Imported) CostFunc {
	return func(g *egraph.Graph, n egraph.NodeID) float64 {
		if im.Subsumed[n] {
			return math.Inf(1)
		}
		return egraph.CostOf(g.Node(n))
	}
}

// names are the file's names of p's nodes and classes, for
// FasterGreedyDAG's tie-breaks.
func (f *File) names(p *Problem) FasterGreedyOptions {
	return FasterGreedyOptions{
		NodeName:  func(n int32) string { return f.NodeName[p.NodeIDs[n]] },
		ClassName: func(c int32) string { return p.ClassNames[c] },
	}
}
