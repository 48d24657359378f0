package egraph

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
