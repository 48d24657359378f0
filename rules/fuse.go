package rules

import (
	"fmt"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// Bounds on what fusion builds, so that the e-graph stays small: the body
// size and the argument count of a fused kernel.
const (
	maxBodyNodes  = 48
	maxKernelArgs = 6
	// maxAlternatives bounds the kernels one class keeps: past it, fusion
	// adds only bodies larger than the class's largest. (A beam by
	// predicted cost replaces this once the cost model exists.)
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
// Casts and concats count as views: they only say where elements come
// from. The lowering issue refines these; the bounds (body size, argument
// count) keep the e-graph small.
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
		case n.Op == ir.OpCast, n.Op == ir.OpConcat:
			// A concat, like a view, only says where its elements come
			// from: a kernel reads through it (rotary's rotate_half).
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
	// Past the cap a class only takes bodies larger than any it has: a
	// bigger fusion saves launches and memory traffic, so growth is what
	// the search wants to keep, and body size bounds it.
	kernels, largest := 0, 0
	for _, nid := range g.ClassNodes(mt.Root()) {
		if n := g.Node(nid); n.Op == KernelSymbol {
			kernels++
			if b, ok := Spec(n.Payload); ok {
				largest = max(largest, len(b.Nodes))
			}
		}
	}
	// The searcher's variables are ?a0..?a(n-1) with ?a(pos) replaced by
	// ?b0..?b(m-1), in that order of first occurrence, so the match's
	// substitution is already the merged body's argument list.
	args := mt.Subst
	f, ok := fusedBody(mt.GetPayload("?c"), mt.GetPayload("?p"), m, pos)
	if !ok || (kernels >= maxAlternatives && f.nodes <= largest) {
		return 0, false
	}
	order := f.order
	kids := make([]egraph.ClassID, len(order))
	for i, o := range order {
		kids[i] = args[o]
	}
	c, err := g.Add(egraph.Node{Op: KernelSymbol, Payload: f.spec, Children: kids})
	return c, err == nil
}

// fusion is a merged body, remembered by the bodies it was made from: the
// same two kernels meet again and again during saturation (the fuse rules
// are Go appliers, so every iteration sees all their matches), and building
// and canonicalizing the body is the expensive part.
type fusion struct {
	spec  egraph.Payload
	order []int // argument i of the merged body is the match's argument order[i]
	nodes int
	legal bool
}

type fusionKey struct {
	consumer, producer egraph.Payload
	m, pos             int
}

var fusions = struct {
	sync.Mutex
	m map[fusionKey]fusion
}{m: map[fusionKey]fusion{}}

// fusedBody merges producer body p into argument pos of consumer body c
// (p takes m arguments) and reports whether the result is Legal. The
// merged body's arguments are c's before pos, p's, then c's after pos.
func fusedBody(c, p egraph.Payload, m, pos int) (fusion, bool) {
	key := fusionKey{c, p, m, pos}
	fusions.Lock()
	f, ok := fusions.m[key]
	fusions.Unlock()
	if ok {
		return f, f.legal
	}
	f = buildFusion(c, p, m, pos)
	fusions.Lock()
	fusions.m[key] = f
	fusions.Unlock()
	return f, f.legal
}

func buildFusion(cPay, pPay egraph.Payload, m, pos int) fusion {
	cBody, ok1 := Spec(cPay)
	pBody, ok2 := Spec(pPay)
	if !ok1 || !ok2 || len(cBody.Nodes)+len(pBody.Nodes) > maxBodyNodes+maxKernelArgs {
		return fusion{}
	}
	cIns, pIns := cBody.Inputs(), pBody.Inputs()
	if len(pIns) != m || pos >= len(cIns) {
		return fusion{}
	}
	b := ir.NewBuilder("kernel")
	var ins []ir.Value
	arg := func(body *ir.Graph, v ir.Value) ir.Value {
		n := body.Node(v)
		x := b.Input(fmt.Sprintf("$%d", len(ins)), n.DType, n.Shape...)
		ins = append(ins, x)
		return x
	}
	var cArgs []ir.Value
	for i, v := range cIns {
		if i == pos {
			var pArgs []ir.Value
			for _, w := range pIns {
				pArgs = append(pArgs, arg(pBody, w))
			}
			cArgs = append(cArgs, inline(b, pBody, pArgs))
			continue
		}
		cArgs = append(cArgs, arg(cBody, v))
	}
	b.Output("out", inline(b, cBody, cArgs))
	body, err := b.Build()
	if err != nil {
		return fusion{}
	}
	canon, order, err := ir.Canonical(body)
	if err != nil || !Legal(canon) {
		return fusion{}
	}
	return fusion{spec: SpecPayload(canon), order: order, nodes: len(canon.Nodes), legal: true}
}
