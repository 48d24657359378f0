package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as the isolated measuring worker process: with
// FLEET_TEST_WORKER=crash it serves the measure protocol and exits with
// status 3 on every request, as a kernel that kills its process does.
func TestMain(m *testing.M) {
	if os.Getenv("FLEET_TEST_WORKER") == "crash" {
		_ = measure.Serve(context.Background(), os.Stdin, os.Stdout, crashing{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type crashing struct{}

func (crashing) Measure(context.Context, measure.Request) measure.Response {
	os.Stderr.WriteString("candidate kernel: illegal memory access\n")
	os.Exit(3)
	return measure.Response{}
}

// crashingClient runs the crashing worker process through the measure
// package's client, as tune-worker runs lumsearch worker.
func crashingClient(t *testing.T) *measure.Client {
	exe, err := os.Executable()
	require.NoError(t, err)
	c := &measure.Client{Timeout: 10 * time.Second, Command: func() *exec.Cmd {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "FLEET_TEST_WORKER=crash")
		return cmd
	}}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The kind and environment of the tests' workers.
const testKind = "h100-sxm"

var testEnv = Env{Compiler: "g++ test"}

// fast are worker options with reaction times short enough for tests and
// long enough for a loaded machine (an in-progress acknowledgement every
// second keeps a job; a worker that stops has its job back after 3 s).
func fast(kind string) WorkerOptions {
	return WorkerOptions{Kind: kind, Mode: ModeEmulated, Env: testEnv, AckWait: 3 * time.Second, MaxDeliver: 3,
		Heartbeat: 300 * time.Millisecond, FetchWait: 500 * time.Millisecond, Retry: 50 * time.Millisecond}
}

// fastClient are client options to match.
func fastClient() ClientOptions {
	return ClientOptions{Kind: testKind, Mode: ModeEmulated, WorkerTimeout: 5 * time.Second, ServerTimeout: 5 * time.Second, Poll: 100 * time.Millisecond}
}

// startServer starts an embedded server with the fleet on it, storing in
// dir, on port (-1: any free one).
func startServer(t *testing.T, dir string, port int, maxPayload int32) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := StartServer(ctx, ServerOptions{Port: port, StoreDir: dir, MaxPayload: maxPayload})
	require.NoError(t, err)
	return s
}

// newServer starts a server for one test, shut down at its end.
func newServer(t *testing.T) *Server {
	s := startServer(t, t.TempDir(), -1, 0)
	t.Cleanup(s.Shutdown)
	return s
}

// dial connects to s, closed at the test's end.
func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := Connect(url, ConnectOptions{ReconnectWait: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// fake measures instantly (after delay), counting the requests it gets by
// kernel body; with hold set, it blocks on every request until hold is
// closed or its context ends.
type fake struct {
	delay   time.Duration
	hold    chan struct{}
	started chan string // receives each body as its measurement starts, when set

	mu    sync.Mutex
	calls map[string]int
}

func (f *fake) Measure(ctx context.Context, req measure.Request) (measure.Response, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[req.Body]++
	f.mu.Unlock()
	if f.started != nil {
		f.started <- req.Body
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return measure.Response{}, ctx.Err()
		}
	}
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return measure.Response{}, ctx.Err()
	}
	return measure.Response{ID: req.ID, OK: true, Where: measure.WhereEmulated, Median: 1e-3, IQR: 1e-5, Samples: 5, Schedule: req.Schedule}, nil
}

// total is how many requests f got; counts the requests by body.
func (f *fake) total() (int, map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, m := 0, map[string]int{}
	for k, v := range f.calls {
		n += v
		m[k] = v
	}
	return n, m
}

// runWorker starts a worker on url that measures with m until the test
// ends (or its own stop is called); it returns the worker and its stop.
func runWorker(t *testing.T, url string, m Measurer, o WorkerOptions) (*Worker, func()) {
	t.Helper()
	nc := dial(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := NewWorker(ctx, nc, m, o)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return w, stop
}

// body is a small kernel body, distinct for each n.
func body(t testing.TB, n int) string {
	b := ir.NewBuilder("kernel")
	x, y := b.Input("$0", ir.F32, ir.Dim(n+1), 8), b.Input("$1", ir.F32, 8)
	b.Output("out0", b.Mul(b.Sigmoid(x), b.BroadcastTo(y, ir.Shape{ir.Dim(n + 1), 8})))
	g, err := b.Build()
	require.NoError(t, err)
	return g.String()
}

// jobs are n jobs of distinct small kernels.
func jobs(t testing.TB, n int) []Job {
	var js []Job
	for i := range n {
		js = append(js, Job{Body: body(t, i), Schedule: "threads=128", Shapes: fmt.Sprintf("[%d,8] [8]", i+1), DTypes: "f32 f32", Seed: 1})
	}
	return js
}

// measureAll measures js through a fresh client and returns the results by
// index.
func measureAll(t *testing.T, ctx context.Context, url string, o ClientOptions, js []Job) ([]Result, error) {
	t.Helper()
	c, err := NewClient(ctx, dial(t, url), o)
	require.NoError(t, err)
	res := make([]Result, len(js))
	got := make([]bool, len(js))
	err = c.Measure(ctx, js, func(i int, r Result) {
		require.False(t, got[i], "job %d answered twice", i)
		got[i] = true
		res[i] = r
	})
	return res, err
}
