package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
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
