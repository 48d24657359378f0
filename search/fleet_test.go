package search

import (
	"bytes"
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleetFake measures every kernel in 10 µs, as a GPU would, counting.
type fleetFake struct{ calls atomic.Int64 }

func (f *fleetFake) Measure(_ context.Context, req measure.Request) (measure.Response, error) {
	f.calls.Add(1)
	return measure.Response{ID: req.ID, OK: true, Where: measure.WhereGPU, Median: 1e-5, Samples: 5, Schedule: req.Schedule}, nil
}

// startFleet starts an embedded server and n workers of h100-sxm on the
// GPU that measure with f, all stopped at the test's end.
func startFleet(t *testing.T, n int, f fleet.Measurer) string {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := fleet.StartServer(ctx, fleet.ServerOptions{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	var done []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range done {
			<-d
		}
		s.Shutdown()
	})
	for range n {
		nc, err := fleet.Connect(s.URL(), fleet.ConnectOptions{})
		require.NoError(t, err)
		w, err := fleet.NewWorker(ctx, nc, f, fleet.WorkerOptions{Kind: "h100-sxm", Mode: fleet.ModeGPU, Env: fleet.Env{Driver: "12.4", Compiler: "nvrtc 12.4"},
			Heartbeat: 300 * time.Millisecond, FetchWait: 500 * time.Millisecond})
		require.NoError(t, err)
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			defer nc.Close()
			_ = w.Run(ctx)
		}()
	}
	return s.URL()
}

// TestOptimizeOnFleet: optimize --workers measures the chosen kernels on
// the fleet's GPU workers (none here), feeds the times back into the
// extraction as a local GPU's would be, and keeps the records in the
// local tuning database; a second run finds them in the fleet's bucket
// and measures nothing.
func TestOptimizeOnFleet(t *testing.T) {
	f := &fleetFake{}
	url := startFleet(t, 2, f)
	m, err := LoadModel("tiny-llama:mlp", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	defer m.Close()
	run := func(db string) (*Result, string) {
		var log bytes.Buffer
		res, err := Optimize(context.Background(), m, Options{IterLimit: 5, NoVerify: true, Measure: MeasureGPU, Candidates: 2, Workers: url,
			TuneDB: db, Events: NewPrinter(&log, false).Event, Fleet: fleet.ClientOptions{Poll: 100 * time.Millisecond}})
		require.NoError(t, err, log.String())
		return res, log.String()
	}
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	res, log := run(db)
	assert.Equal(t, measure.WhereGPU, res.Report.Measured)
	assert.Contains(t, log, "measuring on the fleet at "+url+": the tune-workers of h100-sxm (gpu)")
	assert.Regexp(t, `(?m)^  measure: k\d+ \S+: 10 µs \(gpu, by the fleet on `, log)
	measured := f.calls.Load()
	require.Positive(t, measured)
	local, err := tunedb.Open(db)
	require.NoError(t, err)
	require.EqualValues(t, measured, local.Len(), "every fleet record kept locally too")
	for _, r := range local.Records() {
		assert.Equal(t, tunedb.Key{Spec: r.Key.Spec, Schedule: r.Key.Schedule, Shapes: r.Key.Shapes, DTypes: r.Key.DTypes, Device: "h100-sxm", Driver: "12.4", Compiler: "nvrtc 12.4"}, r.Key)
	}

	_, log = run(filepath.Join(t.TempDir(), "other.jsonl"))
	assert.Contains(t, log, "from the fleet's tuning bucket")
	assert.NotContains(t, log, "by the fleet on")
	assert.Equal(t, measured, f.calls.Load(), "measured once for every later search")
}

// TestOptimizeFleetFallback: a fleet that cannot be reached, or has no
// worker of the kind, leaves the program to the cost model; the search
// finishes and its notes say so.
func TestOptimizeFleetFallback(t *testing.T) {
	empty := startFleet(t, 0, nil)
	m, err := LoadModel("tiny-llama:rmsnorm", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	defer m.Close()
	for _, tt := range []struct{ name, url, want string }{
		{"unreachable", "nats://127.0.0.1:1", "connect to NATS at nats://127.0.0.1:1"},
		{"no workers", empty, "no tune-worker of kind h100-sxm measuring on emulated has joined the fleet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			start := time.Now()
			res, err := Optimize(context.Background(), m, Options{IterLimit: 3, NoVerify: true, Measure: MeasureEmulated, Candidates: 2, Workers: tt.url,
				TuneDB: filepath.Join(t.TempDir(), "tunedb.jsonl"), Events: NewPrinter(&log, false).Event,
				Fleet: fleet.ClientOptions{WorkerTimeout: 500 * time.Millisecond, ServerTimeout: 500 * time.Millisecond, Poll: 100 * time.Millisecond}})
			require.NoError(t, err, log.String())
			assert.Less(t, time.Since(start), time.Minute)
			require.NotNil(t, res.Search.Best)
			notes := ""
			for _, n := range res.Search.Notes {
				notes += n + "\n"
			}
			assert.Contains(t, notes, "measuring failed: the measuring fleet is unavailable")
			assert.Contains(t, notes, tt.want)
			assert.Contains(t, notes, "priced by the cost model")
			assert.Contains(t, log.String(), tt.want)
		})
	}
}

// TestBenchOnFleet: bench --workers measures every distinct kernel of the
// compiled and the naive program on the fleet and sums their medians.
func TestBenchOnFleet(t *testing.T) {
	f := &fleetFake{}
	url := startFleet(t, 2, f)
	m, err := LoadModel("tiny-llama:mlp", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	defer m.Close()
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	rep, err := Bench(context.Background(), m, BenchOptions{Workers: url, TuneDB: db, Fleet: fleet.ClientOptions{Poll: 100 * time.Millisecond}})
	require.NoError(t, err)
	assert.Equal(t, url, rep.Fleet)
	assert.Equal(t, "h100-sxm", rep.Device)
	require.NotEmpty(t, rep.Kernels)
	for _, k := range rep.Kernels {
		assert.InDelta(t, 0.01, k.MS, 1e-12, k.Launch)
	}
	assert.InDelta(t, 0.01*float64(len(rep.Kernels)), rep.MS, 1e-9)
	assert.Greater(t, rep.NaiveMS, rep.MS, "the naive program has more launches")
	assert.EqualValues(t, f.calls.Load(), rep.Recorded)
	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	assert.Contains(t, text.String(), "bench tiny-llama:mlp on the fleet at "+url+": the tune-workers of h100-sxm (gpu), driver 12.4, nvrtc 12.4")
	assert.Contains(t, text.String(), "sum of the kernels' medians (gpu; no whole run on the fleet)")

	_, err = Bench(context.Background(), m, BenchOptions{Workers: url, TuneDB: db, Save: t.TempDir()})
	assert.ErrorContains(t, err, "--save, --inputs and --outputs need the programs run here")
}
