package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as the worker process: with MEASURE_TEST_WORKER
// set it serves requests on stdin, misbehaving as the variable says on the
// request whose id is 2.
func TestMain(m *testing.M) {
	switch os.Getenv("MEASURE_TEST_WORKER") {
	case "":
		code := m.Run()
		fakecuda.Cleanup()
		os.Exit(code)
	case "serve":
		_ = Serve(context.Background(), os.Stdin, os.Stdout, Emulated{})
	case "hang":
		_ = Serve(context.Background(), os.Stdin, os.Stdout, misbehave{hang: true})
	case "exit":
		_ = Serve(context.Background(), os.Stdin, os.Stdout, misbehave{})
	}
	os.Exit(0)
}

// misbehave answers every request quickly except id 2, on which it hangs
// or exits with status 3.
type misbehave struct{ hang bool }

func (m misbehave) Measure(_ context.Context, req Request) Response {
	if req.ID == 2 {
		if m.hang {
			select {}
		}
		os.Stderr.WriteString("worker: giving up on request 2\n")
		os.Exit(3)
	}
	return Response{OK: true, Where: WhereEmulated, Median: 1e-3, Samples: 1}
}

func worker(t *testing.T, mode string) *Client {
	exe, err := os.Executable()
	require.NoError(t, err)
	c := &Client{Timeout: 2 * time.Second, Command: func() *exec.Cmd {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "MEASURE_TEST_WORKER="+mode)
		return cmd
	}}
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func bodyText(t *testing.T) string {
	b := ir.NewBuilder("kernel")
	x, y := b.Input("$0", ir.F32, 37, 50), b.Input("$1", ir.F32, 50)
	b.Output("out0", b.Mul(b.Sigmoid(x), b.BroadcastTo(y, ir.Shape{37, 50})))
	g, err := b.Build()
	require.NoError(t, err)
	return g.String()
}

// TestEmulatedMeasuring runs the real worker loop in a child process: a
// kernel is checked against the reference, then timed, and the times are
// labelled emulated; a bad body or schedule is an error response and the
// worker goes on.
func TestEmulatedMeasuring(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	c := worker(t, "serve")
	c.Timeout = 2 * time.Minute
	ctx := context.Background()
	resp, err := c.Measure(ctx, Request{ID: 1, Body: bodyText(t), Schedule: "threads=128", Seed: 7, Repeats: 3})
	require.NoError(t, err)
	require.True(t, resp.OK, resp.Error)
	assert.Equal(t, WhereEmulated, resp.Where)
	assert.GreaterOrEqual(t, resp.Samples, 3, "at least Repeats runs")
	assert.Positive(t, resp.Median)
	assert.Equal(t, int64(37*50), resp.Checked)
	assert.Equal(t, "threads=128", resp.Schedule)

	for _, bad := range []Request{{ID: 2, Body: "not a graph"}, {ID: 3, Body: bodyText(t), Schedule: "bm=64,bn=64,bk=16,threads=256,stages=1"}} {
		resp, err := c.Measure(ctx, bad)
		require.NoError(t, err)
		assert.False(t, resp.OK)
		assert.NotEmpty(t, resp.Error)
		assert.False(t, resp.Lost, "a verdict on the kernel, not a lost worker")
		assert.Equal(t, bad.ID, resp.ID)
	}
	assert.Zero(t, c.Restarts(), "bad requests do not cost the worker")
}

// TestHangingWorkerIsKilled: request 2 hangs; it fails with a timeout, the
// worker is killed, and request 3 gets a fresh worker.
func TestHangingWorkerIsKilled(t *testing.T) {
	c := worker(t, "hang")
	c.Timeout = 500 * time.Millisecond
	ctx := context.Background()
	for id, wantOK := range map[int64]bool{1: true} {
		resp, err := c.Measure(ctx, Request{ID: id})
		require.NoError(t, err)
		assert.Equal(t, wantOK, resp.OK)
	}
	resp, err := c.Measure(ctx, Request{ID: 2})
	require.NoError(t, err)
	assert.False(t, resp.OK)
	assert.Contains(t, resp.Error, "timed out after 500ms; worker killed")
	assert.True(t, resp.Lost, "the worker, not the kernel, failed")
	resp, err = c.Measure(ctx, Request{ID: 3})
	require.NoError(t, err)
	assert.True(t, resp.OK, resp.Error)
	assert.Equal(t, 1, c.Restarts())
}

// TestExitingWorkerIsRestarted: the worker exits in the middle of request
// 2; the response says how it ended, and the next request runs.
func TestExitingWorkerIsRestarted(t *testing.T) {
	c := worker(t, "exit")
	ctx := context.Background()
	resp, err := c.Measure(ctx, Request{ID: 2})
	require.NoError(t, err)
	assert.False(t, resp.OK)
	assert.Contains(t, resp.Error, "worker exited during the request: exit status 3")
	assert.Contains(t, resp.Error, "giving up on request 2")
	assert.True(t, resp.Lost, "the worker, not the kernel, failed")
	resp, err = c.Measure(ctx, Request{ID: 4})
	require.NoError(t, err)
	assert.True(t, resp.OK, resp.Error)
	assert.Equal(t, 1, c.Restarts())
}

// TestServeProtocol drives the loop in process: one response line per
// request line, in order, a malformed line answered with an error.
func TestServeProtocol(t *testing.T) {
	in := strings.NewReader("{\"id\":1}\nnot json\n{\"id\":5}\n")
	var out bytes.Buffer
	require.NoError(t, Serve(context.Background(), in, &out, misbehave{}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	var rs []Response
	for _, l := range lines {
		var r Response
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		rs = append(rs, r)
	}
	assert.True(t, rs[0].OK)
	assert.Equal(t, int64(1), rs[0].ID)
	assert.False(t, rs[1].OK)
	assert.Contains(t, rs[1].Error, "bad request")
	assert.True(t, rs[2].OK)
	assert.Equal(t, int64(5), rs[2].ID)
}

// TestStopRule: a request's Repeats is the fewest timed runs; the runs go
// on until their times settle or the time cap, fed here a deterministic
// sequence of times and a clock that advances a second per reading.
func TestStopRule(t *testing.T) {
	times := []float64{9, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 2, 1, 3, 1, 2, 1, 3}
	noisy := []float64{1, 2, 1, 3, 1, 2, 1, 3, 1, 2, 1, 3, 1, 2, 1, 3, 1, 2}
	for _, tc := range []struct {
		name    string
		req     Request
		maxTime time.Duration
		xs      []float64
		want    int
	}{
		{"settles after the outliers", Request{Repeats: 3}, time.Hour, times, 9},
		{"no fewer than Repeats", Request{Repeats: 12}, time.Hour, times, 12},
		{"DefaultRepeats when none is named", Request{}, time.Hour, []float64{1, 1, 1, 1, 1, 1, 1}, DefaultRepeats},
		{"noisy times stop at the cap", Request{Repeats: 3}, 8 * time.Second, noisy, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule(tc.req, tc.maxTime)
			now := time.Unix(0, 0)
			r.Now = func() time.Time { now = now.Add(time.Second); return now }
			i := 0
			got, err := r.Repeat(func() (float64, error) {
				require.Less(t, i, len(tc.xs), "more runs than the sequence has")
				i++
				return tc.xs[i-1], nil
			})
			require.NoError(t, err)
			assert.Len(t, got, tc.want)
		})
	}
}

func mustSchedule(t *testing.T, text string) cost.Schedule {
	s, err := cost.ParseSchedule(text)
	require.NoError(t, err)
	return s
}
