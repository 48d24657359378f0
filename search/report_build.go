package search

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/report"
	"github.com/lumsearch/lumsearch/rules"
)

// buildReport fills the run's report from the search's records: the
// report package only renders what it is given, so everything it shows
// about the program, the naive program and the rule sets is read here.
func buildReport(ctx context.Context, md *Model, o Options, sel *ruleSelection, res *Outcome, best *final, m *cost.Model, measured []kernelMeasurement, where string) *report.Report {
	g := md.Graph
	rep := &report.Report{Model: md.Name, Target: m.Device.Name, Arch: o.Arch, Version: Version(), Seed: o.Seed, Options: o.Command,
		EndedBy: res.EndedBy, Steps: res.Steps, Notes: res.Notes}
	if where != "" {
		rep.Measured = where
	}
	lp := best.lowered
	measuredBy := map[string]kernelMeasurement{}
	for _, km := range measured {
		if km.resp.OK {
			if prev, ok := measuredBy[km.kernel]; !ok || km.resp.Median < prev.resp.Median {
				measuredBy[km.kernel] = km
			}
		}
	}
	for i, l := range lp.Run {
		k := best.kernels[len(lp.Prep)+i]
		row := report.Kernel{Launch: l.Name, Kernel: k.Name, Form: l.Form.String(), Schedule: k.Schedule.String(), Predicted: estimateSeconds(k)}
		for _, b := range k.Buckets {
			row.Buckets = append(row.Buckets, report.KernelBucket{Hi: b.Hi, Kernel: b.Kernel.Name, Schedule: b.Kernel.Schedule.String()})
		}
		if km, ok := measuredBy[k.Name]; ok && km.schedule == row.Schedule {
			row.Measured, row.Where = km.resp.Median, km.resp.Where
		}
		rep.Kernels = append(rep.Kernels, row)
	}
	if len(lp.Symbols) > 0 {
		if bs, err := bucketTimes(g, best.compiled, m); err == nil {
			rep.Buckets = bs
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the program could not be priced per bucket: %v", err))
		}
	}
	// The naive program's figures are the extraction's (as rules stats
	// and compile print them); its categories are those of the launches
	// it lowers to, priced as they would run.
	naive := naiveOf(res.Naive)
	var naiveKernels []report.Kernel
	if nc, err := lowerAndPrint(g, res.Naive, m); err == nil {
		for i, l := range nc.lowered.Run {
			k := nc.kernels[len(nc.lowered.Prep)+i]
			naiveKernels = append(naiveKernels, report.Kernel{Launch: l.Name, Kernel: k.Name, Form: l.Form.String(), Predicted: estimateSeconds(k)})
		}
	} else {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the naive program could not be lowered for its categories: %v", err))
	}
	rep.Categories = report.Categories(rep.Kernels, naiveKernels)
	rep.Summary = report.Summary{Launches: len(lp.Run), NaiveLaunches: naive.Launches, Prep: len(lp.Prep),
		Predicted: res.Best.Cost, Naive: naive.Seconds, Verified: res.Best.Verified}
	// The rule statistics and the repeated blocks are the last stage's
	// (the best program may be a previous run's, with none).
	var searched *rules.Program
	for _, c := range res.Candidates {
		if c.Program != nil {
			searched = c.Program
		}
	}
	if searched != nil {
		if searched.Block != nil {
			rep.Summary.Layers = searched.Block.Copies
		}
		rep.RuleSets = ruleSets(searched, sel)
	}
	if res.Best.Program == nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the program is the previous run's (stage %q): this run found none predicted faster", res.Best.Stage))
	}
	f := expectedFloor(g, m.Device)
	rep.Summary.FloorBytes, rep.Summary.FloorFLOPs, rep.Summary.Floor, rep.Summary.Achievable = f.Bytes, f.FLOPs, f.Hardware, f.Achievable
	return rep
}

// estimateSeconds is a printed kernel's predicted seconds per launch, 0
// when the cost model gave it no estimate (the report shows 0 s rather
// than leaving the launch out).
func estimateSeconds(k *cuda.Kernel) float64 {
	if k.Estimate == nil {
		return 0
	}
	return k.Estimate.Seconds
}

// ruleSets says what each rule set did in the final program's search:
// its rules, how many of them fired, and the matches they applied.
func ruleSets(prog *rules.Program, sel *ruleSelection) []report.RuleSet {
	fired := map[string]map[string]bool{}
	matches := map[string]int{}
	reports := []*rules.Program{prog}
	if prog.Block != nil && prog.Block.Pair != nil {
		reports = append(reports, prog.Block.Pair)
	}
	setOf := sel.origin
	sizes := map[string]int{}
	for _, s := range setOf {
		sizes[s]++
	}
	for _, p := range reports {
		if p.Report == nil {
			continue
		}
		for _, it := range p.Report.Iterations {
			for _, r := range it.Rules {
				s, ok := setOf[r.Name]
				if !ok {
					continue
				}
				if fired[s] == nil {
					fired[s] = map[string]bool{}
				}
				if r.Applied > 0 || r.NewNodes > 0 {
					fired[s][r.Name] = true
				}
				matches[s] += r.Matches
			}
		}
	}
	var out []report.RuleSet
	for _, s := range sel.names() {
		out = append(out, report.RuleSet{Name: s, Rules: sizes[s], Fired: len(fired[s]), Matches: matches[s]})
	}
	return out
}
