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
	synopsis: "verify DIR [--input-range NAME=LO..HI ...] [--inputs FILE.safetensors] [--outputs FILE.safetensors]",
	doc: `
"verify DIR" checks a folder that "optimize" or "compile" wrote, from the
folder itself: plan.json (each launch's body, the reference it must
compute, with its kernel, schedule, grid and block), kernels.cu and
constants.safetensors.

Each distinct kernel is printed again from its body and schedule and must be
the very code kernels.cu holds; it then runs under the CPU emulation at its
real shapes on random inputs against the reference interpreter (a large one
on a seeded sample of its thread blocks). Then the whole program, rebuilt
from the plan, runs under the emulation against the model, rebuilt from the
plan's provenance, when its intermediates are small enough (at most 16M
elements); a corpus model too large for that is checked at the reduced size
of its architecture, as compile does. Needs g++.
` + feedsDoc + `

--inputs FILE runs the whole program on the tensors of a safetensors file
instead: one for every input and state of the model's graph, named as the
graph names them (what bench --save writes; weights in it replace the
model's), converted to the graph's dtypes only where that is exact; a
missing or extra name is an error naming it. --outputs FILE compares the
whole program's outputs with that file's (one per output, and optionally
the states' values after the run, by state name) within the verifier's
allowance. Both need the whole program under the emulation.`,
	example: `lumsearch verify out/`,
	setup: func(fs *flag.FlagSet) action {
		feeds := feedFlags(fs, "")
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
