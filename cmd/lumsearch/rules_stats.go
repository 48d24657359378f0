package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/tunedb"
)

// rulesStats saturates a corpus model with the rule sets (minus the
// disabled ones, plus rule files) and prints per-rule figures, the e-graph's
// growth, the extracted program and an ablation table.
func rulesStats(ctx context.Context, model string, files, disable, enable []string, opt corpus.Options, price pricing, stdout io.Writer) error {
	g, err := corpus.Build(model, opt)
	if err != nil {
		return err
	}
	var sets []string
	for _, s := range rules.Sets() {
		if !slices.Contains(disable, s) {
			sets = append(sets, s)
		}
	}
	for _, d := range disable {
		if !slices.Contains(rules.Sets(), d) {
			return usagef("--disable %s: no such rule set (have %s)", d, strings.Join(rules.Sets(), ", "))
		}
	}
	for _, e := range enable {
		if !slices.Contains(rules.OptionalSets(), e) {
			return usagef("--enable %s: no such opt-in rule set (have %s)", e, strings.Join(rules.OptionalSets(), ", "))
		}
		if !slices.Contains(sets, e) {
			sets = append(sets, e)
		}
	}
	var rws []*egraph.Rewrite[rules.Data]
	setOf := map[string]string{} // rule name -> its set (or file)
	for _, s := range sets {
		r, err := rules.SetRewrites(s)
		if err != nil {
			return err
		}
		for _, rw := range r {
			setOf[rw.Name()] = s
		}
		rws = append(rws, r...)
	}
	for _, f := range files {
		rs, err := rules.LoadFile(f)
		if err != nil {
			return err
		}
		for _, rw := range rules.Rewrites(rs) {
			setOf[rw.Name()] = f
		}
		rws = append(rws, rules.Rewrites(rs)...)
	}
	sat, costName, _, err := price.options(ctx)
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
	naive, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nbest program: %d kernels per run and %d at load time, %s per run by %s; the naive program: %d kernels, %s (%.2fx)\n",
		prog.Kernels, prog.Prep, seconds(prog.Cost), costName, naive.Kernels+naive.Prep, seconds(naive.Cost), naive.Cost/prog.Cost)
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
	if !price.ablate {
		return nil
	}
	abl, err := rules.Ablate(ctx, g, sets, sat)
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%v\t%s\n", a.Without, a.Kernels, a.Prep, a.Nodes, a.Stop, a.Time.Round(1e6), seconds(a.Cost))
	}
	return tw.Flush()
}

// pricing says how rules stats prices programs: the simple estimate, or the
// cost model of a target device.
type pricing struct {
	estimate string   // "model" or "simple"
	target   string   // a device name or "auto"
	files    []string // users' device description files
	db       string   // the tuning database whose measured times override predictions ("" for the default)
	ablate   bool     // print the ablation table
	profile  string   // a calibrated profile of the target's factors ("" for the description's)
}

// seconds prints a time with a unit that keeps it readable.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}

// options makes the saturation options that price as p says, with the
// pricing's name for reports and the model (nil for the simple estimate).
func (p pricing) options(ctx context.Context) (rules.SaturateOptions, string, *cost.Model, error) {
	sat := rules.SaturateOptions{}
	if p.estimate == "simple" {
		return sat, "the simple estimate", nil, nil
	}
	dev, err := cost.ResolveTarget(ctx, p.target, p.files)
	if err != nil {
		return sat, "", nil, usagef("%v", err)
	}
	factors := cost.Defaults(dev)
	if p.profile != "" {
		prof, err := cost.LoadProfile(p.profile)
		if err != nil {
			return sat, "", nil, err
		}
		if prof.Device != dev.Name {
			return sat, "", nil, usagef("--profile %s was fitted for %s, not %s", p.profile, prof.Device, dev.Name)
		}
		factors = prof.Factors
	}
	m := cost.NewModel(dev, factors)
	dbPath := p.db
	if dbPath == "" {
		if dbPath, err = tunedb.DefaultPath(); err != nil {
			return sat, "", nil, err
		}
	}
	db, err := tunedb.Open(dbPath)
	if err != nil {
		return sat, "", nil, err
	}
	m.Measurements = cost.NewDBMeasurements(db)
	sat.Cost = func(eg *egraph.EGraph[rules.Data]) extract.CostFunc { return rules.ModelCost(eg, m) }
	return sat, "the cost model on " + dev.Name, m, nil
}
