package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/search"
)

// benchCommand times a compiled program against the naive program of the
// same model.
var benchCommand = &command{
	name:     "bench",
	summary:  "check a compiled program against the naive one, then time both on a GPU (or under the CPU emulation)",
	synopsis: "bench DIR|MODEL [--measure gpu|emulated] [--compare-kernels [--budget D]] [--workers URL] [--json] [--tunedb PATH] [--min-runs N] [--max-time D] [--seed N] [--save DIR] [--seq N] [--dtype f32|f16|bf16] [--weights FORMAT] [--dim NAME=VALUE ...] [--target NAME] [--arch sm_80|sm_90] [--input-range NAME=LO..HI ...] [--inputs FILE.safetensors] [--outputs FILE.safetensors]",
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

With --workers URL nothing runs here: every distinct kernel of both
programs is a job for the tune-workers of the target's kind on a fleet
(see tuning-server and docs/distributed.md), on their GPUs (or under
their emulation with --measure emulated), checked there against the
reference at its real shapes and timed, or answered from the fleet's
shared tuning database; each program's time is the sum of its launches'
medians (no whole run, CUDA graph or whole-program check on the fleet).

--compare-kernels, with DIR, times nothing: it runs each distinct kernel
of the folder's program on the GPU (the module its host library embeds)
and under the CPU emulation, on the same random inputs drawn as "verify"
draws them (--seed; a kernel that reads a runtime position also runs at
both ends of its range), and compares both with the reference interpreter
at the elements verification compares, within the verifier's allowance,
and the GPU's outputs with the emulation's. It prints a row per kernel:
its schedule, the runs and elements compared, the worst GPU and emulation
errors and the largest GPU-emulation difference, all in units of the
allowance (inf: a NaN or an element the GPU never wrote), then each
failure in full and a verdict line ("verdict: agree", "verdict: DISAGREE"
or "verdict: incomplete"); --json prints one JSON object instead. The exit
status is 1 unless every kernel was compared and agrees. --budget D bounds
its time: the kernels not reached are reported as not compared. Needs a
GPU and g++.

--save DIR writes, after the run, what bench fed and what the compiled
program gave, so that another tool can run the same graph on the same
tensors and compare: DIR/inputs.safetensors (every input, state and weight
of the model's graph, by the graph's names; its metadata lists which are
which as JSON lists under "inputs", "states" and "weights", with the
"model" and "seed"), DIR/outputs.safetensors (the compiled program's
outputs by output name and the states' values after the run by state
name) and DIR/graph.txt (the model's graph in the ir text format, which
names and shapes them all). scripts/torch_bench.py --inputs DIR reads them.
` + feedsDoc + `

--inputs FILE feeds both programs the tensors of a safetensors file in the
layout --save writes (every input and state by the graph's names; weights
in it replace the model's), converted to the graph's dtypes only where that
is exact; a missing or extra name is an error naming it. --outputs FILE
compares the compiled program's outputs (and the states' values after the
run, where the file has them) with that file's: element by element within
the verifier's allowance when the model is small enough for the reference
interpreter (at most 16M elements of intermediates), else each whole within
the verifier's relative L2 bound. With both, a model is checked against
PyTorch or onnxruntime without writing Go.`,
	example: `
lumsearch bench out/ --json
lumsearch bench tiny-gpt2:block --seq 4 --measure emulated
lumsearch bench tiny-llama:mlp --seq 4 --measure emulated --save feeds/
lumsearch bench out/ --compare-kernels --budget 2m`,
	setup: func(fs *flag.FlagSet) action {
		mode := fs.String("measure", "gpu", "where to measure: `gpu` or emulated")
		asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
		db := fs.String("tunedb", "", "the tuning database `PATH` the measurements go to (default $LUMSEARCH_TUNEDB, else the user cache's lumsearch/tunedb.jsonl)")
		seq := fs.Int("seq", corpus.DefaultSeq, "MODEL only: tokens per sequence (a decode step's cache size)")
		dtype := fs.String("dtype", "f32", "MODEL only: dtype of weights and activations: f32, f16 or bf16")
		weights := weightsFlag(fs, "MODEL only: ")
		target := fs.String("target", "h100-sxm", "MODEL only: the device the cost model prices for")
		arch := fs.String("arch", "sm_90", "MODEL only: the architecture schedules are priced for with NVRTC: sm_80 or sm_90")
		dims := dimFlag(fs, dimUsage+"; for DIR, NAME=VALUE runs the program at that runtime extent (past=P)")
		maxSeq := fs.Int("max-seq", 0, "MODEL only: the KV cache's capacity N of a decode step or a prefill")
		stepOpt := stepFlags(fs)
		minRuns := fs.Int("min-runs", timing.DefaultMin, "the fewest timed runs of each measurement")
		maxTime := fs.Duration("max-time", timing.DefaultMaxTime, "stop repeating a measurement after this long once --min-runs are done")
		seed := fs.Uint64("seed", 1, "seed of the random inputs and weights")
		feeds := feedFlags(fs, "")
		workers := fs.String("workers", "", "measure every kernel of both programs on the tune-workers of a fleet at `URL` (nats://HOST:4222; see tuning-server) instead of here")
		compare := fs.Bool("compare-kernels", false, "DIR only: time nothing; run each distinct kernel on the GPU and under the CPU emulation on the same inputs and compare both with the reference and with each other")
		budget := fs.Duration("budget", 0, "with --compare-kernels, the time the comparison may take (0: no bound); kernels not reached are reported as not compared")
		save := fs.String("save", "", "after the run, write the tensors fed (inputs.safetensors), the compiled program's outputs (outputs.safetensors) and the graph (graph.txt) into `DIR`")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: bench DIR|MODEL")
			}
			if *mode != "gpu" && *mode != "emulated" {
				return usagef("--measure %q: gpu or emulated", *mode)
			}
			if *compare {
				return compareKernels(ctx, fs, pos[0], *seed, *budget, *asJSON, stdout)
			}
			if *budget != 0 {
				return usagef("--budget applies to --compare-kernels")
			}
			if *minRuns < 1 || *maxTime <= 0 {
				return usagef("--min-runs and --max-time must be positive")
			}
			o := search.BenchOptions{Measure: search.Measure(*mode), TuneDB: *db, Seed: *seed, Save: *save, MinRuns: *minRuns, MaxTime: *maxTime, Target: *target, Arch: *arch, Feeds: *feeds, Workers: *workers}
			if err := o.Check(); err != nil {
				return err
			}
			var rep *search.BenchReport
			var err error
			if st, statErr := os.Stat(filepath.Join(pos[0], plan.FileName)); statErr == nil && !st.IsDir() {
				var modelFlags []string
				fs.Visit(func(f *flag.Flag) {
					if strings.HasPrefix(f.Usage, "MODEL only") {
						modelFlags = append(modelFlags, "--"+f.Name)
					}
				})
				if len(modelFlags) > 0 {
					return usagef("%s applies to a MODEL; DIR's plan.json says how it was compiled", strings.Join(modelFlags, ", "))
				}
				if len(dims.Ranges) > 0 {
					return usagef("--dim NAME=LO..HI applies to a MODEL; for DIR, --dim NAME=VALUE times the program at one value of a runtime extent")
				}
				o.Feeds.At = search.SymbolValues(dims.Pins)
				rep, err = search.BenchDir(ctx, pos[0], o)
			} else {
				if *arch != "sm_80" && *arch != "sm_90" {
					return usagef("--arch %s: want sm_80 or sm_90", *arch)
				}
				dt, dtErr := ir.ParseDType(*dtype)
				if dtErr != nil || !dt.IsFloat() {
					return usagef("--dtype %s: want f32, f16 or bf16", *dtype)
				}
				build := weights.apply(corpus.Options{Seq: *seq, MaxSeq: *maxSeq, Past: -1, DType: dt, Step: *stepOpt})
				m, loadErr := search.LoadModel(pos[0], search.ModelOptions{Build: build, Dims: dims.Pins, Ranges: dims.Ranges})
				if loadErr != nil {
					return loadErr
				}
				defer m.Close()
				rep, err = search.Bench(ctx, m, o)
			}
			if err != nil {
				return err
			}
			if *asJSON {
				return rep.WriteJSON(stdout)
			}
			return rep.WriteText(stdout)
		}
	},
}

// compareKernels is bench DIR --compare-kernels: every distinct kernel of
// DIR on the GPU and under the emulation, compared; the report printed,
// and an error (exit status 1) unless every kernel agrees.
func compareKernels(ctx context.Context, fs *flag.FlagSet, dir string, seed uint64, budget time.Duration, asJSON bool, stdout io.Writer) error {
	var others []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "compare-kernels", "budget", "seed", "json":
		case "measure":
			if f.Value.String() != "gpu" {
				others = append(others, "--measure "+f.Value.String())
			}
		default:
			others = append(others, "--"+f.Name)
		}
	})
	if len(others) > 0 {
		return usagef("%s: not with --compare-kernels, which runs each kernel of DIR on the GPU and under the emulation (--seed, --budget and --json apply)", strings.Join(others, ", "))
	}
	if budget < 0 {
		return usagef("--budget %v: want a positive duration, or 0 for none", budget)
	}
	if st, err := os.Stat(filepath.Join(dir, plan.FileName)); err != nil || st.IsDir() {
		return usagef("--compare-kernels takes a folder that compile or optimize wrote; %s has no %s", dir, plan.FileName)
	}
	rep, err := search.CompareKernels(ctx, dir, search.CompareOptions{Seed: seed, Budget: budget})
	if err != nil {
		return err
	}
	if asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("the kernels on the GPU and under the emulation: %s", rep.Verdict())
	}
	return nil
}
