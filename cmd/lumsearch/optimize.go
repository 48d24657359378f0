package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/tunedb"
)

// optimizeCommand is the product: the budgeted search.
var optimizeCommand = &command{
	name:     "optimize",
	summary:  "search a model's fastest verified program within a time budget and write it with a report",
	synopsis: "optimize MODEL.onnx|CORPUS-NAME|HF-FOLDER -o DIR [--budget 10m] [--target NAME] [--measure auto|gpu|emulated|none] [--workers URL] [--seed N] [--weights mxfp4|fp8|awq|gptq|none] [--json] [--dump DIR] [--expect past=LO..HI|context=LO..HI] [--input-range NAME=LO..HI ...] [--rules FILE ...] [--disable SET] [--enable SET] [...]",
	doc: `
"optimize" searches the fastest program it can verify for a model within
--budget, and writes it to DIR. The model is an ONNX file (its symbolic
dimensions bound with --dim), a corpus name (see "lumsearch corpus list"),
or a folder holding a Hugging Face config.json (and optionally its
safetensors weights), built as --kind. A decode step takes its position
at run time (past over 0..N-1 for --max-seq N, or --dim past=LO..HI;
--dim past=P pins it), and report.md shows its predicted time per bucket
of that range.

The search runs in phases under the one budget: the naive program (one
kernel per op, the reference for every speed-up), then saturation stages
(the fusion rules, then every rule set; a model whose layers repeat is
searched on two of them and the result replayed on all), each ending with
the program the cost model of --target predicts fastest; with a budget,
each better program is lowered, compiled and verified while the next stage
runs, so that the best verified program so far is always at hand: first
the insurance (the previous run's plan for this model and options, kept
beside the tuning database, else the naive program) in the cost model's
schedules, then each better stage program, whose arrival abandons the
finalization of a costlier one once something is verified. Then,
with --measure, the chosen kernels' best schedules are measured through a
worker process (on the GPU, or under the CPU emulation with --measure
emulated, whose times are CPU times and labelled so) and recorded in the
tuning database; GPU times override the cost model's predictions and the
program is extracted again. With --workers URL the kernels are measured by
the tune-workers of a fleet instead (see tuning-server and
docs/distributed.md), those of the --target's kind, on their GPUs (or
under their emulation with --measure emulated), all of a round at once;
a kernel that the fleet's shared tuning database has measured before, for
any model, is not measured again. If the fleet cannot be reached, or its
server or every worker vanishes, the kernels not measured are left to the
cost model within the budget, and the run says so. The last program is finalized as "compile"
does it: NVRTC, and verification under the CPU emulation (every distinct
kernel at its real shapes, and the architecture at a reduced size).
` + rulesDoc + ` With --ablate (the default) report.md's rule table
also gives the predicted time without each rule set and rule file: the
last stage saturated again without it, as many as the budget leaves time
for.
` + feedsDoc + `

The budget is kept: the command ends within max(2 s, 2%) of --budget with
the best verified program found; an unverified program is never written.
Ctrl-C does the same (a second Ctrl-C quits at once, leaving DIR as it
was). When work limits (--iter-limit, --node-limit) rather than the clock
end the search, two runs with the same input, seed and options write
identical files.

DIR receives what "compile" writes (kernels.cu, model.h, model.cpp,
plan.json with the run's provenance and the digest of every file,
constants.safetensors, the Go package in DIR/go, weights.safetensors for a
model with weights) and report.md with its charts in DIR/report/. The
folder is written beside DIR and swapped into its place whole, so DIR
holds the old folder or the new one, never a mix, even if the process is
killed; a DIR that is not empty is replaced only if lumsearch wrote it.`,
	example: `
lumsearch optimize llama-3-8b:layer --seq 16 --budget 2m -o _out/
lumsearch optimize model.onnx --dim batch=1 --dim sequence=128 --target h100 --budget 10m -o out/
lumsearch optimize ./Llama-3.2-1B/ --kind model --seq 512 --measure gpu -o out/
lumsearch optimize tiny-llama:layer --iter-limit 8 --json -o out/
lumsearch optimize llama-3-8b:layer --target h100 --workers nats://fleet.example.com:4222 --budget 30m -o out/`,
	setup: func(fs *flag.FlagSet) action {
		var o search.Options
		var out, dtype, kind string
		var seq int
		var asJSON, verify bool
		dims := dimFlag(fs, dimUsage)
		maxSeq := maxSeqFlag(fs)
		stepOpt := stepFlags(fs)
		fs.StringVar(&out, "o", "", "the output `DIR`")
		fs.DurationVar(&o.Budget, "budget", 10*time.Minute, "the run's time budget, output included (0: none, the work limits end it)")
		fs.StringVar(&o.Target, "target", "h100-sxm", "the device the cost model prices for (h100, a100, ...; auto: the GPU here)")
		fs.StringVar(&o.Arch, "arch", "", "the architecture NVRTC compiles for: sm_80 or sm_90 (default: the target's)")
		fs.IntVar(&seq, "seq", corpus.DefaultSeq, "tokens per sequence (a decode step's cache size)")
		fs.StringVar(&dtype, "dtype", "f32", "dtype of weights and activations for corpus and config models: f32, f16 or bf16")
		weights := weightsFlag(fs, "")
		fs.StringVar(&kind, "kind", "model", "what to build from a Hugging Face folder: model, layer, decode, ...")
		fs.Uint64Var(&o.Seed, "seed", 1, "seeds random weights, inputs and samples")
		fs.StringVar((*string)(&o.Measure), "measure", "auto", "where to measure kernels: auto (the GPU when there is one), gpu, emulated or none")
		fs.IntVar(&o.Candidates, "candidates", 8, "kernels measured (each in its best schedules)")
		fs.StringVar(&o.Workers, "workers", "", "measure on the tune-workers of a fleet at `URL` (nats://HOST:4222; see tuning-server) instead of here")
		fs.IntVar(&o.IterLimit, "iter-limit", 0, "saturation iterations per stage (0: 30)")
		fs.IntVar(&o.NodeLimit, "node-limit", 0, "e-nodes per stage (0: 200,000)")
		fs.BoolVar(&asJSON, "json", false, "print progress as one JSON event per line")
		fs.BoolVar(&o.Ablate, "ablate", true, "price the report's rule table without each rule set and rule file, as the budget allows")
		fs.StringVar(&o.Dump, "dump", "", "write the e-graph and the chosen program after every stage to `DIR`")
		fs.StringVar(&o.TuneDB, "tunedb", "", "the tuning database (default: $"+tunedb.EnvPath+" or the user cache folder)")
		fs.BoolVar(&verify, "verify", true, "verify under the CPU emulation (needs g++)")
		o.InputRanges = search.InputRanges{}
		fs.Var(o.InputRanges, "input-range", inputRangeUsage)
		o.Expect = map[string]ir.Symbol{}
		fs.Var(search.RangeFlag(o.Expect), "expect", expectUsage)
		ruleOpts := ruleFlags(fs)
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			start := time.Now()
			if len(pos) != 1 {
				return usagef("want: optimize MODEL -o DIR")
			}
			if out == "" {
				return usagef("optimize needs -o DIR")
			}
			dt, err := ir.ParseDType(dtype)
			if err != nil || !dt.IsFloat() {
				return usagef("--dtype %s: want f32, f16 or bf16", dtype)
			}
			switch o.Measure {
			case search.MeasureAuto, search.MeasureGPU, search.MeasureEmulated, search.MeasureNone:
			default:
				return usagef("--measure %q: want auto, gpu, emulated or none", o.Measure)
			}
			if o.Budget < 0 {
				return usagef("--budget %v: want a duration, 0 for none", o.Budget)
			}
			if o.Workers != "" {
				if err := fleet.CheckURL(o.Workers); err != nil {
					return usagef("--workers: %v", err)
				}
			}
			if err := search.CheckOutputDir(out); err != nil {
				return exitCodes(err)
			}
			build := weights.apply(corpus.Options{Seq: seq, MaxSeq: *maxSeq, Past: -1, DType: dt, Step: *stepOpt})
			m, err := search.LoadModel(pos[0], search.ModelOptions{Build: build, Kind: kind, Dims: dims.Pins, Ranges: dims.Ranges})
			if err != nil {
				if isUsage(err) {
					return err
				}
				return withCode(exitInput, fmt.Errorf("model %s: %w", pos[0], err))
			}
			defer m.Close()
			p := search.NewPrinter(stdout, asJSON)
			o.NoVerify, o.Events, o.Worker, o.Rules = !verify, p.Event, worker, *ruleOpts
			res, err := search.Optimize(ctx, m, o)
			if err != nil {
				return exitCodes(err)
			}
			// The output is written even after Ctrl-C: the folder must be whole.
			if err := res.Write(context.WithoutCancel(ctx), out); err != nil {
				return withCode(exitOutput, err)
			}
			p.Done(res.Report, out, time.Since(start))
			return nil
		}
	},
}

// worker starts this program's worker command to measure on where.
func worker(where string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, "worker", "--measure", where)
}

// Exit codes of the failures a user can act on.
const (
	exitInput    = 3 // the model cannot be read or is unsupported
	exitNoDevice = 4 // --measure gpu without a GPU
	exitOutput   = 5 // the output folder cannot be written
	exitBudget   = 6 // nothing verified within the budget
	exitInternal = 7 // a bug in lumsearch (search.KindInternal), whatever the command
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

// exitCodes turns the kinds of search's errors into exit codes.
func exitCodes(err error) error {
	switch {
	case search.KindOf(err) == search.KindInternal:
		return withCode(exitInternal, err)
	case errors.Is(err, search.ErrNothingVerified):
		return withCode(exitBudget, err)
	case search.KindOf(err) == search.KindInput:
		return withCode(exitInput, err)
	case search.KindOf(err) == search.KindNoDevice:
		return withCode(exitNoDevice, err)
	case search.KindOf(err) == search.KindOutput:
		return withCode(exitOutput, err)
	}
	return err
}
