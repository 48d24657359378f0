package cost

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// Form is a kernel form: how the CUDA printer computes a kernel body, and
// so which schedules the cost model lists for it.
type Form uint8

// The kernel forms.
const (
	// FormElementwise computes each output element on its own, in a
	// grid-stride loop, through views, casts, gathers and slice updates;
	// a reduction that is not a row reduction (RowReduces) is a loop per
	// output element.
	FormElementwise Form = iota
	// FormRow reduces rows (sums and maxima along the last axis; softmax
	// and norms decomposed into them), a block or a warp per row, with
	// elementwise prologues and epilogues (RowStructure).
	FormRow
	// FormMatMul is one tiled matmul, an elementwise or norm prologue on
	// its left operand, elementwise ones on its right, and an elementwise
	// epilogue that keeps every element in place.
	FormMatMul
	// FormAttention is softmax(scores) x v with the scores computed
	// elementwise from q x k^T, flash style (the attention op, or its
	// eager form: Attention).
	FormAttention
	// FormPagedAttention is a serving step's attention over a paged KV
	// cache (the paged_attention op alone: Paged), a block per token and
	// key head whose warps share the token's keys.
	FormPagedAttention
	// FormRoute is a mixture of experts' routing (the route op alone,
	// experts.go), a warp a row of router logits.
	FormRoute
	// FormExperts is either half of a mixture of experts (experts_up or
	// experts_down alone, experts.go): each row's chosen experts' weight
	// columns times the row's vector, found by slot or by expert.
	FormExperts
)

// String names the form.
func (f Form) String() string {
	switch f {
	case FormElementwise:
		return "elementwise"
	case FormRow:
		return "row"
	case FormMatMul:
		return "matmul"
	case FormAttention:
		return "attention"
	case FormPagedAttention:
		return "paged_attention"
	case FormRoute:
		return "route"
	case FormExperts:
		return "experts"
	}
	return fmt.Sprintf("form(%d)", uint8(f))
}

// FormOf says in which form the CUDA printer prints a kernel body, or why
// no form prints it. It is the one legality oracle the compiler has:
// rules.Legal admits no body it refuses, the cost model lists the
// schedules of the form it names (and prices nothing it refuses), and the
// printer prints the body in that form. What it checks is structure: the
// schedules of a form that fit a body's shapes are the cost model's
// business (Model.Ranked), and the printer prints each of them.
func FormOf(body *ir.Graph) (Form, error) {
	if len(body.Outputs) == 0 {
		return 0, fmt.Errorf("a kernel body without outputs")
	}
	var matmuls []ir.Value
	attention, rows := 0, false
	for i, n := range body.Nodes {
		switch {
		case n.Op == ir.OpPagedAttention:
			return FormPagedAttention, pagedStructure(body)
		case n.Op == ir.OpRoute:
			_, err := Route(body)
			return FormRoute, err
		case n.Op == ir.OpExpertsUp || n.Op == ir.OpExpertsDown:
			_, err := Experts(body)
			return FormExperts, err
		case n.Op == ir.OpExperts:
			return 0, fmt.Errorf("an experts op in a kernel body (no kernel computes it whole: the split-experts rewrite makes experts_up and experts_down of it)")
		case n.Op == ir.OpMatMul:
			matmuls = append(matmuls, ir.Value(i))
		case n.Op == ir.OpAttention:
			attention++
		case n.Op == ir.OpConst && n.Attrs.ConstLen() > 1:
			return 0, fmt.Errorf("a constant of %d values inside a kernel body (a kernel reads one from memory)", n.Attrs.ConstLen())
		case n.Op.Class() == ir.ClassLeaf && n.Op != ir.OpInput && n.Op != ir.OpConst && n.Op != ir.OpIota:
			return 0, fmt.Errorf("a %s inside a kernel body (a kernel reads its arguments as inputs)", n.Op)
		case rowOp(body, n):
			rows = true
		}
	}
	switch {
	case attention > 0 && (attention > 1 || len(matmuls) > 0):
		return 0, fmt.Errorf("%d attention ops and %d matmuls in one kernel body: the attention form computes one attention", attention, len(matmuls))
	case attention == 1, len(matmuls) == 2:
		d, err := Decompose(body)
		if err != nil {
			return 0, err
		}
		return FormAttention, attentionStructure(d)
	case len(matmuls) > 2:
		return 0, fmt.Errorf("%d matmuls in one kernel body: a kernel computes one matmul, or two as attention", len(matmuls))
	case len(matmuls) == 1:
		return FormMatMul, matmulStructure(body, matmuls[0])
	case rows:
		return FormRow, RowStructure(body)
	}
	return FormElementwise, elementwiseStructure(body)
}

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
// which Decompose turns into row reductions. A softmax along another axis
// is a loop per output element, as other reductions are.
func rowOp(body *ir.Graph, n *ir.Node) bool {
	switch n.Op {
	case ir.OpRMSNorm, ir.OpLayerNorm:
		return true
	case ir.OpSoftmax:
		in := body.Node(n.Inputs[0]).Shape
		return len(in) > 0 && (n.Attrs.Axis == -1 || n.Attrs.Axis == len(in)-1)
	}
	return RowReduction(body, n)
}

// RowStructure checks what the row form needs of a body without matmuls
// whose row operations (row reductions, softmax or norms along the last
// axis) all run along rows of one shape: past a row operation, values
// keep the row structure (elementwise ops, casts, reshapes and broadcasts
// of the row statistics only), and every output has an element per row
// element or one per row, so that output element i belongs to row i / L.
// A body without row operations passes. FormOf refuses the bodies it
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
				return fmt.Errorf("a row kernel with row operations over rows of shapes %v and %v", rowShape, in)
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
				return fmt.Errorf("a row kernel with a %s after its row reduction", n.Op)
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
			return fmt.Errorf("a row kernel output of %d elements for %d rows of %d (an element per row element or one per row)", n, rows, L)
		}
	}
	return nil
}

// elementwiseStructure checks what the elementwise form needs: every
// output of the first one's shape (one loop over its elements writes them
// all).
func elementwiseStructure(body *ir.Graph) error {
	first := body.Node(body.Outputs[0].Value).Shape
	for _, o := range body.Outputs[1:] {
		if s := body.Node(o.Value).Shape; !s.Equal(first) {
			return fmt.Errorf("an elementwise kernel writing outputs of shapes %v and %v (one loop over the first's elements writes them all)", first, s)
		}
	}
	return nil
}

// matmulStructure checks what the matmul form needs of a body with the one
// matmul mm: operands of rank 2 or more; an epilogue that keeps every
// element in place (epilogueStructure); and row operations only in a norm
// prologue of the left operand (the tile loads read the statistics of the
// block's own rows), reducing f32 rows of that operand's shape (Decompose
// reduces softmax and norms in f32; a reduction of half-precision values
// is a row kernel's).
func matmulStructure(body *ir.Graph, mm ir.Value) error {
	mn := body.Node(mm)
	a, b := body.Node(mn.Inputs[0]), body.Node(mn.Inputs[1])
	if len(a.Shape) < 2 || len(b.Shape) < 2 {
		return fmt.Errorf("a matmul of shapes %v and %v: the matmul form takes matrices", a.Shape, b.Shape)
	}
	if err := epilogueStructure(body, mm, "matmul"); err != nil || WritesWindows(body) {
		// A matrix-vector kernel may gather its epilogue and write
		// through windows (gather.go); no other form does either.
		if err == nil {
			err = fmt.Errorf("a matmul kernel writing through a window")
		}
		g, gerr := GatheredEpilogue(body, mm)
		if gerr != nil {
			return fmt.Errorf("%w; as a gathered epilogue: %w", err, gerr)
		}
		_, _, plain := GEMVWeight(body, mm)
		if _, quantized := GEMVQuantWeight(body, mm); !plain && !quantized {
			return fmt.Errorf("%w; a gathered epilogue needs the matrix-vector kernel, whose weight must be a plain f32, f16 or bf16 buffer or a quantized one it streams packed", err)
		}
		k := &kernelForm{body: body, form: FormMatMul, matmuls: []ir.Value{mm}}
		if len(k.gatheredSchedules(g)) == 0 {
			return fmt.Errorf("%w; as a gathered epilogue: no matrix-vector schedule's blocks hold its groups of %d x %d columns in the shared memory they declare", err, g.Map.P, g.Map.I)
		}
	}
	left, right := ancestors(body, mn.Inputs[0]), ancestors(body, mn.Inputs[1])
	var rowShape ir.Shape
	for i, n := range body.Nodes {
		if !rowOp(body, n) {
			continue
		}
		if !left[i] || right[i] {
			return fmt.Errorf("a matmul kernel with a %s outside its left operand's prologue (a tile reads the row statistics of its own rows only)", n.Op)
		}
		in := body.Node(n.Inputs[0])
		if n.Op.Class() == ir.ClassReduce && in.DType != ir.F32 {
			return fmt.Errorf("a matmul prologue reducing %s rows (a norm prologue reduces f32; half-precision rows are a row kernel's)", in.DType)
		}
		if rowShape == nil {
			rowShape = in.Shape
		} else if !rowShape.Equal(in.Shape) {
			return fmt.Errorf("a matmul prologue reducing rows of shapes %v and %v", rowShape, in.Shape)
		}
	}
	if rowShape != nil && (rowShape[len(rowShape)-1] != a.Shape[len(a.Shape)-1] || rowShape.NumElements() != a.Shape.NumElements()) {
		return fmt.Errorf("a matmul prologue reducing rows of %v, not its left operand's %v", rowShape, a.Shape)
	}
	return nil
}

// epilogueStructure checks the values computed from a product (a
// matmul's, or attention's second) that a tiled kernel applies as it
// writes each element: elementwise ops, casts, reshapes and permutes only,
// their other operands computed without a matmul (the scores of an
// attention are gone by then), and every output one of them of the
// product's size, so that each output element is one of the product's.
func epilogueStructure(body *ir.Graph, prod ir.Value, form string) error {
	after := make([]bool, len(body.Nodes))
	after[prod] = true
	matmul := make([]bool, len(body.Nodes)) // computed from a matmul
	for i, n := range body.Nodes {
		matmul[i] = n.Op == ir.OpMatMul
		for _, in := range n.Inputs {
			matmul[i] = matmul[i] || matmul[in]
			after[i] = after[i] || after[in]
		}
		if !after[i] || ir.Value(i) == prod {
			continue
		}
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpReshape && n.Op != ir.OpPermute && n.Op != ir.OpCast {
				return fmt.Errorf("a %s kernel with a %s after its %s (an epilogue keeps every element in place)", form, n.Op, form)
			}
		}
		for _, in := range n.Inputs {
			if !after[in] && matmul[in] {
				return fmt.Errorf("a %s kernel whose epilogue's %s reads another matmul's result", form, n.Op)
			}
		}
	}
	size := body.Node(prod).Shape.NumElements()
	for j, o := range body.Outputs {
		if !after[o.Value] {
			return fmt.Errorf("a %s kernel whose output %d does not read its %s", form, j, form)
		}
		if n := body.Node(o.Value).Shape.NumElements(); n != size {
			return fmt.Errorf("a %s kernel output of %d elements for a %s of %d", form, n, form, size)
		}
	}
	return nil
}

// ancestors marks v and every value it is computed from.
func ancestors(body *ir.Graph, v ir.Value) []bool {
	in := make([]bool, len(body.Nodes))
	in[v] = true
	for i := int(v); i >= 0; i-- {
		if in[i] {
			for _, k := range body.Nodes[i].Inputs {
				in[k] = true
			}
		}
	}
	return in
}
