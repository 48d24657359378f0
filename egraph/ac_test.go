package egraph

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// acRules are the rules of the associativity-commutativity check.
func acRules(t testing.TB) []*Rewrite[NoData] {
	comm, err := ParseBidirectional[NoData]("comm", "(+ ?a ?b)", "(+ ?b ?a)")
	require.NoError(t, err)
	assoc, err := ParseBidirectional[NoData]("assoc", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)")
	require.NoError(t, err)
	return append(comm, assoc...)
}

// acTerm is (+ 1 (+ 2 ... (+ n-1 n))).
func acTerm(n int) string {
	s := fmt.Sprint(n)
	for i := n - 1; i >= 1; i-- {
		s = fmt.Sprintf("(+ %d %s)", i, s)
	}
	return s
}

func saturateAC(t testing.TB, n int, sched Scheduler) (*EGraph[NoData], *Report) {
	g, _, rep := saturateACRoot(t, n, sched)
	return g, rep
}

func saturateACRoot(t testing.TB, n int, sched Scheduler) (*EGraph[NoData], ClassID, *Report) {
	g := NewPlain()
	root, err := g.AddExpr(acTerm(n))
	require.NoError(t, err)
	r := Runner[NoData]{IterLimit: 100, NodeLimit: 10_000_000, TimeLimit: 1 << 40, Scheduler: sched}
	rep, err := r.Run(context.Background(), g, acRules(t))
	require.NoError(t, err)
	return g, g.Find(root), rep
}

func TestACSaturation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		terms int
		sched Scheduler
	}{
		{"simple/3", 3, SimpleScheduler{}},
		{"simple/7", 7, SimpleScheduler{}},
		{"backoff/7", 7, NewBackoffScheduler()},
		{"simple/8", 8, SimpleScheduler{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, rep := saturateAC(t, tc.terms, tc.sched)
			require.Equal(t, Saturated, rep.Stop, "report: %+v", rep.Iterations)
			// One class per non-empty subset of the numbers; each subset of
			// size k >= 2 holds 2^k - 2 ordered splits.
			classes, nodes := 0, 0
			for k := 1; k <= tc.terms; k++ {
				c := binom(tc.terms, k)
				classes += c
				if k == 1 {
					nodes += c
				} else {
					nodes += c * (1<<k - 2)
				}
			}
			require.Equal(t, classes, g.NumClasses())
			require.Equal(t, nodes, g.NumNodes())
			checkInvariants(t, g)
		})
	}
}

func binom(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
	}
	return r
}

// checkInvariants verifies the rebuilt e-graph against its definition: every
// listed class is canonical and non-empty, every node's children are
// canonical, the hash-cons maps every node to its class and holds nothing
// else, class nodes are sorted, and no two nodes anywhere are congruent.
func checkInvariants[D any](t testing.TB, g *EGraph[D]) {
	t.Helper()
	type key struct {
		op   Symbol
		p    Payload
		kids string
	}
	seen := map[key]ClassID{}
	total := 0
	for _, c := range g.Classes() {
		if g.Find(c) != c {
			t.Fatalf("listed class %d is not canonical", c)
		}
		nodes := g.ClassNodes(c)
		if len(nodes) == 0 {
			t.Fatalf("class %d is empty", c)
		}
		for i, nid := range nodes {
			n := g.Node(nid)
			if g.NodeClass(nid) != c {
				t.Fatalf("node %v listed in class %d belongs to %d", n, c, g.NodeClass(nid))
			}
			if i > 0 && g.Node(nodes[i-1]).Op > n.Op {
				t.Fatalf("class %d is not sorted", c)
			}
			for _, k := range n.Children {
				if g.Find(k) != k {
					t.Fatalf("node %v has a stale child %d", n, k)
				}
			}
			k := key{n.Op, n.Payload, fmt.Sprint(n.Children)}
			if prev, dup := seen[k]; dup {
				t.Fatalf("node %v in classes %d and %d: congruence not closed", n, prev, c)
			}
			seen[k] = c
			if got, ok := g.Lookup(n); !ok || got != c {
				t.Fatalf("hash-cons gives %d, %v for %v of class %d", got, ok, n, c)
			}
			total++
		}
	}
	require.Equal(t, total, g.NumNodes())
	require.Equal(t, g.table.n, g.NumNodes(), "hash-cons holds stale entries")
}
