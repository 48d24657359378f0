package extract

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImproveSharing builds the case greedy choices miss: two roots that
// one two-output node computes together (through projections) more
// cheaply than their own nodes do apart, though each alone is cheaper its
// own way.
func TestImproveSharing(t *testing.T) {
	tests := []struct {
		name      string
		pair      float64 // the two-output node's cost
		wantCost  float64
		wantAdopt bool
	}{
		{"sharing pays", 3, 3, true},
		{"sharing does not pay", 5, 4, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandGraph(map[string]float64{"x": 0, "f": 2, "g": 2, "pair": tt.pair, "p0": 0, "p1": 0})
			x := h.add(t, "x", "x")
			_ = x
			f := h.add(t, "f", "(f x)")
			g := h.add(t, "g", "(g x)")
			h.add(t, "pair", "(pair x)")
			h.union(f, h.add(t, "p0", "(p0 (pair x))"))
			h.union(g, h.add(t, "p1", "(p1 (pair x))"))
			p, err := h.problem(t, f, g)
			require.NoError(t, err)
			greedy, gc, err := GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			assert.Equal(t, 4.0, gc, "greedy prices each root alone")
			s, cost, err := Improve(context.Background(), p, greedy)
			require.NoError(t, err)
			require.NoError(t, s.Check(p))
			got, err := s.DAGCost(p)
			require.NoError(t, err)
			assert.Equal(t, got, cost)
			assert.Equal(t, tt.wantCost, cost)
			s2, cost2, err := GreedyImproved(context.Background(), p)
			require.NoError(t, err)
			assert.Equal(t, s.Choice, s2.Choice, "GreedyImproved is GreedyDAG then Improve")
			assert.Equal(t, cost, cost2)
		})
	}
}

// TestImproveReferences runs Improve after GreedyDAG on the smaller
// extraction-gym e-graphs: never worse than greedy, never below the ILP
// optimum where the reference proved one.
func TestImproveReferences(t *testing.T) {
	improved := 0
	for _, ref := range gymReferences(t) {
		if ref.eclasses > 3000 {
			continue
		}
		t.Run(ref.name, func(t *testing.T) {
			p, _, err := FromFile(ref.path, LoadOptions{})
			require.NoError(t, err)
			gs, dag, err := GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			s, cost, err := Improve(context.Background(), p, gs)
			require.NoError(t, err)
			require.NoError(t, s.Check(p))
			got, err := s.DAGCost(p)
			require.NoError(t, err)
			assert.InEpsilon(t, got, cost, 1e-9)
			assert.LessOrEqual(t, cost, dag)
			if ref.ilpOptimal {
				assert.GreaterOrEqual(t, cost, ref.ilpDAG*(1-1e-9), "below the ILP optimum")
			}
			if cost < dag {
				improved++
			}
			t.Logf("greedy %v improved %v (ilp %v)", dag, cost, ref.ilpDAG)
		})
	}
	t.Logf("improved on %d files", improved)
}
