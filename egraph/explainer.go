package egraph

import (
	"fmt"
	"slices"
)

// Explainer answers many Explain queries over one e-graph: it roots the
// forest of unions (an edge for every union that merged two classes,
// between the two ids it was called with) once, so that each query walks
// its two ids up to their common ancestor instead of searching the
// forest. It reads the unions made before it was built.
type Explainer struct {
	g     *Graph
	up    []ClassID // the id one step towards the root of its tree
	edge  []int32   // the union record joining an id to up; -1 at a root
	depth []int32
}

// Explainer builds an Explainer of g's unions so far.
func (g *Graph) Explainer() *Explainer {
	n := len(g.parent)
	recs := g.prov.recs
	// The forest's adjacency, compressed: the records touching id i are
	// adj[start[i]:start[i+1]].
	start := make([]int32, n+1)
	for _, r := range recs {
		start[r.a+1]++
		start[r.b+1]++
	}
	for i := range n {
		start[i+1] += start[i]
	}
	adj := make([]int32, 2*len(recs))
	fill := append([]int32(nil), start[:n]...)
	for i, r := range recs {
		adj[fill[r.a]] = int32(i)
		fill[r.a]++
		adj[fill[r.b]] = int32(i)
		fill[r.b]++
	}
	e := &Explainer{g: g, up: make([]ClassID, n), edge: make([]int32, n), depth: make([]int32, n)}
	seen := make([]bool, n)
	var queue []ClassID
	for root := range n {
		if seen[root] {
			continue
		}
		seen[root] = true
		e.up[root], e.edge[root] = ClassID(root), -1
		queue = append(queue[:0], ClassID(root))
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			for _, ri := range adj[start[x]:start[x+1]] {
				r := recs[ri]
				y := r.a
				if y == x {
					y = r.b
				}
				if !seen[y] {
					seen[y] = true
					e.up[y], e.edge[y], e.depth[y] = x, ri, e.depth[x]+1
					queue = append(queue, y)
				}
			}
		}
	}
	return e
}

// Explain returns the unions that made a and b equal, as Graph.Explain
// does, in the order they happened.
func (e *Explainer) Explain(a, b ClassID) ([]UnionRecord, error) {
	ids, err := e.Unions(a, b)
	if err != nil {
		return nil, err
	}
	out := make([]UnionRecord, len(ids))
	for i, id := range ids {
		out[i] = e.g.prov.export(id)
	}
	return out, nil
}

// Unions is Explain's records as their indexes (Graph.UnionAt), so that
// records shared by several queries can be told apart.
func (e *Explainer) Unions(a, b ClassID) ([]int, error) {
	if int(a) >= len(e.up) || int(b) >= len(e.up) {
		return nil, fmt.Errorf("explain %d = %d: no such class (or one made after the explainer)", a, b)
	}
	if e.g.find(a) != e.g.find(b) {
		return nil, fmt.Errorf("explain %d = %d: the classes are not equal", a, b)
	}
	var ids []int
	for a != b {
		if e.depth[a] >= e.depth[b] {
			ids = append(ids, int(e.edge[a]))
			a = e.up[a]
		} else {
			ids = append(ids, int(e.edge[b]))
			b = e.up[b]
		}
	}
	// Record indices grow with time.
	slices.Sort(ids)
	return ids, nil
}
