package search

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeRules writes a rule file into a test's temporary folder.
func writeRules(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// mergeSameShape is a researcher's variant of the built-in merge-matmuls:
// only projections whose weights have one shape merge (K and V of
// grouped-query attention; gate and up).
const mergeSameShape = `# Merge two projections of one input when their weights have one shape.
rule merge-same-shape: (matmul ?x ?a), (matmul ?x ?b) => @merge_matmuls
    if rank(?a) == 2 and shape(?a) == shape(?b) and weightonly(?a) and weightonly(?b) and not weightonly(?x)
`

// TestUserRuleChangesTheProgram: with the built-in algebra set left out,
// a user's rule file that merges K and V changes the program optimize and
// compile write for tiny-llama:attention (fewer launches, a faster
// prediction), and plan.json and report.md name the file (by digest) and
// the rule the program rests on; without the file they do not.
func TestUserRuleChangesTheProgram(t *testing.T) {
	ctx := t.Context()
	withoutNVRTC(t) // the rules choose the program; NVRTC only compiles it
	file := writeRules(t, "merge.rules", mergeSameShape)
	m, err := LoadModel("tiny-llama:attention", ModelOptions{Build: corpus.Options{Seq: 16, Past: -1}})
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "db.jsonl")
	base := Options{TuneDB: db, NoVerify: true, Ablate: true, Rules: RuleOptions{Disable: []string{"algebra"}}}
	with := base
	with.Rules.Files = []string{file}

	without, err := Optimize(ctx, m, base)
	require.NoError(t, err)
	withRule, err := Optimize(ctx, m, with)
	require.NoError(t, err)
	assert.Less(t, len(withRule.Plan.Run), len(without.Plan.Run), "the merged projection saves a launch")
	assert.Less(t, withRule.Report.Summary.Predicted, without.Report.Summary.Predicted)

	used := func(pl *plan.Plan) []string {
		var out []string
		for _, u := range pl.RulesUsed {
			out = append(out, u.Rule+"@"+u.From)
		}
		return out
	}
	assert.Contains(t, used(withRule.Plan), "merge-same-shape@"+file)
	assert.NotContains(t, strings.Join(used(without.Plan), " "), "merge")
	require.Len(t, withRule.Plan.RuleFiles, 1)
	rf := withRule.Plan.RuleFiles[0]
	assert.Equal(t, file, rf.Path)
	assert.Equal(t, []string{"merge-same-shape"}, rf.Rules)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, rf.Digest)
	assert.NotContains(t, withRule.Plan.RuleSets, "algebra")
	assert.Contains(t, withRule.Plan.Command, "disable=algebra")
	assert.Contains(t, withRule.Plan.Command, "rules="+file)
	assert.Empty(t, without.Plan.RuleFiles)

	md := string(withRule.Report.Markdown())
	assert.Contains(t, md, "`merge-same-shape`")
	assert.Contains(t, md, rf.Digest)
	assert.NotContains(t, md, "not computed |", "optimize computed every ablation: %s", md)
	assert.NotContains(t, string(without.Report.Markdown()), "merge-same-shape")

	// compile takes the same rules.
	comp, err := Compile(ctx, m, with)
	require.NoError(t, err)
	assert.Contains(t, used(comp.Plan), "merge-same-shape@"+file)
	assert.Equal(t, len(withRule.Plan.Run), len(comp.Plan.Run))
}

// TestBadRulesAreRefusedEverywhere: optimize, compile and rules stats
// refuse an unsound rule (naming it, with the word "unsound" and the
// counterexample), a rule the verifier cannot check, a file that does not
// parse, a rule named like a built-in one, and unknown rule sets, before
// any search.
func TestBadRulesAreRefusedEverywhere(t *testing.T) {
	ctx := t.Context()
	cases := []struct {
		name string
		opt  RuleOptions
		want []string
	}{
		{"unsound", RuleOptions{Files: []string{writeRules(t, "bad.rules", "rule swap-sub: (sub ?a ?b) => (sub ?b ?a)\n")}},
			[]string{"swap-sub", "unsound", "bad.rules:1"}},
		{"unverified", RuleOptions{Files: []string{writeRules(t, "rare.rules", "rule cube: (pow ?x ?c) => (mul ?x (mul ?x ?x))\n    if const(?c) == 3\n")}},
			[]string{"cube", "unverified", "valid instances"}},
		{"syntax", RuleOptions{Files: []string{writeRules(t, "broken.rules", "rule half: (add ?a\n")}}, []string{"broken.rules:1"}},
		{"clash", RuleOptions{Files: []string{writeRules(t, "clash.rules", "rule comm-add: (add ?a ?b) => (add ?b ?a)\n")}},
			[]string{"comm-add", "algebra"}},
		{"missing file", RuleOptions{Files: []string{filepath.Join(t.TempDir(), "none.rules")}}, []string{"none.rules"}},
		{"disable", RuleOptions{Disable: []string{"algebras"}}, []string{"--disable algebras", "no such rule set"}},
		{"enable", RuleOptions{Enable: []string{"algebra"}}, []string{"--enable algebra", "opt-in"}},
	}
	m, err := LoadModel("tiny-llama:silu", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{TuneDB: filepath.Join(t.TempDir(), "db.jsonl"), NoVerify: true, Rules: c.opt}
			_, errOpt := Optimize(ctx, m, o)
			_, errComp := Compile(ctx, m, o)
			var out bytes.Buffer
			errStats := RuleStats(ctx, "tiny-llama:silu", corpus.Options{Seq: 4, Past: -1},
				RuleStatsOptions{Files: c.opt.Files, Disable: c.opt.Disable, Enable: c.opt.Enable, Pricing: Pricing{Simple: true}}, &out)
			for what, err := range map[string]error{"optimize": errOpt, "compile": errComp, "rules stats": errStats} {
				require.Error(t, err, what)
				for _, w := range c.want {
					assert.Contains(t, err.Error(), w, what)
				}
			}
			assert.Empty(t, out.String(), "rules stats printed nothing before refusing")
		})
	}
	// The counterexample comes with an unsound rule.
	_, err = Compile(ctx, m, Options{NoVerify: true, TuneDB: filepath.Join(t.TempDir(), "db.jsonl"), Rules: cases[0].opt})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rule swap-sub is unsound:")
	assert.Equal(t, KindInput, KindOf(err))
}
