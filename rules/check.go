package rules

import (
	"context"
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// Disagreement is an e-class where an extracted program computes another
// value than the graph it came from: the first such class in the graph's
// order, so its operands still agree and the node the extraction chose
// for it (or a kernel body) is where the values part. Unions names the
// rule applications that made that node equal to the graph's own.
type Disagreement struct {
	Class egraph.ClassID
	// Value is the graph's value the class computes, and Original its node.
	Value    ir.Value
	Original string
	// Chosen is the node the extraction chose for the class (a kernel's
	// body printed in full).
	Chosen string
	// Culprit, when the chosen node is a kernel (built by a rule from some
	// tensor node of the class), is a tensor node of the class that
	// computes the wrong value from its operands' right values; Unions
	// then also explain it.
	Culprit  string
	Mismatch ir.Mismatch
	// Unions made the original node's class and the chosen node's one,
	// in the order they happened (egraph.Graph.Explain).
	Unions []egraph.UnionRecord
}

// Rules lists the rules named by Unions, once each, in order.
func (d *Disagreement) Rules() []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range d.Unions {
		if u.Kind == egraph.ByRule && !seen[u.Reason] {
			seen[u.Reason] = true
			out = append(out, u.Reason)
		}
	}
	return out
}

// Error reports the class, both nodes, the values and the unions.
func (d *Disagreement) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e-class %d (the graph's %%%d) computes another value in the extracted program: %s\n", d.Class, d.Value, d.Mismatch)
	fmt.Fprintf(&b, "  the graph's node: %s\n  the chosen node:  %s\n", d.Original, strings.ReplaceAll(strings.TrimSpace(d.Chosen), "\n", "\n    "))
	if d.Culprit != "" {
		fmt.Fprintf(&b, "  a node of the class that computes the wrong value: %s\n", d.Culprit)
	}
	fmt.Fprintf(&b, "  made equal by the rules %s through the unions:\n", strings.Join(d.Rules(), ", "))
	for _, u := range d.Unions {
		fmt.Fprintf(&b, "    %s\n", u)
	}
	return b.String()
}

// CheckExtraction evaluates the program that solution sol of problem p
// extracts from eg, with feeds, and compares it value by value with g, the
// graph eg was built from (classes are AddGraph's result, roots
// GraphRoots'). It returns nil when every class the program computes
// agrees with the graph within its allowance (ir.Graph.Allowance of the
// precisions on its path in g, so a value the model rounds to bf16 may be
// rounded by the program too), else the first disagreement. Both sides
// run in the reference interpreter, kernel bodies inlined.
func CheckExtraction(ctx context.Context, eg *egraph.EGraph[Data], g *ir.Graph, classes []egraph.ClassID, p *extract.Problem, sol *extract.Solution, feeds map[string]*ir.Tensor) (*Disagreement, error) {
	// The graph with every computed value an output, for its truth.
	all := &ir.Graph{Name: g.Name, Nodes: g.Nodes, Outputs: append([]ir.Output(nil), g.Outputs...), Updates: g.Updates}
	reduction := 1
	for i, n := range g.Nodes {
		for _, d := range n.Shape {
			reduction = max(reduction, int(d))
		}
		if n.Op.Class() != ir.ClassLeaf {
			all.Outputs = append(all.Outputs, ir.Output{Name: fmt.Sprintf("%%%d", i), Value: ir.Value(i)})
		}
	}
	want, err := ir.Eval(ctx, all, feeds, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return nil, fmt.Errorf("check extraction of %s: the graph: %w", g.Name, err)
	}
	eps := ir.PathEps(g)
	index := make(map[egraph.ClassID]int, len(p.ClassIDs))
	for i, id := range p.ClassIDs {
		index[id] = i
	}
	choose := func(c egraph.ClassID) (egraph.NodeID, bool) {
		i, ok := index[c]
		if !ok || sol.Choice[i] < 0 {
			return 0, false
		}
		return p.NodeIDs[sol.Choice[i]], true
	}
	prog, err := toGraph(&eg.Graph, g.Name, GraphRoots(g, classes), choose, classes)
	if err != nil {
		return nil, fmt.Errorf("check extraction of %s: %w", g.Name, err)
	}
	got, err := ir.Eval(ctx, prog, feeds, ir.EvalOptions{})
	if err != nil {
		return nil, fmt.Errorf("check extraction of %s: the program: %w", g.Name, err)
	}
	for i, n := range g.Nodes {
		if n.Op.Class() == ir.ClassLeaf {
			continue
		}
		c := eg.Find(classes[i])
		have, ok := got.Outputs[classOutput(c)]
		if !ok {
			continue // the program does not compute this value
		}
		name := fmt.Sprintf("%%%d", i)
		tol := g.Allowance(ir.Value(i), eps, reduction)
		mm, err := ir.CompareWithin(have, want.Outputs[name], want.Magnitudes[name], tol)
		if err != nil {
			return nil, fmt.Errorf("check extraction of %s: %s: %w", g.Name, name, err)
		}
		if mm == nil {
			continue
		}
		chosen, _ := choose(c)
		d := &Disagreement{Class: c, Value: ir.Value(i), Original: nodeText(g, i), Chosen: eNodeText(eg, chosen), Mismatch: *mm}
		if d.Unions, err = eg.Explain(classes[i], eg.NodeOrigin(chosen)); err != nil {
			return nil, fmt.Errorf("check extraction of %s: %w", g.Name, err)
		}
		if eg.Node(chosen).Op == KernelSymbol {
			culprit, ok, err := wrongNode(ctx, eg, c, got.Outputs, want.Outputs[name], want.Magnitudes[name], tol)
			if err != nil {
				return nil, fmt.Errorf("check extraction of %s: %w", g.Name, err)
			}
			if ok {
				d.Culprit = eNodeText(eg, culprit)
				more, err := eg.Explain(classes[i], eg.NodeOrigin(culprit))
				if err != nil {
					return nil, fmt.Errorf("check extraction of %s: %w", g.Name, err)
				}
				d.Unions = append(d.Unions, more...)
			}
		}
		return d, nil
	}
	return nil, nil
}

// wrongNode finds a tensor node of class c whose operands' values the
// program computed (got, by classOutput) and that computes another value
// than want from them.
func wrongNode(ctx context.Context, eg *egraph.EGraph[Data], c egraph.ClassID, got map[string]*ir.Tensor, want, mag *ir.Tensor, tol float64) (egraph.NodeID, bool, error) {
	for _, id := range eg.ClassNodes(c) {
		n := eg.Node(id)
		op, ok := OpOf(n.Op)
		if !ok || op.Class() == ir.ClassLeaf {
			continue
		}
		attrs, _ := Attrs(n.Payload)
		b := ir.NewBuilder("node")
		var args []*ir.Tensor
		ins := make([]ir.Value, len(n.Children))
		for i, k := range n.Children {
			v, ok := got[classOutput(eg.Find(k))]
			if !ok {
				break
			}
			d := eg.Data(k)
			ins[i] = b.Input(fmt.Sprintf("$%d", i), d.DType, d.Shape...)
			args = append(args, v)
		}
		if len(args) != len(n.Children) {
			continue
		}
		b.Output("out", b.Apply(op, attrs, ins...))
		one, err := b.Build()
		if err != nil {
			continue
		}
		outs, err := ir.EvalKernel(ctx, one, args...)
		if err != nil {
			return 0, false, err
		}
		mm, err := ir.CompareWithin(outs[0], want, mag, tol)
		if err != nil {
			return 0, false, err
		}
		if mm != nil {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// nodeText prints node i of g as the text format does.
func nodeText(g *ir.Graph, i int) string {
	lines := strings.Split(g.String(), "\n")
	prefix := fmt.Sprintf("%%%d = ", i)
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return prefix + g.Nodes[i].Op.String()
}

// eNodeText prints an e-node: a tensor op as the text format does, over
// its operand classes, or a kernel with its body.
func eNodeText(eg *egraph.EGraph[Data], id egraph.NodeID) string {
	n := eg.Node(id)
	kids := make([]string, len(n.Children))
	for i, k := range n.Children {
		kids[i] = fmt.Sprintf("class %d", eg.Find(k))
	}
	if n.Op == KernelSymbol {
		body, ok := Spec(n.Payload)
		if !ok {
			return "kernel with an unknown body"
		}
		return fmt.Sprintf("kernel over %s with body\n%s", strings.Join(kids, ", "), body)
	}
	op, ok1 := OpOf(n.Op)
	a, ok2 := Attrs(n.Payload)
	if !ok1 || !ok2 {
		return fmt.Sprintf("%s over %s", n.Op, strings.Join(kids, ", "))
	}
	// A one-op graph prints the op and its attributes as the text format
	// does; its operands are then renamed to the classes.
	b := ir.NewBuilder("node")
	ins := make([]ir.Value, len(n.Children))
	for i, k := range n.Children {
		d := eg.Data(k)
		ins[i] = b.Input(fmt.Sprintf("in%d", i), d.DType, d.Shape...)
	}
	b.Output("out", b.Apply(op, a, ins...))
	one, err := b.Build()
	if err != nil {
		return fmt.Sprintf("%s over %s", op, strings.Join(kids, ", "))
	}
	line := nodeText(one, len(one.Nodes)-1)
	line = line[strings.Index(line, "= ")+2:]
	for i := len(kids) - 1; i >= 0; i-- {
		line = strings.ReplaceAll(line, fmt.Sprintf("%%%d", i), "{"+kids[i]+"}")
	}
	return line
}
