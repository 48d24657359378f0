package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/fleet"
)

// tuningServerCommand runs the fleet's NATS server and its dead-letter
// handler.
var tuningServerCommand = &command{
	name:     "tuning-server",
	summary:  "run the NATS JetStream server that spreads measurement jobs over tune-workers (or set a NATS cluster up for it)",
	synopsis: "tuning-server [--port N] [--host ADDR] [--store DIR] [--max-payload BYTES] [--config FILE] | tuning-server --nats URL [--replicas N]",
	doc: `
"tuning-server" starts an embedded NATS server with JetStream, keeping its
streams in --store, and sets the measuring fleet up on it: the work-queue
stream of jobs (lumsearch.jobs.KIND.MODE), the dead letters
(lumsearch.dead.KIND.MODE), the kept max-deliveries advisories, the
key-value bucket lumsearch-tunedb (the shared tuning database) and the
bucket lumsearch-fleet (the kinds' drivers and compilers, the live
workers). Then it moves each job that JetStream gave up on (delivered
--max-deliver times, see tune-worker) to the dead letters with the reason,
until Ctrl-C stops it; what JetStream acknowledged stays in the store for
the next start.

With --nats URL it starts no server: it sets the fleet up on that NATS
server or cluster (--replicas 3 for a cluster) and handles the dead letters
there. This command's and every other's credentials and TLS come from
$` + fleet.EnvUser + ` and $` + fleet.EnvPassword + `, or $` + fleet.EnvCreds + `, and $` + fleet.EnvCA + `,
$` + fleet.EnvCert + ` and $` + fleet.EnvKey + `; the embedded server's users, TLS and
everything else NATS provides come from --config (a nats-server
configuration file). By default it listens on 127.0.0.1 only: --host 0.0.0.0 opens it to
the network, where it should have authentication (see docs/distributed.md).

tune-workers measure the jobs; "optimize --workers URL" sends them.`,
	example: `
lumsearch tuning-server --store /var/lib/lumsearch/fleet
lumsearch tuning-server --host 0.0.0.0 --config fleet.conf
lumsearch tuning-server --nats nats://nats-1:4222,nats://nats-2:4222 --replicas 3`,
	setup: func(fs *flag.FlagSet) action {
		port := fs.Int("port", 4222, "the client `PORT` to listen on (0: any free port)")
		host := fs.String("host", "", "the `ADDR` to listen on (default 127.0.0.1, or the --config file's)")
		store := fs.String("store", "", "the `DIR` JetStream keeps the streams in (default: lumsearch/fleet in the user cache folder)")
		maxPayload := fs.Int("max-payload", 0, "the largest message the server takes, in `BYTES` (default 1 MiB); a larger job is refused")
		config := fs.String("config", "", "a nats-server configuration `FILE` (accounts, TLS, limits) for the embedded server")
		url := fs.String("nats", "", "set the fleet up on the NATS server or cluster at `URL` instead of starting one")
		replicas := fs.Int("replicas", 1, "how many servers of a cluster keep each stream and bucket, `N`")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) > 0 {
				return usagef("tuning-server takes no arguments, got: %s", strings.Join(pos, " "))
			}
			if *url != "" {
				for _, name := range []string{"port", "host", "store", "max-payload", "config"} {
					if isSet(fs, name) {
						return usagef("--%s is for the embedded server; --nats uses a server that runs already", name)
					}
				}
				if err := fleet.CheckURL(*url); err != nil {
					return usagef("--nats: %v", err)
				}
			}
			if *port < 0 || *port > 65535 || *maxPayload < 0 || *maxPayload > 64<<20 || *replicas < 1 || *replicas > 5 {
				return usagef("--port wants 0..65535, --max-payload 0..64 MiB, --replicas 1..5")
			}
			out := &syncWriter{w: stdout}
			logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
			serverURL := *url
			if serverURL == "" {
				dir := *store
				if dir == "" && *config == "" {
					cache, err := os.UserCacheDir()
					if err != nil {
						return fmt.Errorf("no cache folder (%v): give --store DIR", err)
					}
					dir = filepath.Join(cache, "lumsearch", "fleet")
				}
				p := *port
				if p == 0 {
					p = -1
				} else if !isSet(fs, "port") && *config != "" {
					p = 0 // the file's, else NATS's
				}
				s, err := fleet.StartServer(ctx, fleet.ServerOptions{ConfigFile: *config, Host: *host, Port: p, StoreDir: dir, MaxPayload: int32(*maxPayload), Fleet: fleet.Config{Replicas: *replicas}, Connect: fleet.ConnectOptionsFromEnv(), Log: logf})
				if err != nil {
					return err
				}
				defer s.Shutdown()
				serverURL = s.URL()
				logf("tuning server: %s, JetStream in %s", serverURL, s.StoreDir())
			}
			nc, err := fleet.Connect(serverURL, fleet.ConnectOptionsFromEnv())
			if err != nil {
				return err
			}
			defer nc.Close()
			if *url != "" {
				if err := fleet.Setup(ctx, nc, fleet.Config{Replicas: *replicas}); err != nil {
					return fmt.Errorf("set the fleet up at %s: %w", fleet.Redact(serverURL), err)
				}
				logf("tuning server: the fleet is set up at %s", fleet.Redact(serverURL))
			}
			logf("workers: lumsearch tune-worker --nats %s --gpu-kind KIND; searches: lumsearch optimize MODEL --workers %s ...", fleet.Redact(serverURL), fleet.Redact(serverURL))
			err = fleet.RunDeadLetters(ctx, nc, fleet.DeadLetterOptions{Log: logf})
			logf("tuning server: stopped")
			return err
		}
	},
}

// syncWriter serializes the lines a long-running command's goroutines
// write.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
