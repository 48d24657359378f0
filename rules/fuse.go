package rules

import (
	"fmt"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// Bounds on what fusion builds, so that the e-graph stays small: the body
// size and the argument count of a fused kernel.
const (
	maxBodyNodes  = 48
	maxKernelArgs = 6
	// maxAlternatives bounds the kernels one class keeps: fusion adds no
	// more once a class has this many. (A beam by predicted cost replaces
	// the plain count once the cost model exists.)
	maxAlternatives = 12
)

// Legal says whether lowering will accept a kernel body. It is the one
// place that decides, and fusion asks it before building anything. The
// forms, besides elementwise ops and views anywhere:
//   - an elementwise chain;
//   - one other op (a reduction, gather, concat, ...) with elementwise
//     prologues and epilogue;
//   - a row kernel: reductions along the last axis of same-shaped tensors
//     (softmax, layer norm, RMS norm, residual add plus norm);
//   - a matmul with a prologue (elementwise, or a row kernel normalizing the
//     rows of its left operand) and an elementwise epilogue;
//   - attention: two matmuls with a row kernel (the softmax) between them.
//
// The lowering issue refines these; the bounds (body size, argument count)
// keep the e-graph small.
func Legal(body *ir.Graph) bool {
	if len(body.Nodes) > maxBodyNodes || len(body.Inputs()) > maxKernelArgs || len(body.Outputs) != 1 {
		return false
	}
	matmuls, others := 0, 0
	var rowShape ir.Shape
	rowsAgree := true
	for _, n := range body.Nodes {
		switch n.Op.Class() {
		case ir.ClassLeaf, ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView:
			continue
		}
		switch {
		case n.Op == ir.OpCast:
		case n.Op == ir.OpMatMul:
			matmuls++
		case n.Op.Class() == ir.ClassReduce || n.Op == ir.OpSoftmax || n.Op == ir.OpLayerNorm || n.Op == ir.OpRMSNorm:
			in := body.Node(n.Inputs[0]).Shape
			ax := n.Axis
			if ax < 0 {
				ax += len(in)
			}
			if n.Op.Class() == ir.ClassReduce && ax != len(in)-1 {
				others++ // a reduction across rows is its own kind of kernel
				continue
			}
			if rowShape == nil {
				rowShape = in
			} else if !rowShape.Equal(in) {
				rowsAgree = false
			}
		default:
			others++
		}
	}
	rows := rowShape != nil
	switch {
	case matmuls == 0 && !rows:
		return others <= 1
	case others > 0 || !rowsAgree:
		return false
	case matmuls == 0:
		return true // a row kernel
	case matmuls == 1:
		return true // a matmul, its prologue possibly a row kernel
	case matmuls == 2:
		return rows // attention: the softmax between the matmuls
	}
	return false
}

// FuseRewrites are the fuse rule set: a kernel absorbs the kernel that
// produces one of its arguments when the merged body is Legal. One rule per
// consumer arity, producer arity and argument position, up to the argument
// bound.
func FuseRewrites() []*egraph.Rewrite[Data] {
	var out []*egraph.Rewrite[Data]
	for n := 1; n <= 4; n++ {
		for m := 1; m <= 4; m++ {
			for pos := range n {
				kids := make([]egraph.PatternTerm, n)
				for i := range kids {
					kids[i] = egraph.PatternTerm{Var: fmt.Sprintf("?a%d", i)}
				}
				inner := make([]egraph.PatternTerm, m)
				for j := range inner {
					inner[j] = egraph.PatternTerm{Var: fmt.Sprintf("?b%d", j)}
				}
				kids[pos] = egraph.PatternTerm{Op: KernelSymbol, PayloadVar: "?p", Children: inner}
				p, err := egraph.NewPattern(egraph.PatternTerm{Op: KernelSymbol, PayloadVar: "?c", Children: kids})
				if err != nil {
					panic(err)
				}
				pos := pos
				rw, err := egraph.NewFuncRewrite(fmt.Sprintf("fuse-%d-%d-at-%d", n, m, pos), egraph.Searcher(p),
					func(g *egraph.EGraph[Data], mt egraph.Match) (egraph.ClassID, bool) {
						return fuse(g, mt, n, m, pos)
					})
				if err != nil {
					panic(err)
				}
				out = append(out, rw)
			}
		}
	}
	return out
}

// fuse builds consumer∘producer: the consumer's body with argument pos
// replaced by the producer's body over the producer's arguments.
func fuse(g *egraph.EGraph[Data], mt egraph.Match, n, m, pos int) (egraph.ClassID, bool) {
	kernels := 0
	for _, nid := range g.ClassNodes(mt.Root()) {
		if g.Node(nid).Op == KernelSymbol {
			kernels++
		}
	}
	if kernels >= maxAlternatives {
		return 0, false
	}
	cBody, ok1 := Spec(mt.GetPayload("?c"))
	pBody, ok2 := Spec(mt.GetPayload("?p"))
	if !ok1 || !ok2 || len(cBody.Nodes)+len(pBody.Nodes) > maxBodyNodes+maxKernelArgs {
		return 0, false
	}
	var args []egraph.ClassID
	for i := range n {
		if i == pos {
			for j := range m {
				args = append(args, mt.Get(fmt.Sprintf("?b%d", j)))
			}
			continue
		}
		args = append(args, mt.Get(fmt.Sprintf("?a%d", i)))
	}
	if len(args) > maxKernelArgs+1 { // duplicates merge in canonical form
		return 0, false
	}
	b := ir.NewBuilder("kernel")
	ins := make([]ir.Value, len(args))
	for i, a := range args {
		d := g.Data(a)
		if !d.Valid() {
			return 0, false
		}
		ins[i] = b.Input(fmt.Sprintf("$%d", i), d.DType, d.Shape...)
	}
	produced := inline(b, pBody, ins[pos:pos+m])
	cArgs := append(append(append([]ir.Value(nil), ins[:pos]...), produced), ins[pos+m:]...)
	b.Output("out", inline(b, cBody, cArgs))
	body, err := b.Build()
	if err != nil {
		return 0, false
	}
	canon, order, err := ir.Canonical(body)
	if err != nil || !Legal(canon) {
		return 0, false
	}
	kids := make([]egraph.ClassID, len(order))
	for i, o := range order {
		kids[i] = args[o]
	}
	c, err := g.Add(egraph.Node{Op: KernelSymbol, Payload: SpecPayload(canon), Children: kids})
	return c, err == nil
}
