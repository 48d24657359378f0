package rules

import (
	"fmt"
	"maps"
	"slices"
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
		if n := g.Node(nid); n.Op == KernelSymbol && !readsCrossSum(n.Payload) {
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

// CrossSumRewrites fuse split-K's final sum into the kernels that read its
// result: a kernel reading a class that a short sum across rows computes
// ((sum P) over an axis other than the last, of at most MaxCrossSum
// elements: the sum over split-K's partials), directly or through views
// (the slices of a merged QKV projection, reshapes, permutes), gets in
// its own class the kernel that reads P instead and sums the partials as
// it loads them, when that body is Legal. Region fusion cannot reach
// these: it grows a body over a class's oldest node (the unsplit matmul),
// and it grows a node's regions once, before the tile rules' sums join
// the classes. One rule per consumer arity, up to the argument bound; the
// kernel it builds matches again for its next such argument.
func CrossSumRewrites() []*egraph.Rewrite[Data] {
	var out []*egraph.Rewrite[Data]
	for n := 1; n <= maxKernelArgs; n++ {
		kids := make([]egraph.PatternTerm, n)
		for i := range kids {
			kids[i] = egraph.PatternTerm{Var: fmt.Sprintf("?a%d", i)}
		}
		p, err := egraph.NewPattern(egraph.PatternTerm{Op: KernelSymbol, PayloadVar: "?c", Children: kids})
		if err != nil {
			panic(err) // the patterns are built here, from valid parts
		}
		rw, err := egraph.NewFuncRewrite(fmt.Sprintf("fuse-split-sum-%d", n), egraph.Searcher(p), fuseCrossSums)
		if err != nil {
			panic(err)
		}
		out = append(out, rw)
	}
	return out
}

// maxSumViews bounds the views between a kernel's argument and the sum
// across rows it reaches through them.
const maxSumViews = 4

// maxCrossAlternatives bounds the kernels CrossSumRewrites add to one
// class: each argument may be a sum of several partials (two splits of
// its own matmul, two of a merged one), and their combinations multiply.
const maxCrossAlternatives = 32

// fuseCrossSums adds to the matched kernel's class the kernels that read
// split-K partials in place of their sums: for each partials class some
// arguments are sums of (through views), the kernel computing all of
// those arguments from it, the partials that serve the most arguments
// first, up to maxCrossAlternatives such kernels a class. It returns the
// first one's class and unions the others itself.
func fuseCrossSums(g *egraph.EGraph[Data], mt egraph.Match) (egraph.ClassID, bool) {
	args := mt.Subst
	root := g.Find(mt.Root())
	have := 0
	for _, id := range g.ClassNodes(root) {
		if n := g.Node(id); n.Op == KernelSymbol && readsCrossSum(n.Payload) {
			have++
		}
	}
	if have >= maxCrossAlternatives {
		return 0, false
	}
	// The ways each partials class serves the arguments.
	var groups []crossGroup
	at := map[egraph.ClassID]int{}
	for pos, a := range args {
		for _, ch := range crossSumChains(g, g.Find(a), 0) {
			if ch.parts == root {
				continue
			}
			k, ok := at[ch.parts]
			if !ok {
				k = len(groups)
				at[ch.parts] = k
				groups = append(groups, crossGroup{parts: ch.parts, chains: map[int]sumChain{}})
			}
			if _, dup := groups[k].chains[pos]; !dup {
				groups[k].chains[pos] = ch
			}
		}
	}
	slices.SortStableFunc(groups, func(a, b crossGroup) int { return len(b.chains) - len(a.chains) })
	first, added := egraph.ClassID(0), false
	for _, grp := range groups {
		if have >= maxCrossAlternatives {
			break
		}
		spec, kids, ok := crossFused(g, mt.GetPayload("?c"), args, grp)
		if !ok {
			continue
		}
		c, err := g.Add(egraph.Node{Op: KernelSymbol, Payload: spec, Children: kids})
		if err != nil {
			continue
		}
		have++
		if !added {
			first, added = c, true
		} else if g.Find(c) != g.Find(first) {
			g.Union(c, first, "fuse-split-sum")
		}
	}
	return first, added
}

// crossGroup is one partials class and, by argument position, how the
// arguments at those positions are sums of it.
type crossGroup struct {
	parts  egraph.ClassID
	chains map[int]sumChain
}

// crossFused builds consumer body c (over args) with the arguments of grp
// computed inside from grp's partials, and returns its spec and argument
// classes when it is Legal.
func crossFused(g *egraph.EGraph[Data], c egraph.Payload, args []egraph.ClassID, grp crossGroup) (egraph.Payload, []egraph.ClassID, bool) {
	pos := slices.Sorted(maps.Keys(grp.chains))
	key := fmt.Sprint(c, pos, g.Data(grp.parts).Shape)
	for _, p := range pos {
		key += fmt.Sprint(grp.chains[p].ops, grp.chains[p].attrs)
	}
	crossBodies.Lock()
	f, ok := crossBodies.m[key]
	crossBodies.Unlock()
	if !ok {
		f = buildCrossFused(c, grp, g.Data(grp.parts))
		crossBodies.Lock()
		crossBodies.m[key] = f
		crossBodies.Unlock()
	}
	if !f.legal {
		return 0, nil, false
	}
	// The built body's arguments: the consumer's not in grp, in order,
	// then the partials.
	var merged []egraph.ClassID
	for i, a := range args {
		if _, in := grp.chains[i]; !in {
			merged = append(merged, a)
		}
	}
	merged = append(merged, grp.parts)
	kids := make([]egraph.ClassID, len(f.order))
	for i, o := range f.order {
		kids[i] = merged[o]
	}
	return f.spec, kids, true
}

var crossBodies = struct {
	sync.Mutex
	m map[string]fusion
}{m: map[string]fusion{}}

func buildCrossFused(cPay egraph.Payload, grp crossGroup, parts Data) fusion {
	// A two-output kernel (a norm's statistics beside the residual sum it
	// takes them of) sums partials as it reads them like any other.
	cBody, ok := Spec(cPay)
	if !ok {
		return fusion{}
	}
	b := ir.NewBuilder("kernel")
	cIns := cBody.Inputs()
	vals := make([]ir.Value, len(cIns))
	n := 0
	for i, v := range cIns {
		if _, in := grp.chains[i]; in {
			continue
		}
		nd := cBody.Node(v)
		vals[i] = b.Input(fmt.Sprintf("$%d", n), nd.DType, nd.Shape...)
		n++
	}
	p := b.Input(fmt.Sprintf("$%d", n), parts.DType, parts.Shape...)
	for i, ch := range grp.chains {
		x := p
		for k, op := range ch.ops {
			x = b.Apply(op, ch.attrs[k], x)
		}
		if want := cBody.Node(cIns[i]); !b.Shape(x).Equal(want.Shape) || b.DType(x) != want.DType {
			return fusion{}
		}
		vals[i] = x
	}
	outs := b.Inline(cBody, vals)
	if len(outs) == 1 {
		b.Output("out", outs[0])
	} else {
		for j, o := range outs {
			b.Output(fmt.Sprintf("out%d", j), o)
		}
	}
	body, err := b.Build()
	if err != nil {
		return fusion{}
	}
	canon, order, err := ir.Canonical(body)
	if err != nil || len(canon.Nodes) > maxBodyNodes || !Legal(canon) {
		return fusion{}
	}
	return fusion{spec: SpecPayload(canon), order: order, nodes: len(canon.Nodes), legal: true}
}

// sumChain is how a class is a short sum across rows through views: the
// summed class, and the ops from the sum (first) up to the class with
// their attributes.
type sumChain struct {
	parts egraph.ClassID
	ops   []ir.Op
	attrs []ir.Attrs
}

// maxSumChains bounds the ways of one argument crossSumChains returns (a
// merged QKV projection's slice is its own matmul's sum too, each split
// two ways).
const maxSumChains = 8

// crossSumChains finds the ways class c is a short sum across rows,
// through at most maxSumViews views and casts.
func crossSumChains(g *egraph.EGraph[Data], c egraph.ClassID, depth int) []sumChain {
	var out []sumChain
	for _, id := range g.ClassNodes(c) {
		if len(out) >= maxSumChains {
			break
		}
		n := g.Node(id)
		op, ok := OpOf(n.Op)
		if !ok || len(n.Children) != 1 {
			continue
		}
		attrs, ok := Attrs(n.Payload)
		if !ok {
			continue
		}
		kid := g.Find(n.Children[0])
		if kid == c {
			continue
		}
		if op == ir.OpSum {
			in := g.Data(kid)
			ax := attrs.Axis
			if ax < 0 {
				ax += len(in.Shape)
			}
			if in.Valid() && !in.WeightOnly && ax >= 0 && ax < len(in.Shape)-1 && in.Shape[ax] <= MaxCrossSum {
				out = append(out, sumChain{kid, []ir.Op{op}, []ir.Attrs{attrs}})
			}
			continue
		}
		switch op {
		case ir.OpReshape, ir.OpPermute, ir.OpSlice:
		case ir.OpCast:
			// A narrow product's split-K sum is accumulated in f32 and
			// narrowed after (see accumulate in tile.go): the kernel
			// reading it narrows it in its body.
		default:
			continue
		}
		if depth >= maxSumViews {
			continue
		}
	next:
		for _, ch := range crossSumChains(g, kid, depth+1) {
			for _, o := range out {
				if o.parts == ch.parts {
					continue next // one way per partials: the first, shortest found
				}
			}
			ch.ops, ch.attrs = append(slices.Clone(ch.ops), op), append(slices.Clone(ch.attrs), attrs)
			out = append(out, ch)
		}
	}
	return out[:min(len(out), maxSumChains)]
}

// crossSums remembers which kernel bodies hold a sum across rows.
var crossSums sync.Map // egraph.Payload -> bool

// readsCrossSum reports whether kernel body p sums across rows (split-K
// partials, CrossSumRewrites): such a kernel is a variant of the one
// reading the sum, and the caps on a class's alternatives leave it out.
func readsCrossSum(p egraph.Payload) bool {
	if v, ok := crossSums.Load(p); ok {
		return v.(bool)
	}
	body, ok := Spec(p)
	found := false
	for i := 0; ok && i < len(body.Nodes) && !found; i++ {
		n := body.Nodes[i]
		found = n.Op == ir.OpSum && !rowReduce(body, n)
	}
	crossSums.Store(p, found)
	return found
}
