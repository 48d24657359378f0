package search

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
)

// RuleOptions choose the rules a search runs: every built-in rule set
// less Disable, plus the opt-in sets of Enable (rules.OptionalSets) and
// the rules of Files, a researcher's rule files. The zero value is the
// built-in sets.
type RuleOptions struct {
	// Files are rule files (the rules language of docs/rules.md) whose
	// rules join the last stage of the search. Each rule is verified
	// before it is used, in f32 and in every float dtype of the model;
	// an unsound or unverifiable rule refuses the whole run.
	Files []string
	// Disable names built-in rule sets to leave out; Enable opt-in sets
	// to add.
	Disable, Enable []string
	// Instances is how many valid instances the verifier needs of each
	// rule of Files (0: rules.VerifyOptions' default, 20).
	Instances int
}

// ruleSelection is RuleOptions resolved and checked: the sets to run, the
// user's verified rules and the files they came from.
type ruleSelection struct {
	sets  []string
	user  []*egraph.Rewrite[rules.Data]
	files []plan.RuleFile
	// origin names the set or file each rule name comes from.
	origin map[string]string
}

// resolve checks o's set names, loads o's files and verifies each of
// their rules in f32 and in the float dtypes of g (nil g: f32, bf16 and
// f16). An unknown set is a KindOption error; a file that does not load,
// or a rule that is unsound (with its counterexample) or that the
// verifier cannot check (too few valid instances, say), a KindInput error
// naming the rule and where it is.
func (o RuleOptions) resolve(ctx context.Context, g *ir.Graph) (*ruleSelection, error) {
	sel := &ruleSelection{origin: map[string]string{}}
	for _, d := range o.Disable {
		if !slices.Contains(rules.Sets(), d) {
			return nil, optionErrorf("--disable %s: no such rule set (have %s)", d, strings.Join(rules.Sets(), ", "))
		}
	}
	for _, s := range rules.Sets() {
		if !slices.Contains(o.Disable, s) {
			sel.sets = append(sel.sets, s)
		}
	}
	for _, e := range o.Enable {
		if !slices.Contains(rules.OptionalSets(), e) {
			return nil, optionErrorf("--enable %s: no such opt-in rule set (have %s)", e, strings.Join(rules.OptionalSets(), ", "))
		}
		if !slices.Contains(sel.sets, e) {
			sel.sets = append(sel.sets, e)
		}
	}
	for _, s := range sel.sets {
		rws, err := rules.SetRewrites(s)
		if err != nil {
			return nil, err
		}
		for _, rw := range rws {
			sel.origin[rw.Name()] = s
		}
	}
	opt := rules.VerifyOptions{Instances: o.Instances, Seed: 1, DTypes: verifyDTypes(g)}
	for _, f := range o.Files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, withKind(KindInput, fmt.Errorf("--rules %s: %w", f, err))
		}
		parsed, err := rules.ParseRules(f, src, rules.Atom)
		if err != nil {
			return nil, withKind(KindInput, fmt.Errorf("--rules %s: %w", f, err))
		}
		// The digest is of the text the rules came from: one read.
		rs, err := rules.Compile(parsed)
		if err != nil {
			return nil, withKind(KindInput, fmt.Errorf("--rules %s: %w", f, err))
		}
		sum := sha256.Sum256(src)
		rf := plan.RuleFile{Path: f, Digest: "sha256:" + hex.EncodeToString(sum[:])}
		for _, r := range rs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			d := r.Decl
			for _, rw := range r.Rewrites {
				if prev, ok := sel.origin[rw.Name()]; ok {
					return nil, withKind(KindInput, fmt.Errorf("--rules %s: rule %s (%s) has the name of a rule of %s", f, rw.Name(), d.Pos, prev))
				}
			}
			_, cx, err := r.Verify(ctx, opt)
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				return nil, withKind(KindInput, fmt.Errorf("--rules: rule %s (%s) is unverified, so no search uses it: %w", d.Name, d.Pos, err))
			case cx != nil:
				return nil, withKind(KindInput, fmt.Errorf("--rules: rule %s (%s) is refused, as no search uses an unsound rule: %s", d.Name, d.Pos, strings.TrimSpace(cx.String())))
			}
			for _, rw := range r.Rewrites {
				sel.origin[rw.Name()] = f
			}
			rf.Rules = append(rf.Rules, d.Name)
		}
		sel.user = append(sel.user, rules.Rewrites(rs)...)
		sel.files = append(sel.files, rf)
	}
	return sel, nil
}

// verifyDTypes are the dtypes a user's rules are verified in: f32 and the
// float dtypes g computes in (every float dtype without g).
func verifyDTypes(g *ir.Graph) []ir.DType {
	if g == nil {
		return rules.DefaultDTypes
	}
	out := []ir.DType{ir.F32}
	for _, n := range g.Nodes {
		if n.DType.IsFloat() && !slices.Contains(out, n.DType) {
			out = append(out, n.DType)
		}
	}
	return out
}

// rewrites are the rewrites of the named sets that the selection keeps,
// then the user's rules when user is set.
func (sel *ruleSelection) rewrites(sets []string, user bool) ([]*egraph.Rewrite[rules.Data], error) {
	var out []*egraph.Rewrite[rules.Data]
	for _, s := range sets {
		if !slices.Contains(sel.sets, s) {
			continue
		}
		rws, err := rules.SetRewrites(s)
		if err != nil {
			return nil, err
		}
		out = append(out, rws...)
	}
	if user {
		out = append(out, sel.user...)
	}
	return out, nil
}

// stages are the search's stages under the selection: the fusion stage
// of DefaultStages with the sets the selection keeps, then every set it
// runs with the user's rules.
func (sel *ruleSelection) stages() ([]Stage, error) {
	var out []Stage
	def := DefaultStages()
	for i, st := range def {
		last := i == len(def)-1
		sets := st.Sets
		if last {
			sets = sel.sets
		}
		rws, err := sel.rewrites(sets, last)
		if err != nil {
			return nil, err
		}
		out = append(out, Stage{Name: st.Name, Sets: sets, Rewrites: rws})
	}
	return out, nil
}

// changed says whether the selection differs from the built-in sets.
func (sel *ruleSelection) changed() bool {
	return len(sel.files) > 0 || !slices.Equal(sel.sets, rules.Sets())
}

// key is the selection's identity for the plan store: the sets it runs
// and the digest of each file.
func (sel *ruleSelection) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sets %s", strings.Join(sel.sets, ","))
	for _, f := range sel.files {
		fmt.Fprintf(&b, " file %s", f.Digest)
	}
	return b.String()
}

// record writes the selection into a plan: the sets when they differ
// from the built-in ones, the user's files, and the rules prog's choices
// rest on (none for a program the search did not extract, nil prog).
func (sel *ruleSelection) record(pl *plan.Plan, prog *rules.Program) error {
	if !slices.Equal(sel.sets, rules.Sets()) {
		pl.RuleSets = slices.Clone(sel.sets)
	}
	pl.RuleFiles = slices.Clone(sel.files)
	pl.RulesUsed = nil
	if prog == nil {
		return nil
	}
	used, err := prog.RulesUsed()
	if err != nil {
		return err
	}
	for _, u := range used {
		pl.RulesUsed = append(pl.RulesUsed, plan.RuleUse{Rule: u.Rule, From: sel.origin[u.Rule], Unions: u.Unions})
	}
	return nil
}

// names are the selection's sets, then its files' paths: the rows of the
// report's rule table.
func (sel *ruleSelection) names() []string {
	out := slices.Clone(sel.sets)
	for _, f := range sel.files {
		out = append(out, f.Path)
	}
	return out
}

// without are the rewrites of the selection less one of its names (a set
// or a file), those of its last stage.
func (sel *ruleSelection) without(name string) ([]*egraph.Rewrite[rules.Data], error) {
	var sets []string
	for _, s := range sel.sets {
		if s != name {
			sets = append(sets, s)
		}
	}
	rws, err := sel.rewrites(sets, false)
	if err != nil {
		return nil, err
	}
	for _, rw := range sel.user {
		if sel.origin[rw.Name()] != name {
			rws = append(rws, rw)
		}
	}
	return rws, nil
}
