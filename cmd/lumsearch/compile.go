package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/gogen"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/safetensors"
)

// compileCommand runs the pipeline without measurement.
var compileCommand = &command{
	name:     "compile",
	summary:  "search, lower and print a model's CUDA program, compile it with NVRTC and verify it",
	synopsis: "compile MODEL|MODEL.onnx -o DIR [--seq N] [--dtype f32|f16|bf16] [--dim NAME=VALUE ...] [--target NAME] [--arch sm_80|sm_90] [--verify=false]",
	doc: `
"compile MODEL" runs the compiler without measuring anything: it saturates
the model's e-graph with every rule set (a model whose layers repeat is
searched on two of them and their seam), extracts the program the cost model
of --target predicts fastest, lowers it to launches and a memory plan, and
prints every kernel as CUDA C in the schedule (tiles, threads, tensor cores)
the cost model ranks first. With libnvrtc present it compiles each kernel's
best four schedules for --arch, prices them again with the registers and
shared memory NVRTC reports, and keeps the fastest.

Then it verifies, unless --verify=false: every distinct kernel runs under
the CPU emulation at its real shapes on random inputs (a large one on a
seeded sample of its thread blocks, the reference interpreter computing
just the elements they wrote), and the whole program's wiring is checked:
for a corpus model, the same architecture at a reduced size (two layers,
hidden size 64) goes through every step and its CUDA runs under the
emulation against the reference interpreter; an ONNX model (its symbolic
dimensions bound with --dim) is run whole under the emulation with its own
weights when it is small enough (at most 16M elements of intermediates),
else that check says it was skipped.

It writes DIR/kernels.cu (the NVRTC prelude and every kernel), the host
library DIR/model.h and DIR/model.cpp (a C API over the CUDA driver, which
it loads at run time, embedding the PTX and CUBIN; any C++17 compiler
builds it, no CUDA toolkit; without NVRTC it embeds no kernels and its
lum_create says so) and DIR/plan.json (buffers, the arena, and each
launch's kernel, grid, block, buffers, schedule and the next three
candidates, predicted time, bytes and arithmetic, and NVRTC's register,
shared memory and spill report). When the model comes with weights (an
ONNX model's initializers) it also writes DIR/weights.safetensors: the
weights the run reads and those computed from weights at load time, which
the host library's lum_load_prepared loads in place of lum_load_weights and
lum_prepare.`,
	example: `
lumsearch compile llama-3-8b:layer --seq 16 -o out/
lumsearch compile gpt2:block --target a100 --arch sm_80 -o out/
lumsearch compile model.onnx --dim batch=1 --dim sequence=16 -o out/`,
	setup: func(fs *flag.FlagSet) action {
		out := fs.String("o", "", "the output `DIR`")
		seq := fs.Int("seq", corpus.DefaultSeq, "tokens per sequence (a decode step's cache size)")
		dtype := fs.String("dtype", "f32", "dtype of weights and activations: f32, f16 or bf16")
		target := fs.String("target", "h100-sxm", "the device the cost model prices for")
		arch := fs.String("arch", "sm_90", "the architecture NVRTC compiles for: sm_80 or sm_90")
		verify := fs.Bool("verify", true, "verify under the CPU emulation (needs g++)")
		dims := dimFlags{}
		fs.Var(dims, "dim", "an ONNX model's symbolic dimension `NAME=VALUE` (repeatable)")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: compile MODEL -o DIR")
			}
			if *out == "" {
				return usagef("compile needs -o DIR")
			}
			if *arch != "sm_80" && *arch != "sm_90" {
				return usagef("--arch %s: want sm_80 or sm_90", *arch)
			}
			dt, err := ir.ParseDType(*dtype)
			if err != nil || !dt.IsFloat() {
				return usagef("--dtype %s: want f32, f16 or bf16", *dtype)
			}
			return compileModel(ctx, pos[0], *out, corpus.Options{Seq: *seq, Past: -1, DType: dt}, dims, pricing{estimate: "model", target: *target}, *arch, *verify, stdout)
		}
	},
}

// compiled is one pass of the pipeline over a graph.
type compiled struct {
	prog    *rules.Program
	lowered *lower.Program
	kernels []*cuda.Kernel
}

func pipeline(ctx context.Context, g *ir.Graph, sat rules.SaturateOptions, m *cost.Model) (*compiled, error) {
	var rws []*egraph.Rewrite[rules.Data]
	for _, s := range rules.Sets() {
		r, err := rules.SetRewrites(s)
		if err != nil {
			return nil, err
		}
		rws = append(rws, r...)
	}
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

// source is what model and options a program was compiled from.
type source struct {
	model   string
	g       *ir.Graph
	weights map[string]*ir.Tensor // the model's own (nil for a corpus model)
	opt     corpus.Options
	dims    dimFlags
	sat     rules.SaturateOptions
	m       *cost.Model
	arch    string
}

// final is a program ready to write: lowered, printed, compiled by NVRTC
// when it is present, and verified unless verification was turned off.
type final struct {
	*compiled
	src, ptx  string
	cubin     []byte
	resources map[string]nvrtc.Resources
	// verified says what verification passed ("" when it was off).
	verified string
}

func compileModel(ctx context.Context, model, dir string, opt corpus.Options, dims dimFlags, price pricing, arch string, verify bool, stdout io.Writer) error {
	g, weights, closeModel, err := loadGraph(model, opt, dims)
	if err != nil {
		return err
	}
	defer closeModel()
	sat, costName, m, err := price.options(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	naive, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return err
	}
	lp := c.lowered
	fmt.Fprintf(stdout, "compile %s for %s (%s)\n", model, m.Device.Name, arch)
	fmt.Fprintf(stdout, "  program: %d kernels per run and %d at load, %s per run by %s (the naive program: %d kernels, %s)\n",
		c.prog.Kernels, c.prog.Prep, seconds(c.prog.Cost), costName, naive.Kernels+naive.Prep, seconds(naive.Cost))
	fmt.Fprintf(stdout, "  lowered: %d launches per run, %d at load, %d buffers; arena %d bytes for %d bytes of intermediates (%v)\n",
		len(lp.Run), len(lp.Prep), len(lp.Buffers), lp.ArenaBytes, lp.TempBytes, time.Since(start).Round(time.Millisecond))
	src := &source{model: model, g: g, weights: weights, opt: opt, dims: dims, sat: sat, m: m, arch: arch}
	f, err := finalize(ctx, src, c, verify, stdout)
	if err != nil {
		return err
	}
	if _, err := writeOutput(ctx, dir, src, f, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  wrote %s, %s, %s and %s\n", filepath.Join(dir, "kernels.cu"), filepath.Join(dir, "model.h"),
		filepath.Join(dir, "model.cpp"), filepath.Join(dir, "plan.json"))
	return nil
}

// rerank prices each kernel's best few schedules again with the
// registers and shared memory NVRTC reports for them (the cost model only
// guessed those) and reprints the kernels whose best schedule changed; it
// returns how many changed.
func rerank(ctx context.Context, lib *nvrtc.Library, c *compiled, m *cost.Model, arch string) (int, error) {
	compileUnit := func(unit string) (map[string]cost.Resources, error) {
		res, err := lib.Compile(ctx, cuda.NVRTCPrelude+"\n"+unit, "schedules.cu", nvrtc.Options{Arch: arch})
		if err != nil {
			return nil, err
		}
		out := map[string]cost.Resources{}
		for name, r := range res.Kernels {
			out[name] = cost.Resources{Registers: r.Registers, Shared: r.SharedBytes}
		}
		return out, nil
	}
	ks, changed, err := cuda.Rerank(c.lowered, c.kernels, compileUnit, m.Resourced)
	if err != nil {
		return 0, err
	}
	c.kernels = ks
	return changed, nil
}

// finalize makes a printed program ready to write: NVRTC (when present)
// re-ranks the schedules by the resources it reports and compiles the
// kernels, then the program is verified (when verify is set): every
// distinct kernel at its real shapes, and the whole program's wiring at a
// reduced size (a corpus model) or whole (an imported one). It reports on
// log as it goes.
func finalize(ctx context.Context, src *source, c *compiled, verify bool, log io.Writer) (*final, error) {
	model, arch, m, lp := src.model, src.arch, src.m, c.lowered
	f := &final{compiled: c, resources: map[string]nvrtc.Resources{}}
	if lib, err := nvrtc.Load(); err != nil {
		f.src = cuda.NVRTCPrelude + "\n" + cuda.Source(c.kernels)
		fmt.Fprintf(log, "  nvrtc: not compiled: %v\n", err)
	} else {
		changed, err := rerank(ctx, lib, c, m, arch)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", model, err)
		}
		ks := c.kernels
		fmt.Fprintf(log, "  schedules: %d distinct kernels priced again with NVRTC's registers and shared memory for their best %d schedules; %d changed schedule\n",
			len(cuda.Distinct(ks)), 1+cuda.Alternatives, changed)
		f.src = cuda.NVRTCPrelude + "\n" + cuda.Source(c.kernels)
		res, err := lib.Compile(ctx, f.src, "kernels.cu", nvrtc.Options{Arch: arch})
		if err != nil {
			return nil, fmt.Errorf("compile %s: NVRTC rejected the generated CUDA (a printer bug): %w", model, err)
		}
		f.resources, f.ptx, f.cubin = res.Kernels, res.PTX, res.CUBIN
		regs, smem, spills := 0, 0, 0
		for _, r := range res.Kernels {
			regs, smem, spills = max(regs, r.Registers), max(smem, r.SharedBytes), spills+r.SpillStores
		}
		major, minor := lib.Version()
		fmt.Fprintf(log, "  nvrtc %d.%d %s: %d distinct kernels compiled for %d launches; registers up to %d, shared memory up to %d bytes, %d bytes spilled\n",
			major, minor, arch, len(res.Kernels), len(c.kernels), regs, smem, spills)
	}
	if !verify {
		return f, nil
	}
	var what bytes.Buffer
	out := io.MultiWriter(log, &what)
	// The program's wiring is checked (whole or at the reduced size)
	// while its kernels run at their real shapes: the two share nothing
	// but the machine, and the kernels' check spends much of its time
	// waiting on the emulation. Its lines follow the kernels' as before.
	var wiring bytes.Buffer
	wiringErr := make(chan error, 1)
	wctx, stopWiring := context.WithCancel(ctx)
	defer stopWiring()
	go func() {
		if strings.HasSuffix(model, ".onnx") {
			wiringErr <- verifyWhole(wctx, model, src.g, src.weights, c, &wiring)
		} else {
			wiringErr <- verifyReduced(wctx, model, src.opt, src.sat, m, &wiring)
		}
	}()
	kernelsErr := verifyKernels(ctx, model, lp, c.kernels, out)
	if kernelsErr != nil {
		stopWiring()
	}
	werr := <-wiringErr
	if kernelsErr != nil {
		return nil, kernelsErr
	}
	out.Write(wiring.Bytes())
	if werr != nil {
		return nil, werr
	}
	f.verified = strings.TrimSpace(strings.ReplaceAll(what.String(), "\n  ", "; "))
	f.verified = strings.TrimPrefix(f.verified, "verify: ")
	// The record of what was verified is part of the output, which must
	// not change from run to run: drop the wall times.
	f.verified = verifyTime.ReplaceAllString(f.verified, ")")
	return f, nil
}

// verifyTime matches the wall time that ends a verify line's parenthesis.
var verifyTime = regexp.MustCompile(`; [0-9hms.µ]+\)`)

// writeOutput writes a final program's output folder: kernels.cu, the
// host library, plan.json (with where the program came from), the
// constants, the Go package and, for a model with weights, the prepared
// weights. It returns the plan.
func writeOutput(ctx context.Context, dir string, src *source, f *final, stdout io.Writer) (*plan.Plan, error) {
	model, lp := src.model, f.lowered
	header, library, err := cuda.HostLibrary(lp, f.kernels, f.ptx, f.cubin, src.arch)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	if f.ptx == "" {
		fmt.Fprintf(stdout, "  host library: no kernels embedded (NVRTC is missing): its lum_create fails until the model is compiled where libnvrtc is installed\n")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	for _, file := range [][2]string{{"kernels.cu", f.src}, {"model.h", header}, {"model.cpp", library}} {
		if err := os.WriteFile(filepath.Join(dir, file[0]), []byte(file[1]), 0o644); err != nil {
			return nil, fmt.Errorf("output folder: %w", err)
		}
	}
	pl, err := plan.Build(lp, f.kernels, f.resources, src.m)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	pl.Version, pl.Model, pl.Target, pl.Arch = versionString(), model, src.m.Device.Name, src.arch
	pl.Options = plan.Options{Seq: src.opt.Seq, Past: src.opt.Past, DType: src.opt.DType.String(), Dims: maps.Clone(src.dims)}
	if err := pl.Write(dir); err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	consts, err := plan.Constants(ctx, lp)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	constData, err := safetensors.Encode(consts, map[string]string{versionMetadataKey: versionString()})
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	if err := os.WriteFile(filepath.Join(dir, plan.ConstantsFile), constData, 0o644); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	goDir := filepath.Join(dir, "go", gogen.PackageName(model))
	pkgName, err := gogen.Write(goDir, gogen.Package{Plan: pl, PTX: f.ptx, CUBIN: f.cubin, Constants: constData})
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	fmt.Fprintf(stdout, "  go package: %s in %s (embeds the plan, kernels and constants; runs through lumsearch's gpu runtime)\n", pkgName, goDir)
	if src.weights != nil {
		if err := writePreparedWeights(ctx, model, dir, lp, src.weights, stdout); err != nil {
			return nil, fmt.Errorf("compile %s: %w", model, err)
		}
	}
	return pl, nil
}

// verifyKernels runs every distinct kernel of the program under the CPU
// emulation at its real shapes on random inputs, the large ones on a
// seeded sample of thread blocks with the reference computing only the
// elements they wrote (cuda.VerifyKernels: one compilation, the kernels
// run a group at a time to bound memory), and reports what it compared.
func verifyKernels(ctx context.Context, model string, lp *lower.Program, ks []*cuda.Kernel, stdout io.Writer) error {
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: kernels not run: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	start := time.Now()
	launches := append(append([]*lower.Launch(nil), lp.Prep...), lp.Run...)
	bodyOf := map[*cuda.Kernel]*ir.Graph{}
	var distinct []*cuda.Kernel
	for i, k := range ks {
		if _, ok := bodyOf[k]; !ok {
			bodyOf[k] = launches[i].Body
			distinct = append(distinct, k)
		}
	}
	bodies := make([]*ir.Graph, len(distinct))
	for i, k := range distinct {
		bodies[i] = bodyOf[k]
	}
	checks, err := cuda.VerifyKernels(ctx, distinct, bodies, cuda.VerifyOptions{Seed: 1})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("verify %s: stopped before the kernels were checked: %w", model, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("verify %s: a kernel at its real shapes differs from the reference: %w", model, err)
	}
	var whole, sampled, blocksRun, blocks int
	var elements int64
	worst := 0.0
	for _, c := range checks {
		if c.Sampled {
			sampled++
		} else {
			whole++
		}
		blocksRun, blocks, elements = blocksRun+c.BlocksRun, blocks+c.GridBlocks, elements+c.Elements
		worst = math.Max(worst, c.WorstRatio)
	}
	fmt.Fprintf(stdout, "  verify: %d distinct kernels at their real shapes under the CPU emulation match the reference (%d whole, %d on a sample of thread blocks; %d of %d blocks run, %d elements compared, worst error %.2g of the tolerance; %v)\n",
		len(distinct), whole, sampled, blocksRun, blocks, elements, worst, time.Since(start).Round(time.Millisecond))
	return nil
}

// verifyReduced runs the pipeline on the model's architecture at the
// reduced size and checks its CUDA under emulation against the reference.
func verifyReduced(ctx context.Context, model string, opt corpus.Options, sat rules.SaturateOptions, m *cost.Model, stdout io.Writer) error {
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: skipped: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	i := strings.LastIndexByte(model, ':')
	if i < 0 {
		return usagef("model %q is not MODEL:KIND", model)
	}
	var cfg *corpus.Config
	var err error
	if strings.HasSuffix(model[:i], ".json") {
		cfg, err = corpus.LoadConfig(model[:i])
	} else {
		cfg, err = corpus.EmbeddedConfig(model[:i])
	}
	if err != nil {
		return err
	}
	small := opt
	small.Seq, small.Past = min(opt.Seq, 8), min(opt.Seq, 8)-1
	g, err := corpus.BuildConfig(model+" (reduced)", corpus.Reduced(cfg), model[i+1:], small)
	if err != nil {
		return fmt.Errorf("verify %s: %w", model, err)
	}
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return fmt.Errorf("verify %s at the reduced size: %w", model, err)
	}
	feeds, err := ir.RandomFeeds(g, 1, ir.Typical)
	if err != nil {
		return err
	}
	rel, err := emulateAgainstReference(ctx, model, g, c, feeds, opt.DType)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the reduced configuration (%d launches, hidden 64, 2 layers at most) matches the reference interpreter under the CPU emulation (relative error %.2g)\n",
		len(c.kernels), rel)
	return nil
}

// emulateAgainstReference runs c's CUDA under the CPU emulation with feeds
// and compares it with the reference interpreter: element by element
// within ir.Tolerance, and, because the reference's first-order magnitudes
// can grow large through norms and masked softmax, the whole result in the
// relative L2 sense (how far from the reference in units of its own size).
func emulateAgainstReference(ctx context.Context, model string, g *ir.Graph, c *compiled, feeds map[string]*ir.Tensor, dt ir.DType) (float64, error) {
	want, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return 0, err
	}
	outs, states, err := cuda.EmulateProgram(ctx, c.lowered, c.kernels, feeds, emu.Options{})
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", model, err)
	}
	var diff2, norm2 float64
	check := func(name string, got, w, mag *ir.Tensor) error {
		mm, err := ir.Compare(got, w, mag, 1024)
		if err != nil {
			return err
		}
		if mm != nil {
			return fmt.Errorf("verify %s: %s differs from the reference: %v", model, name, mm)
		}
		for k := range w.Len() {
			if g, x := got.At(k), w.At(k); g == g && x == x && !math.IsInf(x, 0) {
				diff2 += (g - x) * (g - x)
				norm2 += x * x
			}
		}
		return nil
	}
	for name, w := range want.Outputs {
		if err := check("output "+name, outs[name], w, want.Magnitudes[name]); err != nil {
			return 0, err
		}
	}
	for name, w := range want.States {
		if err := check("state "+name, states[name], w, want.Magnitudes[name]); err != nil {
			return 0, err
		}
	}
	rel := math.Sqrt(diff2 / math.Max(norm2, math.SmallestNonzeroFloat64))
	if limit := relativeLimit(dt); rel > limit {
		return rel, fmt.Errorf("verify %s: the results are %.3g away from the reference relative to their size (at most %.3g for %s)", model, rel, limit, dt)
	}
	return rel, nil
}

// verifyWhole runs an imported model's program whole under the emulation,
// with its own weights and random inputs, when it is small enough.
func verifyWhole(ctx context.Context, model string, g *ir.Graph, weights map[string]*ir.Tensor, c *compiled, stdout io.Writer) error {
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: skipped: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	const maxElements = 16 << 20
	if c.lowered.TempBytes/4 > maxElements {
		fmt.Fprintf(stdout, "  verify: skipped: %d bytes of intermediates are too many for the CPU emulation (at most %d elements)\n", c.lowered.TempBytes, maxElements)
		return nil
	}
	feeds, err := ir.RandomLeaves(g, 1, ir.Typical, ir.OpInput, ir.OpState)
	if err != nil {
		return err
	}
	for name, w := range weights {
		feeds[name] = w
	}
	dt := ir.F32
	for _, o := range g.Outputs {
		if d := g.Node(o.Value).DType; d.IsFloat() && d.Eps() > dt.Eps() {
			dt = d
		}
	}
	rel, err := emulateAgainstReference(ctx, model, g, c, feeds, dt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the whole program matches the reference interpreter under the CPU emulation (relative error %.2g)\n", rel)
	return nil
}

// relativeLimit is the relative L2 error a verified program may have in
// dtype dt: a few thousand roundings of the dtype's precision.
func relativeLimit(dt ir.DType) float64 {
	if dt == ir.F32 || dt == ir.InvalidDType {
		return 1e-4
	}
	return 64 * dt.Eps()
}
