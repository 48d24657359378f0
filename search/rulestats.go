package search

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/rules"
)

// RuleStatsOptions say which rules RuleStats runs and how it prices.
type RuleStatsOptions struct {
	// Disable are built-in rule sets to leave out; Enable opt-in sets to
	// add (rules.OptionalSets); Files rule files to add, each rule
	// verified first (RuleOptions).
	Disable, Enable, Files []string
	// Pricing prices the programs.
	Pricing Pricing
	// Ablate also saturates once without each rule set.
	Ablate bool
}

// RuleStats saturates a corpus model with the rule sets (every built-in
// set less o.Disable, plus o.Enable and the rules of o.Files) and writes
// to w, per rule and per rule set, the matches, applications, new e-nodes
// and time; the e-graph's size per iteration; the best program, kernel by
// kernel, with its price per run against the naive program's; and, with
// o.Ablate, the program found without each rule set. A model whose
// layers repeat is searched on two of its layers and their seam, and the
// result replayed on every layer. An unknown set is a KindOption error;
// a rule of o.Files that is unsound or that the verifier cannot check
// refuses the run (KindInput), naming it.
func RuleStats(ctx context.Context, model string, build corpus.Options, o RuleStatsOptions, stdout io.Writer) error {
	g, err := corpus.Build(model, build)
	if err != nil {
		return err
	}
	sel, err := o.Rules().resolve(ctx, g)
	if err != nil {
		return err
	}
	rws, err := sel.rewrites(sel.sets, true)
	if err != nil {
		return err
	}
	setOf := sel.origin // rule name -> its set (or file)
	sat, costName, _, err := o.Pricing.Options(ctx)
	if err != nil {
		return err
	}
	prog, err := rules.SaturateModel(ctx, g, rws, sat)
	if err != nil {
		return err
	}
	searched := prog
	if b := prog.Block; b != nil {
		searched = b.Pair
		fmt.Fprintf(stdout, "model %s (%d ops): %d copies of a %d-op block; the rules ran on two of them and their seam, and the result was replayed on every copy (%d e-nodes added); the model's e-graph has %d e-nodes in all (%v)\n",
			model, len(g.Nodes), b.Copies, b.BlockNodes, b.Replayed, prog.EGraph.NumNodes(), prog.Time.Round(1e6))
	}
	fmt.Fprintf(stdout, "search %s (%d ops): %d e-nodes, %d e-classes after %d iterations in %v (%s)\n\n",
		model, len(searched.Classes), searched.EGraph.NumNodes(), searched.EGraph.NumClasses(), len(searched.Report.Iterations), searched.Time.Round(1e6), searched.Report.Stop)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RULE\tMATCHES\tAPPLIED\tNEW E-NODES\tTIME\t")
	for _, s := range rules.RuleStats(searched.Report) {
		if s.Matches == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t\n", s.Name, s.Matches, s.Applied, s.NewNodes, s.Time.Round(1000))
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	type setSum struct {
		rules, matches, applied, nodes int
		time                           time.Duration
	}
	perSet := map[string]*setSum{}
	var setOrder []string
	for _, st := range rules.RuleStats(searched.Report) {
		name := setOf[st.Name]
		sum := perSet[name]
		if sum == nil {
			sum = &setSum{}
			perSet[name] = sum
			setOrder = append(setOrder, name)
		}
		sum.rules++
		sum.matches += st.Matches
		sum.applied += st.Applied
		sum.nodes += st.NewNodes
		sum.time += st.Time
	}
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RULE SET\tRULES\tMATCHES\tAPPLIED\tNEW E-NODES\tTIME\t")
	for _, name := range setOrder {
		sum := perSet[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t\n", name, sum.rules, sum.matches, sum.applied, sum.nodes, sum.time.Round(1000))
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ITERATION\tE-NODES\tE-CLASSES\t")
	for _, it := range searched.Report.Iterations {
		fmt.Fprintf(tw, "%d\t%d\t%d\t\n", it.Index, it.Nodes, it.Classes)
	}
	tw.Flush()
	np, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return err
	}
	naive := naiveOf(np)
	fmt.Fprintf(stdout, "\nbest program: %d kernels per run and %d at load time, %s per run by %s; the naive program: %d kernels, %s (%.2fx)\n",
		prog.Kernels, prog.Prep, Seconds(prog.Cost), costName, naive.Launches, Seconds(naive.Seconds), naive.Seconds/prog.Cost)
	for _, k := range prog.List {
		when := "run "
		if k.Prep {
			when = "load"
		}
		var shapes []string
		for _, o := range k.Outputs {
			shapes = append(shapes, fmt.Sprint(o.Shape))
		}
		fmt.Fprintf(stdout, "  %s %-16s %s\n", when, strings.Join(shapes, " "), k.Form)
	}
	fmt.Fprintln(stdout)
	if !o.Ablate {
		return nil
	}
	abl, err := rules.Ablate(ctx, g, sel.sets, sat)
	if err != nil {
		return err
	}
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WITHOUT\tKERNELS\tAT LOAD\tE-NODES\tSTOP\tSATURATION\tPER RUN")
	for _, a := range abl {
		if a.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tno kernel program\n", a.Without)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%v\t%s\n", a.Without, a.Kernels, a.Prep, a.Nodes, a.Stop, a.Time.Round(1e6), Seconds(a.Cost))
	}
	return tw.Flush()
}

// Rules are o's rule choices as the compiler's RuleOptions.
func (o RuleStatsOptions) Rules() RuleOptions {
	return RuleOptions{Files: o.Files, Disable: o.Disable, Enable: o.Enable}
}
