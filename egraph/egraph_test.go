package egraph

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// naiveClosure is the reference for congruence closure: a plain union-find
// over the ids the e-graph handed out, closed under congruence by brute
// force, with no hash-cons and no deferred work.
type naiveClosure struct {
	parent []int
	terms  []naiveTerm
}

type naiveTerm struct {
	op    Symbol
	p     Payload
	kids  []ClassID
	class ClassID
}

func (n *naiveClosure) find(x ClassID) ClassID {
	for n.parent[x] != int(x) {
		x = ClassID(n.parent[x])
	}
	return x
}

func (n *naiveClosure) union(a, b ClassID) bool {
	ra, rb := n.find(a), n.find(b)
	if ra == rb {
		return false
	}
	n.parent[ra] = int(rb)
	return true
}

func (n *naiveClosure) close() {
	for changed := true; changed; {
		changed = false
		byKey := map[string]ClassID{}
		for _, t := range n.terms {
			key := fmt.Sprint(t.op, t.p)
			for _, k := range t.kids {
				key += fmt.Sprint(" ", n.find(k))
			}
			if c, ok := byKey[key]; ok {
				changed = n.union(c, t.class) || changed
			} else {
				byKey[key] = t.class
			}
		}
	}
}

func TestRandomAddsAndUnions(t *testing.T) {
	ops := []Symbol{Intern("f"), Intern("g"), Intern("h")}
	leaves := []Symbol{Intern("a"), Intern("b"), Intern("c")}
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			g := NewPlain()
			ref := &naiveClosure{}
			var ids []ClassID
			add := func(n Node) {
				id, err := g.Add(n)
				require.NoError(t, err)
				for len(ref.parent) < g.NumIDs() {
					ref.parent = append(ref.parent, len(ref.parent))
				}
				ref.terms = append(ref.terms, naiveTerm{n.Op, n.Payload, append([]ClassID(nil), n.Children...), id})
				ids = append(ids, id)
			}
			for range 10 {
				add(Node{Op: leaves[rng.IntN(len(leaves))], Payload: Payload(rng.IntN(3))})
			}
			for step := range 300 {
				switch r := rng.IntN(10); {
				case r < 5:
					arity := 1 + rng.IntN(2)
					kids := make([]ClassID, arity)
					for i := range kids {
						kids[i] = ids[rng.IntN(len(ids))]
					}
					add(Node{Op: ops[rng.IntN(len(ops))], Children: kids})
				case r < 6:
					add(Node{Op: leaves[rng.IntN(len(leaves))], Payload: Payload(rng.IntN(5))})
				case r < 8:
					a, b := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
					g.Union(a, b, fmt.Sprint("step ", step))
					ref.union(a, b)
				default:
					g.Rebuild()
					checkInvariants(t, g)
				}
			}
			g.Rebuild()
			checkInvariants(t, g)
			ref.close()
			classes := map[ClassID]ClassID{} // reference root -> e-graph class
			for id := range g.NumIDs() {
				r, c := ref.find(ClassID(id)), g.Find(ClassID(id))
				if prev, ok := classes[r]; ok {
					require.Equal(t, prev, c, "id %d: reference says equal to class %d", id, prev)
				} else {
					classes[r] = c
				}
			}
			require.Len(t, classes, g.NumClasses(), "the e-graph merged classes the reference keeps apart")
		})
	}
}

func TestRandomWithConstantFolding(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			g := New[constant](constFold{})
			var ids []ClassID
			vars := []Symbol{Intern("x"), Intern("y"), Intern("z")}
			bin := []Symbol{opAdd, opMul, opSub}
			valuation := []int64{rng.Int64N(9) - 4, rng.Int64N(9) - 4, rng.Int64N(9) - 4}
			for range 6 {
				ids = append(ids, g.MustAdd(Node{Op: vars[rng.IntN(3)]}))
				ids = append(ids, g.MustAdd(Node{Op: opNum, Payload: Payload(uint64(rng.Int64N(7) - 3))}))
			}
			for range 200 {
				switch r := rng.IntN(10); {
				case r < 6:
					a, b := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
					ids = append(ids, g.MustAdd(Node{Op: bin[rng.IntN(3)], Children: []ClassID{a, b}}))
				case r < 7:
					// Reveal a variable's value. Only true equalities under
					// one valuation are ever added, so the constants never
					// contradict each other.
					v := rng.IntN(3)
					x := g.MustAdd(Node{Op: vars[v]})
					c := g.MustAdd(Node{Op: opNum, Payload: Payload(uint64(valuation[v]))})
					g.Union(x, c, "assign")
				default:
					g.Rebuild()
				}
			}
			g.Rebuild()
			checkInvariants(t, g)
			require.Equal(t, fromScratch(g), dataMap(g))
		})
	}
}

func TestAddErrors(t *testing.T) {
	g := NewPlain()
	a := g.MustAdd(Node{Op: Intern("a")})
	_, err := g.Add(Node{Op: Intern("f"), Children: []ClassID{a, 99}})
	require.ErrorContains(t, err, "child class 99 does not exist")
	_, err = g.Add(Node{Op: Intern("f"), Children: make([]ClassID, maxArity+1)})
	require.ErrorContains(t, err, "at most 65535")
}

func TestProvenance(t *testing.T) {
	g := NewPlain()
	x, err := g.AddExpr("(* a 2)")
	require.NoError(t, err)
	y, err := g.AddExpr("(<< a 1)")
	require.NoError(t, err)
	z, err := g.AddExpr("(+ a a)")
	require.NoError(t, err)
	shift := MustParseRewrite[NoData]("mul2-to-shift", "(* ?x 2)", "(<< ?x 1)")
	r := Runner[NoData]{}
	_, err = r.Run(t.Context(), g, []*Rewrite[NoData]{shift})
	require.NoError(t, err)
	g.Union(y, z, "told so")
	g.Rebuild()

	why, err := g.Explain(x, z)
	require.NoError(t, err)
	require.Len(t, why, 2)
	require.Equal(t, ByRule, why[0].Kind)
	require.Equal(t, "mul2-to-shift", why[0].Reason)
	a, ok := g.Lookup(Node{Op: Intern("a")})
	require.True(t, ok)
	require.Equal(t, []Binding{{"?x", a}}, why[0].Match)
	require.Equal(t, x, why[0].MatchRoot)
	require.Equal(t, ByCaller, why[1].Kind)
	require.Equal(t, "told so", why[1].Reason)
	require.Contains(t, why[0].String(), `"mul2-to-shift" at class`)

	// Congruence: f(p) and f(q) become equal when p and q do.
	fp, err := g.AddExpr("(f p)")
	require.NoError(t, err)
	fq, err := g.AddExpr("(f q)")
	require.NoError(t, err)
	p, _ := g.Lookup(Node{Op: Intern("p")})
	q, _ := g.Lookup(Node{Op: Intern("q")})
	g.Union(p, q, "p is q")
	g.Rebuild()
	why, err = g.Explain(fp, fq)
	require.NoError(t, err)
	require.Len(t, why, 1)
	require.Equal(t, ByCongruence, why[0].Kind)

	_, err = g.Explain(fp, x)
	require.ErrorContains(t, err, "not equal")
}
