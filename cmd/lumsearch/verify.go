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
	synopsis: "verify DIR",
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
of its architecture, as compile does. Needs g++.`,
	example: `lumsearch verify out/`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: verify DIR")
			}
			err := search.Verify(ctx, pos[0], search.NewPrinter(stdout, false).Event)
			if search.KindOf(err) == search.KindInput {
				return withCode(exitInput, err)
			}
			return err
		}
	},
}
