package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkJobOverhead is the fleet's cost per job on loopback with a
// measurement that takes no time, jobs going one after another through
// one worker: its fetch, the bucket look-up, write and acknowledgement,
// and the requester's watch. The jobs are published at once, in one
// Measure call, as a search's round is.
func BenchmarkJobOverhead(b *testing.B) {
	s := startServer(&testing.T{}, b.TempDir(), -1, 0)
	defer s.Shutdown()
	runWorkerB(b, s.URL(), 1)
	c, err := NewClient(context.Background(), dial(&testing.T{}, s.URL()), fastClient())
	require.NoError(b, err)
	js := jobs(b, b.N)
	b.ResetTimer()
	if err := c.Measure(context.Background(), js, func(int, Result) {}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOneJobCall is a Measure call of one job: the overhead above
// plus the call's own set-up (the kind's environment, the watchers).
func BenchmarkOneJobCall(b *testing.B) {
	s := startServer(&testing.T{}, b.TempDir(), -1, 0)
	defer s.Shutdown()
	runWorkerB(b, s.URL(), 1)
	c, err := NewClient(context.Background(), dial(&testing.T{}, s.URL()), fastClient())
	require.NoError(b, err)
	js := jobs(b, b.N)
	b.ResetTimer()
	for i := range b.N {
		if err := c.Measure(context.Background(), js[i:i+1], func(int, Result) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkThroughput is the jobs per second one server holds with 8
// workers and 1,000 jobs published at once.
func BenchmarkThroughput(b *testing.B) {
	s := startServer(&testing.T{}, b.TempDir(), -1, 0)
	defer s.Shutdown()
	runWorkerB(b, s.URL(), 8)
	c, err := NewClient(context.Background(), dial(&testing.T{}, s.URL()), fastClient())
	require.NoError(b, err)
	const n = 1000
	all := jobs(b, n*b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := c.Measure(context.Background(), all[i*n:(i+1)*n], func(int, Result) {}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "jobs/s")
}

// runWorkerB runs n workers with an instant measurement until the
// benchmark ends.
func runWorkerB(b *testing.B, url string, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for i := range n {
		nc, err := Connect(url, ConnectOptions{})
		require.NoError(b, err)
		b.Cleanup(nc.Close)
		o := fast(testKind)
		o.Name = fmt.Sprintf("bench-%d", i)
		w, err := NewWorker(ctx, nc, &fake{}, o)
		require.NoError(b, err)
		go func() { _ = w.Run(ctx) }()
	}
}
