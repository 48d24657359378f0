package main

import (
	"context"
	"flag"
	"io"
	"strings"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/search"
)

// listFlag collects a repeated string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// ruleFlags registers --rules, --disable and --enable, which choose the
// rules a search runs, and returns what they set.
func ruleFlags(fs *flag.FlagSet) *search.RuleOptions {
	var o search.RuleOptions
	fs.Var((*listFlag)(&o.Files), "rules", "a rule `FILE` whose rules join the search, each verified first (repeatable)")
	fs.Var((*listFlag)(&o.Disable), "disable", "a built-in rule `SET` to leave out (repeatable): "+strings.Join(rules.Sets(), ", "))
	fs.Var((*listFlag)(&o.Enable), "enable", "an opt-in rule `SET` to add (repeatable): "+strings.Join(rules.OptionalSets(), ", "))
	return &o
}

// rulesDoc says what the rule flags do, for the help of the commands that
// take them.
const rulesDoc = `
--rules FILE adds a researcher's rules (the language "lumsearch rules
check" verifies) to the search's last stage; --disable SET leaves a
built-in rule set out and --enable SET adds an opt-in one. Every rule of a
file is verified first, in f32 and in the model's float dtypes: an
unsound rule (a counterexample) or one the verifier cannot check refuses
the run, naming it. plan.json records the files by digest and the rules
the program's choices rest on (from the e-graph's union provenance), and
report.md shows them.`

// rulesCommand checks rule files with the rule verifier.
var rulesCommand = &command{
	name:     "rules",
	summary:  "check rewrite rules for soundness, or measure them on a model",
	synopsis: "rules check [FILE.rules ...] [--instances N] [--seed N] | rules stats MODEL [--rules FILE] [--disable SET] [--enable SET] [--seq N] [--past N] [--target NAME] [--cost model|simple] [--profile FILE] [--ablate=false]",
	doc: `
"rules check" verifies rules: for every rule, random legal instances (shapes
for its variables, attributes for its payload variables, random and stress
values, in f32, bf16 and f16), at least --instances of them accepted by the
rule's condition, both sides evaluated by the reference interpreter with
every value rounded to its dtype and compared with the left side's float64
truth, within the allowance of the left side's own roundings
(docs/precision.md): a right side that rounds where the left side does not,
such as a partial sum kept in bf16, fails. A two-way rule is checked in both
directions. A rule whose right side is a Go applier is checked by applying
it in an e-graph to the instances and to the applier's examples, at the
sizes its condition asks for. A failing rule is printed with its
counterexample; the command then exits with status 1.

Without files it checks the built-in rule sets (` + strings.Join(rules.BuiltinSets(), ", ") + `).

"rules stats MODEL" saturates a corpus model with every rule set (less those
named by --disable, plus the opt-in sets named by --enable (` + strings.Join(rules.OptionalSets(), ", ") + `) and
the files given with --rules), then prints, per rule and per rule set, the
matches, applications, new e-nodes and time; the e-graph's size per
iteration; the best kernel program, kernel by kernel, with its predicted
time per run against the naive program's (one kernel per op), priced by
the cost model of --target (default h100-sxm; --cost simple for the
simple estimate), with the GPU times of the tuning database (--db) in
place of predictions where it has them; and an ablation table: the program found without each
rule set. A
model whose layers repeat is searched on two of its layers and their seam,
and the result is replayed on every layer.`,
	example: `
lumsearch rules check
lumsearch rules check my.rules --instances 50
lumsearch rules stats tiny-llama:layer --seq 16
lumsearch rules stats gpt2:block --disable algebra`,
	setup: func(fs *flag.FlagSet) action {
		instances := fs.Int("instances", 20, "valid instances each rule needs")
		seed := fs.Uint64("seed", 1, "seed of the random instances")
		var targetFiles listFlag
		ruleOpts := ruleFlags(fs)
		seq := fs.Int("seq", corpus.DefaultSeq, "stats: tokens per sequence (a decode step's cache capacity)")
		past := fs.Int("past", -1, "stats: a decode step's position pinned at compile time (-1: the runtime extent past over the cache)")
		target := fs.String("target", "h100-sxm", "stats: the device the cost model prices for (a built-in name, one from --target-file, or auto)")
		fs.Var(&targetFiles, "target-file", "stats: a device description file to add (repeatable)")
		profile := fs.String("profile", "", "stats: a calibrated profile of the target's efficiency factors (tunedb calibrate -o)")
		ablate := fs.Bool("ablate", true, "stats: also saturate once without each rule set (the ablation table)")
		db := fs.String("db", "", "stats: the tuning database whose GPU times override predictions (default $LUMSEARCH_TUNEDB or the user cache's tunedb.jsonl)")
		estimate := fs.String("cost", "model", "stats: how programs are priced: model (the cost model of --target) or simple (bytes moved plus launches)")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) == 2 && pos[0] == "stats" {
				if *estimate != "model" && *estimate != "simple" {
					return usagef("--cost %s: want model or simple", *estimate)
				}
				return search.RuleStats(ctx, pos[1], corpus.Options{Seq: *seq, Past: *past}, search.RuleStatsOptions{Disable: ruleOpts.Disable, Enable: ruleOpts.Enable, Files: ruleOpts.Files, Ablate: *ablate,
					Pricing: search.Pricing{Simple: *estimate == "simple", Target: *target, Files: targetFiles, TuneDB: *db, Profile: *profile}}, stdout)
			}
			if len(pos) == 0 || pos[0] != "check" {
				return usagef("want: rules check [FILE.rules ...] or rules stats MODEL")
			}
			if *instances <= 0 {
				return usagef("--instances must be positive")
			}
			rep, err := rules.CheckSoundness(ctx, pos[1:], rules.VerifyOptions{Instances: *instances, Seed: *seed})
			if err != nil {
				return err
			}
			if err := rep.WriteText(stdout); err != nil {
				return err
			}
			return rep.Err() // exit status 1 after the report
		}
	},
}
