package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnavailable is what Client.Measure returns (wrapped, with the reason)
// when the fleet cannot measure: the server is unreachable, or no worker
// of the kind has been alive for ClientOptions.WorkerTimeout. The jobs not
// answered by then are left to the caller's cost model.
var ErrUnavailable = errors.New("the measuring fleet is unavailable")

// TooLargeError refuses a job whose message exceeds the server's
// max_payload, before it is published.
type TooLargeError struct {
	Size, Max int64
	Server    string
}

// Error says how large the job was, what the server takes, and how to
// raise it.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("job of %d bytes not sent: the NATS server at %s takes messages of at most %d bytes (its max_payload; tuning-server --max-payload, or max_payload in a cluster's configuration, raises it)", e.Size, e.Server, e.Max)
}

// ClientOptions say which kind of worker a Client's jobs go to and how
// long it waits for a fleet in trouble.
type ClientOptions struct {
	// Kind is the GPU kind (ResolveKind), Mode the measurement mode.
	Kind, Mode string
	// WorkerTimeout is how long Measure waits while no worker of the
	// kind is alive before it gives up (0: 30 s).
	WorkerTimeout time.Duration
	// ServerTimeout is how long Measure waits for a lost server to come
	// back before it gives up (0: 10 s).
	ServerTimeout time.Duration
	// Poll is how often Measure checks the server and the workers (0:
	// 1 s).
	Poll time.Duration
	// Log, when set, receives a line when the fleet changes (a
	// reconnection, a fleet given up on).
	Log func(format string, args ...any)
}

// Result is the outcome of one job.
type Result struct {
	// Record is the measured time, from the result bucket; nil with Err.
	Record *tunedb.Record
	// Cached says the record was in the bucket before the job was sent.
	Cached bool
	// Err says why there is no record: the kernel failed its check on the
	// worker, the job is dead, it was refused (TooLargeError).
	Err error
}

// Client sends measurement jobs to the fleet and collects their results.
type Client struct {
	h *handles
	o ClientOptions
}

// NewClient makes a requester on nc's server for the workers of o.Kind
// and o.Mode.
func NewClient(ctx context.Context, nc *nats.Conn, o ClientOptions) (*Client, error) {
	if !kindPattern.MatchString(o.Kind) {
		return nil, fmt.Errorf("GPU kind %q (see ResolveKind)", o.Kind)
	}
	if err := checkMode(o.Mode); err != nil {
		return nil, err
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.WorkerTimeout, 30*time.Second)
	def(&o.ServerTimeout, 10*time.Second)
	def(&o.Poll, time.Second)
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	octx, cancel := short(ctx, o.ServerTimeout)
	defer cancel()
	h, err := open(octx, nc)
	if err != nil {
		if r := refused(nc); r != nil {
			return nil, r
		}
		return nil, err
	}
	return &Client{h: h, o: o}, nil
}

// unavailable wraps ErrUnavailable with the reason.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}

// Env is the environment the kind's workers measure in, which keys its
// jobs. It waits up to WorkerTimeout for a first worker of the kind to
// join the fleet.
func (c *Client) Env(ctx context.Context) (Env, error) {
	deadline := time.Now().Add(c.o.WorkerTimeout)
	for {
		gctx, cancel := short(ctx, c.o.ServerTimeout)
		e, err := c.h.state.Get(gctx, envKey(c.o.Kind, c.o.Mode))
		cancel()
		var env Env
		switch {
		case err == nil:
			if err := json.Unmarshal(e.Value(), &env); err != nil || env.Compiler == "" {
				return Env{}, fmt.Errorf("the fleet's environment of %s (%s) is unreadable: %q", c.o.Kind, c.o.Mode, e.Value())
			}
			return env, nil
		case ctx.Err() != nil:
			return Env{}, ctx.Err()
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return Env{}, unavailable("the NATS server at %s: %v", c.h.nc.ConnectedUrlRedacted(), err)
		case time.Now().After(deadline):
			return Env{}, unavailable("no tune-worker of kind %s measuring on %s has joined the fleet (waited %v)", c.o.Kind, c.o.Mode, c.o.WorkerTimeout)
		}
		select {
		case <-ctx.Done():
			return Env{}, ctx.Err()
		case <-time.After(c.o.Poll):
		}
	}
}

// LiveWorkers counts the workers of the client's kind and mode whose
// presence has not expired.
func (c *Client) LiveWorkers(ctx context.Context) (int, error) {
	lctx, cancel := short(ctx, c.o.Poll+c.o.ServerTimeout)
	defer cancel()
	l, err := c.h.state.ListKeysFiltered(lctx, liveFilter(c.o.Kind, c.o.Mode))
	if err != nil {
		return 0, err
	}
	n := 0
	for range l.Keys() {
		n++
	}
	// The lister stops itself once it has listed every key.
	return n, lctx.Err()
}

// pending is a job sent (or to send) and the indices of Measure's jobs
// that share its key.
type pending struct {
	job       Job
	data      []byte
	idx       []int
	published bool
	seq       uint64 // in the job stream, once published
}

// Measure measures jobs on the fleet, calling each (from Measure's
// goroutine) with a job's index and result as results come: first those
// the result bucket holds already, then those the workers store, in any
// order. Jobs get the client's kind and mode and the kind's environment
// (Env); equal jobs are sent once. All jobs are published at once, so
// that the workers keep min(workers, jobs) in flight.
//
// Measure returns nil when every job has its result, ctx's error when ctx
// ends first, and ErrUnavailable (wrapped) when the server stayed away
// for ServerTimeout or no worker of the kind was alive for WorkerTimeout;
// the jobs without a result are then not answered at all.
func (c *Client) Measure(ctx context.Context, jobs []Job, each func(i int, r Result)) error {
	env, err := c.Env(ctx)
	if err != nil {
		return err
	}
	pend := map[string]*pending{}
	var order []string
	for i, j := range jobs {
		j.Version, j.Kind, j.Mode, j.Driver, j.Compiler = JobVersion, c.o.Kind, c.o.Mode, env.Driver, env.Compiler
		if err := j.Check(); err != nil {
			each(i, Result{Err: fmt.Errorf("job refused: %w", err)})
			continue
		}
		key := j.Key()
		if p := pend[key]; p != nil {
			p.idx = append(p.idx, i)
			continue
		}
		data, err := j.Encode()
		if err != nil {
			each(i, Result{Err: err})
			continue
		}
		if limit := c.h.nc.MaxPayload(); int64(len(data)) > limit {
			each(i, Result{Err: &TooLargeError{Size: int64(len(data)), Max: limit, Server: c.h.nc.ConnectedUrlRedacted()}})
			continue
		}
		pend[key] = &pending{job: j, data: data, idx: []int{i}}
		order = append(order, key)
	}
	deliver := func(key string, r Result) {
		if p := pend[key]; p != nil {
			delete(pend, key)
			for _, i := range p.idx {
				each(i, r)
			}
		}
	}
	w := &watch{c: c}
	defer w.stop()
	if err := w.start(ctx); err != nil {
		if r := refused(c.h.nc); r != nil {
			return r
		}
		return unavailable("watch the result bucket: %v", err)
	}
	// JetStream's max-deliveries advisories name the jobs it gave up on:
	// such a job is answered at once, whether or not a dead-letter
	// handler runs (it moves the job and records the reason too).
	advisories := make(chan *nats.Msg, 64)
	sub, err := c.h.nc.ChanSubscribe(AdvisorySubjects, advisories)
	if err != nil {
		return unavailable("watch the advisories: %v", err)
	}
	defer sub.Unsubscribe()
	c.sweep(ctx, order, pend, deliver)
	c.publish(ctx, order, pend, false)
	if err := refused(c.h.nc); err != nil {
		return err
	}

	tick := time.NewTicker(c.o.Poll)
	defer tick.Stop()
	var downSince, aloneSince time.Time
	reconnects := c.h.nc.Stats().Reconnects
	for len(pend) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.recs:
			if !ok {
				w.recs = nil
			} else if e != nil && e.Operation() == jetstream.KeyValuePut && pend[e.Key()] != nil {
				deliver(e.Key(), decodeRecord(e))
			}
		case e, ok := <-w.fails:
			if !ok {
				w.fails = nil
			} else if e != nil && e.Operation() == jetstream.KeyValuePut {
				key := strings.TrimPrefix(e.Key(), "failed.")
				if pend[key] != nil {
					deliver(key, Result{Err: decodeFailure(e.Value())})
				}
			}
		case m := <-advisories:
			var a advisory
			if json.Unmarshal(m.Data, &a) != nil {
				continue
			}
			for key, p := range pend {
				if p.published && p.seq == a.StreamSeq {
					rctx, cancel := short(ctx, c.o.ServerTimeout)
					deliver(key, Result{Err: fmt.Errorf("dead letter: %s", deadReason(rctx, c.h, key, a.Deliveries))})
					cancel()
					break
				}
			}
		case <-tick.C:
			now := time.Now()
			if !c.h.nc.IsConnected() {
				if downSince.IsZero() {
					downSince = now
					c.o.Log("fleet: lost the NATS server; waiting up to %v for it", c.o.ServerTimeout)
				}
				if now.Sub(downSince) >= c.o.ServerTimeout {
					return unavailable("lost the NATS server for %v with %d jobs unanswered", c.o.ServerTimeout, len(pend))
				}
				continue
			}
			downSince = time.Time{}
			if r := c.h.nc.Stats().Reconnects; r != reconnects || w.recs == nil || w.fails == nil {
				// Back after a server restart: watch afresh, catch what
				// was stored meanwhile, and publish again what is still
				// pending (the duplicate window drops what the server
				// kept).
				reconnects = r
				c.o.Log("fleet: reconnected to %s", c.h.nc.ConnectedUrlRedacted())
				w.stop()
				if err := w.start(ctx); err != nil {
					continue
				}
				c.sweep(ctx, order, pend, deliver)
				c.publish(ctx, order, pend, true)
			} else {
				c.publish(ctx, order, pend, false)
			}
			live, err := c.LiveWorkers(ctx)
			if err != nil {
				continue
			}
			if live > 0 {
				aloneSince = time.Time{}
				continue
			}
			if aloneSince.IsZero() {
				aloneSince = now
			}
			if now.Sub(aloneSince) >= c.o.WorkerTimeout {
				return unavailable("no tune-worker of kind %s measuring on %s was alive for %v, with %d jobs unanswered", c.o.Kind, c.o.Mode, c.o.WorkerTimeout, len(pend))
			}
		}
	}
	return nil
}

// sweep looks every pending job up: a record stored, or a failure
// recorded, answers it.
func (c *Client) sweep(ctx context.Context, order []string, pend map[string]*pending, deliver func(string, Result)) {
	for _, key := range order {
		if pend[key] == nil || ctx.Err() != nil {
			continue
		}
		gctx, cancel := short(ctx, c.o.ServerTimeout)
		if e, err := c.h.results.Get(gctx, key); err == nil {
			r := decodeRecord(e)
			r.Cached = !pend[key].published
			deliver(key, r)
		} else if e, err := c.h.state.Get(gctx, failedKey(key)); err == nil {
			deliver(key, Result{Err: decodeFailure(e.Value())})
		}
		cancel()
	}
}

// publish publishes the pending jobs not yet published (all of them
// with again), each with its key as message id, so that the server drops
// a job it holds already. A job that cannot be published now is tried
// again at the next poll.
func (c *Client) publish(ctx context.Context, order []string, pend map[string]*pending, again bool) {
	for _, key := range order {
		p := pend[key]
		if p == nil || (p.published && !again) || ctx.Err() != nil {
			continue
		}
		pctx, cancel := short(ctx, c.o.ServerTimeout)
		ack, err := c.h.js.Publish(pctx, JobSubject(c.o.Kind, c.o.Mode), p.data, jetstream.WithMsgID(key), jetstream.WithExpectStream(JobStream))
		cancel()
		if err != nil {
			if !p.published {
				c.o.Log("fleet: job %s not published yet: %v", shortKey(key), err)
			}
			continue
		}
		// A duplicate's sequence is the job's already in the stream.
		p.published, p.seq = true, ack.Sequence
	}
}

// watch holds the watchers of new records and new failures.
type watch struct {
	c           *Client
	rw, fw      jetstream.KeyWatcher
	recs, fails <-chan jetstream.KeyValueEntry
	cancel      context.CancelFunc
}

// start watches for records and failures stored from now on. A watcher
// lives as long as the context it was made with, which also bounds its
// making: a context of its own, cancelled when the server has not made it
// within ServerTimeout, or by stop.
func (w *watch) start(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(w.c.o.ServerTimeout, cancel)
	var err error
	if w.rw, err = w.c.h.results.WatchAll(wctx, jetstream.UpdatesOnly()); err == nil {
		w.fw, err = w.c.h.state.Watch(wctx, "failed.>", jetstream.UpdatesOnly())
	}
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("no answer within %v", w.c.o.ServerTimeout)
	}
	if err != nil {
		cancel()
		w.rw, w.fw = nil, nil
		return err
	}
	w.recs, w.fails, w.cancel = w.rw.Updates(), w.fw.Updates(), cancel
	return nil
}

// stop stops the watchers. Stopping one asks the server to delete its
// consumer, which waits for a server that is away: then the stop goes on
// in the background (the server drops the consumer by itself), so that
// giving up on a lost server is not delayed by it.
func (w *watch) stop() {
	for _, kw := range []jetstream.KeyWatcher{w.rw, w.fw} {
		switch {
		case kw == nil:
		case w.c.h.nc.IsConnected():
			_ = kw.Stop()
		default:
			go kw.Stop()
		}
	}
	if w.cancel != nil {
		w.cancel()
	}
	w.rw, w.fw, w.recs, w.fails, w.cancel = nil, nil, nil, nil, nil
}

// decodeRecord reads a record of the result bucket.
func decodeRecord(e jetstream.KeyValueEntry) Result {
	var rec tunedb.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Result{Err: fmt.Errorf("the result bucket's record %s is unreadable: %w", e.Key(), err)}
	}
	if err := rec.Validate(); err != nil {
		return Result{Err: fmt.Errorf("the result bucket's record %s is invalid: %w", e.Key(), err)}
	}
	return Result{Record: &rec}
}

// decodeFailure reads a failed job's reason.
func decodeFailure(data []byte) error {
	var f failure
	if err := json.Unmarshal(data, &f); err != nil || f.Reason == "" {
		return fmt.Errorf("failed, for a reason recorded unreadably: %q", data)
	}
	if f.Dead {
		return fmt.Errorf("dead letter: %s", f.Reason)
	}
	return errors.New(f.Reason)
}
