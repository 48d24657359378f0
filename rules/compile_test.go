package rules

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/require"
)

// TestBuiltinRulesVerify is the CI check of every built-in rule, Go
// appliers included: each is checked in f32, bf16 and f16.
func TestBuiltinRulesVerify(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	rules, err := Builtin()
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	// The tiling rules over attention and split-K matmuls draw instances
	// whose reference evaluation takes seconds under the race detector:
	// under -short they are checked on 9 instances (3 a dtype; the
	// command's TestRulesCheck draws 3 more), the long test command
	// checks them on the default 20 like every other rule.
	costly := map[string]bool{"kv-blocked-attention": true, "kv-blocked-attention-op": true, "split-k": true, "split-k-fine": true}
	for _, r := range rules {
		t.Run(r.Decl.Name, func(t *testing.T) {
			opt := VerifyOptions{Seed: 7}
			want := 20
			if testing.Short() && costly[r.Decl.Name] {
				opt.Instances, want = 9, 9
			}
			n, cx, err := r.Verify(context.Background(), opt)
			require.NoError(t, err)
			require.Nil(t, cx, "%v", cx)
			require.GreaterOrEqual(t, n.Total(), want)
			for _, dt := range DefaultDTypes {
				require.Positive(t, n[dt], "no %s instance: %s", dt, n)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	f, err := ParseRules("t.rules", []byte("rule a: (add ?x ?y) => @no_such_applier\n"), Atom)
	require.NoError(t, err)
	_, err = Compile(f)
	require.ErrorContains(t, err, "t.rules:1:1: rule a: no Go applier named @no_such_applier is registered")
	f, err = ParseRules("t.rules", []byte("rule a: (add ?x ?y) <=> (add ?y ?x)\nrule a-rev: (mul ?x ?y) => (mul ?y ?x)\n"), Atom)
	require.NoError(t, err)
	_, err = Compile(f)
	require.ErrorContains(t, err, "rule a-rev clashes")
}

// TestSaturatedExtractionsAgree is the e-graph fuzz test for the algebra
// rules: corpus graphs are saturated, and random extractions of the result
// must compute what the original graph computes.
func TestSaturatedExtractionsAgree(t *testing.T) {
	rules, err := Builtin("algebra")
	require.NoError(t, err)
	for _, name := range []string{"tiny-llama:mlp", "tiny-gpt2:attention", "tiny-llama:rmsnorm"} {
		t.Run(name, func(t *testing.T) {
			s := saturate(t, name, true, egraph.Runner[Data]{IterLimit: 4, NodeLimit: 20_000}, Rewrites(rules))
			t.Logf("%s: %d e-nodes, %d e-classes, stop: %s", name, s.eg.NumNodes(), s.eg.NumClasses(), s.report.Stop)
			p := s.problem(t, func(g *egraph.Graph, n egraph.NodeID) float64 {
				if s.eg.Data(g.NodeClass(n)).Valid() {
					return 1
				}
				return math.Inf(1) // ill-typed nodes never execute
			})
			s.requireAgree(t, p, randomSolutions(t, p, 8), 11, false)
		})
	}
}

func TestUnsoundRulesRejected(t *testing.T) {
	src, err := os.ReadFile("testdata/unsound.rules")
	require.NoError(t, err)
	f, err := ParseRules("testdata/unsound.rules", src, Atom)
	require.NoError(t, err)
	rs, err := Compile(f)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	for _, r := range rs {
		_, cx, err := r.Verify(context.Background(), VerifyOptions{Seed: 3})
		require.NoError(t, err)
		require.NotNil(t, cx, "%s passed", r.Decl.Name)
		require.Contains(t, cx.Reason, "values:", "%s is caught by its values", r.Decl.Name)
		require.NotNil(t, cx.Program)
	}
}
