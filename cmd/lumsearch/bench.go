package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/tunedb"
)

// benchCommand times a compiled program against the naive program of the
// same model.
var benchCommand = &command{
	name:     "bench",
	summary:  "check a compiled program against the naive one, then time both on a GPU (or under the CPU emulation)",
	synopsis: "bench DIR|MODEL [--measure gpu|emulated] [--json] [--tunedb PATH] [--min-runs N] [--max-time D] [--seed N] [--save DIR] [--seq N] [--dtype f32|f16|bf16] [--dim NAME=VALUE ...] [--target NAME] [--arch sm_80|sm_90]",
	doc: `
"bench" builds two programs of the same model: the one "compile" makes (the
search, the cost model's extraction and schedules) and the naive one (each
operation its own kernel), compiles both with NVRTC for the device, loads
them, prepares them with the same weights (seeded random weights for a
corpus model, an ONNX model's own) and runs both on the same seeded random
inputs. The compiled program's outputs and states must agree with the
naive program's, the reference at real shapes, within a relative L2 error
of 1e-4 (f32) or 64 roundings of the dtype; else bench fails and times
nothing. Then it times the whole run of each (replayed as one CUDA graph,
an L2 flush before every timed run, after warm-up runs, repeated until the
interquartile range is under 2% of the median or --max-time) and each
launch of the compiled program on its own, and prints per launch its
kernel, schedule, the cost model's predicted time and the measured median,
then both end-to-end medians and the speedup. Each kernel's measurement is
recorded in the tuning database (--tunedb), where it overrides the cost
model's prediction at the next compile.

With DIR, a folder "lumsearch compile" wrote, the program is compiled
again from the model, options, target and architecture its plan.json
records, and bench refuses to go on unless the result is DIR/kernels.cu
byte for byte (another lumsearch version, other options, or a tuning
database that has changed since, gives other kernels). With MODEL, the
flags say how to build it, as for compile.

Without a CUDA device, --measure gpu (the default) fails and says so.
--measure emulated runs both programs under the CPU emulation instead: the
outputs are checked the same way and the times are the emulation's wall
times, labelled emulated in the table, in the JSON and in the tuning
database, which keeps them apart from GPU records. --json prints one JSON
object instead of the table: {"ms": the compiled program's median, "naive_ms",
"speedup", "where": "gpu" or "emulated", "kernels": [...], ...}.

--save DIR writes, after the run, what bench fed and what the compiled
program gave, so that another tool can run the same graph on the same
tensors and compare: DIR/inputs.safetensors (every input, state and weight
of the model's graph, by the graph's names; its metadata lists which are
which as JSON lists under "inputs", "states" and "weights", with the
"model" and "seed"), DIR/outputs.safetensors (the compiled program's
outputs by output name and the states' values after the run by state
name) and DIR/graph.txt (the model's graph in the ir text format, which
names and shapes them all). scripts/torch_bench.py --inputs DIR reads them.`,
	example: `
lumsearch bench out/ --json
lumsearch bench tiny-gpt2:block --seq 4 --measure emulated
lumsearch bench tiny-llama:mlp --seq 4 --measure emulated --save feeds/`,
	setup: func(fs *flag.FlagSet) action {
		mode := fs.String("measure", "gpu", "where to measure: `gpu` or emulated")
		asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
		db := fs.String("tunedb", "", "the tuning database `PATH` the measurements go to (default $LUMSEARCH_TUNEDB, else the user cache's lumsearch/tunedb.jsonl)")
		seq := fs.Int("seq", corpus.DefaultSeq, "MODEL only: tokens per sequence (a decode step's cache size)")
		dtype := fs.String("dtype", "f32", "MODEL only: dtype of weights and activations: f32, f16 or bf16")
		target := fs.String("target", "h100-sxm", "MODEL only: the device the cost model prices for")
		arch := fs.String("arch", "sm_90", "MODEL only: the architecture schedules are priced for with NVRTC: sm_80 or sm_90")
		dims := dimFlags{}
		fs.Var(dims, "dim", "MODEL only: an ONNX model's symbolic dimension `NAME=VALUE` (repeatable)")
		minRuns := fs.Int("min-runs", timing.DefaultMin, "the fewest timed runs of each measurement")
		maxTime := fs.Duration("max-time", timing.DefaultMaxTime, "stop repeating a measurement after this long once --min-runs are done")
		seed := fs.Uint64("seed", 1, "seed of the random inputs and weights")
		save := fs.String("save", "", "after the run, write the tensors fed (inputs.safetensors), the compiled program's outputs (outputs.safetensors) and the graph (graph.txt) into `DIR`")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: bench DIR|MODEL")
			}
			if *mode != "gpu" && *mode != "emulated" {
				return usagef("--measure %q: gpu or emulated", *mode)
			}
			if *minRuns < 1 || *maxTime <= 0 {
				return usagef("--min-runs and --max-time must be positive")
			}
			b := bench{mode: *mode, json: *asJSON, dbPath: *db, seed: *seed, save: *save, rule: timing.Rule{Min: *minRuns, MaxTime: *maxTime}}
			if b.mode == "gpu" {
				// Say so before minutes of compiling, not after.
				if _, err := gpu.Open(); err != nil {
					return fmt.Errorf("--measure gpu: %w (--measure emulated runs both programs under the CPU emulation instead)", err)
				}
			}
			if st, err := os.Stat(filepath.Join(pos[0], plan.FileName)); err == nil && !st.IsDir() {
				var modelFlags []string
				fs.Visit(func(f *flag.Flag) {
					if strings.HasPrefix(f.Usage, "MODEL only") {
						modelFlags = append(modelFlags, "--"+f.Name)
					}
				})
				if len(modelFlags) > 0 {
					return usagef("%s applies to a MODEL; DIR's plan.json says how it was compiled", strings.Join(modelFlags, ", "))
				}
				return b.dir(ctx, pos[0], stdout)
			}
			if *arch != "sm_80" && *arch != "sm_90" {
				return usagef("--arch %s: want sm_80 or sm_90", *arch)
			}
			dt, err := ir.ParseDType(*dtype)
			if err != nil || !dt.IsFloat() {
				return usagef("--dtype %s: want f32, f16 or bf16", *dtype)
			}
			s, _, err := buildBench(ctx, pos[0], corpus.Options{Seq: *seq, Past: -1, DType: dt}, dims, *target, *arch)
			if err != nil {
				return err
			}
			return b.run(ctx, s, stdout)
		}
	},
}

// bench is one bench command's settings.
type bench struct {
	mode   string // "gpu" or "emulated"
	json   bool
	dbPath string
	seed   uint64
	save   string // --save's folder, "" for none
	rule   timing.Rule
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

// buildBench builds the model's compiled program as compileModel does
// (the pipeline, then the schedules priced again with NVRTC's resources
// when NVRTC is present) and its naive program, and returns them with the
// compiled program's kernels.cu text, which is what compile writes.
func buildBench(ctx context.Context, model string, opt corpus.Options, dims dimFlags, target, arch string) (*benchSetup, string, error) {
	g, weights, closeModel, err := loadGraph(model, opt, dims)
	if err != nil {
		return nil, "", err
	}
	s := &benchSetup{model: model, g: g, weights: weights, closeFunc: closeModel}
	defer func() {
		if err != nil {
			closeModel()
		}
	}()
	sat, _, m, err := pricing{estimate: "model", target: target}.options(ctx)
	if err != nil {
		return nil, "", err
	}
	s.device = m.Device.Name
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return nil, "", fmt.Errorf("bench %s: %w", model, err)
	}
	if lib, lerr := nvrtc.Load(); lerr == nil {
		if _, err := rerank(ctx, lib, c, m, arch); err != nil {
			return nil, "", fmt.Errorf("bench %s: %w", model, err)
		}
	}
	s.opt = benchProgram{lp: c.lowered, ks: c.kernels}
	if s.naive, err = naiveBench(ctx, g, sat, m); err != nil {
		return nil, "", fmt.Errorf("bench %s: %w", model, err)
	}
	return s, cuda.NVRTCPrelude + "\n" + cuda.Source(c.kernels), nil
}

// naiveBench lowers and prints g's naive program, the reference a bench
// compares with.
func naiveBench(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model) (benchProgram, error) {
	naive, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return benchProgram{}, fmt.Errorf("naive program: %w", err)
	}
	nc, err := lowerAndPrint(g, naive, m)
	if err != nil {
		return benchProgram{}, fmt.Errorf("naive program: %w", err)
	}
	return benchProgram{lp: nc.lowered, ks: nc.kernels}, nil
}

// dir benches a compiled output folder: the program the folder holds
// (plan.json's launches and bodies, whose kernels must print DIR/kernels.cu
// exactly, and its constants) against the naive program of the model its
// provenance names.
func (b bench) dir(ctx context.Context, dir string, stdout io.Writer) error {
	pl, err := plan.Read(dir)
	if err != nil {
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	if pl.Model == "" {
		return fmt.Errorf("bench %s: plan.json names no model (written by an older lumsearch); compile the model again", dir)
	}
	dt := ir.F32
	if pl.Options.DType != "" {
		if dt, err = ir.ParseDType(pl.Options.DType); err != nil {
			return fmt.Errorf("bench %s: plan.json's dtype: %w", dir, err)
		}
	}
	opt := corpus.Options{Seq: pl.Options.Seq, Past: pl.Options.Past, DType: dt}
	if opt.Seq == 0 {
		opt.Seq = corpus.DefaultSeq
	}
	lp, err := pl.Lowered(pl.Model)
	if err != nil {
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	srcPath := filepath.Join(dir, "kernels.cu")
	src, err := os.ReadFile(srcPath)
	if err != nil {
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	ks, err := reprint(pl, lp, string(src), srcPath)
	if err != nil {
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	consts, _, err := safetensors.ReadFile(filepath.Join(dir, plan.ConstantsFile))
	if err != nil {
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	g, weights, closeModel, err := rebuildModel(pl.Model, opt, dimFlags(pl.Options.Dims))
	if err != nil {
		return fmt.Errorf("bench %s: rebuild %s from plan.json: %w", dir, pl.Model, err)
	}
	if err := matchesModel(g, lp); err != nil {
		closeModel()
		return fmt.Errorf("bench %s: the model %s as rebuilt from plan.json: %w", dir, pl.Model, err)
	}
	sat, _, m, err := pricing{estimate: "model", target: pl.Target}.options(ctx)
	if err != nil {
		closeModel()
		return err
	}
	s := &benchSetup{model: pl.Model, g: g, weights: weights, consts: consts, device: m.Device.Name, closeFunc: closeModel,
		opt: benchProgram{lp: lp, ks: ks}}
	if s.naive, err = naiveBench(ctx, g, sat, m); err != nil {
		closeModel()
		return fmt.Errorf("bench %s: %w", dir, err)
	}
	return b.run(ctx, s, stdout)
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
func (b bench) run(ctx context.Context, s *benchSetup, stdout io.Writer) error {
	defer s.closeFunc()
	feeds, err := benchFeeds(s, b.seed)
	if err != nil {
		return fmt.Errorf("bench %s: %w", s.model, err)
	}
	var t *benchTimes
	if b.mode == "gpu" {
		t, err = b.onGPU(ctx, s, feeds)
	} else {
		t, err = b.emulated(ctx, s, feeds)
	}
	if err != nil {
		return fmt.Errorf("bench %s: %w", s.model, err)
	}
	dbPath, recorded, err := b.record(s, t)
	if err != nil {
		return fmt.Errorf("bench %s: %w", s.model, err)
	}
	if b.save != "" {
		if err := saveBench(b.save, s, b.seed, feeds, t.outputs); err != nil {
			return fmt.Errorf("bench %s: %w", s.model, err)
		}
	}
	return b.report(s, t, dbPath, recorded, stdout)
}

// benchFeeds draws the inputs, states and (for a corpus model) weights
// from the seed, as compile's verification does; an ONNX model keeps its
// own weights.
func benchFeeds(s *benchSetup, seed uint64) (map[string]*ir.Tensor, error) {
	var feeds map[string]*ir.Tensor
	var err error
	if s.weights == nil {
		feeds, err = ir.RandomFeeds(s.g, seed, ir.Typical)
	} else {
		feeds, err = ir.RandomLeaves(s.g, seed, ir.Typical, ir.OpInput, ir.OpState)
	}
	if err != nil {
		return nil, err
	}
	maps.Copy(feeds, s.weights)
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

// onGPU runs and times both programs on device 0.
func (b bench) onGPU(ctx context.Context, s *benchSetup, feeds map[string]*ir.Tensor) (_ *benchTimes, err error) {
	d, err := gpu.Open()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w (--measure emulated runs both programs under the CPU emulation instead)", err)
	}
	dev, err := d.Device(0)
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w", err)
	}
	c, err := dev.PrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w", err)
	}
	defer func() { err = errors.Join(err, c.Release()) }()
	lib, err := nvrtc.Load()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu needs NVRTC: %w", err)
	}
	major, minor := lib.Version()
	t := &benchTimes{where: measure.WhereGPU, device: dev.Name, compiler: fmt.Sprintf("nvrtc %d.%d", major, minor),
		driver: fmt.Sprintf("%d.%d", d.Version()/1000, d.Version()%1000/10)}
	load := func(name string, bp benchProgram) (*gpu.Program, map[string]*ir.Tensor, error) {
		res, err := lib.Compile(ctx, cuda.NVRTCPrelude+"\n"+cuda.Source(bp.ks), name+".cu", nvrtc.Options{Arch: dev.Arch()})
		if err != nil {
			return nil, nil, fmt.Errorf("%s program: nvrtc: %w", name, err)
		}
		p, err := gpu.LoadProgram(c, bp.lp, bp.ks, res.CUBIN)
		if err != nil {
			return nil, nil, fmt.Errorf("%s program: %w", name, err)
		}
		outs, err := func() (map[string]*ir.Tensor, error) {
			if err := p.Prepare(ctx, feeds); err != nil {
				return nil, err
			}
			for _, v := range s.g.States() {
				if err := p.SetState(s.g.Node(v).Name, feeds[s.g.Node(v).Name]); err != nil {
					return nil, err
				}
			}
			outs, err := p.Run(feeds, nil)
			if err != nil {
				return nil, err
			}
			for _, v := range s.g.States() {
				name := s.g.Node(v).Name
				st, err := p.State(name)
				if err != nil {
					return nil, err
				}
				outs["state "+name] = st
			}
			return outs, nil
		}()
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("%s program: %w", name, err), p.Close())
		}
		return p, outs, nil
	}
	naive, want, err := load("naive", s.naive)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, naive.Close()) }()
	opt, got, err := load("compiled", s.opt)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, opt.Close()) }()
	if t.relError, t.relLimit, t.checkedAt, err = compareWithNaive(got, want); err != nil {
		return nil, err
	}
	t.outputs = got
	topt := gpu.TimeOptions{Rule: b.rule}
	if t.opt, err = opt.Time(topt); err != nil {
		return nil, err
	}
	if t.naive, err = naive.Time(topt); err != nil {
		return nil, err
	}
	if t.launches, err = opt.TimeLaunches(topt); err != nil {
		return nil, err
	}
	return t, nil
}

// emulated runs both programs under the CPU emulation and times them by
// wall clock: the whole run, and each launch of the compiled program run
// alone on the buffers a whole run left (the runner's start and the
// buffers' transfer included, so these are no GPU times).
func (b bench) emulated(ctx context.Context, s *benchSetup, feeds map[string]*ir.Tensor) (*benchTimes, error) {
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("--measure emulated needs g++: %w", err)
	}
	t := &benchTimes{where: measure.WhereEmulated, device: tunedb.WhereEmulated, compiler: "g++"}
	run := func(bp benchProgram) (map[string]*ir.Tensor, error) {
		outs, states, err := cuda.EmulateProgram(ctx, bp.lp, bp.ks, feeds, emu.Options{})
		if err != nil {
			return nil, err
		}
		for name, st := range states {
			outs["state "+name] = st
		}
		return outs, nil
	}
	want, err := run(s.naive)
	if err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	got, err := run(s.opt)
	if err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	if t.relError, t.relLimit, t.checkedAt, err = compareWithNaive(got, want); err != nil {
		return nil, err
	}
	t.outputs = got
	whole := func(bp benchProgram) (gpu.Timing, error) {
		xs, err := b.rule.Repeat(func() (float64, error) {
			start := time.Now()
			_, err := run(bp)
			return time.Since(start).Seconds(), err
		})
		if err != nil {
			return gpu.Timing{}, err
		}
		med, iqr := timing.MedianIQR(xs)
		return gpu.Timing{Median: med, IQR: iqr, Samples: xs}, nil
	}
	if t.opt, err = whole(s.opt); err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	if t.naive, err = whole(s.naive); err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	if t.launches, err = b.emulatedLaunches(ctx, s.opt, feeds); err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	return t, nil
}

// emulatedLaunches times each run launch of a program under the
// emulation on its own: one whole run first (preparation included) gives
// every buffer its content, then each launch runs alone on those buffers.
// The buffers are laid out as cuda.EmulateProgram lays them out.
func (b bench) emulatedLaunches(ctx context.Context, bp benchProgram, feeds map[string]*ir.Tensor) ([]gpu.Timing, error) {
	lp := bp.lp
	launches := append(slices.Clone(lp.Prep), lp.Run...)
	bufs := []emu.Buffer{{Bytes: int(max(lp.ArenaBytes, 16))}}
	where := make([]emu.Arg, len(lp.Buffers))
	for _, buf := range lp.Buffers {
		if buf.Kind == lower.Temp {
			where[buf.ID] = emu.Arg{Buffer: 0, Offset: int(buf.Offset)}
			continue
		}
		var data []byte
		switch buf.Kind {
		case lower.Input, lower.Weight, lower.State:
			t, ok := feeds[buf.Name]
			if !ok {
				return nil, fmt.Errorf("no value for %s %s", buf.Kind, buf.Name)
			}
			data = cuda.EncodeTensor(t)
		case lower.Constant:
			t, err := buf.Value(ctx)
			if err != nil {
				return nil, err
			}
			data = cuda.EncodeTensor(t)
		}
		where[buf.ID] = emu.Arg{Buffer: len(bufs)}
		bufs = append(bufs, emu.Buffer{Bytes: int(max(buf.Bytes, 1)), Data: data})
	}
	var eks []emu.Kernel
	for _, k := range cuda.Distinct(bp.ks) {
		ek := emu.Kernel{Name: k.Name}
		for _, p := range k.Params {
			ek.Params = append(ek.Params, emu.Param{Name: p.Name, Type: p.Type})
		}
		eks = append(eks, ek)
	}
	els := make([]emu.Launch, len(launches))
	for i, k := range bp.ks {
		els[i] = emu.Launch{Kernel: k.Name, Grid: k.Grid, Block: k.Block}
		for _, id := range append(slices.Clone(launches[i].Args), launches[i].Outs...) {
			els[i].Args = append(els[i].Args, where[id])
		}
	}
	src := cuda.Source(bp.ks)
	final, err := emu.Run(ctx, src, eks, bufs, els, emu.Options{})
	if err != nil {
		return nil, err
	}
	for i := range bufs {
		bufs[i].Data = final[i]
	}
	run := els[len(lp.Prep):]
	series, err := b.rule.RepeatEach(len(run), func() ([]float64, error) {
		xs := make([]float64, len(run))
		for i, l := range run {
			start := time.Now()
			if _, err := emu.Run(ctx, src, eks, bufs, []emu.Launch{l}, emu.Options{}); err != nil {
				return nil, err
			}
			xs[i] = time.Since(start).Seconds()
		}
		return xs, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]gpu.Timing, len(series))
	for i, xs := range series {
		med, iqr := timing.MedianIQR(xs)
		out[i] = gpu.Timing{Median: med, IQR: iqr, Samples: xs}
	}
	return out, nil
}

// benchKernel is one run launch of the compiled program in the report.
type benchKernel struct {
	Launch    string  `json:"launch"`
	Kernel    string  `json:"kernel"`
	Schedule  string  `json:"schedule"`
	Predicted float64 `json:"predicted_ms,omitempty"`
	// MS is named median_ms, not ms, so that the one "ms" of the output
	// is the whole run's, which scripts/gpu-check.sh reads with sed.
	MS   float64 `json:"median_ms"`
	IQR  float64 `json:"iqr_ms"`
	Runs int     `json:"runs"`
}

// benchReport is the --json output.
type benchReport struct {
	Model     string        `json:"model"`
	Where     string        `json:"where"`
	Device    string        `json:"device"`
	MS        float64       `json:"ms"`
	IQR       float64       `json:"iqr_ms"`
	Runs      int           `json:"runs"`
	Graph     bool          `json:"graph"`
	NaiveMS   float64       `json:"naive_ms"`
	NaiveIQR  float64       `json:"naive_iqr_ms"`
	NaiveRuns int           `json:"naive_runs"`
	Speedup   float64       `json:"speedup"`
	Predicted float64       `json:"predicted_ms"`
	RelError  float64       `json:"relative_error"`
	RelLimit  float64       `json:"relative_limit"`
	Checked   int           `json:"checked_elements"`
	Kernels   []benchKernel `json:"kernels"`
	TuneDB    string        `json:"tunedb"`
	Recorded  int           `json:"recorded"`
}

// kernelRows pairs each run launch with its kernel and timing.
func kernelRows(s *benchSetup, t *benchTimes) []benchKernel {
	lp, ks := s.opt.lp, s.opt.ks[len(s.opt.lp.Prep):]
	rows := make([]benchKernel, len(lp.Run))
	for i, l := range lp.Run {
		r := benchKernel{Launch: l.Name, Kernel: ks[i].Name, Schedule: ks[i].Schedule.String()}
		if ks[i].Estimate != nil {
			r.Predicted = ks[i].Estimate.Seconds * 1e3
		}
		if i < len(t.launches) {
			r.MS, r.IQR, r.Runs = t.launches[i].Median*1e3, t.launches[i].IQR*1e3, len(t.launches[i].Samples)
		}
		rows[i] = r
	}
	return rows
}

// record appends one record per distinct kernel of the compiled program
// (the samples of its launches pooled) to the tuning database.
func (b bench) record(s *benchSetup, t *benchTimes) (string, int, error) {
	path := b.dbPath
	if path == "" {
		var err error
		if path, err = tunedb.DefaultPath(); err != nil {
			return "", 0, err
		}
	}
	db, err := tunedb.Open(path)
	if err != nil {
		return "", 0, err
	}
	host, _ := os.Hostname()
	where := tunedb.WhereGPU
	if t.where == measure.WhereEmulated {
		where = tunedb.WhereEmulated
	}
	lp, ks := s.opt.lp, s.opt.ks[len(s.opt.lp.Prep):]
	var order []string
	samples := map[string][]float64{}
	first := map[string]int{}
	for i := range lp.Run {
		name := ks[i].Name
		if _, ok := first[name]; !ok {
			first[name] = i
			order = append(order, name)
		}
		if i < len(t.launches) {
			samples[name] = append(samples[name], t.launches[i].Samples...)
		}
	}
	at := time.Now().UTC()
	var recs []tunedb.Record
	for _, name := range order {
		i := first[name]
		if len(samples[name]) == 0 {
			continue
		}
		med, iqr := timing.MedianIQR(samples[name])
		if med <= 0 {
			continue // a time the clock could not resolve is no measurement
		}
		shapes, dtypes := bodySignature(lp.Run[i].Body)
		r := tunedb.Record{
			Key: tunedb.Key{Spec: lp.Run[i].Body.String(), Schedule: ks[i].Schedule.String(), Shapes: shapes, DTypes: dtypes,
				Device: t.device, Driver: t.driver, Compiler: t.compiler},
			Median: med, Spread: iqr, Samples: len(samples[name]), Where: where, Host: host, At: at,
		}
		if ks[i].Estimate != nil {
			r.Predicted = ks[i].Estimate.Seconds
		}
		recs = append(recs, r)
	}
	if err := db.Append(recs...); err != nil {
		return "", 0, fmt.Errorf("tuning database %s: %w", path, err)
	}
	return path, len(recs), nil
}

// bodySignature is a kernel body's argument shapes and dtypes, inputs then
// outputs, as "4x64,64->4x64" and "f32,f32->f32".
func bodySignature(body *ir.Graph) (string, string) {
	side := func(vs []ir.Value) (string, string) {
		var shapes, dtypes []string
		for _, v := range vs {
			n := body.Node(v)
			dims := make([]string, len(n.Shape))
			for i, d := range n.Shape {
				dims[i] = fmt.Sprint(d)
			}
			shapes = append(shapes, strings.Join(dims, "x"))
			dtypes = append(dtypes, n.DType.String())
		}
		return strings.Join(shapes, ","), strings.Join(dtypes, ",")
	}
	var outs []ir.Value
	for _, o := range body.Outputs {
		outs = append(outs, o.Value)
	}
	is, id := side(body.Inputs())
	oshape, odtype := side(outs)
	return is + "->" + oshape, id + "->" + odtype
}

// report prints the table, or the JSON object.
func (b bench) report(s *benchSetup, t *benchTimes, dbPath string, recorded int, stdout io.Writer) error {
	rows := kernelRows(s, t)
	var predicted float64
	for _, r := range rows {
		predicted += r.Predicted
	}
	speedup := 0.0
	if t.opt.Median > 0 {
		speedup = t.naive.Median / t.opt.Median
	}
	if b.json {
		rep := benchReport{Model: s.model, Where: t.where, Device: t.device,
			MS: t.opt.Median * 1e3, IQR: t.opt.IQR * 1e3, Runs: len(t.opt.Samples), Graph: t.opt.Graph,
			NaiveMS: t.naive.Median * 1e3, NaiveIQR: t.naive.IQR * 1e3, NaiveRuns: len(t.naive.Samples),
			Speedup: speedup, Predicted: predicted, RelError: t.relError, RelLimit: t.relLimit, Checked: t.checkedAt,
			Kernels: rows, TuneDB: dbPath, Recorded: recorded}
		data, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", data)
		return err
	}
	label := "GPU"
	if t.where == measure.WhereEmulated {
		label = "EMULATED"
		fmt.Fprintf(stdout, "bench %s under the CPU emulation: times are the emulation's wall times, not GPU times\n", s.model)
	} else {
		fmt.Fprintf(stdout, "bench %s on %s (driver %s, %s)\n", s.model, t.device, t.driver, t.compiler)
	}
	fmt.Fprintf(stdout, "check: the compiled program's outputs match the naive program's (%d elements; relative L2 error %.2g, at most %.2g)\n",
		t.checkedAt, t.relError, t.relLimit)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LAUNCH\tKERNEL\tSCHEDULE\tPREDICTED (%s)\t%s MEDIAN\tIQR\tRUNS\n", s.device, label)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Launch, r.Kernel, r.Schedule, seconds(r.Predicted/1e3), seconds(r.MS/1e3), seconds(r.IQR/1e3), r.Runs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	how := "launches one by one"
	if t.opt.Graph {
		how = "one CUDA graph"
	}
	fmt.Fprintf(stdout, "end to end (%s): compiled %s (IQR %s, %d runs, %s; predicted %s), naive %s (IQR %s, %d runs); speedup %.2fx\n",
		strings.ToLower(label), seconds(t.opt.Median), seconds(t.opt.IQR), len(t.opt.Samples), how, seconds(predicted/1e3),
		seconds(t.naive.Median), seconds(t.naive.IQR), len(t.naive.Samples), speedup)
	fmt.Fprintf(stdout, "tuning database: %d kernel measurements (%s) recorded in %s\n", recorded, t.where, dbPath)
	return nil
}
