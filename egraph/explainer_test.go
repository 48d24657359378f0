package egraph

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplainerAgreesWithExplain: over random unions of random leaves (and
// the congruences they imply between f-nodes), every pair of ids the
// Explainer is asked about gets the records Graph.Explain finds, and ids
// of different classes are an error.
func TestExplainerAgreesWithExplain(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for round := range 5 {
		g := NewPlain()
		var ids []ClassID
		for i := range 40 {
			leaf := g.MustAdd(Node{Op: Intern(fmt.Sprintf("x%d", i))})
			ids = append(ids, leaf, g.MustAdd(Node{Op: Intern("f"), Children: []ClassID{leaf}}))
		}
		for i := range 30 {
			a, b := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
			g.Union(a, b, fmt.Sprintf("u%d", i))
			if rng.IntN(4) == 0 {
				g.Rebuild()
			}
		}
		g.Rebuild()
		e := g.Explainer()
		checked := 0
		for i := range 2000 {
			a, b := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
			if i%2 == 0 {
				// Mostly pairs of one class.
				for _, c := range rng.Perm(len(ids)) {
					if g.Find(ids[c]) == g.Find(a) && ids[c] != a {
						b = ids[c]
						break
					}
				}
			}
			want, wantErr := g.Explain(a, b)
			got, err := e.Explain(a, b)
			if wantErr != nil {
				require.Error(t, err, "round %d: %d = %d", round, a, b)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, want, got, "round %d: %d = %d", round, a, b)
			checked++
		}
		require.Greater(t, checked, 50, "round %d: enough equal pairs", round)
	}
}

// TestMadeBy: the nodes a rule's right side added name that rule's union;
// a node added before any rule ran names none.
func TestMadeBy(t *testing.T) {
	g := NewPlain()
	x, err := g.AddExpr("(* a 2)")
	require.NoError(t, err)
	before := g.NumNodeIDs()
	shift := MustParseRewrite[NoData]("mul2-to-shift", "(* ?x 2)", "(<< ?x (one))")
	_, err = (&Runner[NoData]{}).Run(t.Context(), g, []*Rewrite[NoData]{shift})
	require.NoError(t, err)
	require.Greater(t, g.NumNodeIDs(), before+1, "the right side added (one) and the shift")
	for n := range g.NumNodeIDs() {
		i, ok := g.MadeBy(NodeID(n))
		if n < before {
			assert.False(t, ok, "node %d is the graph's", n)
			continue
		}
		require.True(t, ok, "node %d", n)
		r := g.UnionAt(i)
		assert.Equal(t, "mul2-to-shift", r.Reason)
		assert.Equal(t, g.Find(x), g.Find(r.A))
	}
}
