package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/search"
)

// corpusCommand lists and prints the built-in model graphs.
var corpusCommand = &command{
	name:     "corpus",
	summary:  "list the built-in model graphs, print one, or run one in the reference interpreter",
	synopsis: "corpus list [--json] | corpus show NAME|MODEL.onnx [--summary] | corpus eval NAME|MODEL.onnx [--seed N] [--dim NAME=VALUE ...] [--batch N] [--seq N] [--past N] [--dtype T] [--composite]",
	doc: `
The corpus is the set of model graphs lumsearch builds itself, named
MODEL:KIND: llama-3-8b, llama-3.2-1b, qwen2.5-0.5b, mistral-7b, gpt2 and
tiny-* test models, each as one decoder layer (layer, or block for gpt2), a
whole-model prefill (model), one decode step over in-place KV caches
(decode), and blocks (attention, mlp, rmsnorm or layernorm, softmax, rotary,
the activation). MODEL may also be the path of a Hugging Face config.json.

"corpus list" builds every graph and prints its name, its number of ops and
its number of parameters. "corpus show NAME" prints one graph in the text
format of the ir package, or with --summary its size and ops by count.
"corpus eval NAME" runs one graph in the float64 reference interpreter on
seeded random weights and inputs and prints how long each step took.

Instead of a NAME, show and eval take an ONNX file: it is imported (its
weights are the model's initializers, memory-mapped), and each symbolic
input dimension must be given with --dim NAME=VALUE.

Graphs are built with batch 1 and 128 tokens in f32 unless the flags say
otherwise; for decode, --seq is the KV cache's capacity and --past the
position of the new token (default: seq-1, the cache's last slot).`,
	example: `
lumsearch corpus list
lumsearch corpus show tiny-llama:layer --seq 4
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
		past := fs.Int("past", -1, "decode: tokens already in the cache, the new token's position (-1: seq-1)")
		dtype := fs.String("dtype", "f32", "dtype of weights and activations: f32, f16 or bf16")
		composite := fs.Bool("composite", false, "emit the composite softmax, norm and attention ops instead of their decompositions")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			dt, err := ir.ParseDType(*dtype)
			if err != nil {
				return usagef("--dtype: %v", err)
			}
			if !dt.IsFloat() {
				return usagef("--dtype %s: want f32, f16 or bf16", dt)
			}
			opt := corpus.Options{Batch: *batch, Seq: *seq, Past: *past, DType: dt, Composite: *composite}
			if *batch <= 0 || *seq <= 0 {
				return usagef("--batch and --seq must be positive")
			}
			if len(pos) == 0 {
				return usagef("missing subcommand: list, show or eval")
			}
			switch pos[0] {
			case "list":
				if len(pos) > 1 {
					return usagef("list takes no arguments, got: %s", strings.Join(pos[1:], " "))
				}
				return corpusList(ctx, opt, *asJSON, stdout)
			case "show":
				if len(pos) != 2 {
					return usagef("show wants one graph NAME, got %d arguments", len(pos)-1)
				}
				return corpusShow(pos[1], opt, dims, *summary, stdout)
			case "eval":
				if len(pos) != 2 {
					return usagef("eval wants one graph NAME, got %d arguments", len(pos)-1)
				}
				return corpusEval(ctx, pos[1], opt, dims, *seed, stdout)
			default:
				return usagef("unknown subcommand %q: want list, show or eval", pos[0])
			}
		}
	},
}

// corpusEntry is one line of corpus list.
type corpusEntry struct {
	Name   string `json:"name"`
	Ops    int    `json:"ops"`
	Params int64  `json:"params"`
}

// corpusList builds every registered graph and prints its size.
func corpusList(ctx context.Context, opt corpus.Options, asJSON bool, stdout io.Writer) error {
	var entries []corpusEntry
	for _, name := range corpus.Names() {
		if err := ctx.Err(); err != nil {
			return err
		}
		g, err := corpus.Build(name, opt)
		if err != nil {
			return err
		}
		entries = append(entries, corpusEntry{Name: name, Ops: len(g.Nodes), Params: g.NumParams()})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	width := len("NAME")
	for _, e := range entries {
		width = max(width, len(e.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %6s  %11s\n", width, "NAME", "OPS", "PARAMS")
	for _, e := range entries {
		line := fmt.Sprintf("%-*s  %6d  %11d  %s", width, e.Name, e.Ops, e.Params, humanCount(e.Params))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}

// humanCount writes a parameter count the way model cards do: 124.4M, 8.03B.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return ""
}

// corpusShow prints one graph in the ir text format, or its summary.
func corpusShow(name string, opt corpus.Options, dims search.Dims, summary bool, stdout io.Writer) error {
	m, err := search.LoadModel(name, search.ModelOptions{Build: opt, Dims: dims})
	if err != nil {
		return err
	}
	defer m.Close()
	g := m.Graph
	if summary {
		return writeOpCounts(stdout, g)
	}
	_, err = io.WriteString(stdout, g.String())
	return err
}

// writeOpCounts prints a graph's size and its ops by count.
func writeOpCounts(w io.Writer, g *ir.Graph) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "graph\t%s\nops\t%d\nparams\t%d\ninputs\t%d\nweights\t%d\nstates\t%d\noutputs\t%d\n\n",
		g.Name, len(g.Nodes), g.NumParams(), len(g.Inputs()), len(g.Weights()), len(g.States()), len(g.Outputs))
	counts := g.OpCounts()
	ops := make([]ir.Op, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b ir.Op) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%d\n", op, counts[op])
	}
	return tw.Flush()
}

// corpusEval runs a corpus graph in the reference interpreter and reports
// the time of each step: the figure the issue on the interpreter asks for.
func corpusEval(ctx context.Context, name string, opt corpus.Options, dims search.Dims, seed uint64, stdout io.Writer) error {
	t0 := time.Now()
	m, err := search.LoadModel(name, search.ModelOptions{Build: opt, Dims: dims})
	if err != nil {
		return err
	}
	defer m.Close()
	g, feeds := m.Graph, m.Weights
	t1 := time.Now()
	if feeds == nil {
		if feeds, err = corpus.RandomWeights(g, seed); err != nil {
			return fmt.Errorf("weights for %s: %w", name, err)
		}
	}
	inputs, err := ir.RandomLeaves(g, seed, ir.Typical, ir.OpInput, ir.OpState)
	if err != nil {
		return fmt.Errorf("inputs for %s: %w", name, err)
	}
	maps.Copy(feeds, inputs)
	t2 := time.Now()
	res, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{})
	if err != nil {
		return err
	}
	t3 := time.Now()
	fmt.Fprintf(stdout, "graph:    %s (%d ops, %d parameters)\n", name, len(g.Nodes), g.NumParams())
	fmt.Fprintf(stdout, "build:    %v\n", t1.Sub(t0).Round(time.Millisecond))
	fmt.Fprintf(stdout, "random:   %v (inputs, and weights unless the model has them; seed %d)\n", t2.Sub(t1).Round(time.Millisecond), seed)
	fmt.Fprintf(stdout, "evaluate: %v (float64 reference interpreter)\n", t3.Sub(t2).Round(time.Millisecond))
	for _, o := range g.Outputs {
		t := res.Outputs[o.Name]
		fmt.Fprintf(stdout, "output %s: %s%v\n", o.Name, t.DType, t.Shape)
	}
	return nil
}
