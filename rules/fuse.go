package rules

import (
	"fmt"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// maxAlternatives bounds the kernels one class keeps through pairwise
// fusion: past it, fusion adds only bodies larger than the class's
// largest. maxPairBody bounds the bodies pairwise fusion builds, below
// Legal's bound, because it builds every intermediate step.
const (
	maxAlternatives = 12
	maxPairBody     = 48
)

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
	if !ok1 || !ok2 || len(cBody.Nodes)+len(pBody.Nodes) > maxPairBody+maxKernelArgs {
		return fusion{}
	}
	if len(cBody.Outputs) != 1 || len(pBody.Outputs) != 1 {
		return fusion{} // multi-output kernels are region fusion's
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
			cArgs = append(cArgs, b.Inline(pBody, pArgs)[0])
			continue
		}
		cArgs = append(cArgs, arg(cBody, v))
	}
	b.Output("out", b.Inline(cBody, cArgs)[0])
	body, err := b.Build()
	if err != nil {
		return fusion{}
	}
	canon, order, err := ir.Canonical(body)
	if err != nil || len(canon.Nodes) > maxPairBody || !Legal(canon) {
		return fusion{}
	}
	return fusion{spec: SpecPayload(canon), order: order, nodes: len(canon.Nodes), legal: true}
}
