package main

import (
	"context"
	"flag"
	"io"

	"github.com/lumsearch/lumsearch/search"
)

// verifyCommand re-runs the verification of an output folder.
var verifyCommand = &command{
	name:     "verify",
	summary:  "re-run the verification of a compiled output folder",
	synopsis: "verify DIR [--dim NAME=VALUE ...] [--input-range NAME=LO..HI ...] [--inputs FILE.safetensors] [--outputs FILE.safetensors]",
	doc: `
"verify DIR" checks a folder that "optimize" or "compile" wrote, from the
folder itself: plan.json (each launch's body, the reference it must
compute, with its kernel, schedule, grid and block), kernels.cu and
constants.safetensors. It works from any working directory.

First, the folder must be what lumsearch wrote, byte for byte: plan.json
matches its own digest and lists every other file with its SHA-256 (the
report, report.md and report/, aside); a file changed, added or removed
fails. The copies of the program must agree: the PTX and CUBIN that
model.cpp embeds are the Go package's files, and the Go package's plan and
constants are the folder's. Where the NVRTC version that compiled the
kernels is installed, kernels.cu is compiled again and must give exactly
the PTX and CUBIN the folder holds; with another NVRTC, or none, verify
says so and relies on the digests. A plan.json of an older format asks for
the model to be compiled again. A model read from a file (an ONNX file, a
config.json) is found where plan.json says, relative to the folder first,
then at its absolute path, and must be unchanged (its digest, and its
safetensors weights'); the error says what the folder needs if it moved.

Each distinct kernel is printed again from its body and schedule and must be
the very code kernels.cu holds; it then runs under the CPU emulation at its
real shapes on random inputs against the reference interpreter (a large one
on a seeded sample of its thread blocks). Then the whole program, rebuilt
from the plan, runs under the emulation against the model, rebuilt from the
plan's provenance, when its intermediates are small enough (at most 16M
elements); a corpus model too large for that is checked at the reduced size
of its architecture, as compile does. A program with runtime extents (a
decode step's past) runs at several values across each range (its ends, an
odd value, bucket edges); --dim past=P runs it at P alone. Needs g++.
` + feedsDoc + `

--inputs FILE runs the whole program on the tensors of a safetensors file
instead: one for every input and state of the model's graph, named as the
graph names them (what bench --save writes; weights in it replace the
model's), converted to the graph's dtypes only where that is exact; a
missing or extra name is an error naming it. --outputs FILE compares the
whole program's outputs with that file's (one per output, and optionally
the states' values after the run, by state name) within the verifier's
allowance. Both need the whole program under the emulation.`,
	example: `lumsearch verify _out/`,
	setup: func(fs *flag.FlagSet) action {
		feeds := feedFlags(fs, "")
		atFlag(fs, feeds, "")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: verify DIR")
			}
			err := search.VerifyWith(ctx, pos[0], *feeds, search.NewPrinter(stdout, false).Event)
			if search.KindOf(err) == search.KindInput {
				return withCode(exitInput, err)
			}
			return err
		}
	},
}
