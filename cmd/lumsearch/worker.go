package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lumsearch/lumsearch/measure"
)

// workerCommand serves measurement requests on stdin.
var workerCommand = &command{
	name:     "worker",
	summary:  "measure kernel candidates sent as JSON lines on stdin (a child process of the search)",
	synopsis: "worker [--measure gpu|emulated]",
	doc: `
"worker" reads measurement requests from standard input, one JSON object a
line ({"id": 1, "body": "<kernel body in ir text>", "schedule":
"bm=64,bn=64,bk=16,threads=256,stages=1", "seed": 7, "repeats": 5}), and
answers each on standard output with one JSON line: whether the kernel's
numbers matched the reference and, if so, the median and interquartile
range of its times and where they were measured.

With --measure gpu (the default) the kernel is compiled by NVRTC for the
device, checked on a sample of its outputs against the reference, then
timed with CUDA events after an L2 flush; without a CUDA device the worker
exits with an error saying so. With --measure emulated it runs under the
CPU emulation instead: numbers are checked the same way, and the times are
CPU times of the emulation, labelled "emulated" in every response.

The search starts workers itself and kills one that hangs or crashes on a
candidate; run it by hand to debug a request.`,
	example: `lumsearch worker --measure emulated < requests.jsonl`,
	setup: func(fs *flag.FlagSet) action {
		mode := fs.String("measure", "gpu", "where to measure: `gpu` or emulated")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) > 0 {
				return usagef("worker takes no arguments, got: %s", strings.Join(pos, " "))
			}
			var m measure.Measurer
			switch *mode {
			case "emulated":
				m = measure.Emulated{}
			case "gpu":
				g, err := measure.OpenGPU()
				if _, ok := errors.AsType[*measure.DriverError](err); ok {
					return fmt.Errorf("worker --measure gpu: %w (--measure emulated runs without one)", err)
				} else if err != nil {
					return fmt.Errorf("worker --measure gpu: %w", err)
				}
				defer g.Ctx.Release()
				m = g
			default:
				return usagef("--measure %q: gpu or emulated", *mode)
			}
			return measure.Serve(ctx, os.Stdin, stdout, m)
		}
	},
}
