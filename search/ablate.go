package search

import (
	"context"
	"fmt"
	"time"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/report"
	"github.com/lumsearch/lumsearch/rules"
)

// ablate fills the rule table's "without" figures: the last stage
// saturated again without each rule set (and each user file) of the
// selection, its program extracted and priced as the search prices its
// extractions, for as many as the budget has time for (each about as long
// as the last stage's saturation took, then as long as the previous
// ablation took), in the table's order; a set none of whose rules fired
// costs the same without it and is not saturated again. What was not
// computed, and why,
// is Report.Ablation's to say. Ctrl-C stops it; the report is written
// with what it has.
func ablate(ctx context.Context, r *report.Report, g *ir.Graph, sel *ruleSelection, sat rules.SaturateOptions, res *Outcome, budget time.Duration, start time.Time) {
	var last *rules.Program
	for _, c := range res.Candidates {
		if c.Program != nil {
			last = c.Program
		}
	}
	switch {
	case last == nil:
		r.Ablation = "not computed: no stage of this run extracted a program"
		return
	case ctx.Err() != nil || res.EndedBy == "interrupted":
		r.Ablation = "not computed: the run was interrupted"
		return
	case res.EndedBy == "budget":
		r.Ablation = "not computed: the budget ended the search itself"
		return
	}
	var deadline time.Time
	if budget > 0 {
		// What the search's own reserve keeps for writing, twice over:
		// the report and the folder come after the ablations.
		deadline = start.Add(budget - 3*max(time.Second, budget/50))
	}
	names := sel.names()
	estimate := last.Time
	done := 0
	r.AblationBase = last.Cost
	for _, name := range names {
		if ruleSetIdle(r, name) {
			// No rule of it changed the e-graph: without it the stage
			// saturates to the same e-graph and program.
			setWithout(r, name, last.Cost)
			done++
			continue
		}
		if !deadline.IsZero() && time.Now().Add(estimate).After(deadline) {
			break
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			actx, cancel = context.WithDeadline(ctx, deadline)
		}
		began := time.Now()
		rws, err := sel.without(name)
		var prog *rules.Program
		if err == nil {
			prog, err = rules.SaturateModel(actx, g, rws, sat)
		}
		expired := actx.Err() != nil
		cancel()
		if expired {
			break
		}
		estimate = time.Since(began)
		done++
		if err != nil {
			continue // no program without it: the table says "not computed"
		}
		setWithout(r, name, prog.Cost)
	}
	switch {
	case done == len(names):
		r.Ablation = fmt.Sprintf("the last stage saturated again without each rule set and rule file, its program priced as the search prices its extractions (%s with every one; a set none of whose rules fired costs the same without it)", Seconds(last.Cost))
	case ctx.Err() != nil:
		r.Ablation = fmt.Sprintf("%d of %d computed: the run was interrupted", done, len(names))
	default:
		r.Ablation = fmt.Sprintf("%d of %d computed (%s with every one): the budget had no time left for the others, about %v each", done, len(names), Seconds(last.Cost), estimate.Round(time.Millisecond))
	}
}

// ruleSetIdle says whether the rule table's row name exists and none of
// its rules fired (applied or added a node) in the last stage.
func ruleSetIdle(r *report.Report, name string) bool {
	for _, rs := range r.RuleSets {
		if rs.Name == name {
			return rs.Fired == 0
		}
	}
	return false
}

// setWithout records the rule table's "without" figure of row name.
func setWithout(r *report.Report, name string, cost float64) {
	for i := range r.RuleSets {
		if r.RuleSets[i].Name == name {
			r.RuleSets[i].Without = cost
		}
	}
}
