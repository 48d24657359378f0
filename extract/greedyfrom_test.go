package extract

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGreedyFrom completes partial solutions of the shared-subterm problem
// ((pair (f s) (g s)), where greedy alone takes a and b): preset classes
// keep their nodes, the others are chosen greedily around them, and preset
// choices that cannot make a program are errors.
func TestGreedyFrom(t *testing.T) {
	p, g := exactSharedGraph(t)
	node := func(op string) int32 {
		for i, id := range p.NodeIDs {
			if g.Node(id).Op.String() == op {
				return int32(i)
			}
		}
		t.Fatalf("no %s node", op)
		return -1
	}
	tests := []struct {
		name   string
		preset map[string]string // the classes' operator to keep
		cost   float64
		ops    []string // the operators of the needed classes' choices
		err    string
	}{
		{"nothing preset: greedy", nil, 15, []string{"pair", "a", "b"}, ""},
		{"one reader of s", map[string]string{"f": "f"}, 19, []string{"pair", "f", "s", "b"}, ""},
		{"both readers of s", map[string]string{"f": "f", "g": "g"}, 13, []string{"pair", "f", "g", "s"}, ""},
		{"a node of another class", map[string]string{"f": "g"}, 0, nil, "another class"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			partial := NewSolution(p)
			for class, op := range tt.preset {
				partial.Choice[p.Nodes[node(class)].Class] = node(op)
			}
			sol, cost, err := GreedyFrom(context.Background(), p, partial)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, sol.Check(p))
			assert.Equal(t, tt.cost, cost)
			var ops []string
			for _, n := range sol.Choice {
				if n >= 0 {
					ops = append(ops, g.Node(p.NodeIDs[n]).Op.String())
				}
			}
			assert.ElementsMatch(t, tt.ops, ops)
		})
	}
}

// TestGreedyFromCycle presets choices that read each other in a cycle
// (A = {a, (f B)}, B = {b, (g A)}, A taking (f B) and B taking (g A)):
// neither can be computed, so the root cannot, an error.
func TestGreedyFromCycle(t *testing.T) {
	g := egraph.NewPlain()
	a, b := exactAdd(t, g, "a"), exactAdd(t, g, "b")
	fb, ga := exactAdd(t, g, "(f b)"), exactAdd(t, g, "(g a)")
	g.Union(a, fb, "A")
	g.Union(b, ga, "B")
	g.Rebuild()
	root := exactAdd(t, g, "(r a)")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{root}, exactOpCosts(nil), nil)
	require.NoError(t, err)
	partial := NewSolution(p)
	for i, id := range p.NodeIDs {
		if op := g.Node(id).Op.String(); op == "f" || op == "g" {
			partial.Choice[p.Nodes[i].Class] = int32(i)
		}
	}
	_, _, err = GreedyFrom(context.Background(), p, partial)
	require.ErrorContains(t, err, "cannot be computed")
	// Without the presets the leaves make a program.
	_, cost, err := GreedyFrom(context.Background(), p, NewSolution(p))
	require.NoError(t, err)
	assert.Equal(t, 2.0, cost)
}
