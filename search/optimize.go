package search

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/report"
	"github.com/lumsearch/lumsearch/rules"
)

// Result is a compiled program ready to write: lowered, printed, compiled
// by NVRTC when it is present, and verified, with its plan and, from
// Optimize, the run's report.
type Result struct {
	// Model is what it was compiled from.
	Model *Model
	// Plan is plan.json: the program's provenance, buffers and launches.
	Plan *plan.Plan
	// Report is what report.md shows (nil from Compile).
	Report *report.Report
	// Search is the optimize loop's outcome (nil from Compile).
	Search *Outcome
	// Verified says what verification passed ("" when it was skipped).
	Verified string

	src   *source
	final *final
	em    *emitter
	start time.Time
	// keep stores the plan for the model's next run once the folder is
	// written (Optimize only).
	keep func(*plan.Plan) error
}

// Optimize searches the fastest program of m it can verify within
// o.Budget: the naive program, then saturation stages (the fusion rules,
// then every rule set; a model whose layers repeat is searched on two of
// them and the result replayed on all), each ending with the program the
// cost model of o.Target predicts fastest. With a budget, each better
// program is finalized (NVRTC, verification under the CPU emulation)
// while the next stage runs, so that the best verified program so far is
// always at hand; ctx's cancellation ends the search the same way. With
// o.Measure, the chosen kernels are measured through o.Worker and
// recorded in the tuning database; GPU times override the cost model and
// the program is extracted again. The model's last verified plan, kept
// beside the tuning database, is the program to beat.
//
// The result is written by Result.Write, which keeps the plan for the
// next run and writes the report. Errors: KindOption for an unusable
// option, KindNoDevice for MeasureGPU without a GPU, ErrNothingVerified
// when nothing was verified in time, KindInput when the model cannot be
// compiled.
func Optimize(ctx context.Context, m *Model, o Options) (*Result, error) {
	start := time.Now()
	o = o.withDefaults()
	switch o.Measure {
	case MeasureAuto, MeasureGPU, MeasureEmulated, MeasureNone:
	default:
		return nil, optionErrorf("--measure %q: want auto, gpu, emulated or none", o.Measure)
	}
	if o.Budget < 0 {
		return nil, optionErrorf("--budget %v: want a duration, 0 for none", o.Budget)
	}
	g, model := m.Graph, m.Name
	if err := (Feeds{Ranges: o.InputRanges}).checkRanges(g); err != nil {
		return nil, err
	}
	if err := checkExpect(g, o.Expect); err != nil {
		return nil, err
	}
	sat, _, cm, err := o.price(ctx, g)
	if err != nil {
		return nil, err
	}
	if err := CheckMemory(m, cm.Device); err != nil {
		return nil, err
	}
	if err := CheckQuantizedExperts(m); err != nil {
		return nil, err
	}
	sat.IterLimit, sat.NodeLimit = o.IterLimit, o.NodeLimit
	sel, err := o.Rules.resolve(ctx, g)
	if err != nil {
		return nil, err
	}
	stages, err := sel.stages()
	if err != nil {
		return nil, err
	}
	src := &source{model: m, sat: sat, m: cm, arch: o.Arch, feeds: Feeds{Ranges: o.InputRanges}}

	where := ""
	switch {
	case o.Workers != "" && o.Measure == MeasureNone:
		return nil, optionErrorf("--workers measures on a fleet: give --measure gpu, emulated or auto, not none")
	case o.Workers != "" && o.Measure == MeasureEmulated:
		where = measure.WhereEmulated
	case o.Workers != "":
		// The fleet's GPUs measure: none is needed here.
		where = measure.WhereGPU
	case o.Measure == MeasureGPU || o.Measure == MeasureAuto:
		if _, err := gpu.Open(); err != nil {
			if o.Measure == MeasureGPU {
				return nil, withKind(KindNoDevice, fmt.Errorf("--measure gpu: %w (--measure emulated measures under the CPU emulation instead)", err))
			}
			break
		}
		where = measure.WhereGPU
	case o.Measure == MeasureEmulated:
		where = measure.WhereEmulated
	}
	kind := ""
	if o.Workers != "" {
		if err := fleet.CheckURL(o.Workers); err != nil {
			return nil, optionErrorf("--workers: %v", err)
		}
		if kind, err = fleet.ResolveKind(cm.Device.Name); err != nil {
			return nil, optionErrorf("--workers: the target %s: %v", cm.Device.Name, err)
		}
	} else if where != "" && o.Worker == nil {
		return nil, optionErrorf("measuring on %s needs Options.Worker (a process serving the measure protocol, such as lumsearch worker)", where)
	}

	em := newEmitter(o.Events)
	em.logf("optimize %s for %s (%s), budget %s, seed %d", model, cm.Device.Name, o.Arch, budgetText(o.Budget), o.Seed)
	noteTuneDB(em, o.TuneDB)
	var measurer kernelMeasurer
	switch {
	case o.Workers != "":
		fm := dialFleet(ctx, o.Workers, kind, where, o.Fleet, em)
		if fm.gone == nil {
			em.logf("  measuring on the fleet at %s: the tune-workers of %s (%s)", fleetURL(o.Workers), kind, where)
		}
		measurer = fm
	case where != "":
		measurer = localMeasurer{&measure.Client{Command: func() *exec.Cmd { return o.Worker(where) }, Timeout: 2 * time.Minute}}
	}
	if measurer != nil {
		defer measurer.Close()
	}
	var measured []kernelMeasurement
	cfg := Config{
		Stages: stages,
		Sat:    sat,
		Budget: o.Budget,
		Events: em.send,
		Dump:   o.Dump,
		Price: func(ctx context.Context, c *Candidate) error {
			lc, err := lowerAndPrint(g, c.Program, cm)
			if err != nil {
				return err
			}
			c.Prepared, c.Cost = lc, runCost(lc)
			return nil
		},
		Finalize: func(ctx context.Context, c *Candidate) error {
			lc, _ := c.Prepared.(*compiled)
			if lc == nil {
				var err error
				if lc, err = lowerAndPrint(g, c.Program, cm); err != nil {
					return err
				}
			}
			var log bytes.Buffer
			f, err := finalize(ctx, src, lc, !o.NoVerify, c.Insurance, &log)
			em.log(log.String())
			if err != nil {
				return err
			}
			c.Final = f
			c.Verified = f.verified
			if o.NoVerify {
				c.Verified = "not verified (--verify=false)"
			}
			return nil
		},
	}
	if measurer != nil {
		cfg.Rounds = 1
		if where == measure.WhereGPU {
			cfg.Rounds = 3
		}
		mr := &measureRounds{g: g, sat: sat, m: cm, measurer: measurer, o: o, where: where, em: em, done: map[string]bool{}}
		cfg.Measure = func(ctx context.Context, c *Candidate) (*Candidate, error) {
			next, err := mr.round(ctx, c)
			measured = mr.measured
			return next, err
		}
	}
	// The tuning database as the run read it, before it adds records.
	dbHash := tuneDBHash(o.TuneDB)
	storeKey := planStoreKey(m, o, sel)
	if prev, err := previousPlan(o.TuneDB, storeKey, m, cm); err != nil {
		em.logf("  note: the previous run's plan is not used: %v", err)
	} else if prev != nil {
		cfg.Initial = []*Candidate{prev}
		em.logf("  previous run: its plan (%s per run predicted) is the program to beat", Seconds(prev.Cost))
	}
	res, err := Run(ctx, g, cfg)
	if err != nil {
		if errors.Is(err, ErrNothingVerified) {
			return nil, err
		}
		if res == nil || res.Best == nil {
			return nil, withKind(KindInput, fmt.Errorf("optimize %s: %w", model, err))
		}
	}
	best := res.Best.Final.(*final)
	pl, err := buildPlan(src, best)
	if err != nil {
		return nil, withKind(KindOutput, err)
	}
	if o.Command == "" {
		o.Command = o.canonical(m.Options)
	}
	pl.Seed, pl.Command = o.Seed, o.Command
	if pl.RulesHash, err = rules.SetsHash(); err != nil {
		return nil, err
	}
	pl.TuneDBHash = dbHash
	if err := sel.record(pl, res.Best.Program); err != nil {
		return nil, err
	}
	// The report is built even after Ctrl-C: the folder must be whole.
	rep := buildReport(context.WithoutCancel(ctx), m, o, sel, res, best, cm, measured, where)
	rep.RuleFiles, rep.RulesUsed = pl.RuleFiles, pl.RulesUsed
	if o.Ablate {
		ablate(ctx, rep, g, sel, sat, res, o.Budget, start)
	} else {
		rep.Ablation = "not computed (--ablate=false)"
	}
	if o.Budget > 0 {
		rep.Budget = o.Budget
	}
	r := &Result{Model: m, Plan: pl, Report: rep, Search: res, Verified: res.Best.Verified, src: src, final: best, em: em, start: start}
	r.keep = func(pl *plan.Plan) error { return storePlan(o.TuneDB, storeKey, pl) }
	return r, nil
}

// budgetText is a budget for people.
func budgetText(b time.Duration) string {
	if b == 0 {
		return "none (work limits)"
	}
	return b.String()
}

// measureRounds measures the chosen program's kernels through the worker
// and, on a GPU, extracts the program again with the measured times.
type measureRounds struct {
	g        *ir.Graph
	sat      rules.SaturateOptions
	m        *cost.Model
	measurer kernelMeasurer
	o        Options
	where    string
	em       *emitter
	done     map[string]bool // kernel body and schedule measured
	measured []kernelMeasurement
}

// round measures c's kernels and returns the candidate to finalize
// instead (c itself when nothing changed).
func (r *measureRounds) round(ctx context.Context, c *Candidate) (*Candidate, error) {
	lc, _ := c.Prepared.(*compiled)
	if lc == nil {
		return c, nil
	}
	ms, err := measureKernels(ctx, lc, r.m, r.measurer, r.o.Candidates, r.o.Seed, r.o.TuneDB, r.done, r.em)
	r.measured = append(r.measured, ms...)
	if errors.Is(err, fleet.ErrUnavailable) {
		// The fleet is gone (or never came): what it measured is kept
		// and used; the rest is the cost model's. Said here, and in the
		// report's notes through the search's note on the error.
		err = fmt.Errorf("%w; the kernels it did not measure are priced by the cost model", err)
		r.em.logf("  measure: %v", err)
		if r.where != measure.WhereGPU || len(ms) == 0 {
			return c, err
		}
		err = nil // extract again with the GPU times the fleet gave
	}
	if err != nil || r.where != measure.WhereGPU {
		// Emulated times are CPU times: recorded apart and reported,
		// never fed back into a GPU's extraction.
		return c, err
	}
	db, err := openTuneDB(r.o.TuneDB)
	if err != nil {
		return c, err
	}
	r.m.Measurements = cost.NewDBMeasurements(db)
	// Measured times override predictions: extract again (a previous
	// run's program keeps its launches) and print in the schedules that
	// measured fastest.
	next := &Candidate{Stage: c.Stage, Program: c.Program}
	var nc *compiled
	if c.Program == nil {
		ks, err := cuda.PrintProgramWith(lc.lowered, r.m.Ranked)
		if err != nil {
			return c, err
		}
		nc = &compiled{lowered: lc.lowered, kernels: ks}
	} else {
		prog, err := c.Program.Reextract(ctx, r.sat.Cost)
		if err != nil {
			return c, err
		}
		if nc, err = lowerAndPrint(r.g, prog, r.m); err != nil {
			return c, err
		}
		next.Program = prog
	}
	if cuda.Source(nc.kernels) == cuda.Source(lc.kernels) && len(nc.lowered.Run) == len(lc.lowered.Run) {
		return c, nil // nothing changed: the rounds end
	}
	if !strings.HasSuffix(next.Stage, "+measured") {
		next.Stage += "+measured"
	}
	next.Prepared, next.Cost = nc, runCost(nc)
	return next, nil
}
