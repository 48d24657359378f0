package rules

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// A rule whose right side is Go code (an applier, or any rewrite built
// with egraph.NewFuncRewrite) is checked by applying it: the left side of
// an instance is put into an e-graph, the rule runs once, and the term it
// added to the left side's class (the original node excluded) is
// extracted as the right side, to be judged like a pattern's.

// ExampleFunc builds terms a Go applier's rules apply to, in float dtype
// dt: each graph's outputs are the left side's roots, in order.
type ExampleFunc func(dt ir.DType) ([]*ir.Graph, error)

var examples = struct {
	sync.RWMutex
	m map[string]ExampleFunc
}{m: map[string]ExampleFunc{}}

// RegisterExamples gives the verifier terms that the rules naming applier
// name apply to, beside the instances it draws at random: for left sides
// that random draws rarely fit (a long composite pattern, constants that
// must agree with shapes). Registering a name twice is a bug and panics.
func RegisterExamples(name string, fn ExampleFunc) {
	examples.Lock()
	defer examples.Unlock()
	if _, dup := examples.m[name]; dup {
		panic("rules: examples for applier " + name + " registered twice")
	}
	examples.m[name] = fn
}

// examplesOf returns applier name's examples in dt (none when it has no
// examples registered).
func examplesOf(name string, dt ir.DType) ([]*ir.Graph, error) {
	examples.RLock()
	fn, ok := examples.m[name]
	examples.RUnlock()
	if !ok {
		return nil, nil
	}
	gs, err := fn(dt)
	if err != nil {
		return nil, fmt.Errorf("examples of @%s in %s: %w", name, dt, err)
	}
	return gs, nil
}

// applyRewrite runs rw once on an e-graph holding gl, whose outputs are
// the roots of the left side, and returns the right side it made: the
// graph of the cheapest term (in nodes) of each root's class that does
// not use the root's original node. applied is false when rw added
// nothing to some root's class (its condition or applier declined the
// instance); reason is set when the rewrite merged classes of different
// types.
func applyRewrite(ctx context.Context, rw *egraph.Rewrite[Data], gl *ir.Graph) (gr *ir.Graph, applied bool, reason string, err error) {
	eg, an := NewEGraph(false)
	classes, err := AddGraph(eg, gl)
	if err != nil {
		return nil, false, "", err
	}
	eg.Rebuild()
	roots := GraphRoots(gl, classes)
	original := map[egraph.NodeID]bool{}
	for _, r := range roots {
		for _, id := range eg.ClassNodes(eg.Find(r.Class)) {
			original[id] = true
		}
	}
	run := egraph.Runner[Data]{IterLimit: 1, NodeLimit: 1 << 20}
	if _, err := run.Run(ctx, eg, []*egraph.Rewrite[Data]{rw}); err != nil {
		return nil, false, "", fmt.Errorf("apply %s: %w", rw.Name(), err)
	}
	if cs := an.Conflicts(); len(cs) > 0 {
		return nil, false, fmt.Sprintf("it merged classes of different types: %v", cs[0]), nil
	}
	for _, r := range roots {
		if !slices.ContainsFunc(eg.ClassNodes(eg.Find(r.Class)), func(id egraph.NodeID) bool { return !original[id] }) {
			return nil, false, "", nil
		}
	}
	cost := func(g *egraph.Graph, id egraph.NodeID) float64 {
		if original[id] || !eg.Data(g.NodeClass(id)).Valid() {
			return math.Inf(1)
		}
		return 1
	}
	p, err := extract.NewProblem(&eg.Graph, RootClasses(roots), cost, nil)
	if err != nil {
		return nil, false, "", fmt.Errorf("apply %s: the right side: %w", rw.Name(), err)
	}
	sol, _, err := extract.GreedyDAG(ctx, p)
	if err != nil {
		return nil, false, "", fmt.Errorf("apply %s: extract the right side: %w", rw.Name(), err)
	}
	gr, err = SolutionGraph(&eg.Graph, gl.Name, roots, p, sol)
	if err != nil {
		return nil, false, "", fmt.Errorf("apply %s: the right side: %w", rw.Name(), err)
	}
	return gr, true, "", nil
}

// joinSides builds one program computing both sides: gl's outputs as
// "lhs0", "lhs1", ..., and gr's as "rhs0", ..., over one set of leaves
// (inputs, weights and states by name). It returns the program and the
// values of both sides.
func joinSides(name string, gl, gr *ir.Graph) (*ir.Graph, []ir.Value, []ir.Value, error) {
	b := ir.NewBuilder(name)
	leaves := map[string]ir.Value{}
	copyOf := func(g *ir.Graph) []ir.Value {
		vals := make([]ir.Value, len(g.Nodes))
		for i, n := range g.Nodes {
			switch n.Op {
			case ir.OpInput, ir.OpWeight, ir.OpState:
				key := n.Op.String() + " " + n.Name
				v, ok := leaves[key]
				if !ok {
					v = b.Apply(n.Op, n.Attrs)
					leaves[key] = v
				}
				vals[i] = v
				continue
			}
			ins := make([]ir.Value, len(n.Inputs))
			for k, in := range n.Inputs {
				ins[k] = vals[in]
			}
			vals[i] = b.Apply(n.Op, n.Attrs, ins...)
		}
		out := make([]ir.Value, len(g.Outputs))
		for i, o := range g.Outputs {
			out[i] = vals[o.Value]
		}
		return out
	}
	lvals, rvals := copyOf(gl), copyOf(gr)
	if len(lvals) != len(rvals) {
		return nil, nil, nil, fmt.Errorf("join %s: %d left roots, %d right", name, len(lvals), len(rvals))
	}
	for i := range lvals {
		b.Output(fmt.Sprint("lhs", i), lvals[i])
		b.Output(fmt.Sprint("rhs", i), rvals[i])
	}
	g, err := b.Build()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("join %s: %w", name, err)
	}
	return g, lvals, rvals, nil
}
