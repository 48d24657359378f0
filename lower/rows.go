package lower

import (
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
	// Args are the buffers of query_start and of the seqs symbol.
	Args []int
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

// scaleRows sets Rows on the run's launches of a serving step's program
// that may work on the rows present alone. Buffers of token rows start at
// the step's token inputs (ids, positions, slot mapping), sequence rows at
// a gather of one token row per sequence (the last token's); a launch is
// row-wise when its outputs are rows of one extent in its body. A
// buffer's rows past T (or S) stay unwritten when its producer is scaled,
// so a launch may be scaled only where no reader needs them: a reader
// that is not row-wise needs every row of what it reads (a reduction over
// the tokens, say), except as the data of a gather along the rows, whose
// indices name the rows it reads; and a row-wise reader that is not
// scaled because its own outputs are needed whole needs its inputs whole
// too.
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
	class := make([]rowClass, len(b.prog.Buffers))
	for _, name := range []string{step.InputIDs, step.Positions, step.SlotMapping} {
		if id, ok := b.named[name]; ok && b.prog.Buffers[id].Kind == Input && len(b.prog.Buffers[id].Shape) > 0 &&
			int64(b.prog.Buffers[id].Shape[0]) == ext.tokens {
			class[id] = tokenRows
		}
	}
	isRows := func(c rowClass) bool { return c == tokenRows || c == seqRows }
	// Forward: each launch's outputs' classes (the extent of a row-wise
	// launch), and which of its row inputs it reads past their row.
	extent := make([]rowClass, len(b.prog.Run))
	wholeReads := make([][]int, len(b.prog.Run))
	for i, l := range b.prog.Run {
		ins := make([]rowClass, len(l.Args))
		for j, a := range l.Args {
			ins[j] = class[a]
		}
		outs, whole := bodyRows(l.Body, ins, ext)
		extent[i] = outs[0]
		for j, o := range l.Outs {
			c := outs[j]
			if c != extent[i] || !isRows(c) {
				extent[i] = free
			}
			if _, windowed, _ := OutputWindow(l.Body, j); windowed {
				// Written into a larger buffer (a pool's slots): the
				// buffer's rows are not the step's; what lands in it
				// is whole for the rows present.
				if c == mixed {
					class[o] = mixed
				}
				continue
			}
			class[o] = join(class[o], c)
		}
		for j, a := range l.Args {
			if whole[j] && isRows(class[a]) {
				wholeReads[i] = append(wholeReads[i], a)
			}
		}
	}
	// Backward: the buffers whose every row is needed.
	needed := make([]bool, len(b.prog.Buffers))
	for i := len(b.prog.Run) - 1; i >= 0; i-- {
		l := b.prog.Run[i]
		rowWise := extent[i] != free
		scaled := rowWise
		for _, o := range l.Outs {
			if needed[o] || isRows(class[o]) && b.prog.Buffers[o].Kind != Temp && b.prog.Buffers[o].Kind != Output {
				scaled = false
			}
		}
		if scaled {
			l.Rows = &Rows{Max: ext.of(extent[i]), Seqs: extent[i] == seqRows, Args: []int{starts, seqs}}
		}
		for _, a := range wholeReads[i] {
			needed[a] = true
		}
		if !scaled && rowWise && slices.ContainsFunc(l.Outs, func(o int) bool { return needed[o] }) {
			for _, a := range l.Args {
				if isRows(class[a]) {
					needed[a] = true
				}
			}
		}
	}
}

// bodyRows classifies a body's outputs given its inputs' classes: outs[j]
// for output j, and whole[i] for each input read past its own row.
func bodyRows(body *ir.Graph, ins []rowClass, ext extents) (outs []rowClass, whole []bool) {
	class := make([]rowClass, len(body.Nodes))
	inputs := body.Inputs()
	for i, v := range inputs {
		class[v] = ins[i]
	}
	// wholeRead[v]: value v (of rows) is read past its own row by a node
	// that is not row-wise in it.
	wholeRead := make([]bool, len(body.Nodes))
	readWhole := func(n *ir.Node) {
		for _, x := range n.Inputs {
			if c := class[x]; c == tokenRows || c == seqRows {
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
			c = join(c, class[x])
		}
		switch {
		case c == free:
			continue
		case c == mixed:
			class[v] = mixed
			readWhole(n)
			continue
		}
		if n.Op == ir.OpGather && n.Attrs.Axis == 0 && class[n.Inputs[0]] == tokenRows && class[n.Inputs[1]] == free {
			// A gather of chosen token rows: its indices say which
			// rows it reads (by the step's contract, rows of tokens
			// present). One a sequence (each one's last token) makes
			// the sequences' rows.
			class[v] = free
			if s := n.Shape; len(s) > 0 && int64(s[0]) == ext.seqs && len(body.Node(n.Inputs[1]).Shape) == 1 {
				class[v] = seqRows
			}
			continue
		}
		if s := n.Shape; len(s) == 0 || int64(s[0]) != ext.of(c) || !rowWiseNode(body, n, class) {
			class[v] = mixed
			readWhole(n)
			continue
		}
		class[v] = c
	}
	outs = make([]rowClass, len(body.Outputs))
	for j, o := range body.Outputs {
		outs[j] = class[o.Value]
	}
	whole = make([]bool, len(ins))
	for i, v := range inputs {
		whole[i] = wholeRead[v]
	}
	return outs, whole
}

// rowWiseNode says whether node n, whose result has the token rows on its
// first axis, computes row t from row t of its token-row operands: every
// operand with rows on its first axis keeps them there, and nothing moves,
// mixes or reduces along it.
func rowWiseNode(body *ir.Graph, n *ir.Node, class []rowClass) bool {
	in := func(i int) ir.Shape { return body.Node(n.Inputs[i]).Shape }
	isFree := func(i int) bool { return class[n.Inputs[i]] == free }
	keeps := func(i int) bool { s := in(i); return len(s) > 0 && s[0] == n.Shape[0] }
	switch c := n.Op.Class(); {
	case c == ir.ClassUnary || c == ir.ClassBinary || c == ir.ClassCompare || c == ir.ClassSelect:
		for i := range n.Inputs {
			if !keeps(i) {
				return false
			}
		}
		return true
	case c == ir.ClassReduce:
		return n.Attrs.Axis != 0 && keeps(0)
	}
	switch n.Op {
	case ir.OpCast:
		return keeps(0)
	case ir.OpReshape, ir.OpExpand:
		return keeps(0)
	case ir.OpPermute:
		return len(n.Attrs.Perm) > 0 && n.Attrs.Perm[0] == 0
	case ir.OpSlice:
		return len(n.Attrs.Starts) > 0 && n.Attrs.Starts[0] == 0 && n.Attrs.Steps[0] == 1 && keeps(0)
	case ir.OpPad:
		return len(n.Attrs.Before) > 0 && n.Attrs.Before[0] == 0 && n.Attrs.After[0] == 0
	case ir.OpConcat:
		if n.Attrs.Axis == 0 {
			return false
		}
		for i := range n.Inputs {
			if !keeps(i) {
				return false
			}
		}
		return true
	case ir.OpGather:
		if n.Attrs.Axis == 0 {
			// Rows of a table chosen by token-row indices (an
			// embedding): the indices' rows are the result's.
			return isFree(0) && keeps(1)
		}
		// Along another axis, the data's rows are the result's.
		return keeps(0) && isFree(1)
	case ir.OpSoftmax:
		return n.Attrs.Axis != 0 && keeps(0)
	case ir.OpRMSNorm, ir.OpLayerNorm:
		return len(n.Shape) > 1 && keeps(0)
	case ir.OpMatMul:
		// [M, K] x [K, N] with M the rows, or a batch on the rows.
		a, w := in(0), in(1)
		if len(a) == 2 {
			return keeps(0) && len(w) == 2 && isFree(1)
		}
		return len(a) > 2 && keeps(0) && (len(w) < len(a) || w[0] == a[0])
	case ir.OpPagedAttention:
		return keeps(0) && keeps(1) && keeps(2) && !slices.ContainsFunc([]int{3, 4, 5, 6, 7, 8}, func(i int) bool { return !isFree(i) })
	}
	return false
}
