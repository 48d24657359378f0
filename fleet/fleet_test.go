package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryJobMeasuredOnce: three emulated workers of one kind share the
// jobs; each job is measured once and stored once, a worker of another
// kind and one of the same kind measuring on the GPU take none, and the
// same jobs asked for again are answered from the bucket without a
// measurement.
func TestEveryJobMeasuredOnce(t *testing.T) {
	s := newServer(t)
	var fakes []*fake
	var workers []*Worker
	for range 3 {
		f := &fake{delay: 20 * time.Millisecond}
		w, _ := runWorker(t, s.URL(), f, fast(testKind))
		fakes, workers = append(fakes, f), append(workers, w)
	}
	other := &fake{}
	runWorker(t, s.URL(), other, fast("a100-sxm-80gb"))
	onGPU := &fake{}
	gpuOpts := fast(testKind)
	gpuOpts.Mode, gpuOpts.Env = ModeGPU, Env{Driver: "12.4", Compiler: "nvrtc 12.4"}
	runWorker(t, s.URL(), onGPU, gpuOpts)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jobs(t, 12)
	js = append(js, js[0]) // the same job twice in one call: one measurement
	res, err := measureAll(t, ctx, s.URL(), fastClient(), js)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, "job %d", i)
		require.NotNil(t, r.Record, "job %d", i)
		assert.False(t, r.Cached, "job %d", i)
		assert.Equal(t, 1e-3, r.Record.Median)
		assert.Equal(t, "cpu-emulation", r.Record.Where)
		assert.Equal(t, "g++ test", r.Record.Key.Compiler)
	}
	calls := map[string]int{}
	for _, f := range fakes {
		_, byBody := f.total()
		for b, n := range byBody {
			calls[b] += n
		}
	}
	assert.Len(t, calls, 12)
	for _, n := range calls {
		assert.Equal(t, 1, n, "every job measured once")
	}
	// A worker counts a record stored once its requester may have it.
	require.Eventually(t, func() bool {
		stored := 0
		for _, w := range workers {
			stored += w.Stats().Stored
		}
		return stored == 12
	}, 5*time.Second, 10*time.Millisecond, "every result stored once")
	n, _ := other.total()
	assert.Zero(t, n, "a worker of another kind never takes a job")
	n, _ = onGPU.total()
	assert.Zero(t, n, "a worker measuring on the GPU never takes an emulated job")

	again, err := measureAll(t, ctx, s.URL(), fastClient(), js[:12])
	require.NoError(t, err)
	for i, r := range again {
		require.NoError(t, r.Err)
		assert.True(t, r.Cached, "job %d answered from the bucket", i)
		assert.Equal(t, res[i].Record.At, r.Record.At)
	}
	total := 0
	for _, f := range fakes {
		n, _ := f.total()
		total += n
	}
	assert.Equal(t, 12, total, "nothing measured again")
}

// TestKilledWorkerJobRedelivered: a worker dies in the middle of a job
// (its connection closes, as when its process is killed); the job goes to
// another worker once its ack wait runs out, and its result is stored
// once.
func TestKilledWorkerJobRedelivered(t *testing.T) {
	s := newServer(t)
	doomed := &fake{hold: make(chan struct{}), started: make(chan string, 1)}
	defer close(doomed.hold)
	nc := dial(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := NewWorker(ctx, nc, doomed, fast(testKind))
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _ = first.Run(wctx) }()

	type outcome struct {
		res []Result
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 1))
		out <- outcome{res, err}
	}()
	select {
	case <-doomed.started:
	case <-ctx.Done():
		t.Fatal("the first worker never got the job")
	}
	nc.Close() // the worker's process is gone: no acknowledgement, no hand-back
	survivor := &fake{}
	second, _ := runWorker(t, s.URL(), survivor, fast(testKind))

	o := <-out
	require.NoError(t, o.err)
	require.NoError(t, o.res[0].Err)
	require.NotNil(t, o.res[0].Record)
	n, _ := survivor.total()
	assert.Equal(t, 1, n, "the job was redelivered to the other worker")
	require.Eventually(t, func() bool { return second.Stats().Stored == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, first.Stats().Stored)
	assert.Equal(t, 1, bucketKeys(t, ctx, s.URL()), "stored once")
}

// bucketKeys counts the result bucket's records.
func bucketKeys(t *testing.T, ctx context.Context, url string) int {
	h, err := open(ctx, dial(t, url))
	require.NoError(t, err)
	st, err := h.results.Status(ctx)
	require.NoError(t, err)
	return int(st.Values())
}

// TestServerRestartMidSearch: the server stops in the middle of the jobs
// and starts again on the same port and store; no stored result is lost,
// the workers and the requester reconnect, and every job gets its result.
func TestServerRestartMidSearch(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, -1, 0)
	port := s.Port()
	restarted := false
	defer func() {
		if !restarted {
			s.Shutdown()
		}
	}()
	var fakes []*fake
	var workers []*Worker
	for range 2 {
		f := &fake{delay: 100 * time.Millisecond}
		w, _ := runWorker(t, s.URL(), f, fast(testKind))
		fakes, workers = append(fakes, f), append(workers, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := NewClient(ctx, dial(t, s.URL()), fastClient())
	require.NoError(t, err)
	js := jobs(t, 10)
	got := make(chan Result, len(js))
	done := make(chan error, 1)
	go func() {
		done <- c.Measure(ctx, js, func(_ int, r Result) { got <- r })
	}()
	var before []Result
	for len(before) < 3 {
		select {
		case r := <-got:
			before = append(before, r)
		case <-ctx.Done():
			t.Fatal("no results before the restart")
		}
	}
	s.Shutdown()
	time.Sleep(300 * time.Millisecond)
	s2 := startServer(t, dir, port, 0)
	restarted = true
	defer s2.Shutdown()

	require.NoError(t, <-done)
	after := before
	for len(after) < len(js) {
		after = append(after, <-got)
	}
	for _, r := range after {
		require.NoError(t, r.Err)
		require.NotNil(t, r.Record)
	}
	assert.Equal(t, len(js), bucketKeys(t, ctx, s2.URL()), "no stored result lost, none stored twice")
	h, err := open(ctx, dial(t, s2.URL()))
	require.NoError(t, err)
	for _, r := range before {
		_, err := h.results.Get(ctx, RecordKey(*r.Record))
		require.NoError(t, err, "a result stored before the restart is still there")
	}
	// A create the server made just before it stopped, whose reply was
	// lost, is found stored on the job's redelivery: that worker counts it
	// measured, not stored. So every job is measured at least once and no
	// more than one store per job is counted; the bucket's key count above
	// is what says none was stored twice.
	require.Eventually(t, func() bool {
		measured := 0
		for _, w := range workers {
			measured += w.Stats().Measured
		}
		return measured >= len(js)
	}, 5*time.Second, 10*time.Millisecond, "every job measured")
	stored := 0
	for _, w := range workers {
		stored += w.Stats().Stored
	}
	assert.LessOrEqual(t, stored, len(js), "no job counted stored twice")
	assert.Positive(t, stored)
}

// TestCrashingJobIsDeadLettered: a job whose kernel kills the isolated
// measuring process every time is handed back after each crash, and
// after MaxDeliver deliveries the dead-letter handler moves it to the dead
// letters with the crash as the reason; its requester hears of it, and
// the job stream no longer holds it.
func TestCrashingJobIsDeadLettered(t *testing.T) {
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	dead := make(chan error, 1)
	go func() {
		dead <- RunDeadLetters(dctx, dial(t, s.URL()), DeadLetterOptions{FetchWait: 500 * time.Millisecond})
	}()
	w, _ := runWorker(t, s.URL(), crashingClient(t), fast(testKind))

	res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 1))
	require.NoError(t, err)
	require.Error(t, res[0].Err)
	assert.Contains(t, res[0].Err.Error(), "dead letter: delivered 3 times without a result")
	assert.Contains(t, res[0].Err.Error(), "worker exited during the request: exit status 3")
	assert.Contains(t, res[0].Err.Error(), "illegal memory access")
	assert.Equal(t, 3, w.Stats().Lost)

	// The requester heard of it from JetStream's advisory; the handler
	// moves the job on the same advisory, perhaps a moment later.
	nc := dial(t, s.URL())
	var letters []DeadLetter
	require.Eventually(t, func() bool {
		var err error
		letters, err = DeadLetters(ctx, nc)
		return err == nil && len(letters) == 1 && jobCount(t, ctx, nc) == 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, JobSubject(testKind, ModeEmulated), letters[0].Subject)
	assert.Equal(t, uint64(3), letters[0].Deliveries)
	assert.Contains(t, letters[0].Reason, "exit status 3")
	assert.Equal(t, jobs(t, 1)[0].Body, mustParse(t, letters[0].Data).Body)
	dcancel()
	assert.NoError(t, <-dead)
}

func mustParse(t *testing.T, data []byte) Job {
	j, err := ParseJob(data)
	require.NoError(t, err)
	return j
}

// jobCount is how many jobs the job stream holds.
func jobCount(t *testing.T, ctx context.Context, nc *nats.Conn) uint64 {
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, JobStream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// TestMalformedJobsDeadLettered: messages on a job subject that are no
// valid job go to the dead letters with the reason at once, and the worker
// goes on to measure the next good job.
func TestMalformedJobsDeadLettered(t *testing.T) {
	s := newServer(t)
	w, _ := runWorker(t, s.URL(), &fake{}, fast(testKind))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := dial(t, s.URL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	wrongKind := validJob(t)
	wrongKind.Mode, wrongKind.Driver, wrongKind.Kind, wrongKind.Compiler = ModeEmulated, "", "l40s", testEnv.Compiler
	wrong, err := wrongKind.Encode()
	require.NoError(t, err)
	bad := map[string]string{
		"not json":      "measure this please",
		"newer version": `{"v":9,"kind":"h100-sxm","mode":"emulated"}`,
		"no body":       `{"v":1,"kind":"h100-sxm","mode":"emulated","compiler":"g++ test","body":"","schedule":"","shapes":"[1]","dtypes":"f32","seed":1}`,
		"wrong subject": string(wrong),
		"binary":        "\x00\xff\x01{",
	}
	for _, data := range bad {
		_, err := js.Publish(ctx, JobSubject(testKind, ModeEmulated), []byte(data))
		require.NoError(t, err)
	}
	res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 1))
	require.NoError(t, err)
	require.NoError(t, res[0].Err, "the worker survived the malformed jobs")

	var letters []DeadLetter
	require.Eventually(t, func() bool {
		letters, err = DeadLetters(ctx, nc)
		return err == nil && len(letters) == len(bad) && jobCount(t, ctx, nc) == 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, len(bad), w.Stats().Malformed)
	reasons := ""
	for _, l := range letters {
		assert.True(t, strings.HasPrefix(l.Reason, "malformed job: "), l.Reason)
		reasons += l.Reason + "\n"
	}
	for _, want := range []string{"not a job message", "job version 9", "no kernel body", "a job for l40s (emulated) on subject lumsearch.jobs.h100-sxm.emulated"} {
		assert.Contains(t, reasons, want)
	}
}

// TestTooLargeJobRefused: a job larger than the server's max_payload is
// refused before it is published, with an error saying so; the others go.
func TestTooLargeJobRefused(t *testing.T) {
	s := startServer(t, t.TempDir(), -1, 2048)
	defer s.Shutdown()
	runWorker(t, s.URL(), &fake{}, fast(testKind))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jobs(t, 2)
	js[1].Body = largeBody(t, 2048)
	res, err := measureAll(t, ctx, s.URL(), fastClient(), js)
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	var tooLarge *TooLargeError
	require.ErrorAs(t, res[1].Err, &tooLarge)
	assert.Equal(t, int64(2048), tooLarge.Max)
	assert.Contains(t, res[1].Err.Error(), "takes messages of at most 2048 bytes (its max_payload")
	assert.Equal(t, uint64(0), jobCount(t, ctx, dial(t, s.URL())))
}

// largeBody is a valid kernel body longer than n bytes.
func largeBody(t *testing.T, n int) string {
	var b strings.Builder
	b.WriteString("graph kernel\n%0 = input \"$0\" f32[4,8]\n")
	i := 0
	for ; b.Len() <= n; i++ {
		b.WriteString("%" + strconv.Itoa(i+1) + " = neg %" + strconv.Itoa(i) + " : f32[4,8]\n")
	}
	b.WriteString("output \"out0\" = %" + strconv.Itoa(i) + "\n")
	return b.String()
}

// TestFallback: nothing waits forever. With no worker of the kind ever,
// with the workers gone in the middle of the jobs, and with the server
// gone, Measure returns ErrUnavailable within its timeouts, the answered
// jobs answered.
func TestFallback(t *testing.T) {
	quick := fastClient()
	quick.WorkerTimeout, quick.ServerTimeout = 800*time.Millisecond, 800*time.Millisecond

	t.Run("no worker ever", func(t *testing.T) {
		ctx := testContext(t)
		s := newServer(t)
		start := time.Now()
		_, err := measureAll(t, ctx, s.URL(), quick, jobs(t, 2))
		require.ErrorIs(t, err, ErrUnavailable)
		assert.Contains(t, err.Error(), "no tune-worker of kind h100-sxm measuring on emulated has joined the fleet")
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("workers gone", func(t *testing.T) {
		ctx := testContext(t)
		s := newServer(t)
		f := &fake{hold: make(chan struct{}), started: make(chan string, 8)}
		defer close(f.hold)
		_, stop := runWorker(t, s.URL(), f, fast(testKind))
		go func() {
			<-f.started
			stop()
		}()
		start := time.Now()
		_, err := measureAll(t, ctx, s.URL(), quick, jobs(t, 3))
		require.ErrorIs(t, err, ErrUnavailable)
		assert.Contains(t, err.Error(), "no tune-worker of kind h100-sxm measuring on emulated was alive")
		assert.Contains(t, err.Error(), "3 jobs unanswered")
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("server gone", func(t *testing.T) {
		ctx := testContext(t)
		s := startServer(t, t.TempDir(), -1, 0)
		f := &fake{hold: make(chan struct{}), started: make(chan string, 8)}
		defer close(f.hold)
		runWorker(t, s.URL(), f, fast(testKind))
		go func() {
			<-f.started
			s.Shutdown()
		}()
		start := time.Now()
		_, err := measureAll(t, ctx, s.URL(), quick, jobs(t, 2))
		require.ErrorIs(t, err, ErrUnavailable)
		assert.Contains(t, err.Error(), "lost the NATS server")
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("budget", func(t *testing.T) {
		ctx := testContext(t)
		s := newServer(t)
		f := &fake{hold: make(chan struct{})}
		defer close(f.hold)
		runWorker(t, s.URL(), f, fast(testKind))
		bctx, bcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer bcancel()
		_, err := measureAll(t, bctx, s.URL(), fastClient(), jobs(t, 1))
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	})
}

// testContext bounds a test's waits.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPushPull: the local tuning database exports its records to the
// bucket (create-if-absent: what the bucket holds stays) and imports the
// bucket's records, exact copies left out.
func TestPushPull(t *testing.T) {
	s := newServer(t)
	ctx := testContext(t)
	runWorker(t, s.URL(), &fake{}, fast(testKind))
	res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 3))
	require.NoError(t, err)

	local, err := tunedb.Open(filepath.Join(t.TempDir(), "tunedb.jsonl"))
	require.NoError(t, err)
	mine := *res[0].Record
	mine.Median, mine.At = 5e-3, mine.At.Add(time.Hour) // the same key, measured again here
	other := mine
	other.Key.Shapes, other.Median = "[99,8] [8]", 2e-3
	gpu := other
	gpu.Key.Device, gpu.Key.Driver, gpu.Key.Compiler, gpu.Where = testKind, "12.4", "nvrtc 12.4", tunedb.WhereGPU
	require.NoError(t, local.Append(mine, other, gpu))

	nc := dial(t, s.URL())
	pushed, err := Push(ctx, nc, local, Filter{Where: tunedb.WhereEmulated})
	require.NoError(t, err)
	assert.Equal(t, PushResult{Keys: 2, Added: 1, Present: 1}, pushed)
	assert.Equal(t, 4, bucketKeys(t, ctx, s.URL()))

	pulled, err := Pull(ctx, nc, local, Filter{})
	require.NoError(t, err)
	assert.Equal(t, 4, pulled.Read)
	assert.Equal(t, 3, pulled.Added, "the three measured by the fleet")
	assert.Equal(t, 1, pulled.Duplicates, "the one pushed from here")
	again, err := Pull(ctx, nc, local, Filter{})
	require.NoError(t, err)
	assert.Zero(t, again.Added)
	kept, err := h(t, ctx, s.URL()).results.Get(ctx, RecordKey(mine))
	require.NoError(t, err)
	assert.Contains(t, string(kept.Value()), `"median_s":0.001`, "the bucket keeps the first record of a key")
}

func h(t *testing.T, ctx context.Context, url string) *handles {
	h, err := open(ctx, dial(t, url))
	require.NoError(t, err)
	return h
}

// TestOtherEnvironmentHandedBack: a job keyed by another driver and
// compiler than the worker's is handed back, not measured, and dead in
// the end with the reason; its requester hears of it from JetStream's
// advisory even when no dead-letter handler runs.
func TestOtherEnvironmentHandedBack(t *testing.T) {
	s := newServer(t)
	ctx := testContext(t)
	old := &fake{}
	oldOpts := fast(testKind)
	oldOpts.Env = Env{Compiler: "g++ 11"}
	w, _ := runWorker(t, s.URL(), old, oldOpts)
	// A newer worker joined (and left): the kind's environment is its.
	_, err := NewWorker(ctx, dial(t, s.URL()), &fake{}, fast(testKind))
	require.NoError(t, err)
	res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 1))
	require.NoError(t, err)
	require.Error(t, res[0].Err)
	assert.Contains(t, res[0].Err.Error(), "dead letter: delivered 3 times without a result; the last attempt (delivery 3)")
	assert.Contains(t, res[0].Err.Error(), "has g++ 11; the job wants g++ test")
	n, _ := old.total()
	assert.Zero(t, n)
	assert.Equal(t, 3, w.Stats().Lost)
}

// gate holds every measurement until want of them are in flight at once
// (or a while has passed), counting the most in flight.
type gate struct {
	want int
	mu   sync.Mutex
	now  int
	most int
	full chan struct{}
}

func (g *gate) Measure(ctx context.Context, req measure.Request) (measure.Response, error) {
	g.mu.Lock()
	g.now++
	g.most = max(g.most, g.now)
	if g.now == g.want {
		close(g.full)
	}
	g.mu.Unlock()
	select {
	case <-g.full:
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return measure.Response{ID: req.ID, OK: true, Where: measure.WhereEmulated, Median: 1e-3, Samples: 1}, nil
}

// TestInFlight: N workers keep min(N, ready jobs) measuring at once, as the
// requester publishes every job of a round at once.
func TestInFlight(t *testing.T) {
	for _, tt := range []struct{ workers, jobs int }{{4, 10}, {4, 2}} {
		t.Run(fmt.Sprintf("%d workers %d jobs", tt.workers, tt.jobs), func(t *testing.T) {
			s := newServer(t)
			g := &gate{want: min(tt.workers, tt.jobs), full: make(chan struct{})}
			for range tt.workers {
				runWorker(t, s.URL(), g, fast(testKind))
			}
			start := time.Now()
			_, err := measureAll(t, testContext(t), s.URL(), fastClient(), jobs(t, tt.jobs))
			require.NoError(t, err)
			assert.Equal(t, min(tt.workers, tt.jobs), g.most)
			assert.Less(t, time.Since(start), 3*time.Second, "the gate opened: every worker had a job at once")
		})
	}
}

// TestLongJobKeepsItsWorker: a measurement that takes longer than the ack
// wait keeps its job through in-progress acknowledgements; the other
// worker never gets it.
func TestLongJobKeepsItsWorker(t *testing.T) {
	s := newServer(t)
	o := fast(testKind)
	o.AckWait = 1500 * time.Millisecond
	slow := &fake{delay: 4 * time.Second, started: make(chan string, 1)}
	runWorker(t, s.URL(), slow, o)
	ctx := testContext(t)
	done := make(chan error, 1)
	go func() {
		_, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 1))
		done <- err
	}()
	<-slow.started
	idle := &fake{}
	runWorker(t, s.URL(), idle, o)
	require.NoError(t, <-done)
	n, _ := idle.total()
	assert.Zero(t, n, "the job was not redelivered while its worker measured it")
}

// TestConsumerMadeAgain: a worker whose consumer is deleted under it
// makes it again and goes on taking jobs.
func TestConsumerMadeAgain(t *testing.T) {
	s := newServer(t)
	runWorker(t, s.URL(), &fake{}, fast(testKind))
	ctx := testContext(t)
	js, err := jetstream.New(dial(t, s.URL()))
	require.NoError(t, err)
	require.NoError(t, js.DeleteConsumer(ctx, JobStream, ConsumerName(testKind, ModeEmulated)))
	res, err := measureAll(t, ctx, s.URL(), fastClient(), jobs(t, 2))
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}
