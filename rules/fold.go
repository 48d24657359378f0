package rules

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// viewFolder prices kernels as lowering builds them. A kernel node's
// arguments are classes; lowering reads an argument that is a view (a
// reshape, a permute, a slice) of another class through that view, folded
// into the kernel's body (lower's fold), and the printer loads the operand
// by what the folded body shows: an nn.Linear weight reached through its
// transpose is a K-contiguous buffer copied with 16-byte cp.async, a
// split-K batch of a reshaped activation is a computed operand. Pricing
// the body with plain buffers for arguments would price both the other
// way round, and extraction would pick programs by prices lowering never
// sees. It caches the folded bodies, interned so that the cost model's
// cache (by body) serves them.
type viewFolder struct {
	eg    *egraph.EGraph[Data]
	mu    sync.Mutex
	cache map[string]*ir.Graph
}

func newViewFolder(eg *egraph.EGraph[Data]) *viewFolder {
	return &viewFolder{eg: eg, cache: map[string]*ir.Graph{}}
}

// chain follows class c through view nodes to the class lowering gives a
// buffer, returning that class and the views from it outward, innermost
// first. A view chain that ends at a leaf (an input, a weight, a state, a
// constant) costs nothing, so extraction chooses it over any kernel that
// computes the same class (a transposed copy made at load time), and the
// chain is followed to the leaf. A chain that ends at a computed class
// stops at the first class a kernel may compute: there extraction may
// choose the kernel's buffer over the view. ok is false on a cycle of
// views (reshape(reshape(x)) merged into x's class), left unfolded.
func (f *viewFolder) chain(c egraph.ClassID) (root egraph.ClassID, views []egraph.Node, ok bool) {
	seen := map[egraph.ClassID]bool{}
	c = f.eg.Find(c)
	// The first class on the chain a kernel may compute, and how many
	// views lead to it.
	kernelClass, kernelAt := egraph.ClassID(0), -1
	for {
		if seen[c] {
			return 0, nil, false
		}
		seen[c] = true
		var view *egraph.Node
		leaf, kernel := false, false
		for _, id := range f.eg.ClassNodes(c) {
			n := f.eg.Node(id)
			op, isOp := OpOf(n.Op)
			switch {
			case n.Op == KernelSymbol:
				kernel = true
			case isOp && op.Class() == ir.ClassLeaf:
				leaf = true
			case isOp && op.Class() == ir.ClassView && view == nil && len(n.Children) == 1:
				view = &n
			}
		}
		if kernel && kernelAt < 0 {
			kernelClass, kernelAt = c, len(views)
		}
		if leaf || view == nil {
			if !leaf && kernelAt >= 0 {
				// A computed class: stop where a kernel may be chosen.
				c, views = kernelClass, views[:kernelAt]
			}
			slices.Reverse(views)
			return c, views, true
		}
		views = append(views, *view)
		c = f.eg.Find(view.Children[0])
	}
}

// fold returns kernel node n's body with its arguments' views folded in,
// over one input per distinct class reached, or body itself when no
// argument is a view.
func (f *viewFolder) fold(n egraph.Node, body *ir.Graph) *ir.Graph {
	roots := make([]egraph.ClassID, len(n.Children))
	views := make([][]egraph.Node, len(n.Children))
	var key strings.Builder
	fmt.Fprintf(&key, "%d", n.Payload)
	any := false
	for i, k := range n.Children {
		root, vs, ok := f.chain(k)
		if !ok || len(vs) == 0 {
			root, vs = f.eg.Find(k), nil
		}
		any = any || len(vs) > 0
		roots[i], views[i] = root, vs
		fmt.Fprintf(&key, " %d", root)
		for _, v := range vs {
			fmt.Fprintf(&key, ":%d/%d", v.Op, v.Payload)
		}
	}
	if !any {
		return body
	}
	f.mu.Lock()
	g, ok := f.cache[key.String()]
	f.mu.Unlock()
	if ok {
		return g
	}
	g = f.build(body, roots, views)
	if g == nil {
		g = body
	}
	f.mu.Lock()
	f.cache[key.String()] = g
	f.mu.Unlock()
	return g
}

// build is body over the roots' buffers read through the views; nil when
// a root's data is unknown or the views do not build (the body is then
// priced as it stands).
func (f *viewFolder) build(body *ir.Graph, roots []egraph.ClassID, views [][]egraph.Node) *ir.Graph {
	nb := ir.NewBuilder(body.Name)
	in := map[egraph.ClassID]ir.Value{}
	ins := make([]ir.Value, len(roots))
	for i, r := range roots {
		x, ok := in[r]
		if !ok {
			d := f.eg.Data(r)
			if !d.Valid() {
				return nil
			}
			x = nb.Input(fmt.Sprintf("$%d", len(in)), d.DType, d.Shape...)
			in[r] = x
		}
		for _, v := range views[i] {
			op, _ := OpOf(v.Op)
			attrs, ok := Attrs(v.Payload)
			if !ok {
				return nil
			}
			x = nb.Apply(op, attrs, x)
		}
		ins[i] = x
	}
	for i, o := range nb.Inline(body, ins) {
		nb.Output(fmt.Sprintf("out%d", i), o)
	}
	g, err := nb.Build()
	if err != nil {
		return nil
	}
	p := SpecPayload(g)
	interned, _ := Spec(p)
	return interned
}
