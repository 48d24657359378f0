package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Measurer measures one request: a measure.Client, which runs the
// isolated measuring worker process and restarts it when it hangs or
// dies, answering such a request with Response.Lost. An error means that
// no measurement could be attempted (no worker could start, ctx ended).
type Measurer interface {
	Measure(ctx context.Context, req measure.Request) (measure.Response, error)
}

// WorkerOptions say what a Worker measures and how it paces itself. The
// durations are the fleet's reaction times; tests shorten them.
type WorkerOptions struct {
	// Kind is the GPU kind served (ResolveKind), Mode the measurement
	// mode (ModeGPU or ModeEmulated).
	Kind, Mode string
	// Env is this worker's driver and compiler (LocalEnv); a job for
	// another environment is handed back for a worker that has it.
	Env Env
	// Name names the worker in presence entries and dead letters (""
	// means host-pid-random).
	Name string
	// AckWait is how long a delivered job may go without an
	// acknowledgement before JetStream gives it to another worker (0: 30
	// s); a worker measuring sends an in-progress acknowledgement every
	// third of it.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a job gets before it is dead
	// (0: 5).
	MaxDeliver int
	// Heartbeat is how often the worker renews its presence (0: 2 s); the
	// presence expires after three of them.
	Heartbeat time.Duration
	// FetchWait bounds one wait for a job (0: 5 s).
	FetchWait time.Duration
	// Retry is how long a job handed back waits before its next delivery
	// (0: 1 s).
	Retry time.Duration
	// FailureTTL is how long a failed job's reason stays in the fleet
	// bucket for requesters to read (0: one hour).
	FailureTTL time.Duration
	// Log, when set, receives a line per job and per trouble.
	Log func(format string, args ...any)
}

func (o WorkerOptions) withDefaults() WorkerOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.AckWait, 30*time.Second)
	def(&o.Heartbeat, 2*time.Second)
	def(&o.FetchWait, 5*time.Second)
	def(&o.Retry, time.Second)
	def(&o.FailureTTL, time.Hour)
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[:6])
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return o
}

// WorkerStats count what a worker did with the jobs it took.
type WorkerStats struct {
	// Measured jobs stored a record; Stored of them were stored by this
	// worker (the others were there already).
	Measured, Stored int
	// Failed jobs got a verdict without a time (the kernel's check or
	// compilation failed).
	Failed int
	// Lost jobs were handed back: the measuring process hung or died, or
	// the job wants another environment.
	Lost int
	// Malformed jobs were dead-lettered on arrival.
	Malformed int
}

// Worker takes the jobs of one GPU kind and mode from the fleet, measures
// each through its Measurer, stores the result in the result bucket and
// only then acknowledges the job.
type Worker struct {
	h    *handles
	cons jetstream.Consumer
	m    Measurer
	o    WorkerOptions

	mu    sync.Mutex
	stats WorkerStats
}

// NewWorker joins the fleet on nc's server: it makes (or updates) the
// durable pull consumer its kind and mode share and records its
// environment as the kind's, so that requesters key their jobs by it.
func NewWorker(ctx context.Context, nc *nats.Conn, m Measurer, o WorkerOptions) (*Worker, error) {
	o = o.withDefaults()
	if !kindPattern.MatchString(o.Kind) {
		return nil, fmt.Errorf("worker: GPU kind %q (see ResolveKind)", o.Kind)
	}
	if err := checkMode(o.Mode); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if o.Env.Compiler == "" || (o.Mode == ModeGPU && o.Env.Driver == "") {
		return nil, fmt.Errorf("worker: environment %+v: a compiler, and for the GPU a driver, are needed", o.Env)
	}
	h, err := open(ctx, nc)
	if err != nil {
		return nil, err
	}
	cons, err := consumer(ctx, h, o)
	if err != nil {
		return nil, err
	}
	env, err := json.Marshal(o.Env)
	if err != nil {
		return nil, err
	}
	if prev, err := h.state.Get(ctx, envKey(o.Kind, o.Mode)); err == nil && string(prev.Value()) != string(env) {
		o.Log("note: the %s workers (%s) had %s; this worker has %s, which requesters now key their jobs by", o.Kind, o.Mode, prev.Value(), env)
	}
	if _, err := h.state.Put(ctx, envKey(o.Kind, o.Mode), env); err != nil {
		return nil, fmt.Errorf("worker: record the environment: %w", err)
	}
	return &Worker{h: h, cons: cons, m: m, o: o}, nil
}

// consumer makes (or updates) the durable pull consumer the workers of
// o's kind and mode share.
func consumer(ctx context.Context, h *handles, o WorkerOptions) (jetstream.Consumer, error) {
	cons, err := h.js.CreateOrUpdateConsumer(ctx, JobStream, jetstream.ConsumerConfig{
		Durable:       ConsumerName(o.Kind, o.Mode),
		Description:   "the tune-workers of " + o.Kind + " measuring on " + o.Mode,
		FilterSubject: JobSubject(o.Kind, o.Mode),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    o.MaxDeliver,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: consumer %s: %w", ConsumerName(o.Kind, o.Mode), err)
	}
	return cons, nil
}

// JoinWorker is NewWorker for a worker started before its fleet: while
// the server is unreachable or the fleet is not set up, it logs why once
// and tries again every two seconds, until ctx ends (nil, nil then).
func JoinWorker(ctx context.Context, nc *nats.Conn, m Measurer, o WorkerOptions) (*Worker, error) {
	said := false
	for {
		w, err := NewWorker(ctx, nc, m, o)
		switch {
		case err == nil:
			return w, nil
		case ctx.Err() != nil:
			return nil, nil
		case refused(nc) != nil:
			return nil, refused(nc)
		case !nc.IsConnected() || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders):
			if !said && o.Log != nil {
				o.Log("waiting for the fleet: %v", err)
				said = true
			}
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(2 * time.Second):
		}
	}
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.o.Name }

// Stats is what the worker did so far.
func (w *Worker) Stats() WorkerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

func (w *Worker) count(f func(*WorkerStats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// Run takes and measures jobs one at a time until ctx ends (nil then) or
// the connection is closed. A job in hand when ctx ends is handed back at
// once for another worker. It keeps the worker's presence while it runs
// and removes it when it returns.
func (w *Worker) Run(ctx context.Context) error {
	stopPresence := w.keepPresence(ctx)
	defer stopPresence()
	for ctx.Err() == nil {
		msg, err := w.next(ctx)
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("worker %s: %w", w.o.Name, err)
		case errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders):
			// The consumer is gone (deleted, or a server that lost its
			// store: a pull request then has no one to answer it), or
			// the server is not ready yet: the workers of the kind make
			// the consumer again as soon as they can.
			cons, cerr := consumer(ctx, w.h, w.o)
			switch {
			case cerr == nil && !errors.Is(err, nats.ErrNoResponders):
				w.o.Log("the consumer %s was gone; made it again", ConsumerName(w.o.Kind, w.o.Mode))
				w.cons = cons
			case cerr == nil:
				w.cons = cons
			case ctx.Err() == nil:
				select {
				case <-ctx.Done():
				case <-time.After(min(w.o.FetchWait, 250*time.Millisecond)):
				}
			}
		case err != nil:
			if ctx.Err() == nil {
				// The server is away (restarting, a network cut): try
				// again shortly; the connection reconnects by itself.
				select {
				case <-ctx.Done():
				case <-time.After(min(w.o.FetchWait, 250*time.Millisecond)):
				}
			}
		case msg != nil:
			w.handle(ctx, msg)
		}
	}
	return nil
}

// next waits up to FetchWait for one job: one at a time, so that a busy
// worker holds no job another could measure.
func (w *Worker) next(ctx context.Context) (jetstream.Msg, error) {
	fctx, cancel := context.WithTimeout(ctx, w.o.FetchWait)
	defer cancel()
	batch, err := w.cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg != nil {
		return msg, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return nil, err
	}
	return nil, nil
}

// keepPresence renews the worker's presence entry every Heartbeat until
// the returned function is called, which removes it.
func (w *Worker) keepPresence(ctx context.Context) func() {
	host, _ := os.Hostname()
	entry, _ := json.Marshal(map[string]any{"worker": w.o.Name, "host": host, "pid": os.Getpid(), "env": w.o.Env, "since": time.Now().UTC()})
	key := liveKey(w.o.Kind, w.o.Mode, w.o.Name)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.o.Heartbeat)
		defer t.Stop()
		away := false // the server is away: said once, and once back
		for {
			rctx, rcancel := short(pctx, w.o.Heartbeat)
			err := w.h.putTTL(rctx, key, entry, 3*w.o.Heartbeat)
			rcancel()
			switch {
			case pctx.Err() != nil || errors.Is(err, nats.ErrConnectionClosed):
			case err != nil && !away:
				w.o.Log("lost the fleet's server (%v); trying again", err)
				away = true
			case err == nil && away:
				w.o.Log("back on the fleet's server %s", w.h.nc.ConnectedUrlRedacted())
				away = false
			}
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		rctx, rcancel := short(context.WithoutCancel(ctx), time.Second)
		defer rcancel()
		_ = w.h.state.Delete(rctx, key) // else it expires by itself
	}
}

// handle deals with one delivered job; whatever the job holds, it does
// not crash the worker.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	defer func() {
		if p := recover(); p != nil {
			w.deadLetter(ctx, msg, fmt.Sprintf("internal error: the worker panicked on this job: %v", p))
		}
	}()
	job, err := ParseJob(msg.Data())
	if err == nil && msg.Subject() != JobSubject(job.Kind, job.Mode) {
		err = fmt.Errorf("a job for %s (%s) on subject %s", job.Kind, job.Mode, msg.Subject())
	}
	if err != nil {
		w.count(func(s *WorkerStats) { s.Malformed++ })
		w.deadLetter(ctx, msg, "malformed job: "+err.Error())
		return
	}
	key := job.Key()
	if job.Driver != w.o.Env.Driver || job.Compiler != w.o.Env.Compiler {
		w.handBack(ctx, msg, key, fmt.Sprintf("worker %s has %s; the job wants %s", w.o.Name, w.o.Env, Env{Driver: job.Driver, Compiler: job.Compiler}))
		return
	}
	if _, err := w.h.results.Get(ctx, key); err == nil {
		// Measured already (a job published again beyond the duplicate
		// window): nothing to do.
		w.count(func(s *WorkerStats) { s.Measured++ })
		w.ack(ctx, msg, key)
		return
	}
	resp, err := w.measure(ctx, msg, job)
	switch {
	case ctx.Err() != nil:
		// Stopping: hand the job back at once for another worker.
		_ = msg.Nak()
	case err != nil:
		w.handBack(ctx, msg, key, fmt.Sprintf("worker %s could not measure: %v", w.o.Name, err))
	case resp.Lost:
		w.handBack(ctx, msg, key, fmt.Sprintf("worker %s: %s", w.o.Name, resp.Error))
	case !resp.OK:
		w.fail(ctx, msg, key, resp.Error)
	default:
		w.store(ctx, msg, job, resp)
	}
}

// measure measures job, telling JetStream that the job is in progress every
// third of the ack wait, so that a long measurement keeps its job.
func (w *Worker) measure(ctx context.Context, msg jetstream.Msg, job Job) (measure.Response, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(w.o.AckWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	defer wg.Wait()
	defer close(done)
	w.o.Log("job %s: measuring %s (%s)", shortKey(job.Key()), firstLine(job.Body), job.Schedule)
	return w.m.Measure(ctx, job.Request())
}

// store stores a measured job's record (create-if-absent: a record stored
// by another worker first stays) and then acknowledges the job. A record
// that cannot be stored leaves the job unacknowledged for a retry.
func (w *Worker) store(ctx context.Context, msg jetstream.Msg, job Job, resp measure.Response) {
	host, _ := os.Hostname()
	rec := tunedb.Record{Key: job.tuneKey(), Median: resp.Median, Spread: resp.IQR, Samples: resp.Samples, Where: job.where(), Host: host, At: time.Now().UTC(), Predicted: job.Predicted}
	key := job.Key()
	if err := rec.Validate(); err != nil {
		w.fail(ctx, msg, key, fmt.Sprintf("the measurement gave no usable record: %v", err))
		return
	}
	data, err := json.Marshal(rec)
	if err != nil {
		w.fail(ctx, msg, key, err.Error())
		return
	}
	sctx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	stored := true
	if _, err := w.h.results.Create(sctx, key, data); errors.Is(err, jetstream.ErrKeyExists) {
		stored = false
	} else if err != nil {
		w.o.Log("job %s: measured %s but not stored (%v); left for a retry", shortKey(key), seconds(resp.Median), err)
		_ = msg.NakWithDelay(w.o.Retry)
		return
	}
	w.count(func(s *WorkerStats) {
		s.Measured++
		if stored {
			s.Stored++
		}
	})
	w.o.Log("job %s: %s (%s)", shortKey(key), seconds(resp.Median), job.Mode)
	w.ack(ctx, msg, key)
}

// ack acknowledges a job and waits for the server to confirm it.
func (w *Worker) ack(ctx context.Context, msg jetstream.Msg, key string) {
	actx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		w.o.Log("job %s: acknowledgement not confirmed (%v); a redelivery finds the result stored", shortKey(key), err)
	}
}

// failure is a job's end without a time, in the fleet bucket under
// failed.KEY for requesters.
type failure struct {
	Reason string    `json:"reason"`
	Dead   bool      `json:"dead,omitempty"`
	Worker string    `json:"worker,omitempty"`
	At     time.Time `json:"at"`
}

// fail records a verdict without a time (the kernel failed its check or
// did not compile: measuring it again would fail again) and acknowledges
// the job.
func (w *Worker) fail(ctx context.Context, msg jetstream.Msg, key, reason string) {
	w.count(func(s *WorkerStats) { s.Failed++ })
	w.o.Log("job %s: failed: %s", shortKey(key), reason)
	w.putFailure(ctx, key, failure{Reason: reason, Worker: w.o.Name, At: time.Now().UTC()})
	w.ack(ctx, msg, key)
}

func (w *Worker) putFailure(ctx context.Context, key string, f failure) {
	data, _ := json.Marshal(f)
	fctx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	if err := w.h.putTTL(fctx, failedKey(key), data, w.o.FailureTTL); err != nil {
		w.o.Log("job %s: the failure's reason was not recorded: %v", shortKey(key), err)
	}
}

// attempt is a delivery that ended without a verdict, kept for the dead
// letter's reason.
type attempt struct {
	Reason   string    `json:"reason"`
	Delivery uint64    `json:"delivery"`
	At       time.Time `json:"at"`
}

// handBack records why the job could not be measured here and hands it
// back for a later delivery, to this worker or another; after MaxDeliver
// deliveries JetStream gives up on it and it becomes a dead letter.
func (w *Worker) handBack(ctx context.Context, msg jetstream.Msg, key, reason string) {
	w.count(func(s *WorkerStats) { s.Lost++ })
	var n uint64
	if md, err := msg.Metadata(); err == nil {
		n = md.NumDelivered
	}
	w.o.Log("job %s: handed back after delivery %d: %s", shortKey(key), n, reason)
	data, _ := json.Marshal(attempt{Reason: reason, Delivery: n, At: time.Now().UTC()})
	actx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	if err := w.h.putTTL(actx, attemptKey(key), data, w.o.FailureTTL); err != nil {
		w.o.Log("job %s: the attempt's reason was not recorded: %v", shortKey(key), err)
	}
	_ = msg.NakWithDelay(w.o.Retry)
}

// deadLetter moves a job that no worker can measure (malformed) to the
// dead letters with the reason, tells its requester when the job names
// its key, and acknowledges it, which removes it from the work queue.
func (w *Worker) deadLetter(ctx context.Context, msg jetstream.Msg, reason string) {
	var seq, n uint64
	if md, err := msg.Metadata(); err == nil {
		seq, n = md.Sequence.Stream, md.NumDelivered
	}
	w.o.Log("job #%d dead-lettered: %s", seq, reason)
	dctx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	if err := publishDead(dctx, w.h.js, msg.Subject(), seq, n, msg.Headers(), msg.Data(), reason); err != nil {
		// Not acknowledged: the job comes back, and in the end the
		// max-deliveries advisory dead-letters it.
		w.o.Log("job #%d: the dead letter was not published: %v", seq, err)
		return
	}
	if key := msg.Headers().Get(nats.MsgIdHdr); jobKeyPattern.MatchString(key) {
		w.putFailure(ctx, key, failure{Reason: reason, Dead: true, Worker: w.o.Name, At: time.Now().UTC()})
	}
	w.ack(ctx, msg, "#"+strconv.FormatUint(seq, 10))
}
