package search

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// compiled is one pass of the pipeline over a graph: an extraction,
// lowered to launches and printed as CUDA.
type compiled struct {
	prog    *rules.Program // nil for a program read from a plan
	lowered *lower.Program
	kernels []*cuda.Kernel
}

// pipeline saturates g with every rule set, extracts the program sat
// prices cheapest, and lowers and prints it.
func pipeline(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model) (*compiled, error) {
	var rws []*egraph.Rewrite[rules.Data]
	for _, s := range rules.Sets() {
		r, err := rules.SetRewrites(s)
		if err != nil {
			return nil, err
		}
		rws = append(rws, r...)
	}
	return pipelineWith(ctx, g, sat, m, rws)
}

// pipelineWith is pipeline with the rewrites rws in place of every rule
// set's.
func pipelineWith(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model, rws []*egraph.Rewrite[rules.Data]) (*compiled, error) {
	prog, err := rules.SaturateModel(ctx, g, rws, sat)
	if err != nil {
		return nil, err
	}
	return lowerAndPrint(g, prog, m)
}

// lowerAndPrint lowers an extracted program and prints its kernels in the
// schedules m ranks first (nil m: each form's default).
func lowerAndPrint(g *ir.Graph, prog *rules.Program, m *cost.Model) (*compiled, error) {
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	if err != nil {
		return nil, err
	}
	var rank cuda.Ranker
	if m != nil {
		rank = m.Ranked
	}
	ks, err := cuda.PrintProgramWith(lp, rank)
	if err != nil {
		return nil, err
	}
	return &compiled{prog: prog, lowered: lp, kernels: ks}, nil
}

// runCost is a printed program's predicted seconds per run: its run
// launches' kernels in their chosen schedules.
func runCost(c *compiled) float64 {
	total := 0.0
	for i := range c.lowered.Run {
		if k := c.kernels[len(c.lowered.Prep)+i]; k.Estimate != nil {
			total += k.Estimate.Seconds
		}
	}
	return total
}

// Naive is the figures of a model's naive program (DESIGN.md: one kernel
// per tensor op, every intermediate in memory), the program every
// speed-up lumsearch reports is against: optimize's report and summary,
// compile's and rules stats' lines all take them from here. They are the
// extraction's: its kernels per run and at load, priced per run as the
// search prices programs. (Lowering may add a copy launch for an output
// that is a view; bench runs and times that lowered program.)
type Naive struct {
	// Launches per run and at load.
	Launches int
	Prep     int
	// Seconds per run as priced (the cost model, or the simple
	// estimate).
	Seconds float64
}

// NaiveProgram builds g's naive program and prices it as p says.
func NaiveProgram(ctx context.Context, g *ir.Graph, p Pricing) (*Naive, error) {
	sat, _, _, err := p.Options(ctx)
	if err != nil {
		return nil, err
	}
	prog, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	return naiveOf(prog), nil
}

// naiveOf is a naive extraction's figures.
func naiveOf(prog *rules.Program) *Naive {
	return &Naive{Launches: prog.Kernels, Prep: prog.Prep, Seconds: prog.Cost}
}

// naiveProgram builds, lowers and prints g's naive program (what bench
// runs).
func naiveProgram(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model) (*compiled, error) {
	prog, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	c, err := lowerAndPrint(g, prog, m)
	if err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	return c, nil
}
