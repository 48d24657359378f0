package rules

import (
	"context"
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

func side(t *testing.T, srcs ...string) Side {
	t.Helper()
	var s Side
	for _, src := range srcs {
		p, err := egraph.ParsePatternWith(src, Atom)
		require.NoError(t, err)
		s = append(s, p)
	}
	return s
}

func TestVerifySoundRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lhs, rhs string
		cond     func(Facts) bool
	}{
		{"comm-add", "(add ?a ?b)", "(add ?b ?a)", nil},
		{"assoc-mul", "(mul ?a (mul ?b ?c))", "(mul (mul ?a ?b) ?c)", nil},
		{"distribute", "(mul ?a (add ?b ?c))", "(add (mul ?a ?b) (mul ?a ?c))", nil},
		{"recip-recip", "(recip (recip ?a))", "?a", nil},
		{"matmul-assoc", "(matmul (matmul ?a ?b) ?c)", "(matmul ?a (matmul ?b ?c))", nil},
		{"sum-add", "(sum[?p] (add ?a ?b))", "(add (sum[?p] ?a) (sum[?p] ?b))", nil},
		{"mul-one", "(mul ?a ?one)", "?a", func(f Facts) bool { c, ok := f.Const("?one"); return ok && c == 1 }},
		{"permute-permute-id", "(permute[perm=[1,0]] (permute[perm=[1,0]] ?a))", "?a", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, cx, err := VerifyRule(context.Background(), tc.name, side(t, tc.lhs), side(t, tc.rhs), tc.cond, VerifyOptions{Seed: 1})
			require.NoError(t, err)
			require.Nil(t, cx, "%v", cx)
			require.Equal(t, 20, n.Total())
		})
	}
}

func TestVerifyRejectsUnsoundRules(t *testing.T) {
	for _, tc := range []struct {
		name, lhs, rhs string
		why            string
	}{
		{"blatant", "(sub ?a ?b)", "(sub ?b ?a)", "values"},
		{"exp-add", "(exp (add ?a ?b))", "(add (exp ?a) (exp ?b))", "values"},
		// A subtly wrong permutation composition: [1,2,0] twice is [2,0,1],
		// not the identity.
		{"perm-compose", "(permute[perm=[1,2,0]] (permute[perm=[1,2,0]] ?a))", "?a", ""},
		{"sum-drop", "(sum[axis=0] ?a)", "?a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cx, err := VerifyRule(context.Background(), tc.name, side(t, tc.lhs), side(t, tc.rhs), nil, VerifyOptions{Seed: 1})
			require.NoError(t, err)
			require.NotNil(t, cx, "an unsound rule passed")
			require.Contains(t, cx.String(), "rule "+tc.name+" is unsound")
			if tc.why != "" {
				require.Contains(t, cx.Reason, tc.why)
			}
		})
	}
}

func TestVerifyNeedsInstances(t *testing.T) {
	_, _, err := VerifyRule(context.Background(), "never", side(t, "(add ?a ?b)"), side(t, "(add ?b ?a)"),
		func(Facts) bool { return false }, VerifyOptions{Seed: 1, Attempts: 50})
	require.ErrorContains(t, err, "only 0 valid instances")
}

// Go appliers that are wrong, to show the verifier checks Go rules: one
// returns the wrong operand, one a class of another shape, one declines
// everything.
func init() {
	RegisterApplier("test_first_operand", func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
		return m.Get("?a"), true
	})
	RegisterApplier("test_operand_of_sum", func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
		return m.Get("?x"), true
	})
	RegisterApplier("test_decline", func(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
		return 0, false
	})
}

// oneRule compiles the one rule of src.
func oneRule(t *testing.T, src string) *Rule {
	t.Helper()
	f, err := ParseRules("t.rules", []byte(src), Atom)
	require.NoError(t, err)
	rs, err := Compile(f)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	return rs[0]
}

func TestVerifyGoRules(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		reason    string // "" for a sound rule
		err       string
		dts       []ir.DType
	}{
		{name: "sound applier", src: "rule pc: (permute[?p] (permute[?q] ?x)) => @permute_compose\n"},
		// The e-graph's analysis sees constants differ before the values do.
		{name: "wrong operand", src: "rule first: (sub ?a ?b) => @test_first_operand\n", reason: "merged classes of different types: f32[4,4] (const true: 0) versus f32[4,4] (const true: -2)"},
		{name: "wrong operand, bf16 values", src: "rule first: (div ?a ?b) => @test_first_operand\n", reason: "bf16 typical values:", dts: []ir.DType{ir.BF16}},
		{name: "another shape", src: "rule drop-sum: (sum[?p] ?x) => @test_operand_of_sum\n", reason: "merged classes of different types"},
		{name: "declines every instance", src: "rule never: (add ?a ?b) => @test_decline\n", err: "only 0 valid instances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, cx, err := oneRule(t, tc.src).Verify(context.Background(), VerifyOptions{Seed: 5, Instances: 6, DTypes: tc.dts})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if tc.reason == "" {
				require.Nil(t, cx, "%v", cx)
				require.Equal(t, 6, n.Total())
				return
			}
			require.NotNil(t, cx, "an unsound Go rule passed")
			require.Contains(t, cx.Reason, tc.reason)
			require.NotNil(t, cx.Program)
		})
	}
}

func TestCondExtents(t *testing.T) {
	for _, tc := range []struct {
		cond string
		want []extent
	}{
		{"shape(?a)[-1] >= 2048 and not weightonly(?a)", []extent{{-1, []ir.Dim{2048, 3072, 4096}}}},
		{"shape(?b)[-1] >= 512 and shape(?b)[-1] % 256 == 0", []extent{{-1, []ir.Dim{512, 768, 1024}}}},
		{"shape(?a)[-2] >= 600 and shape(?b)[-2] % 256 == 0", []extent{{-2, []ir.Dim{768, 1024, 1280}}}},
		{"2048 <= shape(?a)[0]", []extent{{0, []ir.Dim{2048, 3072, 4096}}}},
		{"shape(?a)[1] > 100 and shape(?a)[1] % 3 == 0 and shape(?a)[1] % 2 == 0", []extent{{1, []ir.Dim{102, 156, 204}}}},
		{"shape(?a)[-1] == 64", []extent{{-1, []ir.Dim{64, 96, 128}}}},
		{"shape(?a)[0] >= 8 and shape(?b)[-1] >= 16", []extent{{0, []ir.Dim{8, 12, 16}}, {-1, []ir.Dim{16, 24, 32}}}},
		{"shape(?a)[0] == shape(?a)[1]", nil},
		{"shape(?a)[-1] >= 3", nil},
		{"shape(?a)[-1] <= 4096", nil},
		{"rank(?a) == 2", nil},
	} {
		t.Run(tc.cond, func(t *testing.T) {
			r := oneRule(t, "rule r: (add ?a ?b) => (add ?b ?a)\n    if "+tc.cond+"\n")
			require.NotNil(t, r.Decl.Cond)
			require.Equal(t, tc.want, condExtents(r.Decl.Cond))
		})
	}
	require.Nil(t, condExtents(nil))
}

func TestRoundingsOf(t *testing.T) {
	b := ir.NewBuilder("roundings")
	a := b.Input("a", ir.BF16, 2, 4)
	w := b.Weight("w", ir.BF16, 4, 3)
	mm := b.MatMul(a, w)                                                       // computed: its own bf16 rounding, nothing before
	view := b.Reshape(mm, 3, 2)                                                // a copy keeps the matmul's
	wide := b.Cast(view, ir.F32)                                               // a widening cast adds f32's to bf16's
	sum := b.Sum(wide, 1)                                                      // f32, after the matmul's bf16
	sel := b.Max(wide, b.Neg(wide))                                            // max and neg select: |x| in f32 of bf16
	acc := b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, a, w)                 // f32 accumulator of bf16 operands
	back := b.Cast(acc, ir.BF16)                                               // narrowed once: bf16 own, nothing before
	q := b.Input("q", ir.BF16, 1, 1, 2, 4)                                     //
	att := b.Attention(q, q, q, 0.5, false, 0)                                 // the tensor cores' bf16 P before its own
	mask := b.Binary(ir.OpGe, b.Input("m", ir.F32, 2, 3), b.Scalar(ir.F32, 0)) // exact
	for _, v := range []ir.Value{sum, sel, back, att, mask} {
		b.Output(fmt.Sprint(v), v)
	}
	g, err := b.Build()
	require.NoError(t, err)
	r := roundingsOf(g)
	bf, f := ir.BF16.Eps(), ir.F32.Eps()
	for _, tc := range []struct {
		name        string
		v           ir.Value
		own, before float64
	}{
		{"leaf", a, 0, 0},
		{"matmul", mm, bf, 0},
		{"view", view, bf, 0},
		{"widening cast", wide, bf, 0},
		{"sum", sum, f, bf},
		{"max of neg", sel, bf, 0},
		{"f32 accumulator", acc, f, 0},
		{"narrowed", back, bf, 0},
		{"attention", att, bf, bf},
		{"comparison", mask, 0, f},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.own, r.own[tc.v], "own")
			require.Equal(t, tc.before, r.before[tc.v], "before")
		})
	}
}

// TestJudgeSplitsTheOwnRounding: an error well within the path allowance
// of a bf16 matmul (a bf16 rounding of the terms' magnitude) but beyond a
// bf16 rounding of the result fails, when nothing is rounded before the
// matmul; with a bf16 value before it, it passes.
func TestJudgeSplitsTheOwnRounding(t *testing.T) {
	b := ir.NewBuilder("judge")
	x := b.Input("x", ir.BF16, 1, 2)
	y := b.Input("y", ir.BF16, 2, 1)
	direct := b.MatMul(x, y)
	after := b.MatMul(b.Exp(x), y)
	b.Output("direct", direct)
	b.Output("after", after)
	g, err := b.Build()
	require.NoError(t, err)
	r := roundingsOf(g)
	tensor := func(v ...float64) *ir.Tensor { return &ir.Tensor{DType: ir.BF16, Shape: ir.Shape{1, 1}, F64: v} }
	want, mag, got := tensor(0.01), tensor(10), tensor(0.05)
	path, err := ir.CompareWithin(got, want, mag, g.Allowance(direct, ir.PathEps(g), 2))
	require.NoError(t, err)
	require.Nil(t, path, "the path allowance holds the error")
	for _, tc := range []struct {
		name    string
		v       ir.Value
		excused func(int64) bool
		fails   bool
	}{
		{"nothing rounded before", direct, nil, true},
		{"excused", direct, func(int64) bool { return true }, false},
		{"a bf16 value before", after, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm, err := r.judge(g, tc.v, got, want, mag, 2, tc.excused)
			require.NoError(t, err)
			require.Equal(t, tc.fails, mm != nil, "%v", mm)
			ok, err := r.within(g, tc.v, got, want, mag, 2)
			require.NoError(t, err)
			require.Equal(t, []bool{tc.v != direct}, ok)
		})
	}
}

func TestDrawn(t *testing.T) {
	d := Drawn{ir.F16: 2, ir.F32: 5, ir.BF16: 0, ir.I32: 1}
	require.Equal(t, 8, d.Total())
	require.Equal(t, "f32 5, f16 2, i32 1", d.String())
	require.Equal(t, "", Drawn{}.String())
}
