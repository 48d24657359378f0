package egraph

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePatternErrors(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{"", "pattern 1:1: unexpected end of pattern"},
		{"(+ ?a", "pattern 1:1: unclosed '('"},
		{"(+ ?a ?b))", "pattern 1:10: unexpected ')' after the pattern"},
		{")", "pattern 1:1: unexpected ')'"},
		{"()", "pattern 1:2: want an operator after '('"},
		{"(?f ?a)", "pattern 1:2: operator position holds variable ?f"},
		{"(+ ? a)", "pattern 1:4: variable without a name"},
		{"(+ a\n   (* b", "pattern 2:4: unclosed '('"},
		{"; only a comment\n", "pattern 2:1: unexpected end of pattern"},
		{"a b", "pattern 1:3: unexpected 'b' after the pattern"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			_, err := ParsePattern(tc.src)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestParsePatternAtomErrors(t *testing.T) {
	atom := func(s string) (Symbol, Payload, error) {
		if s == "bad" {
			return 0, 0, fmt.Errorf("not an operator")
		}
		return Intern(s), 0, nil
	}
	_, err := ParsePatternWith("(f x\n  bad)", atom)
	require.EqualError(t, err, "pattern 2:3: bad: not an operator")
}

func TestParsePatternPrints(t *testing.T) {
	for _, src := range []string{"?a", "x", "(+ ?a (* ?b 2))", "(f (g ?x) ?x (h))"} {
		p, err := ParsePattern(src)
		require.NoError(t, err)
		require.Equal(t, src, p.String())
		again, err := ParsePattern(p.String())
		require.NoError(t, err)
		require.Equal(t, p.nodes, again.nodes)
	}
	p := mathPattern(t, "(+ ?a 7)")
	require.Equal(t, "(+ ?a 7)", p.String(), "a parsed pattern prints as written")
	require.Equal(t, []string{"?a"}, p.Vars())
}

func TestSearch(t *testing.T) {
	g := NewPlain()
	for _, e := range []string{"(+ a a)", "(+ a b)", "(* (+ a b) c)", "(f (g x) x)", "(f (g x) y)"} {
		_, err := g.AddExpr(e)
		require.NoError(t, err)
	}
	g.Rebuild()
	show := func(ms []Match) []string {
		var out []string
		for _, m := range ms {
			s := fmt.Sprint(m.Roots)
			for i, v := range m.Subst {
				s += fmt.Sprintf(" %s=%s", m.vars[i], g.Node(g.ClassNodes(v)[0]))
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	id := func(e string) ClassID {
		c, err := g.AddExpr(e)
		require.NoError(t, err)
		return c
	}
	for _, tc := range []struct {
		pat  string
		want []string
	}{
		{"(+ ?x ?y)", []string{
			fmt.Sprintf("[%d] ?x=a ?y=a", id("(+ a a)")),
			fmt.Sprintf("[%d] ?x=a ?y=b", id("(+ a b)")),
		}},
		{"(+ ?x ?x)", []string{fmt.Sprintf("[%d] ?x=a", id("(+ a a)"))}},
		{"(* (+ ?x b) ?z)", []string{fmt.Sprintf("[%d] ?x=a ?z=c", id("(* (+ a b) c)"))}},
		{"(f (g ?v) ?v)", []string{fmt.Sprintf("[%d] ?v=x", id("(f (g x) x)"))}},
		{"(f ?u y)", []string{fmt.Sprintf("[%d] ?u=(g %d)", id("(f (g x) y)"), id("x"))}},
		{"(nothing ?x)", nil},
		{"c", []string{fmt.Sprintf("[%d]", id("c"))}},
	} {
		t.Run(tc.pat, func(t *testing.T) {
			ms, err := Search(&g.Graph, MustParsePattern(tc.pat))
			require.NoError(t, err)
			require.Equal(t, tc.want, show(ms))
		})
	}
	all, err := Search(&g.Graph, MustParsePattern("?any"))
	require.NoError(t, err)
	require.Len(t, all, g.NumClasses())
	_, err = g.AddExpr("(fresh node)")
	require.NoError(t, err)
	_, err = Search(&g.Graph, MustParsePattern("?any"))
	require.ErrorIs(t, err, ErrNeedsRebuild)
}

func TestMultiPattern(t *testing.T) {
	g := NewPlain()
	for _, e := range []string{"(matmul x w1)", "(matmul x w2)", "(matmul y w3)", "(relu x)"} {
		_, err := g.AddExpr(e)
		require.NoError(t, err)
	}
	g.Rebuild()
	mp, err := ParseMultiPattern("(matmul ?x ?a)", "(matmul ?x ?b)")
	require.NoError(t, err)
	require.Equal(t, []string{"?x", "?a", "?b"}, mp.Vars())
	ms, err := Search(&g.Graph, mp)
	require.NoError(t, err)
	// Every ordered pair of matmuls sharing an input, including a matmul
	// with itself: x has 2x2, y has 1.
	require.Len(t, ms, 5)
	for _, m := range ms {
		require.Len(t, m.Roots, 2)
		require.Equal(t, m.Get("?x"), g.Node(g.ClassNodes(m.Roots[0])[0]).Children[0])
		require.Equal(t, m.Get("?x"), g.Node(g.ClassNodes(m.Roots[1])[0]).Children[0])
	}
	// A later part may be a variable bound earlier, constraining nothing
	// new, or refer back through shared variables only.
	mp2, err := ParseMultiPattern("(relu ?x)", "(matmul ?x ?w)")
	require.NoError(t, err)
	ms, err = Search(&g.Graph, mp2)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	_, err = ParseMultiPattern("(relu ?x)", "?y")
	require.ErrorContains(t, err, "lone variable ?y")
	_, err = ParseMultiPattern("(relu ?x", "?y")
	require.ErrorContains(t, err, "multi-pattern part 1")
}

// TestMultiRewrite merges two matmuls that share an input, Tensat-style:
// both become slices of one matmul against concatenated weights.
func TestMultiRewrite(t *testing.T) {
	g := NewPlain()
	m1, err := g.AddExpr("(matmul x w1)")
	require.NoError(t, err)
	m2, err := g.AddExpr("(matmul x w2)")
	require.NoError(t, err)
	lhs, err := ParseMultiPattern("(matmul ?x ?a)", "(matmul ?x ?b)")
	require.NoError(t, err)
	rw, err := NewRewrite[NoData]("merge-matmul", lhs, []*Pattern{
		MustParsePattern("(slice0 (matmul ?x (concat ?a ?b)))"),
		MustParsePattern("(slice1 (matmul ?x (concat ?a ?b)))"),
	}, func(g *EGraph[NoData], m Match) bool { return m.Get("?a") != m.Get("?b") })
	require.NoError(t, err)
	r := Runner[NoData]{IterLimit: 1}
	_, err = r.Run(t.Context(), g, []*Rewrite[NoData]{rw})
	require.NoError(t, err)
	s0, err := g.AddExpr("(slice0 (matmul x (concat w1 w2)))")
	require.NoError(t, err)
	s1, err := g.AddExpr("(slice1 (matmul x (concat w1 w2)))")
	require.NoError(t, err)
	g.Rebuild()
	require.Equal(t, g.Find(m1), g.Find(s0))
	require.Equal(t, g.Find(m2), g.Find(s1))

	_, err = NewRewrite[NoData]("bad", lhs, []*Pattern{MustParsePattern("?a")})
	require.ErrorContains(t, err, "1 right-side patterns for 2 left-side roots")
}

func TestRewriteValidation(t *testing.T) {
	_, err := ParseRewrite[NoData]("intro", "(+ ?a 0)", "(+ ?a ?b)")
	require.EqualError(t, err, "rule intro: right side (+ ?a ?b) uses ?b, which the left side (+ ?a 0) does not bind")
	_, err = ParseBidirectional[NoData]("drop", "(* ?a 0)", "0")
	require.ErrorContains(t, err, "rule drop-rev: right side (* ?a 0) uses ?a")
	_, err = ParseRewrite[NoData]("", "a", "b")
	require.ErrorContains(t, err, "without a name")
	_, err = ParseRewrite[NoData]("broken", "(+ a", "b")
	require.ErrorContains(t, err, "rule broken: left side: pattern 1:1: unclosed '('")
	_, err = NewFuncRewrite[NoData]("nil", MustParsePattern("a"), nil)
	require.ErrorContains(t, err, "nil applier")
}

func TestFuncRewriteAndConditions(t *testing.T) {
	g := New[constant](constFold{})
	_, err := AddInstance(g, mathPattern(t, "(* (+ x 0) (+ y 3))"), nil)
	require.NoError(t, err)
	// A Go applier: (+ ?a c) with c a known constant becomes (- ?a -c),
	// only where the condition says c is positive.
	plus := mathPattern(t, "(+ ?a ?c)")
	rw, err := NewFuncRewrite[constant]("plus-to-minus", plus,
		func(g *EGraph[constant], m Match) (ClassID, bool) {
			c := g.Data(m.Get("?c"))
			neg := g.MustAdd(Node{Op: opNum, Payload: Payload(uint64(-c.val))})
			return g.MustAdd(Node{Op: opSub, Children: []ClassID{m.Get("?a"), neg}}), true
		},
		func(g *EGraph[constant], m Match) bool {
			d := g.Data(m.Get("?c"))
			return d.ok && d.val > 0
		})
	require.NoError(t, err)
	r := Runner[constant]{IterLimit: 1}
	_, err = r.Run(t.Context(), g, []*Rewrite[constant]{rw})
	require.NoError(t, err)
	want, err := AddInstance(g, mathPattern(t, "(- y -3)"), nil)
	require.NoError(t, err)
	y3, err := AddInstance(g, mathPattern(t, "(+ y 3)"), nil)
	require.NoError(t, err)
	g.Rebuild()
	require.Equal(t, g.Find(y3), g.Find(want))
	notWanted := Node{Op: opSub, Children: []ClassID{g.MustAdd(Node{Op: Intern("x")}), g.MustAdd(Node{Op: opNum})}}
	_, found := g.Lookup(notWanted)
	require.False(t, found, "the condition should have kept (+ x 0) unchanged")

	bad, err := NewFuncRewrite[constant]("bad-class", plus, func(*EGraph[constant], Match) (ClassID, bool) { return 1 << 30, true })
	require.NoError(t, err)
	_, err = r.Run(t.Context(), g, []*Rewrite[constant]{bad})
	require.ErrorContains(t, err, "rule bad-class: applier returned class 1073741824, which does not exist")
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"(+ ?a (* ?b 2))", "?x", "a", "(", ")", "(f\n ; c\n ?x)", "((a))", "(+ ?a ?a)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := ParsePattern(src)
		if err != nil {
			return
		}
		again, err := ParsePattern(p.String())
		if err != nil {
			t.Fatalf("printed pattern %q does not parse: %v", p.String(), err)
		}
		if p.String() != again.String() {
			t.Fatalf("print is not stable: %q then %q", p.String(), again.String())
		}
	})
}

func TestPayloadVariables(t *testing.T) {
	g := NewPlain()
	f, gs := Intern("f"), Intern("g")
	x := g.MustAdd(Node{Op: Intern("x")})
	f1 := g.MustAdd(Node{Op: f, Payload: 1, Children: []ClassID{x}})
	f2 := g.MustAdd(Node{Op: f, Payload: 2, Children: []ClassID{x}})
	h := g.MustAdd(Node{Op: Intern("h"), Children: []ClassID{f1, f2}})
	g.Rebuild()

	p, err := ParsePattern("(f[?p] ?x)")
	require.NoError(t, err)
	require.Equal(t, []string{"?p"}, p.PayloadVars())
	require.Equal(t, "(f[?p] ?x)", p.String())
	ms, err := Search(&g.Graph, p)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	got := map[Payload]ClassID{}
	for _, m := range ms {
		got[m.GetPayload("?p")] = m.Root()
		require.Equal(t, x, m.Get("?x"))
	}
	require.Equal(t, map[Payload]ClassID{1: f1, 2: f2}, got)

	// A repeated payload variable means the same payload.
	same, err := ParsePattern("(h (f[?p] ?x) (f[?p] ?x))")
	require.NoError(t, err)
	ms, err = Search(&g.Graph, same)
	require.NoError(t, err)
	require.Empty(t, ms)
	diff, err := ParsePattern("(h (f[?p] ?x) (f[?q] ?x))")
	require.NoError(t, err)
	ms, err = Search(&g.Graph, diff)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, h, ms[0].Root())
	require.Equal(t, []Payload{1, 2}, ms[0].Payloads)

	// A right side copies payloads.
	rw, err := ParseRewrite[NoData]("f-to-g", "(f[?p] ?x)", "(g[?p] ?x)")
	require.NoError(t, err)
	_, err = (&Runner[NoData]{IterLimit: 2}).Run(t.Context(), g, []*Rewrite[NoData]{rw})
	require.NoError(t, err)
	for pay, c := range map[Payload]ClassID{1: f1, 2: f2} {
		want, ok := g.Lookup(Node{Op: gs, Payload: pay, Children: []ClassID{x}})
		require.True(t, ok, "g[%d] missing", pay)
		require.Equal(t, g.Find(c), want)
	}

	_, err = ParseRewrite[NoData]("bad", "(f[?p] ?x)", "(g[?q] ?x)")
	require.ErrorContains(t, err, "uses payload ?q, which the left side (f[?p] ?x) does not bind")
	_, err = ParsePattern("(f[?x] ?x)")
	require.ErrorContains(t, err, "?x is both a class variable and a payload variable")
	_, err = AddInstance(g, p, []ClassID{x})
	require.ErrorContains(t, err, "payload variables ?p have no values")
	mp, err := ParseMultiPattern("(f[?p] ?x)", "(g[?p] ?x)")
	require.NoError(t, err)
	require.Equal(t, []string{"?p"}, mp.PayloadVars())
	ms, err = Search(&g.Graph, mp)
	require.NoError(t, err)
	require.Len(t, ms, 2, "each f pairs with the g of its own payload")
}

func TestPatternTermRoundTrip(t *testing.T) {
	for _, src := range []string{"?a", "x", "(+ ?a (* ?b 2))", "(f[?p] (g ?x) ?x)"} {
		p := MustParsePattern(src)
		again, err := NewPattern(p.Term())
		require.NoError(t, err)
		require.Equal(t, src, again.String())
	}
}
