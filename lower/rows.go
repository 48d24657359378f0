package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
)

// Rows says that a launch of a serving step's program works on the rows
// present, not on the maximum its buffers hold: the T tokens (of
// MaxTokens) or, with Seqs, the S sequences (of MaxSeqs). The body's
// outputs have those rows on their first axis, row r computed from row r
// of its row inputs alone (a row-wise kernel), so the rows past T (or S),
// which belong to no sequence, need not be computed. The kernel reads T
// as query_start[seqs] (S as seqs) through two extra parameters, the
// buffers Args (after the body's inputs, before its outputs), and its grid
// follows them.
type Rows struct {
	// Max is the rows' extent in the buffers: the step's MaxTokens, or
	// its MaxSeqs with Seqs.
	Max int64
	// Seqs says the rows are the sequences, not the tokens.
	Seqs bool
	// Axis is the axis of every body output that holds the rows (the
	// outermost but for axes of 1, or a matmul's rows behind a batch of
	// split-K partials).
	Axis int
	// Args are the buffers of query_start and of the seqs symbol.
	Args []int
	// In gives, for each body input, the axis that holds its rows of the
	// launch's kind, or -1 for an input without them (BodyAtRows).
	In []int
}

// Present is the number of rows present, read from the contents of the
// buffers Args: T = query_start[seqs], or S = seqs with Seqs; checked
// against Max, since a kernel bounds its loops by it.
func (r *Rows) Present(starts, seqs *ir.Tensor) (int64, error) {
	if starts == nil || seqs == nil || seqs.Len() != 1 {
		return 0, fmt.Errorf("no query_start and seqs to read the rows present from")
	}
	S := seqs.Int(0)
	if S < 0 || S >= starts.Len() {
		return 0, fmt.Errorf("seqs = %d, outside query_start's %d entries", S, starts.Len())
	}
	n := starts.Int(S)
	if r.Seqs {
		n = S
	}
	if n < 0 || n > r.Max {
		return 0, fmt.Errorf("%d rows present (seqs = %d), outside 0..%d", n, S, r.Max)
	}
	return n, nil
}

// Params are the buffers a launch's kernel takes, in parameter order: the
// body's inputs, the row count's buffers when the launch has Rows, then
// the outputs.
func (l *Launch) Params() []int {
	var rows []int
	if l.Rows != nil {
		rows = l.Rows.Args
	}
	return slices.Concat(l.Args, rows, l.Outs)
}

// rowClass is what a value is to the rows of the step.
type rowClass uint8

const (
	// free values depend on no row (weights, constants, the KV pools,
	// metadata other than the token-row inputs).
	free rowClass = iota
	// tokenRows values have the tokens on their first axis, row t
	// depending on row t of token-row values and on free values alone.
	tokenRows
	// seqRows values have the sequences on their first axis likewise,
	// from a gather of each sequence's chosen token row on.
	seqRows
	// mixed values depend on rows in any other way.
	mixed
)

// join is the class of a value computed from values of classes a and b
// by a node that is row-wise in them.
func join(a, b rowClass) rowClass {
	switch {
	case a == free:
		return b
	case b == free || a == b:
		return a
	}
	return mixed
}

// extents are the step's row extents by class.
type extents struct{ tokens, seqs int64 }

func (e extents) of(c rowClass) int64 {
	if c == seqRows {
		return e.seqs
	}
	return e.tokens
}

// rowsAt is a value's class and, for rows, the axis that holds them.
type rowsAt struct {
	class rowClass
	axis  int
}

func (r rowsAt) isRows() bool { return r.class == tokenRows || r.class == seqRows }

// Leading says whether a value of shape lies on rows of extent max as
// its outermost axis that is not 1 (the rows of a kernel's loop space
// whose grid can follow them), and how many elements a row holds.
func Leading(shape ir.Shape, max int64) (perRow int64, ok bool) {
	for _, d := range shape {
		if d == 1 {
			continue
		}
		if int64(d) != max || max <= 0 {
			return 0, false
		}
		return shape.NumElements() / max, true
	}
	return 0, false
}

// scaleRows sets Rows on the run's launches of a serving step's program
// that may work on the rows present alone. Buffers of token rows start at
// the step's token inputs (ids, positions, slot mapping), sequence rows at
// a gather of one token row per sequence (the last token's); a launch is
// row-wise when its outputs are rows of one extent in its body, on one
// axis (a split-K matmul's partials hold the tokens on their second); its
// kernel sizes its grid for the rows present where its form can (Kernel
// printers: cuda's RowGrid), and computes the rest of its rows past them
// from rows past them otherwise. A buffer's
// rows past T (or S) stay unwritten when its producer is scaled, so a
// launch may be scaled only where no reader needs them: a reader that is
// not row-wise needs every row of what it reads (a reduction over the
// tokens, say), except as the data of a gather along the rows, whose
// indices name the rows it reads; and a row-wise reader that is not
// scaled because its own outputs are needed whole needs its inputs whole
// too. A row-wise reader that is not scaled for its form computes rows
// past T from rows past T alone.
func (b *builder) scaleRows() {
	layout := b.prog.Step
	if layout == nil {
		return
	}
	starts, okStarts := b.named[step.QueryStarts]
	seqs, okSeqs := b.named[step.SeqsSymbol]
	if !okStarts || !okSeqs {
		return
	}
	ext := extents{tokens: int64(layout.MaxTokens), seqs: int64(layout.MaxSeqs)}
	at := make([]rowsAt, len(b.prog.Buffers))
	for _, name := range []string{step.InputIDs, step.Positions, step.SlotMapping} {
		if id, ok := b.named[name]; ok && b.prog.Buffers[id].Kind == Input && len(b.prog.Buffers[id].Shape) > 0 &&
			int64(b.prog.Buffers[id].Shape[0]) == ext.tokens {
			at[id] = rowsAt{class: tokenRows}
		}
	}
	// Forward: each launch's outputs' classes, whether it is row-wise
	// (its outputs' rows of one extent on one axis), and which of its row
	// inputs it reads past their row.
	rowWise := make([]rowClass, len(b.prog.Run)) // free: not row-wise
	axis := make([]int, len(b.prog.Run))
	wholeReads := make([][]int, len(b.prog.Run))
	for i, l := range b.prog.Run {
		ins := make([]rowsAt, len(l.Args))
		for j, a := range l.Args {
			ins[j] = at[a]
		}
		outs, whole := bodyRows(l.Body, ins, ext)
		rowWise[i], axis[i] = outs[0].class, outs[0].axis
		for j, o := range l.Outs {
			r := outs[j]
			if r.class != rowWise[i] || !r.isRows() || r.axis != outs[0].axis {
				rowWise[i] = free
			}
			if _, windowed, _ := OutputWindow(l.Body, j); windowed {
				// Written into a larger buffer (a pool's slots): the
				// buffer's rows are not the step's; what lands in it
				// is whole for the rows present.
				if r.class == mixed {
					at[o] = rowsAt{class: mixed}
				}
				continue
			}
			if c := join(at[o].class, r.class); c != r.class || at[o].isRows() && at[o].axis != r.axis {
				at[o] = rowsAt{class: mixed}
			} else {
				at[o] = r
			}
		}
		for j, a := range l.Args {
			if whole[j] && at[a].isRows() {
				wholeReads[i] = append(wholeReads[i], a)
			}
		}
	}
	// Backward: the buffers whose every row is needed.
	needed := make([]bool, len(b.prog.Buffers))
	for i := len(b.prog.Run) - 1; i >= 0; i-- {
		l := b.prog.Run[i]
		isRowWise := rowWise[i] != free
		scaled := isRowWise
		for _, o := range l.Outs {
			if needed[o] || at[o].isRows() && b.prog.Buffers[o].Kind != Temp && b.prog.Buffers[o].Kind != Output {
				scaled = false
			}
		}
		if scaled {
			in := make([]int, len(l.Args))
			for j, a := range l.Args {
				in[j] = -1
				if at[a].class == rowWise[i] {
					in[j] = at[a].axis
				}
			}
			l.Rows = &Rows{Max: ext.of(rowWise[i]), Seqs: rowWise[i] == seqRows, Axis: axis[i], Args: []int{starts, seqs}, In: in}
		}
		for _, a := range wholeReads[i] {
			needed[a] = true
		}
		if !scaled && isRowWise && slices.ContainsFunc(l.Outs, func(o int) bool { return needed[o] }) {
			for _, a := range l.Args {
				if at[a].isRows() {
					needed[a] = true
				}
			}
		}
	}
}

// bodyRows classifies a body's outputs given its inputs' classes: outs[j]
// for output j, and whole[i] for each input read past its own row.
func bodyRows(body *ir.Graph, ins []rowsAt, ext extents) (outs []rowsAt, whole []bool) {
	at, wholeRead := bodyRowsAt(body, ins, ext, false)
	outs = make([]rowsAt, len(body.Outputs))
	for j, o := range body.Outputs {
		outs[j] = at[o.Value]
	}
	whole = make([]bool, len(ins))
	for i, v := range body.Inputs() {
		whole[i] = wholeRead[v]
	}
	return outs, whole
}

// bodyRowsAt classifies every value of a body given its inputs' classes,
// and says which row values are read past their own row.
//
// With pools, a scatter of rows into a value without them (a KV pool at
// the slot mapping) holds no rows either: by the step's contract a token
// past T has slot -1 and writes nothing, so the pool after it follows the
// rows present alone.
func bodyRowsAt(body *ir.Graph, ins []rowsAt, ext extents, pools bool) (at []rowsAt, wholeRead []bool) {
	at = make([]rowsAt, len(body.Nodes))
	inputs := body.Inputs()
	for i, v := range inputs {
		at[v] = ins[i]
	}
	// wholeRead[v]: value v (of rows) is read past its own row by a node
	// that is not row-wise in it.
	wholeRead = make([]bool, len(body.Nodes))
	readWhole := func(n *ir.Node) {
		for _, x := range n.Inputs {
			if at[x].isRows() {
				wholeRead[x] = true
			}
		}
	}
	for i, n := range body.Nodes {
		v := ir.Value(i)
		if n.Op.Class() == ir.ClassLeaf {
			continue
		}
		c := free
		for _, x := range n.Inputs {
			c = join(c, at[x].class)
		}
		switch {
		case c == free:
			continue
		case c == mixed:
			at[v] = rowsAt{class: mixed}
			readWhole(n)
			continue
		}
		if pools && n.Op == ir.OpScatter && at[n.Inputs[0]].class == free {
			continue
		}
		if d := at[n.Inputs[0]]; n.Op == ir.OpGather && d.isRows() && d.axis == n.Attrs.Axis && at[n.Inputs[1]].class == free {
			// A gather of chosen rows: its indices say which rows it
			// reads (by the step's contract, rows present). One token
			// a sequence (each one's last) makes the sequences' rows.
			at[v] = rowsAt{}
			if d.class == tokenRows && d.axis == 0 && len(body.Node(n.Inputs[1]).Shape) == 1 && len(n.Shape) > 0 && int64(n.Shape[0]) == ext.seqs {
				at[v] = rowsAt{class: seqRows}
			}
			continue
		}
		axis, ok := rowAxis(body, n, at)
		if !ok || axis < 0 || axis >= len(n.Shape) || int64(n.Shape[axis]) != ext.of(c) {
			at[v] = rowsAt{class: mixed}
			readWhole(n)
			continue
		}
		at[v] = rowsAt{class: c, axis: axis}
	}
	return at, wholeRead
}

// rowAxis is the axis of node n's result that holds the rows when n is
// row-wise in its row operands (each on one axis, at[...]): slice r of the
// result along it is computed from slice r of each row operand along its
// own and from operands that hold no rows. ok is false for a node that
// moves, mixes or reduces along the rows.
func rowAxis(body *ir.Graph, n *ir.Node, at []rowsAt) (axis int, ok bool) {
	in := func(i int) ir.Shape { return body.Node(n.Inputs[i]).Shape }
	op := func(i int) rowsAt { return at[n.Inputs[i]] }
	// same is the one axis of every row operand, if they agree.
	same := func() (int, bool) {
		axis := -1
		for i := range n.Inputs {
			if r := op(i); r.isRows() {
				if axis >= 0 && r.axis != axis {
					return 0, false
				}
				axis = r.axis
			}
		}
		return axis, axis >= 0
	}
	switch c := n.Op.Class(); {
	case c == ir.ClassUnary || c == ir.ClassBinary || c == ir.ClassCompare || c == ir.ClassSelect:
		return same()
	case c == ir.ClassReduce:
		a, ok := same()
		return a, ok && n.Attrs.Axis != a
	}
	a := op(0).axis
	switch n.Op {
	case ir.OpCast, ir.OpExpand:
		return a, op(0).isRows() && in(0)[a] == n.Shape[a]
	case ir.OpSoftmax:
		return a, op(0).isRows() && n.Attrs.Axis != a
	case ir.OpRMSNorm, ir.OpLayerNorm:
		for i := 1; i < len(n.Inputs); i++ {
			if op(i).class != free {
				return 0, false
			}
		}
		return a, op(0).isRows() && a != len(n.Shape)-1
	case ir.OpPermute:
		return slices.Index(n.Attrs.Perm, a), op(0).isRows()
	case ir.OpReshape:
		// The rows' axis survives whole, with the same extents before
		// it.
		s, before := in(0), int64(1)
		for _, d := range in(0)[:a] {
			before *= int64(d)
		}
		p := int64(1)
		for b, d := range n.Shape {
			if p == before && d == s[a] {
				return b, op(0).isRows()
			}
			p *= int64(d)
		}
		return 0, false
	case ir.OpSlice:
		return a, op(0).isRows() && n.Attrs.Starts[a] == 0 && n.Attrs.Steps[a] == 1 && n.Shape[a] == in(0)[a]
	case ir.OpPad:
		return a, op(0).isRows() && n.Attrs.Before[a] == 0 && n.Attrs.After[a] == 0
	case ir.OpConcat:
		a, ok := same()
		return a, ok && n.Attrs.Axis != a
	case ir.OpGather:
		g := n.Attrs.Axis
		switch data, idx := op(0), op(1); {
		case data.isRows() && idx.class == free && g > data.axis:
			return data.axis, true
		case data.isRows() && idx.class == free && g < data.axis:
			return data.axis + len(in(1)) - 1, true
		case data.class == free && idx.isRows():
			return g + idx.axis, true
		}
		return 0, false
	case ir.OpMatMul:
		r := len(n.Shape)
		A, B := op(0), op(1)
		switch {
		case A.isRows() && B.isRows():
			return A.axis, A.axis == B.axis && A.axis < r-2
		case A.isRows():
			return A.axis, A.axis <= r-2
		case B.isRows() && B.axis < r-2:
			return B.axis, true
		case B.isRows() && B.axis == r-1:
			return r - 1, true
		}
		return 0, false
	case ir.OpRoute:
		// Each row's weights from its logits.
		return 0, op(0).isRows() && a == 0
	case ir.OpExperts, ir.OpExpertsUp, ir.OpExpertsDown:
		// Each row's slots from its vector (or slots) and weights; the
		// experts' weights hold no rows.
		for i := 2; i < len(n.Inputs); i++ {
			if op(i).class != free {
				return 0, false
			}
		}
		return 0, op(0).isRows() && a == 0 && op(1).isRows() && op(1).axis == 0
	case ir.OpPagedAttention:
		// The pools, the metadata and the sinks (one a query head, when
		// present) hold no token rows.
		for i := 3; i < len(n.Inputs); i++ {
			if op(i).class != free {
				return 0, false
			}
		}
		return 0, op(0).isRows() && op(0).axis == 0 && op(1).isRows() && op(1).axis == 0 && op(2).isRows() && op(2).axis == 0
	}
	return 0, false
}
