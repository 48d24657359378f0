package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// describe prints a rule on one line: where it starts, its name, its sides
// as written and its condition as parsed.
func describe(r *RuleDecl) string {
	arrow := "=>"
	if r.TwoWay {
		arrow = "<=>"
	}
	s := fmt.Sprintf("%s %s: %s %s %s", r.Pos, r.Name, r.LHSText, arrow, r.RHSText)
	if r.Cond != nil {
		s += " if " + r.Cond.String()
	}
	return s
}

// sideText prints patterns as RuleDecl's LHSText and RHSText do.
func sideText(pats []*egraph.Pattern) string {
	s := make([]string, len(pats))
	for i, p := range pats {
		s[i] = strings.Join(strings.Fields(p.String()), " ")
	}
	return strings.Join(s, ", ")
}

func TestParseRules(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{name: "empty"},
		{name: "only comments", src: "# a\n; b\n\n   # indented comment\n"},
		{
			name: "every feature",
			src: `# comments start with # or ; and run to the end of the line
rule comm-add: (add ?a ?b) => (add ?b ?a)
rule assoc-add: (add ?a (add ?b ?c)) <=> (add (add ?a ?b) ?c)
rule mul-one: (mul ?a ?one) => ?a
    if const(?one) == 1 and dtype(?a) == f32
rule sum-of-expand: (sum[?p] (expand[?q] ?x)) => @sum_of_expand
    if axis(?p) == axis(?q) ; a Go applier, registered by name
rule merge-matmuls: (matmul ?x ?w1), (matmul ?x ?w2) => @merge_matmuls
    if shape(?w1)[-2] == shape(?w2)[-2] and shape(?x)[-1] % 16 == 0
`,
			want: []string{
				"t.rules:2:1 comm-add: (add ?a ?b) => (add ?b ?a)",
				"t.rules:3:1 assoc-add: (add ?a (add ?b ?c)) <=> (add (add ?a ?b) ?c)",
				"t.rules:4:1 mul-one: (mul ?a ?one) => ?a if const(?one) == 1 and dtype(?a) == f32",
				"t.rules:6:1 sum-of-expand: (sum[?p] (expand[?q] ?x)) => @sum_of_expand if axis(?p) == axis(?q)",
				"t.rules:8:1 merge-matmuls: (matmul ?x ?w1), (matmul ?x ?w2) => @merge_matmuls if shape(?w1)[-2] == shape(?w2)[-2] and shape(?x)[-1] % 16 == 0",
			},
		},
		{
			name: "wrapped patterns and conditions",
			src: `rule distribute: (add
        (mul ?a ?b)   ; the first product
        (mul ?a ?c))
# a comment line inside a rule is skipped
    => (mul ?a
        (add ?b ?c))
    if dtype(?a) == dtype(?b)
	and rank(?a) <= 4
rule next:(neg (neg ?x))=>?x
`,
			want: []string{
				"t.rules:1:1 distribute: (add (mul ?a ?b) (mul ?a ?c)) => (mul ?a (add ?b ?c)) if dtype(?a) == dtype(?b) and rank(?a) <= 4",
				"t.rules:9:1 next: (neg (neg ?x)) => ?x",
			},
		},
		{
			name: "CRLF line endings and tabs",
			src:  "rule a: (f ?x) => ?x\r\n\tif rank(?x) == 0\r\n\r\nrule b: ?x => (g ?x)\r\n",
			want: []string{
				"t.rules:1:1 a: (f ?x) => ?x if rank(?x) == 0",
				"t.rules:4:1 b: ?x => (g ?x)",
			},
		},
		{
			name: "multi-pattern right sides",
			src: `rule pair: (neg ?x), (exp ?x) => (neg2 ?x), (exp2 ?x)
rule pair.rev_2: (f ?x ?y), (g ?y) <=> (h ?y ?x), (k ?x ?y)
`,
			want: []string{
				"t.rules:1:1 pair: (neg ?x), (exp ?x) => (neg2 ?x), (exp2 ?x)",
				"t.rules:2:1 pair.rev_2: (f ?x ?y), (g ?y) <=> (h ?y ?x), (k ?x ?y)",
			},
		},
		{
			name: "commas and arrows inside brackets and parentheses",
			src: `rule r1: (reshape[to=[2,3]] ?x), (slice[a=>b] ?x) => (f[1,2] ?x), ?x
rule r2: (if ?c ?a ?b) => ?a
rule r3: (sum[?p] (neg ?x)) => (neg (sum[?p] ?x))
`,
			want: []string{
				"t.rules:1:1 r1: (reshape[to=[2,3]] ?x), (slice[a=>b] ?x) => (f[1,2] ?x), ?x",
				"t.rules:2:1 r2: (if ?c ?a ?b) => ?a",
				"t.rules:3:1 r3: (sum[?p] (neg ?x)) => (neg (sum[?p] ?x))",
			},
		},
		{
			name: "applier with empty parentheses and weightonly",
			src: `rule w: (matmul ?x ?w) => @prepare()
    if weightonly(?w) and not weightonly(?x)
`,
			want: []string{"t.rules:1:1 w: (matmul ?x ?w) => @prepare() if weightonly(?w) and not weightonly(?x)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := ParseRules("t.rules", []byte(tc.src), egraph.DefaultAtom)
			require.NoError(t, err)
			require.Equal(t, "t.rules", rf.Name)
			var got []string
			for _, r := range rf.Rules {
				got = append(got, describe(r))
				assert.Equal(t, r.LHSText, sideText(r.LHS), "%s: LHSText and LHS differ", r.Name)
				if r.Applier == "" {
					assert.Equal(t, r.RHSText, sideText(r.RHS), "%s: RHSText and RHS differ", r.Name)
					assert.Len(t, r.RHS, len(r.LHS))
				} else {
					assert.True(t, strings.HasPrefix(r.RHSText, "@"+r.Applier), r.RHSText)
					assert.Nil(t, r.RHS)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestParseRulesAST checks one rule's AST field by field.
func TestParseRulesAST(t *testing.T) {
	src := "\nrule merge-matmuls: (matmul ?x ?w1),\n  (matmul ?x ?w2) => @merge_matmuls\n  if shape(?x)[-1] % 16 == 0\n"
	rf, err := ParseRules("m.rules", []byte(src), nil)
	require.NoError(t, err)
	require.Len(t, rf.Rules, 1)
	r := rf.Rules[0]
	require.Equal(t, "merge-matmuls", r.Name)
	require.Equal(t, Pos{"m.rules", 2, 1}, r.Pos)
	require.Equal(t, "m.rules:2:1", r.Pos.String())
	require.Len(t, r.LHS, 2)
	require.Equal(t, []string{"?x", "?w1"}, r.LHS[0].Vars())
	require.Equal(t, []string{"?x", "?w2"}, r.LHS[1].Vars())
	require.Nil(t, r.RHS)
	require.Equal(t, "merge_matmuls", r.Applier)
	require.False(t, r.TwoWay)
	require.Equal(t, "(matmul ?x ?w1), (matmul ?x ?w2)", r.LHSText)
	require.Equal(t, "@merge_matmuls", r.RHSText)
	require.Equal(t, &Cond{
		Pos:  Pos{"m.rules", 4, 6},
		Text: "shape(?x)[-1] % 16 == 0",
		Cmps: []*Cmp{{
			Pos: Pos{"m.rules", 4, 6},
			Op:  CmpEq,
			Left: &Expr{Kind: ExprMod, Pos: Pos{"m.rules", 4, 6},
				X: &Expr{Kind: ExprDim, Pos: Pos{"m.rules", 4, 6}, Var: "?x", Index: -1},
				Y: &Expr{Kind: ExprInt, Pos: Pos{"m.rules", 4, 22}, Int: 16},
			},
			Right: &Expr{Kind: ExprInt, Pos: Pos{"m.rules", 4, 28}, Int: 0},
		}},
	}, r.Cond)
}

func TestParseRulesErrors(t *testing.T) {
	badAtom := func(s string) (egraph.Symbol, egraph.Payload, error) {
		if s == "bad" {
			return 0, 0, fmt.Errorf("not an operator")
		}
		return egraph.Intern(s), 0, nil
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"missing colon", "rule comm-add (add ?a ?b) => (add ?b ?a)",
			"t.rules:1:15: missing ':' after rule name comm-add"},
		{"missing name", "rule : ?x => ?x",
			"t.rules:1:6: missing rule name after 'rule'"},
		{"bad character in name", "rule a+b: ?x => ?x",
			"t.rules:1:7: missing ':' after rule name a"},
		{"not a rule", "rul x: ?x => ?x",
			"t.rules:1:1: want a rule: rule NAME: LHS => RHS"},
		{"unknown arrow", "rule r: (add ?a ?b) -> (add ?b ?a)",
			"t.rules:1:21: unknown arrow -> (want => or <=>)"},
		{"long arrow", "rule r: (add ?a ?b) ==> (add ?b ?a)",
			"t.rules:1:21: unknown arrow ==> (want => or <=>)"},
		{"missing arrow", "rule r: (add ?a ?b)",
			"t.rules:1:20: missing => or <=> after the left side"},
		{"condition before the arrow", "rule r: (add ?a ?b) if rank(?a) == 1",
			"t.rules:1:21: missing => or <=> after the left side"},
		{"second arrow", "rule r: (f ?a) => (g ?a) => ?a",
			"t.rules:1:26: a second arrow =>: a rule has one"},
		{"comma inside a pattern", "rule r: (add ?a,\n  ?b) => (add ?b ?a)",
			"t.rules:1:16: ',' inside a pattern: operands are separated by spaces, and ',' separates the patterns of a multi-pattern"},
		{"missing left side", "rule r: => ?a",
			"t.rules:1:9: missing left side before =>"},
		{"missing right side", "rule r: (f ?a) <=>\n    if rank(?a) == 1",
			"t.rules:1:19: missing right side after <=>"},
		{"empty part", "rule r: (f ?a), => ?a",
			"t.rules:1:15: empty pattern after ',' in the left side"},
		{"empty first part", "rule r: (f ?a) => , ?a",
			"t.rules:1:19: empty pattern before ',' in the right side"},
		{"extra ')' on a continuation line", "rule r: (add ?a\n    (mul ?b ?c))) => ?a",
			"t.rules:2:17: unexpected ')' after the pattern"},
		{"unclosed '(' on the right, starting on a continuation line", "rule r: (add ?a ?b) =>\n    (add ?b\n     ?a",
			"t.rules:2:5: unclosed '('"},
		{"unclosed '(' hiding the arrow", "rule r: (add ?a\n    (mul ?b ?c) => ?a",
			"t.rules:1:9: unclosed '('"},
		{"error on the second line of a pattern", "rule r: (add ?a ?b) => (add ?b\n \t (?f ?a))",
			"t.rules:2:5: operator position holds variable ?f"},
		{"atom error", "rule r: (f ?x) => (g (bad ?x))",
			"t.rules:1:23: bad: not an operator"},
		{"duplicate name", "rule comm: (f ?a ?b) => (f ?b ?a)\n\nrule  comm: (g ?a ?b) => (g ?b ?a)",
			"t.rules:3:7: duplicate rule name comm (first defined at t.rules:1:6)"},
		{"right side count", "rule r: (f ?x), (g ?x) =>\n  (h ?x)",
			"t.rules:2:3: 2 patterns on the left but 1 on the right (each right pattern goes to the class of the left pattern in its place)"},
		{"right side count, one left", "rule r: (f ?x) => (h ?x), ?x",
			"t.rules:1:19: 1 pattern on the left but 2 on the right (each right pattern goes to the class of the left pattern in its place)"},
		{"<=> with an applier", "rule r: (f ?x) <=> @app",
			"t.rules:1:16: <=> needs patterns on both sides; a Go applier runs one way only (use =>)"},
		{"applier in a list", "rule r: (f ?x), (g ?x) => ?x, @app",
			"t.rules:1:27: a Go applier must be the whole right side"},
		{"applier with arguments", "rule r: (f ?x) => @app (?x)",
			"t.rules:1:24: a Go applier takes no arguments: write @app"},
		{"applier without a name", "rule r: (f ?x) => @",
			"t.rules:1:19: missing applier name after '@'"},
		{"applier with junk", "rule r: (f ?x) => @app!",
			`t.rules:1:23: unexpected "!" after applier @app`},
		{"right side unbound", "rule r: (f ?x) => (g ?x\n  ?y)",
			"t.rules:2:3: ?y on the right side is not bound by the left side"},
		{"right side payload unbound", "rule r: (f ?x) => (sum[?p] ?x)",
			"t.rules:1:24: payload variable ?p on the right side is not bound by the left side"},
		{"payload used as class", "rule r: (sum[?p] ?x) => (g ?x ?p)",
			"t.rules:1:31: ?p is a payload variable on the left side but a class variable on the right side"},
		{"<=> binds fewer on the right", "rule r: (f ?x ?y) <=> (g ?x)",
			"t.rules:1:15: <=>: ?y on the left side is not bound by the right side, so the rule cannot run right to left"},
		{"<=> right side has a lone variable no earlier part binds", "rule r: (f ?x), (g ?y) <=> (h ?x), ?y",
			"t.rules:1:28: right side, read right to left by <=>: multi-pattern part 2 is the lone variable ?y, which no earlier part binds"},
		{"lone variable part", "rule r: (f ?x), ?y => ?x, ?y",
			"t.rules:1:9: left side: multi-pattern part 2 is the lone variable ?y, which no earlier part binds"},
		{"unbound variable in the condition", "rule r: (f ?x) => ?x\n    if rank(?y) == 2",
			"t.rules:2:13: ?y is not bound by the left side"},
		{"payload variable used as a class variable in the condition", "rule r: (sum[?p] ?x) => ?x if shape(?p)[0] == 1",
			"t.rules:1:37: shape needs a class variable, but ?p is a payload variable"},
		{"class variable given to axis", "rule r: (sum[?p] ?x) => ?x if axis(?x) == 1",
			"t.rules:1:36: axis needs a payload variable (sum[?p]), but ?x is a class variable"},
		{"bad function", "rule r: (f ?x) => ?x if\n    foo(?x) == 1",
			"t.rules:2:5: unknown function foo (want shape, rank, size, dtype, const, weightonly or axis)"},
		{"bad dtype", "rule r: (f ?x) => ?x if dtype(?x) == f64",
			`t.rules:1:38: unknown dtype "f64" (want f32, f16, bf16, i32, i64, bool or u8)`},
		{"dtype compared with an integer", "rule r: (f ?x) => ?x if dtype(?x) == 1",
			"t.rules:1:35: cannot compare dtype(?x) (a dtype) with 1 (an integer)"},
		{"empty condition", "rule r: (f ?x) => ?x if ; nothing",
			"t.rules:1:22: empty condition after 'if'"},
		{"continuation line without a rule", "  if rank(?x) == 1\nrule r: ?x => ?x",
			"t.rules:1:3: continuation line without a rule (a line that starts with a space or tab continues the rule above it; a blank line ends a rule)"},
		{"continuation after a blank line", "rule r: (f ?x) => ?x\n\n\tif rank(?x) == 1",
			"t.rules:3:2: continuation line without a rule (a line that starts with a space or tab continues the rule above it; a blank line ends a rule)"},
		{"several errors, in file order", "rule a (f ?x) => ?x\n  if nonsense\nrule b: (f ?x) => ?y\nrule a: ?x => ?x\n  if rank(?x) == f32",
			"t.rules:1:8: missing ':' after rule name a\n" +
				"t.rules:3:19: ?y on the right side is not bound by the left side\n" +
				"t.rules:5:15: cannot compare rank(?x) (an integer) with f32 (a dtype)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := ParseRules("t.rules", []byte(tc.src), badAtom)
			require.EqualError(t, err, tc.want)
			require.Nil(t, rf)
		})
	}
}

func TestParseRulesErrorLimit(t *testing.T) {
	var src strings.Builder
	for i := range 15 {
		fmt.Fprintf(&src, "rule r%d: (f ?x) => ?y\n", i)
	}
	_, err := ParseRules("t.rules", []byte(src.String()), nil)
	require.Error(t, err)
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined))
	errs := joined.Unwrap()
	require.Len(t, errs, maxErrors)
	for i, e := range errs {
		var pe *PosError
		require.True(t, errors.As(e, &pe))
		require.Equal(t, Pos{"t.rules", i + 1, 20}, pe.Pos)
	}
}

// FuzzParseRules checks that no input panics, that every error has a
// position inside the file and that an accepted file's rules are named
// uniquely and have matching sides.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{
		"rule comm-add: (add ?a ?b) => (add ?b ?a)\n",
		"rule assoc-add: (add ?a (add ?b ?c)) <=> (add (add ?a ?b) ?c)\n",
		"rule mul-one: (mul ?a ?one) => ?a\n    if const(?one) == 1 and dtype(?a) == f32\n",
		"rule s: (sum[?p] (expand[?q] ?x)) => @sum_of_expand\n    if axis(?p) == axis(?q) ; applier\n",
		"rule m: (matmul ?x ?w1), (matmul ?x ?w2) => @merge_matmuls\n    if shape(?w1)[-2] == shape(?w2)[-2] and shape(?x)[-1] % 16 == 0\n",
		"rule w: (f ?x ?w) => ?x if weightonly(?w) and not weightonly(?x) and size(?x) > 1.5e3\n",
		"rule a: (f ?x) => ?x\nrule a: (g ?x) => ?x\n",
		"  if x\nrule r (f ?x) -> ?x\n\n\trule",
		"rule r: (add ?a\n    (mul ?b ?c))) => ?a\r\n# c\n",
		"rule r: (reshape[to=[2,3]] ?x), (f ?x) => (g ?x), ?x if rank(?x) != 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		rf, err := ParseRules("f.rules", src, nil)
		if err != nil {
			require.Nil(t, rf)
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			require.LessOrEqual(t, len(errs), maxErrors)
			lines := strings.Count(string(src), "\n") + 1
			for _, e := range errs {
				pe, ok := e.(*PosError)
				require.True(t, ok, "error without a position: %v", e)
				require.Equal(t, "f.rules", pe.Pos.File)
				require.True(t, pe.Pos.Line >= 1 && pe.Pos.Line <= lines && pe.Pos.Col >= 1, "%v", pe)
			}
			return
		}
		seen := map[string]bool{}
		for _, r := range rf.Rules {
			require.False(t, seen[r.Name], "duplicate rule %s accepted", r.Name)
			seen[r.Name] = true
			require.NotEmpty(t, r.LHS)
			if r.Applier == "" {
				require.Len(t, r.RHS, len(r.LHS))
			} else {
				require.Empty(t, r.RHS)
				require.False(t, r.TwoWay)
			}
			_, err := egraph.NewMultiPattern(r.LHS...)
			require.NoError(t, err)
			if _, err := r.Cond.Eval(noFacts{}); err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
		}
	})
}

// noFacts knows nothing.
type noFacts struct{}

func (noFacts) Shape(string) ([]int64, bool) { return nil, false }
func (noFacts) DType(string) (string, bool)  { return "", false }
func (noFacts) Const(string) (float64, bool) { return 0, false }
func (noFacts) WeightOnly(string) bool       { return false }
func (noFacts) Axis(string) (int64, bool)    { return 0, false }
