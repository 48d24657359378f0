package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/measure"
)

// tuneWorkerCommand measures the fleet's jobs of one GPU kind.
var tuneWorkerCommand = &command{
	name:     "tune-worker",
	summary:  "measure kernel candidates for the searches of a fleet (NATS JetStream), one GPU kind",
	synopsis: "tune-worker --nats URL --gpu-kind KIND [--measure gpu|emulated] [--timeout D] [--ack-wait D] [--max-deliver N] [--name NAME]",
	doc: `
"tune-worker" takes measurement jobs for one GPU kind from the fleet at
--nats (see tuning-server), one at a time, measures each through the
isolated measuring worker process ("lumsearch worker", restarted when a
kernel hangs or kills it) on this machine's GPU, or under the CPU
emulation with --measure emulated, stores the result in the fleet's
shared tuning database (the bucket lumsearch-tunedb, create-if-absent)
and only then acknowledges the job. Run one per GPU. --gpu-kind is a
built-in device (h100, h200, a100, l40s, ...; the cost model's name is
the fleet's) or any name of letters, digits, - and _; every worker of a
kind should have the same GPU, driver and compiler: the worker records
its driver and compiler as the kind's, and requesters key their jobs by
them.

A job whose measuring process dies or passes --timeout is handed back for
another delivery (to this worker or another); one that fails its check
against the reference is answered with the failure. A worker that
vanishes mid-job loses it to another after --ack-wait (while measuring it
says every third of it that the job is in progress). After --max-deliver
deliveries the job goes to the dead letters with the reason; a malformed
job goes there at once. Ctrl-C hands the job in progress back and stops.
Credentials and TLS come from $` + fleet.EnvUser + ` and $` + fleet.EnvPassword + `,
or $` + fleet.EnvCreds + `, and $` + fleet.EnvCA + `, $` + fleet.EnvCert + ` and $` + fleet.EnvKey + `.`,
	example: `
lumsearch tune-worker --nats nats://fleet.example.com:4222 --gpu-kind h100
CUDA_VISIBLE_DEVICES=1 lumsearch tune-worker --nats nats://127.0.0.1:4222 --gpu-kind h100 --name box1-gpu1
lumsearch tune-worker --nats nats://127.0.0.1:4222 --gpu-kind h100 --measure emulated`,
	setup: func(fs *flag.FlagSet) action {
		url := fs.String("nats", "", "the fleet's NATS `URL` (nats://HOST:4222)")
		kind := fs.String("gpu-kind", "", "the GPU `KIND` this worker serves (h100, a100, ...)")
		mode := fs.String("measure", "gpu", "where to measure: `gpu` or emulated")
		timeout := fs.Duration("timeout", 2*time.Minute, "the longest one measurement may take before its process is killed, `D`")
		var o fleet.WorkerOptions
		fs.DurationVar(&o.AckWait, "ack-wait", 30*time.Second, "how long a job goes unacknowledged before another worker gets it, `D`")
		fs.IntVar(&o.MaxDeliver, "max-deliver", 5, "deliveries of a job before it is dead, `N`")
		fs.StringVar(&o.Name, "name", "", "this worker's `NAME` in the fleet (default: host-pid-random)")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) > 0 {
				return usagef("tune-worker takes no arguments, got: %s", strings.Join(pos, " "))
			}
			if err := fleet.CheckURL(*url); err != nil {
				return usagef("--nats: %v", err)
			}
			k, err := fleet.ResolveKind(*kind)
			if err != nil {
				return usagef("--gpu-kind: %v", err)
			}
			if *mode != fleet.ModeGPU && *mode != fleet.ModeEmulated {
				return usagef("--measure %q: gpu or emulated", *mode)
			}
			if *timeout <= 0 || o.AckWait <= 0 || o.MaxDeliver < 1 {
				return usagef("--timeout and --ack-wait must be positive, --max-deliver at least 1")
			}
			env, err := fleet.LocalEnv(ctx, *mode)
			if err != nil {
				if *mode == fleet.ModeGPU {
					return withCode(exitNoDevice, fmt.Errorf("%w (--measure emulated runs without one)", err))
				}
				return err
			}
			out := &syncWriter{w: stdout}
			o.Kind, o.Mode, o.Env = k, *mode, env
			o.Log = func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
			m := &measure.Client{Command: func() *exec.Cmd { return worker(*mode) }, Timeout: *timeout}
			defer m.Close()
			// A worker may start before its server: the connection and
			// the joining keep trying until Ctrl-C.
			co := fleet.ConnectOptionsFromEnv()
			co.Wait = true
			nc, err := fleet.Connect(*url, co)
			if err != nil {
				return err
			}
			defer nc.Close()
			w, err := fleet.JoinWorker(ctx, nc, m, o)
			if err != nil || ctx.Err() != nil {
				return err
			}
			o.Log("tune-worker %s: %s jobs (%s) from %s", w.Name(), k, env, fleet.Redact(*url))
			err = w.Run(ctx)
			s := w.Stats()
			o.Log("tune-worker %s: stopped; %d measured (%d stored here), %d failed, %d handed back, %d malformed", w.Name(), s.Measured, s.Stored, s.Failed, s.Lost, s.Malformed)
			return err
		}
	},
}
