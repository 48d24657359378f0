package lower

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
)

// A row-wise launch's kernel may be printed for fewer rows than the step's
// maximum: a matrix multiply over one token wants a matrix-vector kernel,
// over 512 tensor-core tiles. Its buffers keep the maximum's rows, but the
// rows are every row input's and output's outermost axis that is not 1
// (lower.Leading), so row r of a buffer sits at the same place whatever
// the row count: a kernel printed for n rows computes the first n rows of
// the buffers exactly as the kernel printed for the maximum does, and
// serves any step with at most n rows present.

// BodyAtRows is the launch's body computing n rows (1..Rows.Max) instead
// of Rows.Max: every value holding the launch's rows has n of them, the
// shapes of reshapes, expands and slices along them follow, and every
// other value keeps its shape. A launch of sequence rows that gathers each
// sequence's token row takes the first n of the gather's indices. ok is
// false (with the reason) where the body cannot be written for n rows: a
// launch without rows, or rows the body holds in a way this does not
// follow (the kernel then serves every row count).
func (l *Launch) BodyAtRows(n int64) (body *ir.Graph, err error) {
	r := l.Rows
	if r == nil {
		return nil, fmt.Errorf("launch %s does not follow the rows present", l.Name)
	}
	if n < 1 || n > r.Max {
		return nil, fmt.Errorf("launch %s: %d rows, outside 1..%d", l.Name, n, r.Max)
	}
	inputs := l.Body.Inputs()
	if len(r.In) != len(inputs) {
		return nil, fmt.Errorf("launch %s: rows given for %d of its %d inputs", l.Name, len(r.In), len(inputs))
	}
	class := tokenRows
	if r.Seqs {
		class = seqRows
	}
	ext := extents{tokens: r.Max, seqs: r.Max}
	ins := make([]rowsAt, len(inputs))
	for j, a := range r.In {
		if a >= 0 {
			ins[j] = rowsAt{class: class, axis: a}
		}
	}
	if r.Seqs {
		// The token rows a gather picks each sequence's row of (by
		// indices of the sequences' extent): an input of the launch,
		// the tokens on its first axis.
		index := map[ir.Value]int{}
		for j, v := range inputs {
			index[v] = j
		}
		for _, n := range l.Body.Nodes {
			if n.Op != ir.OpGather || n.Axis != 0 {
				continue
			}
			data, idx := l.Body.Node(n.Inputs[0]), l.Body.Node(n.Inputs[1])
			j, isInput := index[n.Inputs[0]]
			if isInput && r.In[j] < 0 && len(data.Shape) > 0 && len(idx.Shape) == 1 && int64(idx.Shape[0]) == r.Max {
				ins[j] = rowsAt{class: tokenRows}
				ext.tokens = int64(data.Shape[0])
			}
		}
	}
	at, _ := bodyRowsAt(l.Body, ins, ext, false)
	if n == r.Max {
		return l.Body, nil
	}
	g := l.Body.Clone()
	// The leaves to shrink: the row inputs, and for sequence rows the
	// indices of the gathers that pick each sequence's token.
	shrink := map[ir.Value]int{}
	for j, v := range inputs {
		if r.In[j] >= 0 {
			shrink[v] = r.In[j]
		}
	}
	for i, node := range l.Body.Nodes {
		if node.Op != ir.OpGather || at[i].class != class || class != seqRows || at[node.Inputs[0]].class == class {
			continue
		}
		idx := node.Inputs[1]
		if in := l.Body.Node(idx); in.Op != ir.OpInput || len(in.Shape) != 1 || int64(in.Shape[0]) != r.Max {
			return nil, fmt.Errorf("launch %s: the gather %%%d of the sequences' rows takes indices that are not an input of %d", l.Name, i, r.Max)
		}
		shrink[idx] = 0
	}
	// Values that hold no rows but take the rows' extent to meet them
	// in an elementwise op (a constant expanded to [rows, 1] for a norm):
	// they follow the rows too.
	follow, err := broadcastRows(l.Body, at, class, r.Max)
	if err != nil {
		return nil, fmt.Errorf("launch %s: %w", l.Name, err)
	}
	for i, node := range g.Nodes {
		v := ir.Value(i)
		if a, ok := follow[v]; ok {
			switch {
			case node.Op == ir.OpExpand:
				node.To[a] = ir.Dim(n)
			case node.Op == ir.OpConst && len(node.Data) <= 1 && len(node.Ints) <= 1:
				node.Shape[a] = ir.Dim(n)
				node.To = node.Shape.Clone()
				continue
			case node.Op.Class() == ir.ClassLeaf:
				return nil, fmt.Errorf("launch %s: %s %%%d meets the rows with the rows' extent", l.Name, node.Op, i)
			}
		}
		if node.Op.Class() == ir.ClassLeaf {
			if a, ok := shrink[v]; ok {
				if a >= len(node.Shape) || int64(node.Shape[a]) != r.Max {
					return nil, fmt.Errorf("launch %s: input %%%d is %v, without %d rows on axis %d", l.Name, i, node.Shape, r.Max, a)
				}
				node.Shape[a] = ir.Dim(n)
				node.To = node.Shape.Clone()
			}
			continue
		}
		if at[i].class == class {
			a := at[i].axis
			switch node.Op {
			case ir.OpReshape, ir.OpExpand:
				if a >= len(node.To) || int64(node.To[a]) != r.Max {
					return nil, fmt.Errorf("launch %s: %s %%%d to %v has no %d rows on axis %d", l.Name, node.Op, i, node.To, r.Max, a)
				}
				node.To[a] = ir.Dim(n)
			case ir.OpSlice:
				// rowAxis admits a slice along the rows only whole.
				if in := at[node.Inputs[0]]; in.class == class {
					node.Ends[in.axis] = n
				}
			}
		}
		shape, dt, err := ir.Infer(node.Op, node.Attrs, inputTypes(g, node))
		if err != nil {
			return nil, fmt.Errorf("launch %s at %d rows: node %%%d: %w", l.Name, n, i, err)
		}
		want := l.Body.Nodes[i].Shape.Clone()
		if at[i].class == class {
			want[at[i].axis] = ir.Dim(n)
		} else if a, ok := follow[v]; ok {
			want[a] = ir.Dim(n)
		}
		if !shape.Equal(want) || dt != node.DType {
			return nil, fmt.Errorf("launch %s at %d rows: node %%%d (%s) would be %s%v, not %s%v", l.Name, n, i, node.Op, dt, shape, node.DType, want)
		}
		node.Shape = shape
	}
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("launch %s at %d rows: %w", l.Name, n, err)
	}
	for j, o := range g.Outputs {
		if s := g.Node(o.Value).Shape; r.Axis >= len(s) || int64(s[r.Axis]) != n {
			return nil, fmt.Errorf("launch %s at %d rows: output %d is %v, without its rows on axis %d", l.Name, n, j, s, r.Axis)
		}
	}
	for j := range g.Outputs {
		if _, _, err := OutputWindow(g, j); err != nil {
			return nil, fmt.Errorf("launch %s at %d rows: %w", l.Name, n, err)
		}
	}
	return g, nil
}

// broadcastRows finds the values of body without rows (at, of the
// launch's class) that an elementwise op meets with rows of extent max
// on the rows' axis, and what they are computed from likewise: the axis
// each must follow. Only expands, casts, elementwise ops and broadcast
// constants may; anything else is an error.
func broadcastRows(body *ir.Graph, at []rowsAt, class rowClass, max int64) (map[ir.Value]int, error) {
	follow := map[ir.Value]int{}
	mark := func(x ir.Value, a int) error {
		s := body.Node(x).Shape
		if a >= len(s) || int64(s[a]) != max {
			return nil // broadcast along the rows already (extent 1), or not meeting them
		}
		if b, ok := follow[x]; ok && b != a {
			return fmt.Errorf("%%%d meets the rows on axes %d and %d", x, a, b)
		}
		follow[x] = a
		return nil
	}
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		v, n := ir.Value(i), body.Nodes[i]
		a, ok := follow[v]
		if at[i].class == class {
			a, ok = at[i].axis, true
		}
		if !ok || n.Op.Class() == ir.ClassLeaf {
			continue
		}
		elementwise := n.Op == ir.OpCast || n.Op == ir.OpExpand
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
			elementwise = true
		}
		_, following := follow[v]
		if !elementwise {
			if following {
				return nil, fmt.Errorf("%s %%%d meets the rows with the rows' extent", n.Op, i)
			}
			continue
		}
		for _, x := range n.Inputs {
			if at[x].class != free || len(body.Node(x).Shape) != len(n.Shape) {
				continue
			}
			if err := mark(x, a); err != nil {
				return nil, err
			}
		}
	}
	// A value that follows the rows is read only where they are: a
	// reader that neither holds nor follows them (a reduction along
	// them, say) would read fewer rows than it did.
	for i, n := range body.Nodes {
		if at[i].class == class {
			continue
		}
		if _, ok := follow[ir.Value(i)]; ok {
			continue
		}
		for _, x := range n.Inputs {
			if _, ok := follow[x]; ok {
				return nil, fmt.Errorf("%%%d meets the rows and is read by %s %%%d, which does not hold them", x, n.Op, i)
			}
		}
	}
	return follow, nil
}

// inputTypes are node n's operands' types in g.
func inputTypes(g *ir.Graph, n *ir.Node) []ir.ValueType {
	ts := make([]ir.ValueType, len(n.Inputs))
	for i, in := range n.Inputs {
		ts[i] = ir.ValueType{Shape: g.Node(in).Shape, DType: g.Node(in).DType}
	}
	return ts
}

// RowsOf says which of a serving step's rows a value holds.
type RowsOf struct {
	// Tokens or Seqs: the value holds the step's token rows (of
	// MaxTokens) or its sequence rows (of MaxSeqs) on Axis, row r
	// computed from row r alone.
	Tokens, Seqs bool
	Axis         int
}

// GraphRows classifies every value of a serving step's graph g with
// layout l as the lowering does a launch's body: the values that hold the
// step's token rows (from the token inputs: ids, positions, slot mapping)
// or its sequence rows (from a gather of each sequence's token), row-wise.
// What a step of T tokens and S sequences computes of such a value is its
// first T (S) rows: the floor of a step prices them alone.
func GraphRows(g *ir.Graph, l *step.Layout) []RowsOf {
	out := make([]RowsOf, len(g.Nodes))
	if l == nil {
		return out
	}
	ext := extents{tokens: int64(l.MaxTokens), seqs: int64(l.MaxSeqs)}
	inputs := g.Inputs()
	ins := make([]rowsAt, len(inputs))
	for j, v := range inputs {
		n := g.Node(v)
		switch n.Name {
		case step.InputIDs, step.Positions, step.SlotMapping:
			if len(n.Shape) > 0 && int64(n.Shape[0]) == ext.tokens {
				ins[j] = rowsAt{class: tokenRows}
			}
		}
	}
	at, _ := bodyRowsAt(g, ins, ext, true)
	for i, r := range at {
		out[i] = RowsOf{Tokens: r.class == tokenRows, Seqs: r.class == seqRows, Axis: r.axis}
	}
	return out
}
