package main

import (
	"context"
	"flag"
	"io"

	"github.com/lumsearch/lumsearch/search"
)

// runCommand runs a compiled folder on given inputs.
var runCommand = &command{
	name:     "run",
	summary:  "run a compiled output folder on given inputs and write its outputs",
	synopsis: "run DIR --inputs FILE.safetensors -o FILE.safetensors [--dim NAME=VALUE ...]",
	doc: `
"run DIR" runs the program that "optimize" or "compile" wrote into DIR on
the tensors of a safetensors file, under the CPU emulation (the code
kernels.cu holds, as verify checks it), and writes the outputs, and every
state the run updated (a KV cache), to another safetensors file, replaced
whole. The folder is checked first as verify checks its files.

--inputs FILE holds a tensor for every input of the model's graph by its
name (the layout bench --save writes), optionally states (a KV cache's
content before the run; a state it lacks starts zeroed, as lum_create
leaves it) and weights, which replace the model's (a corpus model runs
with the seeded random weights verify uses). --dim NAME=VALUE sets a
runtime extent, a decode step's position past, which must lie within the
range the folder was compiled for; it replaces the file's value.`,
	example: `lumsearch run _out/ --inputs step.safetensors --dim past=17 -o logits.safetensors`,
	setup: func(fs *flag.FlagSet) action {
		o := search.RunOptions{At: search.SymbolValues{}}
		fs.StringVar(&o.Inputs, "inputs", "", "the safetensors `FILE` of inputs (and optionally states and weights)")
		fs.StringVar(&o.Output, "o", "", "the safetensors `FILE` to write the outputs and updated states to")
		fs.Var(o.At, "dim", "a runtime extent `NAME=VALUE` (a decode step's past), within the compiled range (repeatable)")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: run DIR --inputs FILE -o FILE")
			}
			if o.Inputs == "" || o.Output == "" {
				return usagef("run needs --inputs FILE and -o FILE")
			}
			err := search.RunFolder(ctx, pos[0], o, search.NewPrinter(stdout, false).Event)
			if search.KindOf(err) == search.KindInput {
				return withCode(exitInput, err)
			}
			return err
		}
	},
}
