package egraph

import (
	"fmt"
	"math"
	"strconv"
)

// Imported is an egraph-serialize file read into a real e-graph.
//
// The file's language is its operator strings and costs, so each node
// becomes the operator Intern(op) with its cost's float64 bits as payload:
// the cost is part of what the node is (two nodes of one class that differ
// only in cost stay two nodes), and CostOf reads it back.
type Imported struct {
	Graph *EGraph[NoData]
	// Roots are the file's root e-classes, canonical.
	Roots []ClassID
	// ClassName maps each canonical class to the file's name for it.
	ClassName map[ClassID]string
	// NodeName maps each stored node to the file's id for it.
	NodeName map[NodeID]string
	// Subsumed holds the nodes the file marks as not to be extracted.
	Subsumed map[NodeID]bool
}

// CostOf is the cost of a node of an imported e-graph.
func CostOf(n Node) float64 { return math.Float64frombits(uint64(n.Payload)) }

// CostPayload is the payload that gives a node the cost c in the
// convention of Imported.
func CostPayload(c float64) Payload { return Payload(math.Float64bits(c)) }

// importReason is the union reason of every union an import makes.
const importReason = "egraph-serialize e-class"

// FromSerialized builds an e-graph from a file and rebuilds it. Classes of
// the file are created first, in order of first appearance, so that the
// classes of a file are numbered the same way every time; cyclic files need
// no special care because every child class exists before any node is added.
func FromSerialized(s *Serialized) (*Imported, error) {
	g := NewPlain()
	classOf := map[string]ClassID{}
	var order []string
	for _, n := range s.Nodes {
		if _, ok := classOf[n.Class]; !ok {
			classOf[n.Class] = g.newEmptyClass()
			order = append(order, n.Class)
		}
	}
	index := s.NodeIndex()
	im := &Imported{Graph: g, ClassName: map[ClassID]string{}, NodeName: map[NodeID]string{}, Subsumed: map[NodeID]bool{}}
	why := reason{kind: ByCaller, desc: g.prov.describe(importReason, nil)}
	var kids []ClassID
	for i, n := range s.Nodes {
		kids = kids[:0]
		for j, c := range n.Children {
			k, ok := index[c]
			if !ok {
				return nil, fmt.Errorf("$.nodes[%q].children[%d]: unknown node %q", n.ID, j, c)
			}
			kids = append(kids, classOf[s.Nodes[k].Class])
		}
		if math.IsNaN(n.Cost) || math.IsInf(n.Cost, 0) {
			return nil, fmt.Errorf("$.nodes[%q].cost: %v is not a finite cost", n.ID, n.Cost)
		}
		if len(kids) > maxArity {
			return nil, fmt.Errorf("$.nodes[%q].children: %d children; at most %d are supported", n.ID, len(kids), maxArity)
		}
		before := g.NumNodeIDs()
		id, err := g.Add(Node{Op: Intern(n.Op), Payload: CostPayload(n.Cost), Children: kids})
		if err != nil {
			return nil, fmt.Errorf("$.nodes[%q]: %w", n.ID, err)
		}
		if g.NumNodeIDs() > before {
			nid := NodeID(before)
			im.NodeName[nid] = s.Nodes[i].ID
			if n.Subsumed {
				im.Subsumed[nid] = true
			}
		}
		g.union(classOf[n.Class], id, why)
	}
	g.Rebuild()
	for _, name := range order {
		c := g.Find(classOf[name])
		if _, ok := im.ClassName[c]; !ok {
			im.ClassName[c] = name
		}
	}
	for i, r := range s.Roots {
		c, ok := classOf[r]
		if !ok {
			return nil, fmt.Errorf("$.root_eclasses[%d]: unknown e-class %q", i, r)
		}
		im.Roots = append(im.Roots, g.Find(c))
	}
	return im, nil
}

// newEmptyClass makes a class with no nodes yet, for importers whose nodes
// refer to classes before those classes' nodes are read. The importer must
// union a node into it before the next Rebuild.
func (g *EGraph[D]) newEmptyClass() ClassID { return g.newClassData() }

// SerializeOptions says how to write an e-graph in the egraph-serialize
// format.
type SerializeOptions struct {
	// Op names a node's operator; by default the symbol, followed by the
	// payload in brackets when it is not zero.
	Op func(n Node) string
	// Cost is a node's cost; by default 1.
	Cost func(n Node) float64
}

// ToSerialized writes the structure of a rebuilt e-graph in the
// egraph-serialize data model. Classes are named by their canonical ids and
// nodes by "class.index"; a child refers to the first node of its class.
func ToSerialized(g *Graph, roots []ClassID, opt SerializeOptions) *Serialized {
	if opt.Op == nil {
		opt.Op = func(n Node) string {
			if n.Payload == 0 {
				return n.Op.String()
			}
			return fmt.Sprintf("%s[%d]", n.Op, uint64(n.Payload))
		}
	}
	if opt.Cost == nil {
		opt.Cost = func(Node) float64 { return 1 }
	}
	s := &Serialized{}
	for _, c := range g.Classes() {
		cname := strconv.FormatUint(uint64(c), 10)
		for i, nid := range g.ClassNodes(c) {
			n := g.Node(nid)
			sn := SerializedNode{ID: cname + "." + strconv.Itoa(i), Op: opt.Op(n), Class: cname, Cost: opt.Cost(n)}
			for _, k := range n.Children {
				sn.Children = append(sn.Children, strconv.FormatUint(uint64(g.find(k)), 10)+".0")
			}
			s.Nodes = append(s.Nodes, sn)
		}
	}
	for _, r := range roots {
		s.Roots = append(s.Roots, strconv.FormatUint(uint64(g.find(r)), 10))
	}
	return s
}

// Serialize writes an imported e-graph back in the egraph-serialize data
// model, with the file's operators and costs.
func (im *Imported) Serialize() *Serialized {
	return ToSerialized(&im.Graph.Graph, im.Roots, SerializeOptions{
		Op:   func(n Node) string { return n.Op.String() },
		Cost: CostOf,
	})
}
