package search

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/measure"
)

// simScale is how much real time a simulated second of measuring takes in
// BenchmarkFleetMakespan: 20 ms, so that the fleet's own overhead (about
// half a millisecond a job on loopback, BenchmarkJobOverhead in fleet)
// weighs little against a job.
const simScale = 0.02

// simulated measures a kernel in a time drawn from a log-normal
// distribution (median 1.5 s, σ 0.6: an NVRTC compilation, the check and
// the timed runs on a GPU), the same for a kernel whatever worker takes
// it, slept at simScale; it records when each measurement ran.
type simulated struct {
	mu   sync.Mutex
	runs [][2]time.Time
}

func (s *simulated) Measure(ctx context.Context, req measure.Request) (measure.Response, error) {
	h := fnv.New64a()
	h.Write([]byte(req.Body + "\n" + req.Schedule))
	rng := rand.New(rand.NewPCG(h.Sum64(), 1))
	sim := 1.5 * math.Exp(0.6*rng.NormFloat64())
	start := time.Now()
	select {
	case <-time.After(time.Duration(sim * simScale * float64(time.Second))):
	case <-ctx.Done():
		return measure.Response{}, ctx.Err()
	}
	s.mu.Lock()
	s.runs = append(s.runs, [2]time.Time{start, time.Now()})
	s.mu.Unlock()
	// The kernel's time (not the measurement's): a few microseconds.
	return measure.Response{ID: req.ID, OK: true, Where: measure.WhereGPU, Median: sim * 1e-5, Samples: 5, Schedule: req.Schedule}, nil
}

// BenchmarkFleetMakespan runs the real optimize of llama-3-8b:layer (the
// search, three rounds of measuring on the GPU and extracting again)
// against N fleet workers on the embedded server, their measurements
// taking simulated times (simulated), and reports the measuring phases'
// makespan in simulated seconds, the jobs, and the most jobs in flight
// at once in any round against min(N, the round's jobs):
//
//	go test ./search -run '^$' -bench FleetMakespan -benchtime 1x
func BenchmarkFleetMakespan(b *testing.B) {
	m, err := LoadModel("llama-3-8b:layer", ModelOptions{Build: corpus.Options{Seq: 16, Past: -1}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, n := range []int{1, 8, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			for range b.N {
				sim := &simulated{}
				url := benchFleet(b, n, sim)
				var mu sync.Mutex
				var rounds [][2]time.Time // each measure phase's start and end
				o := Options{IterLimit: 8, NoVerify: true, Measure: MeasureGPU, Candidates: 8, Workers: url, TuneDB: filepath.Join(b.TempDir(), "tunedb.jsonl"),
					Fleet: fleet.ClientOptions{Poll: 50 * time.Millisecond},
					Events: func(e Event) {
						mu.Lock()
						defer mu.Unlock()
						now := time.Now()
						if len(rounds) > 0 && rounds[len(rounds)-1][1].IsZero() && e.Kind == "phase" {
							rounds[len(rounds)-1][1] = now
						}
						if e.Kind == "phase" && e.Phase == "measure" {
							rounds = append(rounds, [2]time.Time{now, {}})
						}
					}}
				if _, err := Optimize(context.Background(), m, o); err != nil {
					b.Fatal(err)
				}
				var makespan time.Duration
				worst := 1.0 // the least ratio of most in flight to min(N, jobs)
				jobs := 0
				for _, r := range rounds {
					var in [][2]time.Time
					for _, run := range sim.runs {
						if !run[0].Before(r[0]) && (r[1].IsZero() || run[1].Before(r[1])) {
							in = append(in, run)
						}
					}
					if len(in) == 0 {
						continue
					}
					jobs += len(in)
					// From the first measurement's start to the last's end:
					// the round's planning and extraction are search work,
					// which the simulated clock must not stretch.
					first, last := in[0][0], in[0][1]
					for _, run := range in {
						first, last = minTime(first, run[0]), maxTime(last, run[1])
					}
					makespan += last.Sub(first)
					worst = min(worst, float64(mostAtOnce(in))/float64(min(n, len(in))))
					b.Logf("N=%d round: %d jobs, %d at most in flight, %.1f simulated s", n, len(in), mostAtOnce(in), last.Sub(first).Seconds()/simScale)
				}
				b.ReportMetric(makespan.Seconds()/simScale, "makespan-sim-s")
				b.ReportMetric(float64(jobs), "jobs")
				b.ReportMetric(worst, "in-flight/min(N,jobs)")
				b.Logf("N=%d: %d jobs in %d rounds, makespan %.1f simulated s, most in flight / min(N, ready) at worst %.2f", n, jobs, len(rounds), makespan.Seconds()/simScale, worst)
			}
		})
	}
}

// mostAtOnce is the most intervals that overlap at one moment.
func mostAtOnce(runs [][2]time.Time) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, r := range runs {
		es = append(es, edge{r[0], 1}, edge{r[1], -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same moment
	})
	most, now := 0, 0
	for _, e := range es {
		now += e.d
		most = max(most, now)
	}
	return most
}

// benchFleet starts an embedded server and n GPU workers of h100-sxm
// measuring with m, all stopped when b ends.
func benchFleet(b *testing.B, n int, m fleet.Measurer) string {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := fleet.StartServer(ctx, fleet.ServerOptions{Port: -1, StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		s.Shutdown()
	})
	for i := range n {
		nc, err := fleet.Connect(s.URL(), fleet.ConnectOptions{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := fleet.NewWorker(ctx, nc, m, fleet.WorkerOptions{Kind: "h100-sxm", Mode: fleet.ModeGPU, Env: fleet.Env{Driver: "12.4", Compiler: "nvrtc 12.4"},
			Name: fmt.Sprintf("sim-%d", i), FetchWait: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer nc.Close()
			_ = w.Run(ctx)
		})
	}
	return s.URL()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
