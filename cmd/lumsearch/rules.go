package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/lumsearch/lumsearch/rules"
)

// rulesCommand checks rule files with the rule verifier.
var rulesCommand = &command{
	name:     "rules",
	summary:  "check rewrite rules for soundness",
	synopsis: "rules check [FILE.rules ...] [--instances N] [--seed N]",
	doc: `
"rules check" verifies rules: for every rule, random legal instances (shapes
for its variables, attributes for its payload variables, random and stress
values), at least --instances of them accepted by the rule's condition, both
sides evaluated by the float64 reference interpreter and compared with the
project's tolerance. A two-way rule is checked in both directions. A failing
rule is printed with its counterexample; the command then exits with status 1.

Without files it checks the built-in rule sets (` + strings.Join(rules.BuiltinSets(), ", ") + `). Rules
whose right side is a Go applier are listed as skipped: the e-graph fuzz test
checks them.`,
	example: `
lumsearch rules check
lumsearch rules check my.rules --instances 50`,
	setup: func(fs *flag.FlagSet) action {
		instances := fs.Int("instances", 20, "valid instances each rule needs")
		seed := fs.Uint64("seed", 1, "seed of the random instances")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) == 0 || pos[0] != "check" {
				return usagef("want: rules check [FILE.rules ...]")
			}
			if *instances <= 0 {
				return usagef("--instances must be positive")
			}
			return rulesCheck(ctx, pos[1:], rules.VerifyOptions{Instances: *instances, Seed: *seed}, stdout)
		}
	},
}

// errRulesFailed makes the command exit 1 after printing its report.
var errRulesFailed = errors.New("some rules are unsound")

func rulesCheck(ctx context.Context, files []string, opt rules.VerifyOptions, stdout io.Writer) error {
	var all []*rules.Rule
	if len(files) == 0 {
		rs, err := rules.Builtin()
		if err != nil {
			return err
		}
		all = rs
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		parsed, err := rules.ParseRules(f, src, rules.Atom)
		if err != nil {
			return err
		}
		rs, err := rules.Compile(parsed)
		if err != nil {
			return err
		}
		all = append(all, rs...)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tRESULT\tINSTANCES\tWHERE")
	var failures []string
	for _, r := range all {
		checked, n, cx, err := r.Verify(ctx, opt)
		result := "ok"
		switch {
		case err != nil:
			result = "fail"
			failures = append(failures, err.Error())
		case cx != nil:
			result = "unsound"
			failures = append(failures, cx.String())
		case !checked:
			result = "skipped (Go applier)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Decl.Name, result, n, r.Decl.Pos)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(failures) > 0 {
		fmt.Fprintln(stdout)
		for _, f := range failures {
			fmt.Fprintln(stdout, f)
		}
		return fmt.Errorf("%w: %d of %d", errRulesFailed, len(failures), len(all))
	}
	fmt.Fprintf(stdout, "\n%d rules sound\n", len(all))
	return nil
}
