package rules

import (
	"fmt"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// NewEGraph returns an empty tensor e-graph and its analysis.
func NewEGraph(fold bool) (*egraph.EGraph[Data], *Analysis) {
	a := &Analysis{Fold: fold}
	return egraph.New[Data](a), a
}

// AddGraph adds every node of g and returns the class of each value. The
// e-graph is left to rebuild.
func AddGraph(eg *egraph.EGraph[Data], g *ir.Graph) ([]egraph.ClassID, error) {
	classes := make([]egraph.ClassID, len(g.Nodes))
	kids := []egraph.ClassID{}
	for i, n := range g.Nodes {
		kids = kids[:0]
		for _, in := range n.Inputs {
			kids = append(kids, classes[in])
		}
		op, pay := NodeOf(n)
		c, err := eg.Add(egraph.Node{Op: op, Payload: pay, Children: kids})
		if err != nil {
			return nil, fmt.Errorf("add %s node %%%d: %w", g.Name, i, err)
		}
		classes[i] = c
	}
	return classes, nil
}

// Root names a class the rebuilt graph must compute: an output, or (with
// State set) the new content of a state buffer.
type Root struct {
	Name  string
	Class egraph.ClassID
	// State, when set, is the class of the state buffer Class updates.
	State    egraph.ClassID
	IsUpdate bool
}

// ToGraph builds the ir graph that choosing one node per class gives,
// computing the roots. choose returns a class's chosen node. Classes reached
// twice become one value; a cycle or a missing choice is an error.
func ToGraph(eg *egraph.Graph, name string, roots []Root, choose func(egraph.ClassID) (egraph.NodeID, bool)) (*ir.Graph, error) {
	return toGraph(eg, name, roots, choose, nil)
}

// classOutput names the output toGraph adds for a class it was asked to
// show.
func classOutput(c egraph.ClassID) string { return fmt.Sprintf("class %d", c) }

// toGraph is ToGraph that also outputs the value of each class in show the
// program computes (named by classOutput), for checking it class by class.
func toGraph(eg *egraph.Graph, name string, roots []Root, choose func(egraph.ClassID) (egraph.NodeID, bool), show []egraph.ClassID) (*ir.Graph, error) {
	b := ir.NewBuilder(name)
	val := map[egraph.ClassID]ir.Value{}
	tuples := map[egraph.ClassID][]ir.Value{} // multi-output kernels' outputs
	onPath := map[egraph.ClassID]bool{}
	var visit func(c egraph.ClassID) (ir.Value, error)
	visit = func(c egraph.ClassID) (ir.Value, error) {
		c = eg.Find(c)
		if v, ok := val[c]; ok {
			return v, nil
		}
		if onPath[c] {
			return ir.NoValue, fmt.Errorf("to graph %s: the choices form a cycle through class %d", name, c)
		}
		onPath[c] = true
		defer delete(onPath, c)
		nid, ok := choose(c)
		if !ok {
			return ir.NoValue, fmt.Errorf("to graph %s: class %d has no chosen node", name, c)
		}
		n := eg.Node(nid)
		children := append([]egraph.ClassID(nil), n.Children...)
		pay := n.Payload
		ins := make([]ir.Value, len(children))
		for i, k := range children {
			v, err := visit(k)
			if err != nil {
				return ir.NoValue, err
			}
			ins[i] = v
		}
		var v ir.Value
		switch n.Op {
		case KernelSymbol:
			// A kernel's body is inlined: the program computes the same,
			// and the interpreter checks the body with everything else.
			body, ok := Spec(pay)
			if !ok {
				return ir.NoValue, fmt.Errorf("to graph %s: class %d chose a kernel with an unknown body", name, c)
			}
			outs := b.Inline(body, ins)
			v = outs[0]
			if len(outs) > 1 {
				tuples[c] = outs
			}
		case ProjSymbol:
			outs, ok := tuples[eg.Find(children[0])]
			if !ok || uint64(pay) >= uint64(len(outs)) {
				return ir.NoValue, fmt.Errorf("to graph %s: class %d chose proj %d of a class that is no multi-output kernel", name, c, pay)
			}
			v = outs[pay]
		default:
			op, ok := OpOf(n.Op)
			if !ok {
				return ir.NoValue, fmt.Errorf("to graph %s: class %d chose %s, which is not a tensor op", name, c, n.Op)
			}
			attrs, _ := Attrs(pay)
			v = b.Apply(op, attrs, ins...)
		}
		if err := b.Err(); err != nil {
			return ir.NoValue, fmt.Errorf("to graph %s: class %d: %w", name, c, err)
		}
		val[c] = v
		return v, nil
	}
	for _, r := range roots {
		v, err := visit(r.Class)
		if err != nil {
			return nil, err
		}
		if r.IsUpdate {
			s, err := visit(r.State)
			if err != nil {
				return nil, err
			}
			b.UpdateState(s, v)
		} else {
			b.Output(r.Name, v)
		}
	}
	shown := map[egraph.ClassID]bool{}
	for _, c := range show {
		c = eg.Find(c)
		if v, ok := val[c]; ok && !shown[c] {
			shown[c] = true
			b.Output(classOutput(c), v)
		}
	}
	return b.Build()
}

// GraphRoots are the roots of an ir graph added with AddGraph: its outputs
// and state updates.
func GraphRoots(g *ir.Graph, classes []egraph.ClassID) []Root {
	var roots []Root
	for _, o := range g.Outputs {
		roots = append(roots, Root{Name: o.Name, Class: classes[o.Value]})
	}
	for _, u := range g.Updates {
		roots = append(roots, Root{Class: classes[u.Value], State: classes[u.State], IsUpdate: true})
	}
	return roots
}

// SolutionGraph builds the ir graph of an extraction: the nodes sol chooses
// in problem p of e-graph eg, computing roots.
func SolutionGraph(eg *egraph.Graph, name string, roots []Root, p *extract.Problem, sol *extract.Solution) (*ir.Graph, error) {
	index := make(map[egraph.ClassID]int, len(p.ClassIDs))
	for i, id := range p.ClassIDs {
		index[id] = i
	}
	return ToGraph(eg, name, roots, func(c egraph.ClassID) (egraph.NodeID, bool) {
		i, ok := index[c]
		if !ok || sol.Choice[i] < 0 {
			return 0, false
		}
		return p.NodeIDs[sol.Choice[i]], true
	})
}

// RootClasses lists the classes an extraction must compute for roots: the
// roots, and the state buffers that updates write.
func RootClasses(roots []Root) []egraph.ClassID {
	var out []egraph.ClassID
	for _, r := range roots {
		out = append(out, r.Class)
		if r.IsUpdate {
			out = append(out, r.State)
		}
	}
	return out
}
