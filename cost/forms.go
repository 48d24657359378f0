package cost

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// RowReduces says whether a reduction op along axis of an input of shape in
// and dtype dt is one the row form computes (a pass of a block or a warp
// over each row, float accumulators and a shuffle tree): a sum or max along
// the last axis of a float tensor. Any other reduction (along another
// axis, or over integers, whose sums and maxima must stay exact) is
// computed by a loop per output element, the elementwise form's. It is
// the one answer to that question: rules.Legal classifies kernel bodies
// by it, the cost model lists the row form's schedules only for bodies it
// holds for, and the CUDA printer prints the row form for exactly those.
func RowReduces(op ir.Op, axis int, in ir.Shape, dt ir.DType) bool {
	if op.Class() != ir.ClassReduce || len(in) == 0 || !dt.IsFloat() {
		return false
	}
	return axis == -1 || axis == len(in)-1
}

// RowReduction is RowReduces for a node n of body.
func RowReduction(body *ir.Graph, n *ir.Node) bool {
	if n.Op.Class() != ir.ClassReduce {
		return false
	}
	in := body.Node(n.Inputs[0])
	return RowReduces(n.Op, n.Attrs.Axis, in.Shape, in.DType)
}

// rowOp says whether n is one of a row kernel's row operations: a row
// reduction (RowReduction), or a softmax or norm along the last axis,
// which the printer decomposes into row reductions.
func rowOp(body *ir.Graph, n *ir.Node) bool {
	switch n.Op {
	case ir.OpRMSNorm, ir.OpLayerNorm:
		return true
	case ir.OpSoftmax:
		in := body.Node(n.Inputs[0]).Shape
		return n.Attrs.Axis == -1 || n.Attrs.Axis == len(in)-1
	}
	return RowReduction(body, n)
}

// RowStructure checks what the row form needs of a body without matmuls
// whose row operations (row reductions, softmax or norms along the last
// axis) all run along rows of one shape: past a row operation, values
// keep the row structure (elementwise ops, casts, reshapes and broadcasts
// of the row statistics only), and every output has an element per row
// element or one per row, so that output element i belongs to row i / L.
// A body without row operations passes. rules.Legal refuses the bodies it
// fails and the printer's row form relies on it; the message says what
// breaks the structure.
func RowStructure(body *ir.Graph) error {
	var rowShape ir.Shape
	after := make([]bool, len(body.Nodes))
	for i, n := range body.Nodes {
		row := rowOp(body, n)
		if row {
			in := body.Node(n.Inputs[0]).Shape
			if rowShape == nil {
				rowShape = in
			} else if !rowShape.Equal(in) {
				return fmt.Errorf("row kernel with row operations over rows of shapes %v and %v", rowShape, in)
			}
		}
		for _, in := range n.Inputs {
			after[i] = after[i] || after[in] || rowOp(body, body.Node(in))
		}
		if !after[i] || row {
			continue
		}
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpReshape && n.Op != ir.OpExpand && n.Op != ir.OpCast {
				return fmt.Errorf("row kernel with a %s after its row reduction", n.Op)
			}
		}
	}
	if rowShape == nil {
		return nil
	}
	L := int64(rowShape[len(rowShape)-1])
	rows := rowShape.NumElements() / max(L, 1)
	for _, o := range body.Outputs {
		if n := body.Node(o.Value).Shape.NumElements(); n != rows*L && n != rows {
			return fmt.Errorf("row kernel output of %d elements for %d rows of %d", n, rows, L)
		}
	}
	return nil
}
