package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/search"
)

// corpusCommand lists and prints the built-in model graphs.
var corpusCommand = &command{
	name:     "corpus",
	summary:  "list the built-in model graphs, print one, or run one in the reference interpreter",
	synopsis: "corpus list [--json] | corpus show NAME|CONFIG.json|DIR|MODEL.onnx [--summary] | corpus eval NAME|CONFIG.json|DIR|MODEL.onnx [--seed N] [--dim NAME=VALUE ...] [--batch N] [--seq N] [--past N] [--dtype T] [--weights FORMAT] [--composite] [--input-range NAME=LO..HI ...] [--inputs FILE] [--outputs FILE] [--save-outputs FILE]",
	doc: `
The corpus is the set of model graphs lumsearch builds itself, named
MODEL:KIND: llama-3-8b, llama-3.2-1b, qwen2.5-0.5b, mistral-7b, gpt2, the
mixtures of experts mixtral-8x7b, qwen3-30b-a3b, gpt-oss-20b and
gpt-oss-120b, and tiny-* test models, each as one decoder layer (layer, or
block for gpt2), a
whole-model prefill (model), one decode step over in-place KV caches
(decode), and blocks (attention, mlp, rmsnorm or layernorm, softmax, rotary,
the activation). MODEL may also be the path of a Hugging Face config.json
(PATH.json:KIND); show and eval also take PATH.json alone, or a folder
holding config.json, for the whole model (kind model). A config with a key
lumsearch does not implement (shared experts, quantized activations, ...)
is refused by name, and so is a --seq beyond the model's positions
(max_position_embeddings, n_positions for gpt2).

A quantized model (a config's quantization_config: mxfp4, fp8,
compressed-tensors, awq or gptq; or --weights) declares its checkpoint's
packed tensors and dequantizes them in the graph; eval draws its weights
in float and packs them as such a checkpoint would. --weights none keeps
every weight in --dtype (gpt-oss's experts in bf16).

"corpus list" builds every graph and prints its name, its number of ops and
its number of parameters (a model with fewer positions than --seq has its
graphs listed as skipped). "corpus show NAME" prints one graph in the text
format of the ir package, or with --summary its size and ops by count.
"corpus eval NAME" runs one graph in the float64 reference interpreter on
seeded random weights and inputs and prints how long each step took.
` + feedsDoc + `
With --inputs FILE, eval takes every input and state (and any weights) from
a safetensors file named as the graph names them (the layout bench --save
writes), converted only where exact; a missing or extra name is an error
naming it. --outputs FILE compares the results with that file's within the
verifier's allowance; --save-outputs FILE writes them in the same layout
(outputs by name, updated states by state name), so that a model can be
checked against PyTorch or onnxruntime without writing Go.

Instead of a NAME, show and eval take an ONNX file: it is imported (its
weights are the model's initializers, memory-mapped), and each symbolic
input dimension must be given with --dim NAME=VALUE.

Graphs are built with batch 1 and 128 tokens in f32 unless the flags say
otherwise; for decode, --seq is the KV cache's capacity and --past the
position of the new token (default -1: a runtime position, input past over
0..seq-1).`,
	example: `
lumsearch corpus list
lumsearch corpus show tiny-llama:layer --seq 4
lumsearch corpus show ./Llama-3.2-1B/config.json --summary
lumsearch corpus show llama-3-8b:decode --seq 4096 --past 1000 --dtype bf16
lumsearch corpus eval llama-3-8b:layer --seq 128
lumsearch corpus show model.onnx --dim batch=1 --dim sequence=128 --summary
lumsearch corpus list --json --seq 1024`,
	setup: func(fs *flag.FlagSet) action {
		asJSON := fs.Bool("json", false, "list: print one JSON array")
		seed := fs.Uint64("seed", 1, "eval: seed of the random weights and inputs")
		dims := search.Dims{}
		fs.Var(dims, "dim", "an ONNX model's symbolic input dimension, NAME=VALUE (repeatable)")
		summary := fs.Bool("summary", false, "show: print the graph's size and ops by count instead of the graph")
		batch := fs.Int("batch", corpus.DefaultBatch, "sequences per batch")
		seq := fs.Int("seq", corpus.DefaultSeq, "tokens per sequence; for decode, the KV cache's capacity")
		past := fs.Int("past", -1, "decode: tokens already in the cache, the new token's position (-1: the runtime input past over 0..seq-1)")
		dtype := fs.String("dtype", "f32", "dtype of weights and activations: f32, f16 or bf16")
		weights := weightsFlag(fs, "")
		feeds := feedFlags(fs, "eval: ")
		saveOutputs := fs.String("save-outputs", "", "eval: write the outputs and updated states to the safetensors `FILE` (the layout --outputs reads)")
		composite := fs.Bool("composite", false, "emit the composite softmax, norm and attention ops instead of their decompositions")
		stepOpt := stepFlags(fs)
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			dt, err := ir.ParseDType(*dtype)
			if err != nil {
				return usagef("--dtype: %v", err)
			}
			if !dt.IsFloat() {
				return usagef("--dtype %s: want f32, f16 or bf16", dt)
			}
			// checkSizeFlags has refused a --batch, --seq or --past
			// that does not fit.
			opt := weights.apply(corpus.Options{Batch: *batch, Seq: *seq, Past: *past, DType: dt, Composite: *composite, Step: *stepOpt})
			if len(pos) == 0 {
				return usagef("missing subcommand: list, show or eval")
			}
			switch pos[0] {
			case "list":
				if len(pos) > 1 {
					return usagef("list takes no arguments, got: %s", strings.Join(pos[1:], " "))
				}
				l, err := corpus.List(ctx, opt)
				if err != nil {
					return err
				}
				if *asJSON {
					return l.WriteJSON(stdout)
				}
				return l.WriteText(stdout)
			case "show":
				if len(pos) != 2 {
					return usagef("show wants one graph NAME, got %d arguments", len(pos)-1)
				}
				return corpusShow(pos[1], opt, dims, *summary, stdout)
			case "eval":
				if len(pos) != 2 {
					return usagef("eval wants one graph NAME, got %d arguments", len(pos)-1)
				}
				return corpusEval(ctx, pos[1], opt, dims, search.EvalOptions{Seed: *seed, Feeds: *feeds, SaveOutputs: *saveOutputs}, stdout)
			default:
				return usagef("unknown subcommand %q: want list, show or eval", pos[0])
			}
		}
	},
}

// corpusShow prints one graph in the ir text format, or its summary.
func corpusShow(name string, opt corpus.Options, dims search.Dims, summary bool, stdout io.Writer) error {
	m, err := search.LoadModel(name, search.ModelOptions{Build: opt, Dims: dims})
	if err != nil {
		return err
	}
	defer m.Close()
	if summary {
		return m.Graph.WriteSummary(stdout)
	}
	_, err = io.WriteString(stdout, m.Graph.String())
	return err
}

// corpusEval runs a corpus graph in the reference interpreter and reports
// the time of each step.
func corpusEval(ctx context.Context, name string, opt corpus.Options, dims search.Dims, eo search.EvalOptions, stdout io.Writer) error {
	start := time.Now()
	m, err := search.LoadModel(name, search.ModelOptions{Build: opt, Dims: dims})
	if err != nil {
		return err
	}
	defer m.Close()
	ev, err := search.Evaluate(ctx, m, eo, time.Since(start))
	if err != nil {
		return exitCodes(err)
	}
	return ev.WriteText(stdout)
}
