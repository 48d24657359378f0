package extract

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFixpointRootNotComputable(t *testing.T) {
	// The class of (f x) also holds x, but x costs +Inf: the only node
	// left reads its own class, so nothing bottoms out.
	h := newHandGraph(map[string]float64{"f": 1})
	f := h.add(t, "loop", "(f x)")
	x := h.add(t, "x", "x")
	h.union(x, f)
	_, err := h.problem(t, f)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "root class loop cannot be computed")
}

func TestFixpointDropsInfiniteNodes(t *testing.T) {
	// Class a holds a (+Inf) and b (1); class (g a) is fine through b;
	// class k holds only (h q) where q costs +Inf, so (h q) goes too.
	h := newHandGraph(map[string]float64{"b": 1, "g": 1, "h": 1, "r": 1})
	a := h.add(t, "a", "a")
	b := h.add(t, "b", "b")
	h.union(a, b)
	ga := h.add(t, "ga", "(g a)")
	hq := h.add(t, "hq", "(h q)")
	root := h.add(t, "root", "(r (g a) (h q))")
	r2 := h.add(t, "r2", "r")
	h.union(root, r2)
	p := h.mustProblem(t, root)

	for _, n := range p.Nodes {
		assert.False(t, n.Cost > 1, "no infinite cost is stored")
	}
	require.Len(t, p.ClassNodes[classOf(t, p, h.g, a)], 1, "a keeps only b")
	assert.Len(t, p.ClassNodes[classOf(t, p, h.g, ga)], 1)
	assert.Empty(t, p.ClassNodes[classOf(t, p, h.g, hq)], "(h q) reads a class with no executable node")
	rootNodes := p.ClassNodes[classOf(t, p, h.g, root)]
	require.Len(t, rootNodes, 1, "(r ga hq) is dropped, the leaf r stays")
	assert.Empty(t, p.Nodes[rootNodes[0]].Children)
	assert.Equal(t, []int32{classOf(t, p, h.g, root)}, p.Roots)
}

func TestFixpointCycleWithoutBaseCase(t *testing.T) {
	// x = (g y) and y = (h x), their leaves priced out: a cycle with no
	// way into it from below. The root stays computable through its leaf.
	h := newHandGraph(map[string]float64{"g": 1, "h": 1, "p": 1, "q": 5})
	gy := h.add(t, "x", "(g y0)")
	hx := h.add(t, "y", "(h x0)")
	h.union(gy, h.add(t, "x0", "x0"))
	h.union(hx, h.add(t, "y0", "y0"))
	root := h.add(t, "root", "(p (g y0))")
	h.union(root, h.add(t, "q", "q"))
	p := h.mustProblem(t, root)
	assert.Empty(t, p.ClassNodes[classOf(t, p, h.g, gy)])
	assert.Empty(t, p.ClassNodes[classOf(t, p, h.g, hx)])
	require.Len(t, p.ClassNodes[classOf(t, p, h.g, root)], 1)

	_, err := h.problem(t, gy)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "root class x cannot be computed")
}
