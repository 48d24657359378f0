package rules

import (
	"fmt"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// Bounds on what a kernel body may hold: its node count and its argument
// count. Past them a body is not Legal, whatever its form.
const (
	maxBodyNodes     = 96
	maxKernelArgs    = 8
	maxKernelOutputs = 2
)

// Legal says whether lowering will accept a kernel body. It is the one
// place that decides, and fusion asks it before building anything. The
// forms, besides elementwise ops and views anywhere:
//   - an elementwise chain;
//   - one other op (a reduction across rows, gather, ...) with elementwise
//     prologues and epilogue;
//   - a row kernel: reductions along the last axis of same-shaped tensors
//     (softmax, layer norm, RMS norm, residual add plus norm);
//   - a matmul with a prologue (elementwise, or a row kernel normalizing the
//     rows of its left operand) and an elementwise epilogue that keeps
//     every element in place (reshapes and permutes, but no slices,
//     concats or broadcasts of the result: a tile holds only its own
//     elements); a row reduction after the matmul is not one of them
//     either;
//   - attention: two matmuls with a softmax between them, the first
//     feeding the second only through it, elementwise prologues (rotary,
//     scale, mask) on their operands;
//   - paged attention alone over its nine arguments (the one body past
//     the argument bound).
//
// Casts and concats count as views: they only say where elements come
// from, and so does a short sum across rows (MaxCrossSum: split-K's final
// sum over its partials) of values loaded from the arguments: any form
// sums the partials as it loads them. A kernel without matmuls may write a
// second output, a value it computes on the way (a residual sum next to
// its norm).
//
// On top of these forms, a body must be one cost.FormOf accepts, the
// printer's own account of what each form computes: what Legal admits
// prints, in every schedule the cost model lists for it.
func Legal(body *ir.Graph) bool { return legal(body, false) }

// LegalMerged is Legal for the bodies lowering builds by merging launches
// of an extracted program (lower's epilogue and sibling merges): it also
// admits a matrix-vector matmul whose epilogue gathers the product (reads
// it at other columns than its own: rotary embedding, a merged gate and
// up projection's SiLU product; cost's GatheredEpilogue) and writes cache
// rows through windows. The search does not grow such bodies: with them
// in the e-graph, the greedy extraction's choices elsewhere in the pair
// of blocks moved, for programs no faster (tiny llama's decode took half
// a launch more a layer), while the merges after extraction reach them
// from the program the search found.
func LegalMerged(body *ir.Graph) bool { return legal(body, true) }

func legal(body *ir.Graph, gathered bool) bool {
	args := maxKernelArgs
	for _, n := range body.Nodes {
		if n.Op == ir.OpPagedAttention {
			// Paged attention takes nine arguments (q, k, v, the pools,
			// the metadata), ten with sinks; its form is the op alone
			// (cost.FormOf).
			args = max(args, len(n.Inputs))
		}
	}
	outs := maxKernelOutputs
	if gathered && cost.WritesWindows(body) {
		outs = maxWindowedOutputs
	}
	if len(body.Nodes) > maxBodyNodes || len(body.Inputs()) > args || len(body.Outputs) == 0 || len(body.Outputs) > outs {
		return false
	}
	nodes := make([]formNode, len(body.Nodes))
	for i, n := range body.Nodes {
		nodes[i] = formOf(n.Op, n.Axis, n.Inputs, func(v ir.Value) ir.Shape { return body.Node(v).Shape }, func(v ir.Value) ir.DType { return body.Node(v).DType })
		nodes[i].kids = make([]int32, len(n.Inputs))
		for k, in := range n.Inputs {
			nodes[i].kids[k] = int32(in)
		}
	}
	if len(body.Outputs) > 1 && !(gathered && cost.WritesWindows(body)) {
		for _, n := range nodes {
			if n.kind == formMatMul {
				// A tiled matmul does not write its prologue's values; a
				// matrix-vector one writes the cache rows lowering merged
				// into its epilogue (windows), which cost.FormOf checks.
				return false
			}
		}
	}
	if !legalForm(nodes, false, gathered) {
		return false
	}
	// What the forms above admit must print: cost.FormOf is the printer's
	// own account of the structure each form needs (a row kernel's rows
	// kept to its outputs, a norm prologue of the left operand only, a
	// softmax between attention's matmuls, ...), which the cost model
	// prices and the printer prints by.
	_, err := cost.FormOf(body)
	return err == nil
}

// formKind is what a body node means to the kernel forms.
type formKind uint8

const (
	formFree    formKind = iota // leaves, elementwise ops, views, casts, concats
	formMatMul                  // a matmul
	formRow                     // a reduction along the last axis, or a row op (softmax, norms)
	formSoftmax                 // a row op that makes it a softmax: reduce_max along the last axis, or softmax
	formOther                   // anything else: one per kernel, alone
)

// formNode is a body node as legalForm sees it; kids index the same slice
// and come before their parents.
type formNode struct {
	kind formKind
	// moves says the node reads its input at other positions than its
	// output's (a slice, concat, pad, expand, gather, slice update): a
	// matmul's epilogue cannot, since a tile holds only its own elements.
	moves bool
	exp   bool // an exp, a softmax's first op on the way up from its output
	// left is a matmul's left operand's shape: a norm prologue must
	// reduce exactly its rows (a split-K piece's rows are slices of
	// them, which a tile cannot normalize).
	left     ir.Shape
	rowShape ir.Shape // the shape a row op reduces, for formRow and formSoftmax
	// cross marks a short sum across rows (MaxCrossSum): free, but only
	// over values computed from the kernel's arguments by free nodes.
	cross bool
	// gemv marks a matmul the matrix-vector kernel may run: at most
	// cost.GEMVRows rows, unbatched.
	gemv bool
	// narrow marks a row reduction over f16 or bf16 values: a row kernel
	// reduces them in f32, but a matmul's norm prologue reduces f32 only.
	narrow bool
	kids   []int32
}

// MaxCrossSum is the longest sum across rows (over an axis other than the
// last) that a kernel of any form may compute on the way, each element
// looping over the summed axis as it is read: split-K's final sum over its
// partials (at most 16 of them, rules.SplitKFactors) fused into the
// partials' consumer. Longer ones, and max reductions across rows, are a
// kernel of their own.
const MaxCrossSum = 16

// formOf classifies one op; shape and dtype give its inputs' shapes and
// dtypes.
func formOf[V any](op ir.Op, axis int, inputs []V, shape func(V) ir.Shape, dtype func(V) ir.DType) formNode {
	switch op.Class() {
	case ir.ClassView:
		return formNode{kind: formFree, moves: op != ir.OpReshape && op != ir.OpPermute}
	case ir.ClassLeaf, ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		return formNode{kind: formFree, exp: op == ir.OpExp}
	}
	switch {
	case op == ir.OpCast:
		return formNode{kind: formFree}
	case op == ir.OpDequant:
		// A quantized weight is decoded as its consumer loads it, like
		// a gather reading its codes and scales where the element is.
		return formNode{kind: formFree, moves: true}
	case op == ir.OpConcat:
		// A concat, like a view, only says where its elements come
		// from: a kernel reads through it (rotary's rotate_half).
		return formNode{kind: formFree, moves: true}
	case op == ir.OpMatMul:
		left, right := shape(inputs[0]), shape(inputs[1])
		return formNode{kind: formMatMul, left: left, gemv: gemvShaped(left, right)}
	case op.Class() == ir.ClassReduce || op == ir.OpSoftmax || op == ir.OpLayerNorm || op == ir.OpRMSNorm:
		in := shape(inputs[0])
		ax := axis
		if ax < 0 {
			ax += len(in)
		}
		dt := dtype(inputs[0])
		if op == ir.OpSoftmax && ax != len(in)-1 {
			// A softmax across rows is a loop per output element, a
			// kernel of its own like the reductions it stands for.
			return formNode{kind: formOther}
		}
		if op.Class() == ir.ClassReduce && !cost.RowReduces(op, axis, in, dt) {
			if op == ir.OpSum && ax >= 0 && ax < len(in)-1 && in[ax] <= MaxCrossSum {
				// A short sum across rows (split-K's final sum over its
				// partials) reads a few elements per output element:
				// any form computes it as it loads, like a gather.
				return formNode{kind: formFree, moves: true, cross: true}
			}
			// A reduction across rows, or over integers (exact, a loop
			// per output element), is its own kind of kernel.
			return formNode{kind: formOther}
		}
		narrow := op.Class() == ir.ClassReduce && dt != ir.F32
		if op == ir.OpMaxReduce || op == ir.OpSoftmax {
			return formNode{kind: formSoftmax, rowShape: in, narrow: narrow}
		}
		return formNode{kind: formRow, rowShape: in, narrow: narrow}
	}
	return formNode{kind: formOther}
}

// gemvShaped reports whether a matmul of operands of shapes left and
// right is one row block of a matrix-vector kernel: at most
// cost.GEMVRows rows, no batch.
func gemvShaped(left, right ir.Shape) bool {
	if len(left) < 2 || len(right) < 2 {
		return false
	}
	M := int64(left[len(left)-2])
	return M <= cost.GEMVRows && left.NumElements() == M*int64(left[len(left)-1]) &&
		right.NumElements() == int64(right[len(right)-2])*int64(right[len(right)-1])
}

// maxWindowedOutputs bounds the outputs of a kernel that writes cache rows
// through windows: a projection with its keys and values merged in
// (lowering's epilogue merges).
const maxWindowedOutputs = 4

// legalForm decides Legal's forms on classified nodes. A partial body
// (one still growing) may hold two matmuls with only an exp between them:
// growth reaches the first matmul of attention through the softmax's exp
// before the softmax's reductions.
func legalForm(nodes []formNode, partial, gathered bool) bool {
	var matmuls []int
	others, softmax, exp := 0, false, false
	var rowShape ir.Shape
	var rows []int
	// computed[i]: node i is, or depends on, a node that is not free (a
	// matmul, a row op, another op). A sum across rows must not: its
	// loop recomputes its operand per summed element, which the forms
	// do only for values loaded from the arguments.
	computed := make([]bool, len(nodes))
	for i, n := range nodes {
		computed[i] = n.kind != formFree
		for _, k := range n.kids {
			computed[i] = computed[i] || computed[k]
		}
		if n.cross && computed[i] {
			return false
		}
	}
	for i, n := range nodes {
		switch n.kind {
		case formMatMul:
			matmuls = append(matmuls, i)
		case formOther:
			others++
		case formFree:
			exp = exp || n.exp
		case formRow, formSoftmax:
			if rowShape == nil {
				rowShape = n.rowShape
			} else if !rowShape.Equal(n.rowShape) {
				return false
			}
			rows = append(rows, i)
			softmax = softmax || n.kind == formSoftmax
		}
	}
	switch {
	case len(matmuls) == 0 && len(rows) == 0:
		return others <= 1
	case others > 0 || len(matmuls) > 2:
		return false
	case len(matmuls) == 0:
		return true // a row kernel
	}
	// feeds[i] has bit j set when node i is matmul j or flows into it.
	feeds := make([]uint8, len(nodes))
	for j, m := range matmuls {
		feeds[m] |= 1 << j
	}
	for i := len(nodes) - 1; i >= 0; i-- {
		for _, k := range nodes[i].kids {
			feeds[k] |= feeds[i]
		}
	}
	// Past a matmul (and short of a reduction, whose row statistics may
	// be broadcast) values keep their positions: a tile's epilogue reads
	// only the tile's own elements. A matrix-vector kernel's block holds
	// its columns' sums, and its epilogue may gather them (cost's
	// GatheredEpilogue, which cost.FormOf checks).
	gathers := gathered && len(matmuls) == 1 && nodes[matmuls[0]].gemv
	past := make([]bool, len(nodes))
	for i, n := range nodes {
		if n.kind == formRow || n.kind == formSoftmax {
			continue
		}
		for _, k := range n.kids {
			past[i] = past[i] || past[k] || nodes[k].kind == formMatMul
		}
		if past[i] && n.moves && !gathers {
			return false
		}
	}
	if len(matmuls) == 1 {
		left := nodes[matmuls[0]].left
		for _, r := range rows {
			if feeds[r] == 0 || nodes[r].narrow {
				return false // a row reduction after the matmul, or one of half-precision values
			}
			rs := nodes[r].rowShape
			if left != nil && (rs.NumElements() != left.NumElements() || rs[len(rs)-1] != left[len(left)-1]) {
				return false
			}
		}
		return true
	}
	// Attention: matmul 0 feeds matmul 1, and every row op lies between.
	first := matmuls[0]
	if feeds[first]&2 == 0 || !softmax && !(partial && exp) {
		return false
	}
	after := make([]bool, len(nodes)) // depends on the first matmul
	after[first] = true
	for i := first + 1; i < len(nodes); i++ {
		for _, k := range nodes[i].kids {
			after[i] = after[i] || after[k]
		}
	}
	for _, r := range rows {
		if !after[r] || feeds[r]&2 == 0 {
			return false
		}
	}
	return true
}

// Form describes a kernel body the way a performance engineer would name
// it: its kind, and for a matmul what its prologue and epilogue hold.
type Form struct {
	// Kind is "attention", "matmul", "row" (softmax, norms), "elementwise",
	// or the one other op's name (a reduction across rows, a gather...).
	Kind string
	// RowPrologue says a matmul's left operand is normalized by a row
	// kernel inside it (an RMS or layer norm prologue).
	RowPrologue bool
	// Prologue and Epilogue list the computing ops (views aside) before
	// and after a matmul, in body order.
	Prologue, Epilogue []string
	// Outputs counts what the kernel writes.
	Outputs int
}

// String prints the form on one line: "matmul, prologue [rsqrt mul]
// with a row reduction, epilogue [add]".
func (f Form) String() string {
	s := f.Kind
	if len(f.Prologue) > 0 {
		s += fmt.Sprintf(", prologue %v", f.Prologue)
		if f.RowPrologue {
			s += " with a row reduction"
		}
	}
	if len(f.Epilogue) > 0 {
		s += fmt.Sprintf(", epilogue %v", f.Epilogue)
	}
	if f.Outputs > 1 {
		s += fmt.Sprintf(", %d outputs", f.Outputs)
	}
	return s
}

// FormOf classifies a kernel body.
func FormOf(body *ir.Graph) Form {
	f := formOfBody(body)
	f.Outputs = len(body.Outputs)
	return f
}

func formOfBody(body *ir.Graph) Form {
	var matmuls []int
	var other string
	rows := false
	for i, n := range body.Nodes {
		switch f := formOf(n.Op, n.Axis, n.Inputs, func(v ir.Value) ir.Shape { return body.Node(v).Shape }, func(v ir.Value) ir.DType { return body.Node(v).DType }); f.kind {
		case formMatMul:
			matmuls = append(matmuls, i)
		case formRow, formSoftmax:
			rows = true
		case formOther:
			other = n.Op.String()
		}
	}
	switch {
	case len(matmuls) >= 2:
		return Form{Kind: "attention"}
	case len(matmuls) == 0 && rows:
		return Form{Kind: "row"}
	case len(matmuls) == 0 && other != "":
		return Form{Kind: other}
	case len(matmuls) == 0:
		return Form{Kind: "elementwise"}
	}
	m := matmuls[0]
	feeds := make([]bool, len(body.Nodes))
	feeds[m] = true
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		if feeds[i] {
			for _, k := range body.Nodes[i].Inputs {
				feeds[k] = true
			}
		}
	}
	f := Form{Kind: "matmul"}
	for i, n := range body.Nodes {
		c := n.Op.Class()
		if i == m || c == ir.ClassLeaf || c == ir.ClassView || n.Op == ir.OpConcat || n.Op == ir.OpCast {
			continue
		}
		if feeds[i] {
			f.Prologue = append(f.Prologue, n.Op.String())
			f.RowPrologue = f.RowPrologue || rowReduce(body, n) || n.Op == ir.OpRMSNorm || n.Op == ir.OpLayerNorm
		} else {
			f.Epilogue = append(f.Epilogue, n.Op.String())
		}
	}
	return f
}

// rowReduce reports whether n is a reduction along its input's last axis
// (a sum across rows, say split-K's final sum, is not one).
func rowReduce(body *ir.Graph, n *ir.Node) bool {
	if n.Op.Class() != ir.ClassReduce {
		return false
	}
	in := body.Node(n.Inputs[0]).Shape
	return n.Axis == -1 || n.Axis == len(in)-1
}
