package ir

import (
	"fmt"
	"github.com/lumsearch/lumsearch/quant"
	"slices"
)

// Value names a node of a graph: its index in Graph.Nodes. Builders hand
// them out; a negative Value marks a failed build step.
type Value int32

// NoValue is the Value of a step that failed; builder methods given it
// return it again without a further error, so the first error is the one
// reported.
const NoValue Value = -1

// Attrs are an op's parameters. Each op uses the few fields its doc names;
// the rest stay zero. Leaves (input, weight, state, const, iota) declare
// their shape in To and their dtype in DType.
type Attrs struct {
	Name   string       // input, weight, state
	Data   []float64    // const of a float or bool dtype: one value (broadcast) or every element, row-major
	Ints   []int64      // const of an integer dtype: as Data, exactly (see const.go)
	Axis   int          // iota, reductions, softmax, concat, gather, slice_update
	To     Shape        // reshape, expand: the result shape; leaves: their shape
	Perm   []int        // permute
	Starts []int64      // slice
	Ends   []int64      // slice
	Steps  []int64      // slice
	Before []int64      // pad
	After  []int64      // pad
	Value  float64      // pad
	DType  DType        // cast: the target; leaves: their dtype
	Eps    float64      // layer_norm, rms_norm
	Scale  float64      // attention
	Causal bool         // attention
	Offset int64        // attention (position of the first query), slice_update (start along Axis)
	Block  int64        // paged_attention: positions per block of the KV pool
	Window int64        // paged_attention: a query sees the Window latest positions (0: all)
	TopK   int64        // route: the experts chosen per row; experts: the most a row may have
	Gating Gating       // route: how chosen logits become weights; experts: the gated activation
	Limit  float64      // experts: the clamp of a clamped SwiGLU
	Format quant.Format // dequant: the weight's format
	Group  int64        // dequant: elements of the reduction (K) axis a scale covers
	GroupN int64        // dequant (fp8): elements of the output (N) axis a scale covers
}

// Node is one operation with its result's shape and dtype.
type Node struct {
	Op     Op
	Inputs []Value
	Attrs
	Shape Shape
	DType DType
}

// Output is a named graph result.
type Output struct {
	Name  string
	Value Value
}

// StateUpdate says that after a run the state buffer State holds Value
// (same shape and dtype): a KV cache written in place.
type StateUpdate struct {
	State Value
	Value Value
}

// Graph is a typed tensor program. Nodes are in topological order: a
// node's inputs come before it.
type Graph struct {
	Name    string
	Nodes   []*Node
	Outputs []Output
	Updates []StateUpdate
	// Symbols are the graph's runtime extents, each carried by the
	// integer scalar input of its name.
	Symbols []Symbol
}

// Node returns the node of v.
func (g *Graph) Node(v Value) *Node { return g.Nodes[v] }

// Leaves returns the values of op (OpInput, OpWeight or OpState) in order.
func (g *Graph) Leaves(op Op) []Value {
	var out []Value
	for i, n := range g.Nodes {
		if n.Op == op {
			out = append(out, Value(i))
		}
	}
	return out
}

// Inputs returns the graph's inputs in order.
func (g *Graph) Inputs() []Value { return g.Leaves(OpInput) }

// Weights returns the graph's weights in order.
func (g *Graph) Weights() []Value { return g.Leaves(OpWeight) }

// States returns the graph's state buffers in order.
func (g *Graph) States() []Value { return g.Leaves(OpState) }

// NumParams is the number of weight elements.
func (g *Graph) NumParams() int64 {
	var n int64
	for _, v := range g.Weights() {
		n += g.Nodes[v].Shape.NumElements()
	}
	return n
}

// OpCounts counts the nodes of each op.
func (g *Graph) OpCounts() map[Op]int {
	m := map[Op]int{}
	for _, n := range g.Nodes {
		m[n.Op]++
	}
	return m
}

// Check verifies the whole graph: topological order, every node's shape
// and dtype as inference gives them, leaf names unique per kind, outputs
// and state updates well formed. Errors name the node.
func (g *Graph) Check() error {
	names := map[string]bool{} // inputs, weights and states share one namespace: feeds are named
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in < 0 || int(in) >= i {
				return fmt.Errorf("graph %s: node %%%d (%s) uses %%%d, which does not come before it", g.Name, i, n.Op, in)
			}
		}
		if n.Op == OpInput || n.Op == OpWeight || n.Op == OpState {
			if names[n.Name] {
				return fmt.Errorf("graph %s: node %%%d: a second input, weight or state named %q", g.Name, i, n.Name)
			}
			names[n.Name] = true
		}
		shape, dt, err := Infer(n.Op, n.Attrs, g.inputTypes(n))
		if err != nil {
			return fmt.Errorf("graph %s: node %%%d: %w", g.Name, i, err)
		}
		if !shape.Equal(n.Shape) || dt != n.DType {
			return fmt.Errorf("graph %s: node %%%d (%s) is typed %s%v, but its inputs give %s%v", g.Name, i, n.Op, n.DType, n.Shape, dt, shape)
		}
	}
	outNames := map[string]bool{}
	for _, o := range g.Outputs {
		if o.Value < 0 || int(o.Value) >= len(g.Nodes) {
			return fmt.Errorf("graph %s: output %q names no node", g.Name, o.Name)
		}
		if outNames[o.Name] {
			return fmt.Errorf("graph %s: two outputs named %q", g.Name, o.Name)
		}
		outNames[o.Name] = true
	}
	for _, u := range g.Updates {
		if u.State < 0 || int(u.State) >= len(g.Nodes) || g.Nodes[u.State].Op != OpState {
			return fmt.Errorf("graph %s: state update of %%%d, which is not a state buffer", g.Name, u.State)
		}
		if u.Value < 0 || int(u.Value) >= len(g.Nodes) {
			return fmt.Errorf("graph %s: update of state %q with no value", g.Name, g.Nodes[u.State].Name)
		}
		s, v := g.Nodes[u.State], g.Nodes[u.Value]
		if !s.Shape.Equal(v.Shape) || s.DType != v.DType {
			return fmt.Errorf("graph %s: state %q is %s%v but its update is %s%v", g.Name, s.Name, s.DType, s.Shape, v.DType, v.Shape)
		}
	}
	return g.checkSymbols()
}

// ValueType is a value's shape and dtype, the input of type inference.
type ValueType struct {
	Shape Shape
	DType DType
}

func (g *Graph) inputTypes(n *Node) []ValueType {
	ts := make([]ValueType, len(n.Inputs))
	for i, in := range n.Inputs {
		if in >= 0 && int(in) < len(g.Nodes) {
			ts[i] = ValueType{g.Nodes[in].Shape, g.Nodes[in].DType}
		}
	}
	return ts
}

// Clone returns a deep copy of the graph.
func (g *Graph) Clone() *Graph {
	c := &Graph{Name: g.Name, Outputs: slices.Clone(g.Outputs), Updates: slices.Clone(g.Updates), Symbols: slices.Clone(g.Symbols)}
	c.Nodes = make([]*Node, len(g.Nodes))
	for i, n := range g.Nodes {
		m := *n
		m.Inputs = slices.Clone(n.Inputs)
		m.Shape = n.Shape.Clone()
		m.Attrs.Data = slices.Clone(n.Data)
		m.Attrs.Ints = slices.Clone(n.Ints)
		m.To = n.To.Clone()
		m.Perm = slices.Clone(n.Perm)
		m.Starts, m.Ends, m.Steps = slices.Clone(n.Starts), slices.Clone(n.Ends), slices.Clone(n.Steps)
		m.Before, m.After = slices.Clone(n.Before), slices.Clone(n.After)
		c.Nodes[i] = &m
	}
	return c
}
