package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/tunedb"
)

// optimizeCommand is the product: the budgeted search.
var optimizeCommand = &command{
	name:     "optimize",
	summary:  "search a model's fastest verified program within a time budget and write it with a report",
	synopsis: "optimize MODEL.onnx|CORPUS-NAME|HF-FOLDER -o DIR [--budget 10m] [--target NAME] [--measure auto|gpu|emulated|none] [--seed N] [--json] [--dump DIR] [...]",
	doc: `
"optimize" searches the fastest program it can verify for a model within
--budget, and writes it to DIR. The model is an ONNX file (its symbolic
dimensions bound with --dim), a corpus name (see "lumsearch corpus list"),
or a folder holding a Hugging Face config.json (and optionally its
safetensors weights), built as --kind.

The search runs in phases under the one budget: the naive program (one
kernel per op, the reference for every speed-up), then saturation stages
(the fusion rules, then every rule set; a model whose layers repeat is
searched on two of them and the result replayed on all), each ending with
the program the cost model of --target predicts fastest; with a budget,
each better program is lowered, compiled and verified while the next stage
runs, so that the best verified program so far is always at hand. Then,
with --measure, the chosen kernels' best schedules are measured through a
worker process (on the GPU, or under the CPU emulation with --measure
emulated, whose times are CPU times and labelled so) and recorded in the
tuning database; GPU times override the cost model's predictions and the
program is extracted again. The last program is finalized as "compile"
does it: NVRTC, and verification under the CPU emulation (every distinct
kernel at its real shapes, and the architecture at a reduced size).

The budget is kept: the command ends within max(2 s, 2%) of --budget with
the best verified program found. Ctrl-C does the same. When work limits
(--iter-limit, --node-limit) rather than the clock end the search, two runs
with the same input, seed and options write identical files.

DIR receives what "compile" writes (kernels.cu, model.h, model.cpp,
plan.json with the run's provenance, constants.safetensors, the Go package
in DIR/go, weights.safetensors for a model with weights) and report.md
with its charts in DIR/report/.

Exit status: 0 done; 2 bad command line; 3 the model cannot be read or
compiled (unreadable file, unsupported op, unbound dimension); 4 no GPU for
--measure gpu; 5 DIR cannot be written; 6 nothing was verified within the
budget; 1 any other failure.`,
	example: `
lumsearch optimize llama-3-8b:layer --seq 16 --budget 2m -o out/
lumsearch optimize model.onnx --dim batch=1 --dim sequence=128 --target h100 --budget 10m -o out/
lumsearch optimize ./Llama-3.2-1B/ --kind model --seq 512 --measure gpu -o out/
lumsearch optimize tiny-llama:layer --iter-limit 8 --json -o out/`,
	setup: func(fs *flag.FlagSet) action {
		o := optimizeOptions{dims: dimFlags{}}
		fs.StringVar(&o.out, "o", "", "the output `DIR`")
		fs.DurationVar(&o.budget, "budget", 10*time.Minute, "the run's time budget, output included (0: none, the work limits end it)")
		fs.StringVar(&o.target, "target", "h100-sxm", "the device the cost model prices for (h100, a100, ...; auto: the GPU here)")
		fs.StringVar(&o.arch, "arch", "", "the architecture NVRTC compiles for: sm_80 or sm_90 (default: the target's)")
		fs.IntVar(&o.seq, "seq", corpus.DefaultSeq, "tokens per sequence (a decode step's cache size)")
		fs.StringVar(&o.dtype, "dtype", "f32", "dtype of weights and activations for corpus and config models: f32, f16 or bf16")
		fs.StringVar(&o.kind, "kind", "model", "what to build from a Hugging Face folder: model, layer, decode, ...")
		fs.Var(o.dims, "dim", "an ONNX model's symbolic dimension `NAME=VALUE` (repeatable)")
		fs.Uint64Var(&o.seed, "seed", 1, "seeds random weights, inputs and samples")
		fs.StringVar(&o.measureMode, "measure", "auto", "where to measure kernels: auto (the GPU when there is one), gpu, emulated or none")
		fs.IntVar(&o.candidates, "candidates", 8, "kernels measured (each in its best schedules)")
		fs.IntVar(&o.iterLimit, "iter-limit", 0, "saturation iterations per stage (0: 30)")
		fs.IntVar(&o.nodeLimit, "node-limit", 0, "e-nodes per stage (0: 200,000)")
		fs.BoolVar(&o.json, "json", false, "print progress as one JSON event per line")
		fs.StringVar(&o.dump, "dump", "", "write the e-graph and the chosen program after every stage to `DIR`")
		fs.StringVar(&o.db, "tunedb", "", "the tuning database (default: $"+tunedb.EnvPath+" or the user cache folder)")
		fs.BoolVar(&o.verify, "verify", true, "verify under the CPU emulation (needs g++)")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: optimize MODEL -o DIR")
			}
			if o.out == "" {
				return usagef("optimize needs -o DIR")
			}
			o.model = pos[0]
			return optimize(ctx, o, stdout)
		}
	},
}

// optimizeOptions are optimize's flags.
type optimizeOptions struct {
	model, out, target, arch, dtype, kind string
	seq                                   int
	dims                                  dimFlags
	seed                                  uint64
	budget                                time.Duration
	measureMode                           string
	candidates, iterLimit, nodeLimit      int
	json                                  bool
	dump, db                              string
	verify                                bool
}

// Exit codes of optimize's failures a user can act on.
const (
	exitInput    = 3 // the model cannot be read or compiled
	exitNoDevice = 4 // --measure gpu without a GPU
	exitOutput   = 5 // the output folder cannot be written
	exitBudget   = 6 // nothing verified within the budget
)

// codedError is a failure with its own exit code.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// canonical is the options as text, in a fixed order, for plan.json and
// the report.
func (o optimizeOptions) canonical() string {
	return fmt.Sprintf("seq=%d dtype=%s kind=%s dims=%s target=%s arch=%s budget=%v measure=%s candidates=%d iter-limit=%d node-limit=%d verify=%v",
		o.seq, o.dtype, o.kind, o.dims, o.target, o.arch, o.budget, o.measureMode, o.candidates, o.iterLimit, o.nodeLimit, o.verify)
}

// resolveInput turns optimize's MODEL argument into a graph: an ONNX
// file, a folder with a Hugging Face config.json (built as kind, with its
// safetensors weights when there are any), or a corpus name.
func resolveInput(model, kind string, opt corpus.Options, dims dimFlags) (name string, g *ir.Graph, weights map[string]*ir.Tensor, closeFn func(), err error) {
	if st, statErr := os.Stat(model); statErr == nil && st.IsDir() {
		cfgPath := filepath.Join(model, "config.json")
		cfg, err := corpus.LoadConfig(cfgPath)
		if err != nil {
			return "", nil, nil, nil, err
		}
		name = cfgPath + ":" + kind
		g, err := corpus.BuildConfig(name, cfg, kind, opt)
		if err != nil {
			return "", nil, nil, nil, err
		}
		matches, _ := filepath.Glob(filepath.Join(model, "*.safetensors"))
		if len(matches) > 0 {
			w, set, err := corpus.SafetensorsWeights(g, model)
			if err != nil {
				return "", nil, nil, nil, err
			}
			return name, g, w, func() { set.Close() }, nil
		}
		return name, g, nil, func() {}, nil
	}
	g, weights, closeFn, err = loadGraph(model, opt, dims)
	return model, g, weights, closeFn, err
}

// optimize runs the command.
func optimize(ctx context.Context, o optimizeOptions, stdout io.Writer) error {
	start := time.Now()
	dt, err := ir.ParseDType(o.dtype)
	if err != nil || !dt.IsFloat() {
		return usagef("--dtype %s: want f32, f16 or bf16", o.dtype)
	}
	switch o.measureMode {
	case "auto", "gpu", "emulated", "none":
	default:
		return usagef("--measure %q: want auto, gpu, emulated or none", o.measureMode)
	}
	if o.budget < 0 {
		return usagef("--budget %v: want a duration, 0 for none", o.budget)
	}
	// Learn that the output folder is unusable now, not after the search.
	if err := probeOutput(o.out); err != nil {
		return withCode(exitOutput, err)
	}
	opt := corpus.Options{Seq: o.seq, Past: -1, DType: dt}
	model, g, weights, closeModel, err := resolveInput(o.model, o.kind, opt, o.dims)
	if err != nil {
		if isUsage(err) {
			return err
		}
		return withCode(exitInput, fmt.Errorf("model %s: %w", o.model, err))
	}
	defer closeModel()
	price := pricing{estimate: "model", target: o.target, db: o.db}
	sat, _, m, err := price.options(ctx)
	if err != nil {
		return err
	}
	if o.arch == "" {
		o.arch = m.Device.Arch
	}
	if o.arch != "sm_80" && o.arch != "sm_90" {
		return usagef("--arch %s: want sm_80 or sm_90 (NVRTC 11.8's targets)", o.arch)
	}
	sat.IterLimit, sat.NodeLimit = o.iterLimit, o.nodeLimit
	src := &source{model: model, g: g, weights: weights, opt: opt, dims: o.dims, sat: sat, m: m, arch: o.arch}

	var measurer *measure.Client
	where := ""
	switch o.measureMode {
	case "gpu", "auto":
		if _, err := gpu.Open(); err != nil {
			if o.measureMode == "gpu" {
				return withCode(exitNoDevice, fmt.Errorf("--measure gpu: %w (--measure emulated measures under the CPU emulation instead)", err))
			}
			break
		}
		where = measure.WhereGPU
	case "emulated":
		where = measure.WhereEmulated
	}
	if where != "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("optimize: the worker is this program, which cannot be found: %w", err)
		}
		measurer = &measure.Client{Command: func() *exec.Cmd { return exec.Command(exe, "worker", "--measure", where) }, Timeout: 2 * time.Minute}
		defer measurer.Close()
	}

	ev := newProgress(stdout, o.json, o.budget)
	ev.printf("optimize %s for %s (%s), budget %s, seed %d\n", model, m.Device.Name, o.arch, budgetText(o.budget), o.seed)
	var logMu sync.Mutex
	var measured []kernelMeasurement
	cfg := search.Config{
		Sat:    sat,
		Budget: o.budget,
		Events: ev.event,
		Dump:   o.dump,
		Price: func(ctx context.Context, c *search.Candidate) error {
			lc, err := lowerAndPrint(g, c.Program, m)
			if err != nil {
				return err
			}
			c.Prepared, c.Cost = lc, runCost(lc)
			return nil
		},
		Finalize: func(ctx context.Context, c *search.Candidate) error {
			lc, _ := c.Prepared.(*compiled)
			if lc == nil {
				var err error
				if lc, err = lowerAndPrint(g, c.Program, m); err != nil {
					return err
				}
			}
			var log bytes.Buffer
			f, err := finalize(ctx, src, lc, o.verify, &log)
			logMu.Lock()
			ev.log(log.String())
			logMu.Unlock()
			if err != nil {
				return err
			}
			c.Final = f
			c.Verified = f.verified
			if !o.verify {
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
		done := map[string]bool{} // kernel body and schedule measured
		cfg.Measure = func(ctx context.Context, c *search.Candidate) (*search.Candidate, error) {
			lc, _ := c.Prepared.(*compiled)
			if lc == nil {
				return c, nil
			}
			ms, err := measureKernels(ctx, lc, m, measurer, o.candidates, o.seed, o.db, done, ev)
			measured = append(measured, ms...)
			if err != nil || where != measure.WhereGPU {
				// Emulated times are CPU times: recorded apart and
				// reported, never fed back into a GPU's extraction.
				return c, err
			}
			db, err := openTuneDB(o.db)
			if err != nil {
				return c, err
			}
			m.Measurements = cost.NewDBMeasurements(db)
			// Measured times override predictions: extract again (a
			// previous run's program keeps its launches) and print in
			// the schedules that measured fastest.
			next := &search.Candidate{Stage: c.Stage, Program: c.Program}
			var nc *compiled
			if c.Program == nil {
				ks, err := cuda.PrintProgramWith(lc.lowered, m.Ranked)
				if err != nil {
					return c, err
				}
				nc = &compiled{lowered: lc.lowered, kernels: ks}
			} else {
				prog, err := c.Program.Reextract(ctx, sat.Cost)
				if err != nil {
					return c, err
				}
				if nc, err = lowerAndPrint(g, prog, m); err != nil {
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
	}
	// The tuning database as the run read it, before it adds records.
	dbHash := tuneDBHash(o.db)
	storeKey := planStoreKey(model, o)
	if prev, err := previousPlan(o.db, storeKey, model, g, m); err != nil {
		ev.printf("  note: the previous run's plan is not used: %v\n", err)
	} else if prev != nil {
		cfg.Initial = []*search.Candidate{prev}
		ev.printf("  previous run: its plan (%s per run predicted) is the program to beat\n", seconds(prev.Cost))
	}
	res, err := search.Run(ctx, g, cfg)
	if err != nil {
		if errors.Is(err, search.ErrNothingVerified) {
			return withCode(exitBudget, err)
		}
		if res == nil || res.Best == nil {
			return withCode(exitInput, fmt.Errorf("optimize %s: %w", model, err))
		}
	}
	// The output is written even after Ctrl-C: the folder must be whole.
	wctx := context.WithoutCancel(ctx)
	best := res.Best.Final.(*final)
	ev.phase("write")
	var out bytes.Buffer
	pl, err := writeOutput(wctx, o.out, src, best, &out)
	ev.log(out.String())
	if err != nil {
		return withCode(exitOutput, err)
	}
	pl.Seed, pl.Command = o.seed, o.canonical()
	pl.RulesHash, err = rules.SetsHash()
	if err != nil {
		return err
	}
	pl.TuneDBHash = dbHash
	if err := pl.Write(o.out); err != nil {
		return withCode(exitOutput, err)
	}
	if err := storePlan(o.db, storeKey, pl); err != nil {
		ev.printf("  note: the plan was not kept for the next run: %v\n", err)
	}
	rep := buildReport(wctx, model, g, o, res, best, m, measured, where)
	if o.budget > 0 {
		rep.Budget, rep.Elapsed = o.budget, time.Since(start)
	}
	if err := rep.WriteFiles(o.out); err != nil {
		return withCode(exitOutput, err)
	}
	ev.done(rep, o.out, time.Since(start))
	return nil
}

// tuneDBHash is the SHA-256 of the tuning database's file ("" when there
// is none).
func tuneDBHash(path string) string {
	if path == "" {
		var err error
		if path, err = tunedb.DefaultPath(); err != nil {
			return ""
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// budgetText is a budget for people.
func budgetText(b time.Duration) string {
	if b == 0 {
		return "none (work limits)"
	}
	return b.String()
}

// probeOutput makes sure dir exists (creating it) and takes files.
func probeOutput(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".lumsearch-probe-*")
	if err != nil {
		return fmt.Errorf("output folder %s cannot be written: %w", dir, err)
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// kernelMeasurement is one measured kernel schedule, for the report.
type kernelMeasurement struct {
	kernel    string
	schedule  string
	predicted float64
	resp      measure.Response
}

// measureKernels measures the most expensive distinct kernels of a
// printed program (by predicted time per run, n at most) in their best
// schedules through the worker, skipping those done holds (and adding the
// rest), and records the measurements in the tuning database.
func measureKernels(ctx context.Context, c *compiled, m *cost.Model, client *measure.Client, n int, seed uint64, dbPath string, done map[string]bool, ev *progress) ([]kernelMeasurement, error) {
	lp := c.lowered
	type item struct {
		k     *cuda.Kernel
		body  *ir.Graph
		total float64
	}
	byKernel := map[*cuda.Kernel]*item{}
	var items []*item
	for i, l := range lp.Run {
		k := c.kernels[len(lp.Prep)+i]
		it := byKernel[k]
		if it == nil {
			it = &item{k: k, body: l.Body}
			byKernel[k] = it
			items = append(items, it)
		}
		if k.Estimate != nil {
			it.total += k.Estimate.Seconds
		}
	}
	slices.SortStableFunc(items, func(a, b *item) int { return cmpDesc(a.total, b.total) })
	items = items[:min(n, len(items))]
	db, err := openTuneDB(dbPath)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	var out []kernelMeasurement
	id := int64(0)
	for _, it := range items {
		ranked, err := m.Ranked(it.body)
		if err != nil {
			return out, err
		}
		for _, est := range ranked[:min(len(ranked), 1+cuda.Alternatives)] {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			key := it.body.String() + "\n" + est.Schedule.String()
			if done[key] {
				continue
			}
			done[key] = true
			id++
			req := measure.Request{ID: id, Body: it.body.String(), Schedule: est.Schedule.String(), Seed: seed}
			resp, err := client.Measure(ctx, req)
			if err != nil {
				return out, err
			}
			km := kernelMeasurement{kernel: it.k.Name, schedule: req.Schedule, predicted: est.Seconds, resp: resp}
			out = append(out, km)
			if !resp.OK {
				ev.log(fmt.Sprintf("  measure: %s %s failed: %s\n", it.k.Name, req.Schedule, resp.Error))
				continue
			}
			ev.log(fmt.Sprintf("  measure: %s %s: %s (%s), predicted %s\n", it.k.Name, req.Schedule, seconds(resp.Median), resp.Where, seconds(est.Seconds)))
			rec := tunedb.Record{
				Key:       tunedb.Key{Spec: req.Body, Schedule: resp.Schedule, Shapes: shapesOf(it.body), DTypes: dtypesOf(it.body), Device: m.Device.Name},
				Median:    resp.Median,
				Spread:    resp.IQR,
				Samples:   resp.Samples,
				Where:     resp.Where,
				Host:      host,
				At:        time.Now().UTC(),
				Predicted: est.Seconds,
			}
			switch resp.Where {
			case measure.WhereGPU:
				rec.Where = tunedb.WhereGPU
				rec.Key.Driver, rec.Key.Compiler = "unknown", "nvrtc"
			default:
				// Emulated times are stored apart from every device's.
				rec.Where, rec.Key.Device, rec.Key.Compiler = tunedb.WhereEmulated, tunedb.WhereEmulated, "g++"
			}
			if err := db.Append(rec); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// shapesOf and dtypesOf describe a kernel body's inputs for the tuning
// database's key.
func shapesOf(body *ir.Graph) string {
	var parts []string
	for _, v := range body.Inputs() {
		parts = append(parts, body.Node(v).Shape.String())
	}
	return strings.Join(parts, " ")
}

func dtypesOf(body *ir.Graph) string {
	var parts []string
	for _, v := range body.Inputs() {
		parts = append(parts, body.Node(v).DType.String())
	}
	return strings.Join(parts, " ")
}

// openTuneDB opens the tuning database at path ("" for the default).
func openTuneDB(path string) (*tunedb.DB, error) {
	if path == "" {
		var err error
		if path, err = tunedb.DefaultPath(); err != nil {
			return nil, err
		}
	}
	return tunedb.Open(path)
}

// buildReport fills the run's report.
func buildReport(ctx context.Context, model string, g *ir.Graph, o optimizeOptions, res *search.Result, best *final, m *cost.Model, measured []kernelMeasurement, where string) *search.Report {
	rep := &search.Report{Model: model, Target: m.Device.Name, Arch: o.arch, Version: versionString(), Seed: o.seed, Options: o.canonical(),
		EndedBy: res.EndedBy, Steps: res.Steps, Notes: res.Notes}
	if where != "" {
		rep.Measured = where
	}
	lp := best.lowered
	cats := map[string]*search.Category{}
	cat := func(name string) *search.Category {
		if cats[name] == nil {
			cats[name] = &search.Category{Name: name}
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
		row := search.Kernel{Launch: l.Name, Kernel: k.Name, Form: form, Schedule: k.Schedule.String(), Predicted: pred}
		if km, ok := measuredBy[k.Name]; ok && km.schedule == row.Schedule {
			row.Measured, row.Where = km.resp.Median, km.resp.Where
		}
		rep.Kernels = append(rep.Kernels, row)
		c := cat(category(row.Form))
		c.Launches++
		c.Predicted += pred
	}
	// The naive program priced as it would run, like the others.
	naiveCost := res.Naive.Cost
	if nc, err := lowerAndPrint(g, res.Naive, m); err == nil {
		naiveCost = runCost(nc)
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
	for _, name := range slices.Sorted(mapsKeys(cats)) {
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
	rep.Summary = search.Summary{Launches: len(lp.Run), NaiveLaunches: res.Naive.Kernels, Prep: len(lp.Prep),
		Predicted: res.Best.Cost, Naive: naiveCost, Verified: res.Best.Verified}
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
		rep.RuleSets = ruleSets(searched)
	}
	if res.Best.Program == nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the program is the previous run's (stage %q): this run found none predicted faster", res.Best.Stage))
	}
	rep.Summary.FloorBytes, rep.Summary.FloorFLOPs, rep.Summary.Floor = floor(g, m)
	return rep
}

// category is a kernel form's category: the form without its prologue
// and epilogue ("matmul, prologue [...]" is a matmul).
func category(form string) string {
	c, _, _ := strings.Cut(form, ",")
	return strings.TrimSpace(c)
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

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// floor is a graph's unavoidable time on m's device: every input, weight,
// state and output read or written once from DRAM, against its matmuls'
// arithmetic at the achievable peak of their dtype, whichever is larger.
func floor(g *ir.Graph, m *cost.Model) (bytes, flops, seconds float64) {
	if g == nil {
		return 0, 0, 0
	}
	for _, n := range g.Nodes {
		switch n.Op {
		case ir.OpInput, ir.OpWeight:
			bytes += float64(n.Shape.NumElements()) * float64(n.DType.Size())
		case ir.OpState:
			bytes += 2 * float64(n.Shape.NumElements()) * float64(n.DType.Size())
		case ir.OpMatMul:
			a := g.Node(n.Inputs[0])
			k := float64(a.Shape[len(a.Shape)-1])
			flops += 2 * float64(n.Shape.NumElements()) * k
		}
	}
	for _, o := range g.Outputs {
		n := g.Node(o.Value)
		bytes += float64(n.Shape.NumElements()) * float64(n.DType.Size())
	}
	d := m.Device
	bw := d.MemoryBandwidth * math.Max(d.MemoryAchievable, 1e-9)
	seconds = bytes / bw
	dt := "f32"
	for _, n := range g.Nodes {
		if n.Op == ir.OpMatMul {
			dt = n.DType.String()
			break
		}
	}
	class := cost.FMA
	if dt == "f16" || dt == "bf16" {
		class = cost.MMA
	}
	if p, ok := d.Peak(class, dt); ok && p.FLOPS > 0 {
		seconds = math.Max(seconds, flops/(p.FLOPS*math.Max(p.Achievable, 1e-9)))
	}
	return bytes, flops, seconds
}

// ruleSets says what each rule set did in the final program's search.
func ruleSets(prog *rules.Program) []search.RuleSet {
	fired := map[string]map[string]bool{}
	matches := map[string]int{}
	reports := []*rules.Program{prog}
	if prog.Block != nil && prog.Block.Pair != nil {
		reports = append(reports, prog.Block.Pair)
	}
	setOf := map[string]string{}
	sizes := map[string]int{}
	for _, s := range rules.Sets() {
		rws, err := rules.SetRewrites(s)
		if err != nil {
			continue
		}
		sizes[s] = len(rws)
		for _, rw := range rws {
			setOf[rw.Name()] = s
		}
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
	var out []search.RuleSet
	for _, s := range rules.Sets() {
		out = append(out, search.RuleSet{Name: s, Rules: sizes[s], Fired: len(fired[s]), Matches: matches[s]})
	}
	return out
}

// progress renders the search's events: one JSON object a line with
// --json; on a terminal, a status line redrawn in place; otherwise a line
// per phase and result.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	json     bool
	terminal bool
	budget   time.Duration
	status   bool // a status line is on screen
	enc      *json.Encoder
}

func newProgress(w io.Writer, asJSON bool, budget time.Duration) *progress {
	p := &progress{w: w, json: asJSON, budget: budget, enc: json.NewEncoder(w)}
	if f, ok := w.(*os.File); ok && !asJSON {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

// clearStatus ends a status line before other output.
func (p *progress) clearStatus() {
	if p.status {
		fmt.Fprint(p.w, "\r\033[K")
		p.status = false
	}
}

// printf prints a line of text (not in JSON mode, where it becomes a note).
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(search.Event{Kind: "note", Message: strings.TrimSpace(fmt.Sprintf(format, args...))})
		return
	}
	p.clearStatus()
	fmt.Fprintf(p.w, format, args...)
}

// log prints the lines a phase reported (JSON mode: one note each).
func (p *progress) log(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(line) != "" {
			p.printf("%s\n", line)
		}
	}
}

func (p *progress) phase(name string) {
	p.event(search.Event{Kind: "phase", Phase: name})
}

func (p *progress) event(e search.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(e)
		return
	}
	left := ""
	if e.Remaining != nil {
		left = fmt.Sprintf(", %.1fs left", *e.Remaining)
	}
	switch e.Kind {
	case "step":
		if p.terminal {
			best := "none yet"
			if e.Best > 0 {
				best = seconds(e.Best)
			}
			fmt.Fprintf(p.w, "\r\033[K  [%s %.1fs%s] e-graph %d e-nodes, %d classes; best %s", e.Stage, e.Elapsed, left, e.Nodes, e.Classes, best)
			p.status = true
		}
		return
	case "phase":
		p.clearStatus()
		what := e.Phase
		if e.Stage != "" {
			what += " " + e.Stage
		}
		fmt.Fprintf(p.w, "- %s (%.1fs%s)\n", what, e.Elapsed, left)
	case "candidate":
		p.clearStatus()
		fmt.Fprintf(p.w, "  stage %s: %s per run predicted, %s; e-graph %d e-nodes\n", e.Stage, seconds(e.Best), e.Message, e.Nodes)
	case "verified":
		p.clearStatus()
		fmt.Fprintf(p.w, "  verified the %s program: %s per run predicted\n", e.Stage, seconds(e.Verified))
	case "rejected":
		p.clearStatus()
		fmt.Fprintf(p.w, "  rejected the %s program: %s\n", e.Stage, e.Message)
	case "note":
		p.clearStatus()
		fmt.Fprintf(p.w, "  note: %s\n", e.Message)
	case "done":
		p.clearStatus()
		fmt.Fprintf(p.w, "- search done (%.1fs): %s\n", e.Elapsed, e.Message)
	}
}

// done prints the run's summary.
func (p *progress) done(rep *search.Report, dir string, elapsed time.Duration) {
	s := rep.Summary
	perLayer := ""
	if s.Layers > 0 {
		perLayer = fmt.Sprintf(" (%.1f per layer over %d layers)", float64(s.Launches)/float64(s.Layers), s.Layers)
	}
	speedup := 0.0
	if s.Predicted > 0 {
		speedup = s.Naive / s.Predicted
	}
	msg := fmt.Sprintf("optimized %s: %d launches per run%s, %s per run predicted against %s for the naive program (%.2fx; floor %s); ended by %s after %v; wrote %s",
		rep.Model, s.Launches, perLayer, seconds(s.Predicted), seconds(s.Naive), speedup, seconds(s.Floor), rep.EndedBy, elapsed.Round(time.Millisecond), dir)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(struct {
			search.Event
			Summary search.Summary `json:"summary"`
			Dir     string         `json:"dir"`
		}{search.Event{Kind: "result", Elapsed: elapsed.Seconds(), Message: msg}, s, dir})
		return
	}
	p.clearStatus()
	fmt.Fprintln(p.w, msg)
}

// The tuning database keeps, beside its records, the plan of each model's
// last optimize run, so that the next run of the same model starts from it
// and is never predicted slower (DESIGN.md: a tuning database makes the
// next run incremental).

// planStoreKey names a model's plan in the store: everything that makes
// the same program mean the same thing (model, build options, target,
// architecture, rules), but not the budget or limits, which only decide
// how far the search gets.
func planStoreKey(model string, o optimizeOptions) string {
	rulesHash, _ := rules.SetsHash()
	h := sha256.New()
	fmt.Fprintf(h, "lumsearch plan store 1\nmodel %s\nseq %d\ndtype %s\nkind %s\ndims %s\ntarget %s\narch %s\nrules %s\n",
		model, o.seq, o.dtype, o.kind, o.dims, o.target, o.arch, rulesHash)
	return hex.EncodeToString(h.Sum(nil))
}

// planStoreDir is the folder of kept plans beside the tuning database.
func planStoreDir(dbPath string) (string, error) {
	if dbPath == "" {
		var err error
		if dbPath, err = tunedb.DefaultPath(); err != nil {
			return "", err
		}
	}
	return dbPath + ".plans", nil
}

// previousPlan returns the kept plan of this model and options as a
// candidate, printed in the schedules the cost model ranks first now and
// priced as the search prices its own; nil when there is none.
func previousPlan(dbPath, key, model string, g *ir.Graph, m *cost.Model) (*search.Candidate, error) {
	dir, err := planStoreDir(dbPath)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, key+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pl, err := plan.Parse(key, data)
	if err != nil {
		return nil, err
	}
	lp, err := pl.Lowered(model)
	if err != nil {
		return nil, err
	}
	if err := matchesModel(g, lp); err != nil {
		return nil, fmt.Errorf("it does not fit %s: %w", model, err)
	}
	ks, err := cuda.PrintProgramWith(lp, m.Ranked)
	if err != nil {
		return nil, err
	}
	c := &compiled{lowered: lp, kernels: ks}
	return &search.Candidate{Stage: "previous run", Prepared: c, Cost: runCost(c)}, nil
}

// storePlan keeps a verified plan for the next run, replacing the file
// atomically so that a killed run leaves the old one whole.
func storePlan(dbPath, key string, pl *plan.Plan) error {
	dir, err := planStoreDir(dbPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := pl.Encode()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, key+".*.tmp")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, key+".json"))
}
