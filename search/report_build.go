package search

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/rules"
)

// buildReport fills the run's report.
func buildReport(ctx context.Context, md *Model, o Options, sel *ruleSelection, res *Outcome, best *final, m *cost.Model, measured []kernelMeasurement, where string) *Report {
	g := md.Graph
	rep := &Report{Model: md.Name, Target: m.Device.Name, Arch: o.Arch, Version: Version(), Seed: o.Seed, Options: o.Command,
		EndedBy: res.EndedBy, Steps: res.Steps, Notes: res.Notes}
	if where != "" {
		rep.Measured = where
	}
	lp := best.lowered
	cats := map[string]*Category{}
	cat := func(name string) *Category {
		if cats[name] == nil {
			cats[name] = &Category{Name: name}
		}
		return cats[name]
	}
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
		pred := 0.0
		if k.Estimate != nil {
			pred = k.Estimate.Seconds
		}
		form := l.Form.String()
		row := Kernel{Launch: l.Name, Kernel: k.Name, Form: form, Schedule: k.Schedule.String(), Predicted: pred}
		if km, ok := measuredBy[k.Name]; ok && km.schedule == row.Schedule {
			row.Measured, row.Where = km.resp.Median, km.resp.Where
		}
		rep.Kernels = append(rep.Kernels, row)
		c := cat(category(row.Form))
		c.Launches++
		c.Predicted += pred
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
	if nc, err := lowerAndPrint(g, res.Naive, m); err == nil {
		for i, l := range nc.lowered.Run {
			k := nc.kernels[len(nc.lowered.Prep)+i]
			c := cat(category(l.Form.String()))
			c.NaiveLaunches++
			if k.Estimate != nil {
				c.NaivePredicted += k.Estimate.Seconds
			}
		}
	} else {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the naive program could not be lowered for its categories: %v", err))
	}
	for _, name := range slices.Sorted(maps.Keys(cats)) {
		c := cats[name]
		all := c.Launches > 0
		sum := 0.0
		for _, k := range rep.Kernels {
			if category(k.Form) == name {
				if k.Measured == 0 {
					all = false
				}
				sum += k.Measured
			}
		}
		if all {
			c.Measured = sum
		}
		rep.Categories = append(rep.Categories, *c)
	}
	rep.Summary = Summary{Launches: len(lp.Run), NaiveLaunches: naive.Launches, Prep: len(lp.Prep),
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

// category is a kernel form's category: the form without its prologue
// and epilogue ("matmul, prologue [...]" is a matmul).
func category(form string) string {
	c, _, _ := strings.Cut(form, ",")
	return strings.TrimSpace(c)
}

// ruleSets says what each rule set did in the final program's
func ruleSets(prog *rules.Program, sel *ruleSelection) []RuleSet {
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
	var out []RuleSet
	for _, s := range sel.names() {
		out = append(out, RuleSet{Name: s, Rules: sizes[s], Fired: len(fired[s]), Matches: matches[s]})
	}
	return out
}
