package egraph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test language for analyses and the math workload: integer constants
// are the operator "num" with the value in the payload; everything else is
// a plain symbol.
var (
	opNum = Intern("num")
	opAdd = Intern("+")
	opMul = Intern("*")
	opSub = Intern("-")
)

func mathAtom(tok string) (Symbol, Payload, error) {
	if v, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return opNum, Payload(uint64(v)), nil
	}
	return Intern(tok), 0, nil
}

func mathPattern(t testing.TB, src string) *Pattern {
	p, err := ParsePatternWith(src, mathAtom)
	require.NoError(t, err)
	return p
}

// constant is the constant-folding analysis's data: the class's value, if
// it is known to be a constant.
type constant struct {
	val int64
	ok  bool
}

type constFold struct{}

func (constFold) Make(g *EGraph[constant], n Node) constant {
	if n.Op == opNum {
		return constant{int64(n.Payload), true}
	}
	if len(n.Children) != 2 {
		return constant{}
	}
	a, b := g.Data(n.Children[0]), g.Data(n.Children[1])
	if !a.ok || !b.ok {
		return constant{}
	}
	switch n.Op {
	case opAdd:
		return constant{a.val + b.val, true}
	case opMul:
		return constant{a.val * b.val, true}
	case opSub:
		return constant{a.val - b.val, true}
	}
	return constant{}
}

func (constFold) Merge(to *constant, from constant) DidMerge {
	switch {
	case to.ok && from.ok:
		if to.val != from.val {
			panic("constant folding merged two different constants: an unsound rule")
		}
		return DidMerge{}
	case to.ok:
		return DidMerge{From: true}
	case from.ok:
		*to = from
		return DidMerge{To: true}
	}
	return DidMerge{}
}

func (constFold) Modify(g *EGraph[constant], id ClassID) {
	if d := g.Data(id); d.ok {
		c := g.MustAdd(Node{Op: opNum, Payload: Payload(uint64(d.val))})
		g.Union(id, c, "constant folding")
	}
}

func mathRules(t testing.TB) []*Rewrite[constant] {
	var rules []*Rewrite[constant]
	add := func(name, lhs, rhs string) {
		r, err := NewRewrite[constant](name, mathPattern(t, lhs), []*Pattern{mathPattern(t, rhs)})
		require.NoError(t, err)
		rules = append(rules, r)
	}
	add("comm-add", "(+ ?a ?b)", "(+ ?b ?a)")
	add("comm-mul", "(* ?a ?b)", "(* ?b ?a)")
	add("assoc-add", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)")
	add("assoc-mul", "(* ?a (* ?b ?c))", "(* (* ?a ?b) ?c)")
	add("sub-canon", "(- ?a ?b)", "(+ ?a (* -1 ?b))")
	add("zero-add", "(+ ?a 0)", "?a")
	add("zero-mul", "(* ?a 0)", "0")
	add("one-mul", "(* ?a 1)", "?a")
	add("cancel-sub", "(- ?a ?a)", "0")
	add("distribute", "(* ?a (+ ?b ?c))", "(+ (* ?a ?b) (* ?a ?c))")
	add("factor", "(+ (* ?a ?b) (* ?a ?c))", "(* ?a (+ ?b ?c))")
	return rules
}

// mathStarts are the start terms of the math-simplification workload.
var mathStarts = []string{
	"(+ (* x (+ 2 y)) (- (* 3 x) (* x y)))",
	"(* (+ a 1) (- a 1))",
	"(- (* (+ x 1) (+ x 1)) (* x x))",
	"(+ (* 2 (+ a b)) (* (- 4 2) (- c a)))",
}

func runMath(t testing.TB, nodeLimit int, sched Scheduler) (*EGraph[constant], []ClassID, *Report) {
	g := New[constant](constFold{})
	var roots []ClassID
	for _, s := range mathStarts {
		id, err := AddInstance(g, mathPattern(t, s), nil)
		require.NoError(t, err)
		roots = append(roots, id)
	}
	r := Runner[constant]{IterLimit: 1000, NodeLimit: nodeLimit, TimeLimit: time.Hour, Scheduler: sched}
	rep, err := r.Run(context.Background(), g, mathRules(t))
	require.NoError(t, err)
	return g, roots, rep
}

// fromScratch computes the constant-folding data of every class as the
// least fixed point of Make and Merge over the class's nodes.
func fromScratch(g *EGraph[constant]) map[ClassID]constant {
	data := map[ClassID]constant{}
	for changed := true; changed; {
		changed = false
		for _, c := range g.Classes() {
			for _, nid := range g.ClassNodes(c) {
				n := g.Node(nid)
				var d constant
				if n.Op == opNum {
					d = constant{int64(n.Payload), true}
				} else if len(n.Children) == 2 {
					a, b := data[n.Children[0]], data[n.Children[1]]
					if a.ok && b.ok {
						switch n.Op {
						case opAdd:
							d = constant{a.val + b.val, true}
						case opMul:
							d = constant{a.val * b.val, true}
						case opSub:
							d = constant{a.val - b.val, true}
						}
					}
				}
				if d.ok && !data[c].ok {
					data[c] = d
					changed = true
				}
			}
		}
	}
	return data
}

func TestConstantFolding(t *testing.T) {
	g := New[constant](constFold{})
	x, err := AddInstance(g, mathPattern(t, "(+ (* 3 4) (- 10 8))"), nil)
	require.NoError(t, err)
	g.Rebuild()
	require.Equal(t, constant{14, true}, g.Data(x))
	fourteen, ok := g.Lookup(Node{Op: opNum, Payload: 14})
	require.True(t, ok)
	require.Equal(t, g.Find(x), fourteen)

	// Data flows up through unions made later: y + 1 becomes constant once
	// y is known to be 5.
	y, err := AddInstance(g, mathPattern(t, "y"), nil)
	require.NoError(t, err)
	y1, err := AddInstance(g, mathPattern(t, "(+ y 1)"), nil)
	require.NoError(t, err)
	require.False(t, g.Data(y1).ok)
	five, err := AddInstance(g, mathPattern(t, "5"), nil)
	require.NoError(t, err)
	g.Union(y, five, "test: y is 5")
	g.Rebuild()
	require.Equal(t, constant{6, true}, g.Data(y1))
	six, ok := g.Lookup(Node{Op: opNum, Payload: 6})
	require.True(t, ok)
	require.Equal(t, g.Find(y1), six)
	checkInvariants(t, g)
	require.Equal(t, fromScratch(g), dataMap(g))
}

func dataMap(g *EGraph[constant]) map[ClassID]constant {
	m := map[ClassID]constant{}
	for _, c := range g.Classes() {
		if d := g.Data(c); d.ok {
			m[c] = d
		}
	}
	return m
}

func TestMathWorkload(t *testing.T) {
	g, roots, rep := runMath(t, 20_000, nil)
	require.Contains(t, []StopReason{Saturated, NodeLimit, IterationLimit}, rep.Stop)
	checkInvariants(t, g)
	require.Equal(t, fromScratch(g), dataMap(g))
	// (- (* (+ x 1) (+ x 1)) (* x x)) is 2x + 1.
	twoX1, err := AddInstance(g, mathPattern(t, "(+ (* 2 x) 1)"), nil)
	require.NoError(t, err)
	g.Rebuild()
	require.Equal(t, g.Find(roots[2]), g.Find(twoX1), "(x+1)^2 - x^2 = 2x+1 not found")
}

// randomTerms returns n seeded random arithmetic terms over 64 variables
// and small constants, for workloads that grow wide rather than deep.
func randomTerms(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 3))
	var term func(depth int) string
	term = func(depth int) string {
		if depth == 0 || rng.IntN(4) == 0 {
			if rng.IntN(3) == 0 {
				return strconv.Itoa(rng.IntN(5) - 1)
			}
			return fmt.Sprintf("x%d", rng.IntN(64))
		}
		op := []string{"+", "*", "-"}[rng.IntN(3)]
		return fmt.Sprintf("(%s %s %s)", op, term(depth-1), term(depth-1))
	}
	out := make([]string, n)
	for i := range out {
		out[i] = term(5)
	}
	return out
}
