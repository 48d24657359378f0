package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/search"
)

// compileCommand runs the pipeline without measurement.
var compileCommand = &command{
	name:     "compile",
	summary:  "search, lower and print a model's CUDA program, compile it with NVRTC and verify it",
	synopsis: "compile MODEL|MODEL.onnx -o DIR [--seq N] [--max-seq N] [--dtype f32|f16|bf16] [--weights mxfp4|fp8|awq|gptq|none] [--dim NAME=VALUE|NAME=LO..HI ...] [--target NAME] [--arch sm_80|sm_90] [--verify=false] [--expect past=LO..HI|context=LO..HI] [--input-range NAME=LO..HI ...] [--rules FILE ...] [--disable SET] [--enable SET]",
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

A decode step (MODEL:decode) takes its position at run time: input past,
an i32 scalar over 0..N-1 for a KV cache of --max-seq N (the same as
--seq), or over --dim past=LO..HI; --dim past=P pins it instead. One
program then serves every position: the cache row is written at past and
attention reads keys 0..past only. It prints the program's predicted time
at each bucket of the range (powers of two and the ends), and verification
runs the reduced program at several positions.
` + rulesDoc + `
` + feedsDoc + `

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
lumsearch compile llama-3-8b:decode --max-seq 8192 --dtype bf16 -o out/
lumsearch compile gpt-oss-120b:decode --dtype bf16 -o out/   # MXFP4 experts, as the checkpoint
lumsearch compile llama-3-8b:decode --dtype bf16 --weights fp8 -o out/
lumsearch compile model.onnx --dim batch=1 --dim sequence=16 -o out/`,
	setup: func(fs *flag.FlagSet) action {
		out := fs.String("o", "", "the output `DIR`")
		seq := fs.Int("seq", corpus.DefaultSeq, "tokens per sequence (a decode step's cache size)")
		dtype := fs.String("dtype", "f32", "dtype of weights and activations: f32, f16 or bf16")
		weights := weightsFlag(fs, "")
		target := fs.String("target", "h100-sxm", "the device the cost model prices for")
		arch := fs.String("arch", "sm_90", "the architecture NVRTC compiles for: sm_80 or sm_90")
		verify := fs.Bool("verify", true, "verify under the CPU emulation (needs g++)")
		dims := dimFlag(fs, ""+dimUsage)
		maxSeq := maxSeqFlag(fs)
		stepOpt := stepFlags(fs)
		ranges := search.InputRanges{}
		fs.Var(ranges, "input-range", inputRangeUsage)
		expect := search.RangeFlag{}
		fs.Var(expect, "expect", expectUsage)
		ruleOpts := ruleFlags(fs)
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
			build := weights.apply(corpus.Options{Seq: *seq, MaxSeq: *maxSeq, Past: -1, DType: dt, Step: *stepOpt})
			m, err := search.LoadModel(pos[0], search.ModelOptions{Build: build, Dims: dims.Pins, Ranges: dims.Ranges})
			if err != nil {
				if isUsage(err) {
					return err
				}
				return withCode(exitInput, fmt.Errorf("model %s: %w", pos[0], err))
			}
			defer m.Close()
			p := search.NewPrinter(stdout, false)
			res, err := search.Compile(ctx, m, search.Options{Target: *target, Arch: *arch, NoVerify: !*verify, InputRanges: ranges, Expect: expect, Rules: *ruleOpts, Events: p.Event})
			if err != nil {
				return exitCodes(err)
			}
			if err := res.Write(ctx, *out); err != nil {
				return errors.Unwrap(err) // compile exits 1 when the folder cannot be written
			}
			fmt.Fprintf(stdout, "  wrote %s, %s, %s and %s\n", filepath.Join(*out, search.KernelsFile), filepath.Join(*out, search.HeaderFile),
				filepath.Join(*out, search.LibraryFile), filepath.Join(*out, plan.FileName))
			return nil
		}
	},
}
