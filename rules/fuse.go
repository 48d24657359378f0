package rules

import (
	"fmt"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// Bounds on what fusion builds, so that the e-graph stays small: the body
// size and the argument count of a fused kernel.
const (
	maxBodyNodes  = 32
	maxKernelArgs = 6
	// maxAlternatives bounds the kernels one class keeps: fusion adds no
	// more once a class has this many. (A beam by predicted cost replaces
	// the plain count once the cost model exists.)
	maxAlternatives = 12
)

// Legal says whether lowering will accept a kernel body. It is the one
// place that decides, and fusion asks it before building anything. For now
// a body is legal when it is small and has at most one op that is neither
// elementwise nor a view (its anchor: a reduction, matmul, softmax, norm,
// attention, gather, ...), with elementwise prologues on the anchor's
// inputs and an elementwise epilogue on its result. The lowering issue
// refines the forms.
func Legal(body *ir.Graph) bool {
	if len(body.Nodes) > maxBodyNodes || len(body.Inputs()) > maxKernelArgs || len(body.Outputs) != 1 {
		return false
	}
	anchors := 0
	for _, n := range body.Nodes {
		switch n.Op.Class() {
		case ir.ClassLeaf, ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView:
		default:
			if n.Op == ir.OpCast {
				continue
			}
			anchors++
		}
	}
	return anchors <= 1
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
