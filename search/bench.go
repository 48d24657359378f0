package search

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/rules"
)

// BenchOptions say how Bench and BenchDir measure.
type BenchOptions struct {
	// Measure is MeasureGPU (the zero value means it) or MeasureEmulated.
	Measure Measure
	// TuneDB is the tuning database the measurements go to ("" means
	// $LUMSEARCH_TUNEDB or the user cache's).
	TuneDB string
	// Seed seeds the random inputs and weights.
	Seed uint64
	// Save, when set, is a folder that receives the tensors fed
	// (inputs.safetensors), the compiled program's outputs
	// (outputs.safetensors) and the model's graph (graph.txt).
	Save string
	// MinRuns is the fewest timed runs of each measurement (0: the
	// timing package's default); MaxTime stops repeating a measurement
	// once MinRuns are done (0: its default).
	MinRuns int
	MaxTime time.Duration
	// Target and Arch say how Bench compiles a model, as Compile's
	// Options do ("" means DefaultTarget and its architecture); BenchDir
	// takes them from plan.json.
	Target, Arch string
	// Feeds say where the inputs come from (stated ranges for random
	// ones, or an inputs file) and what the compiled program's results
	// are compared with besides the naive program's (an outputs file).
	Feeds Feeds
	// Workers, when set, is the NATS URL of a measuring fleet: each
	// distinct kernel of both programs is measured by the fleet's
	// tune-workers of the target's kind (each checked against the
	// reference there), and the programs' times are the sums of their
	// launches' (see benchOnFleet). Nothing runs here; Save and Feeds'
	// files, which need the programs run here, cannot be used with it.
	Workers string
	// Fleet replaces the fleet client's waits, as Options.Fleet does.
	Fleet fleet.ClientOptions
}

func (o BenchOptions) bench() (bench, error) {
	b := bench{mode: o.Measure, dbPath: o.TuneDB, seed: o.Seed, save: o.Save, feeds: o.Feeds, rule: timing.Rule{Min: timing.DefaultMin, MaxTime: timing.DefaultMaxTime},
		workers: o.Workers, fleet: o.Fleet}
	if err := o.Feeds.checkFiles(); err != nil {
		return b, err
	}
	if b.mode == "" {
		b.mode = MeasureGPU
	}
	if b.mode != MeasureGPU && b.mode != MeasureEmulated {
		return b, optionErrorf("--measure %q: gpu or emulated", o.Measure)
	}
	if o.MinRuns > 0 {
		b.rule.Min = o.MinRuns
	}
	if o.MaxTime > 0 {
		b.rule.MaxTime = o.MaxTime
	}
	if b.workers != "" {
		if err := fleet.CheckURL(b.workers); err != nil {
			return b, optionErrorf("--workers: %v", err)
		}
		if b.save != "" || o.Feeds.Inputs != "" || o.Feeds.Outputs != "" {
			return b, optionErrorf("--workers measures kernels one by one on the fleet; --save, --inputs and --outputs need the programs run here")
		}
		return b, nil
	}
	if b.mode == MeasureGPU {
		// Say so before minutes of compiling, not after.
		if _, err := gpu.Open(); err != nil {
			return b, withKind(KindNoDevice, fmt.Errorf("--measure gpu: %w (--measure emulated runs both programs under the CPU emulation instead)", err))
		}
	}
	return b, nil
}

// Bench builds two programs of m: the one Compile makes (the search, the
// cost model's extraction and schedules, priced again with NVRTC's
// resources when it is present) and the naive one, compiles both for the
// device, prepares them with the same weights (m's own, or seeded random
// ones) and runs both on the same seeded random inputs. The compiled
// program's outputs and states must agree with the naive program's, the
// reference at real shapes, within a relative L2 error of 1e-4 (f32) or
// 64 roundings of the dtype; else Bench fails and times nothing. Then it
// times the whole run of each (one CUDA graph, an L2 flush before every
// timed run, repeated until the spread is small) and each launch of the
// compiled program, and records each kernel's time in the tuning
// database, where it overrides the cost model's prediction next time.
// Under MeasureEmulated both run under the CPU emulation and the times
// are its wall times, labelled emulated everywhere. The caller keeps m
// and closes it.
func Bench(ctx context.Context, m *Model, o BenchOptions) (*BenchReport, error) {
	b, err := o.bench()
	if err != nil {
		return nil, err
	}
	if err := o.Feeds.checkRanges(m.Graph); err != nil {
		return nil, err
	}
	s, err := buildBench(ctx, m, o.Target, o.Arch)
	if err != nil {
		return nil, err
	}
	return b.run(ctx, s)
}

// Check says whether o can be used here: a known place to measure and,
// for MeasureGPU, a GPU (a caller learns it before minutes of compiling,
// not after). Bench and BenchDir check it too.
func (o BenchOptions) Check() error {
	_, err := o.bench()
	return err
}

// BenchDir benches the program an output folder holds (plan.json's
// launches and bodies, whose kernels must print DIR/kernels.cu exactly,
// and its constants) against the naive program of the model its
// provenance names, as Bench does; o.Target and o.Arch are unused.
func BenchDir(ctx context.Context, dir string, o BenchOptions) (*BenchReport, error) {
	b, err := o.bench()
	if err != nil {
		return nil, err
	}
	return b.dir(ctx, dir)
}

// bench is one bench's settings.
type bench struct {
	mode   Measure // MeasureGPU or MeasureEmulated
	dbPath string
	seed   uint64
	save   string // the folder to save the tensors in, "" for none
	feeds  Feeds
	rule   timing.Rule
	// workers is a fleet's URL ("": measure here), fleet its client's
	// waits.
	workers string
	fleet   fleet.ClientOptions
}

// benchProgram is one of the two programs bench compares.
type benchProgram struct {
	lp *lower.Program
	ks []*cuda.Kernel
}

// benchSetup is what bench measures: the model's graph, its weights when
// it comes with them, and its compiled and naive programs.
type benchSetup struct {
	model     string
	g         *ir.Graph
	weights   map[string]*ir.Tensor // an ONNX model's; nil for a corpus model
	consts    map[string]*ir.Tensor // the constants of a program read from a folder
	opt       benchProgram
	naive     benchProgram
	device    string // the cost model's device
	closeFunc func()
}

// buildBench builds the model's compiled program as Compile does (the
// pipeline, then the schedules priced again with NVRTC's resources when
// NVRTC is present) and its naive program.
func buildBench(ctx context.Context, md *Model, target, arch string) (*benchSetup, error) {
	model, g := md.Name, md.Graph
	s := &benchSetup{model: model, g: g, weights: md.Weights, closeFunc: func() {}}
	sat, _, m, err := Pricing{Target: target}.Options(ctx)
	if err != nil {
		return nil, err
	}
	if err := CheckMemory(md, m.Device); err != nil {
		return nil, err
	}
	if err := CheckQuantizedExperts(md); err != nil {
		return nil, err
	}
	if arch == "" {
		arch = m.Device.Arch
	}
	if err := checkArch(arch); err != nil {
		return nil, err
	}
	s.device = m.Device.Name
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", model, err)
	}
	if lib, lerr := nvrtc.Load(); lerr == nil {
		if _, err := rerank(ctx, lib, c, m, arch); err != nil {
			return nil, fmt.Errorf("bench %s: %w", model, err)
		}
	}
	s.opt = benchProgram{lp: c.lowered, ks: c.kernels}
	if s.naive, err = naiveBench(ctx, g, sat, m); err != nil {
		return nil, fmt.Errorf("bench %s: %w", model, err)
	}
	return s, nil
}

// naiveBench lowers and prints g's naive program, the reference a bench
// compares with.
func naiveBench(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model) (benchProgram, error) {
	nc, err := naiveProgram(ctx, g, sat, m)
	if err != nil {
		return benchProgram{}, err
	}
	return benchProgram{lp: nc.lowered, ks: nc.kernels}, nil
}

// dir benches a compiled output folder: the program the folder holds
// (plan.json's launches and bodies, whose kernels must print DIR/kernels.cu
// exactly, and its constants) against the naive program of the model its
// provenance names.
func (b bench) dir(ctx context.Context, dir string) (*BenchReport, error) {
	pl, err := readPlan(dir)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	if err := checkPlanExtents(pl, b.feeds.At); err != nil {
		return nil, err
	}
	if err := checkFiles(dir, pl); err != nil {
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	src, srcPath, err := readKernelsFile(dir)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	fp, err := loadFolderProgram(dir, pl, src, srcPath)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	lp, ks, consts := fp.lp, fp.ks, fp.consts
	md, err := fp.rebuild()
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	g, weights, closeModel := md.Graph, md.Weights, md.Close
	sat, _, m, err := Pricing{Target: pl.Target}.Options(ctx)
	if err != nil {
		closeModel()
		return nil, err
	}
	s := &benchSetup{model: pl.Model, g: g, weights: weights, consts: consts, device: m.Device.Name, closeFunc: closeModel,
		opt: benchProgram{lp: lp, ks: ks}}
	if s.naive, err = naiveBench(ctx, g, sat, m); err != nil {
		closeModel()
		return nil, fmt.Errorf("bench %s: %w", dir, err)
	}
	return b.run(ctx, s)
}

// benchTimes are a bench's measurements, in seconds.
type benchTimes struct {
	where     string // measure.WhereGPU or measure.WhereEmulated
	device    string // the measuring device's name
	driver    string // the driver's version, "" under emulation
	compiler  string // "nvrtc X.Y", or the emulation's compiler
	opt       gpu.Timing
	naive     gpu.Timing
	launches  []gpu.Timing // the compiled program's, by run launch
	relError  float64      // of the compiled program's outputs against the naive one's
	relLimit  float64
	checkedAt int // elements compared
	// outputs are the compiled program's outputs, and its states as
	// "state NAME", as they were checked (what --save writes).
	outputs map[string]*ir.Tensor
}

// run measures a built bench and reports it.
func (b bench) run(ctx context.Context, s *benchSetup) (*BenchReport, error) {
	defer s.closeFunc()
	if b.workers != "" {
		return b.onFleet(ctx, s)
	}
	feeds, err := benchFeeds(s, b.seed, b.feeds)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", s.model, err)
	}
	expect, err := b.feeds.expect(s.g)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", s.model, err)
	}
	var t *benchTimes
	if b.mode == MeasureGPU {
		t, err = b.onGPU(ctx, s, feeds)
	} else {
		t, err = b.emulated(ctx, s, feeds)
	}
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", s.model, err)
	}
	if expect != nil {
		if err := checkBenchOutputs(ctx, s, feeds, t, expect); err != nil {
			return nil, fmt.Errorf("bench %s: %w", s.model, err)
		}
	}
	dbPath, recorded, warning, err := b.record(s, t)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", s.model, err)
	}
	if b.save != "" {
		if err := saveBench(b.save, s, b.seed, feeds, t.outputs); err != nil {
			return nil, fmt.Errorf("bench %s: %w", s.model, err)
		}
	}
	rep := buildBenchReport(s, t, dbPath, recorded)
	rep.TuneDBWarning = warning
	if len(s.g.Symbols) > 0 {
		rep.At = map[string]int64{}
		for _, sym := range s.g.Symbols {
			rep.At[sym.Name] = feeds[sym.Name].Int(0)
		}
	}
	if p, ok := rep.At[corpus.PastSymbol]; ok {
		repriceAt(s, rep, p)
	}
	if expect != nil {
		rep.Outputs = expect.found
	}
	return rep, nil
}

// benchFeeds draws the inputs, states and (for a corpus model) weights
// from the seed, as compile's verification does, within the ranges f
// states or ir.InputRanges infers; an ONNX model keeps its own weights.
// With an inputs file, its tensors replace the drawn ones (Feeds.feed).
func benchFeeds(s *benchSetup, seed uint64, f Feeds) (map[string]*ir.Tensor, error) {
	feeds, err := f.feed(s.g, seed, s.weights, ir.OpInput, ir.OpState, ir.OpWeight)
	if err != nil {
		return nil, err
	}
	if len(f.At) > 0 {
		// The runtime extents to time the program at.
		bindings, err := symbolBindings(s.g, f.At, maxVerifyPoints)
		if err != nil {
			return nil, err
		}
		if err := bindSymbols(s.g, feeds, bindings[0]); err != nil {
			return nil, err
		}
	}
	// A folder's program has its constants by name; a program that
	// computes its own takes those (gpu.Program and the emulation both
	// prefer them).
	maps.Copy(feeds, s.consts)
	return feeds, nil
}

// compareWithNaive checks the compiled program's outputs and states
// against the naive program's, every element, in the relative L2 sense
// (the worst of all); it returns the worst error and its bound.
func compareWithNaive(got, want map[string]*ir.Tensor) (worst, limit float64, elements int, err error) {
	limit = 1
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w, g := want[name], got[name]
		if g == nil {
			return 0, 0, 0, fmt.Errorf("the compiled program has no %s", name)
		}
		rel, err := measure.RelativeError(g, w)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("the compiled program's %s differs from the naive program's: %w", name, err)
		}
		l := measure.RelativeLimit(w.DType)
		if rel > l {
			return 0, 0, 0, fmt.Errorf("the compiled program's %s differs from the naive program's: relative L2 error %.3g, at most %.3g for %s", name, rel, l, w.DType)
		}
		worst, limit, elements = max(worst, rel), min(limit, l), elements+int(w.Len())
	}
	return worst, limit, elements, nil
}
