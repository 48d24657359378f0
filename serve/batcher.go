package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/tokenizer"
)

// Errors Submit returns for a request the batcher will not take.
var (
	// ErrOverloaded: the waiting queue is full.
	ErrOverloaded = errors.New("the server is overloaded: its waiting queue is full")
	// ErrDraining: the server is shutting down and admits nothing new.
	ErrDraining = errors.New("the server is shutting down")
)

// Request is one generation: prompt ids and how to continue them.
type Request struct {
	Prompt []int64
	// Params says how tokens are drawn; Params.Seed fixes the draws.
	Params sample.Params
	// MaxTokens bounds the tokens generated (at least 1).
	MaxTokens int
	// Stop strings end the generation; none of one reaches the output.
	Stop []string
	// IgnoreEOS keeps generating past the model's end-of-sequence ids.
	IgnoreEOS bool
	// MinTokens is how many tokens are generated before an
	// end-of-sequence id or a stop string may end the generation. Unlike
	// vLLM's min_tokens, which masks the end-of-sequence ids out of the
	// draw, an end-of-sequence id drawn earlier is kept as a token whose
	// text is empty, and a stop string that begins before the boundary
	// is text.
	MinTokens int
}

// Output is what a request produced since the caller last looked.
type Output struct {
	// Text is the new text.
	Text string
	// Tokens are the new tokens, with their log-probabilities.
	Tokens []Token
	// Finish is "" while the generation goes on, then "stop" (an
	// end-of-sequence id or a stop string), "length" (max tokens, or the
	// step's longest sequence) or "abort" (Err says why).
	Finish string
	Err    error
	// PromptTokens and OutputTokens are the usage counts so far.
	PromptTokens, OutputTokens int
}

// Options tune a Batcher.
type Options struct {
	// TokenBudget is the most tokens a step carries (0: the program's
	// maximum).
	TokenBudget int
	// KVBlocks is the most of the pool's blocks the scheduler hands out
	// (0: all of them), as vLLM's num_gpu_blocks_override.
	KVBlocks int
	// MaxWaiting bounds the waiting queue; Submit refuses past it with
	// ErrOverloaded (0: 4096).
	MaxWaiting int
	// Registerer gets the metrics (nil: a registry of the batcher's own,
	// see Batcher.Registry).
	Registerer prometheus.Registerer
}

// Stats are counts since the batcher started.
type Stats struct {
	Steps, StepSeqs, StepTokens int
	Preemptions                 int
	// HostTime is the loop's time outside Engine.Step: scheduling,
	// metadata, detokenisation.
	HostTime time.Duration
}

// Batcher serves requests by continuous batching: one goroutine owns the
// scheduler and runs the engine step after step over whatever is running,
// admitting new requests between steps. Its methods are safe for
// concurrent use.
type Batcher struct {
	engine  Engine
	text    *Text
	sched   *Scheduler
	metrics *metrics
	reg     *prometheus.Registry
	max     int

	mu       sync.Mutex
	inbox    []*live
	lives    map[*Sequence]*live
	nextID   uint64
	draining bool
	stats    Stats
	// inFlight counts requests submitted and not finished; queued those
	// waiting (the inbox and the scheduler's queue), as the loop last
	// saw them.
	inFlight, queued int
	wake             chan struct{}
	stop             chan struct{}
	done             chan struct{}
}

// live is a request in flight: its sequence, its text state and what its
// caller has not read yet.
type live struct {
	req     Request
	seq     *Sequence
	ctx     context.Context
	arrived time.Time
	first   time.Time
	dec     *tokenizer.StreamDecoder
	stops   stopper

	mu       sync.Mutex
	pending  Output
	finished bool
	read     bool // the finish was handed out
	notify   chan struct{}
}

// NewBatcher starts the loop of a batcher over engine, with text for the
// model's tokenizer and end-of-sequence ids. Close (or Shutdown) stops it.
func NewBatcher(engine Engine, text *Text, o Options) (*Batcher, error) {
	sched, err := NewScheduler(engine.Layout(), o.TokenBudget, o.KVBlocks)
	if err != nil {
		return nil, err
	}
	if text == nil || text.Tokenizer == nil {
		return nil, fmt.Errorf("batcher: no tokenizer")
	}
	b := &Batcher{engine: engine, text: text, sched: sched, max: o.MaxWaiting, lives: map[*Sequence]*live{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if b.max <= 0 {
		b.max = 4096
	}
	reg := o.Registerer
	if reg == nil {
		b.reg = prometheus.NewRegistry()
		reg = b.reg
	}
	if b.metrics, err = newMetrics(reg, sched.Blocks().Total()); err != nil {
		return nil, fmt.Errorf("batcher: metrics: %w", err)
	}
	go b.loop()
	return b, nil
}

// Registry is the batcher's own metrics registry (nil when Options gave a
// Registerer).
func (b *Batcher) Registry() *prometheus.Registry { return b.reg }

// Engine is the engine the batcher runs.
func (b *Batcher) Engine() Engine { return b.engine }

// Text is the model's text side.
func (b *Batcher) Text() *Text { return b.text }

// MaxLen is the longest sequence, prompt and output, a request can have.
func (b *Batcher) MaxLen() int { return b.sched.MaxLen() }

// Stats returns the counts so far.
func (b *Batcher) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Handle is a submitted request's end: Next reads its outputs.
type Handle struct{ l *live }

// Submit queues a request; ctx is the client's: when it ends, the request
// is cancelled and its blocks are freed at the next step.
func (b *Batcher) Submit(ctx context.Context, r Request) (*Handle, error) {
	switch {
	case len(r.Prompt) == 0:
		return nil, fmt.Errorf("the prompt is empty")
	case r.MaxTokens < 1:
		return nil, fmt.Errorf("max_tokens %d; want at least 1", r.MaxTokens)
	case r.MaxTokens > b.sched.MaxLen()-len(r.Prompt):
		return nil, fmt.Errorf("the prompt's %d tokens and max_tokens %d exceed the %d positions a sequence has", len(r.Prompt), r.MaxTokens, b.sched.MaxLen())
	}
	vocab := int64(b.engine.Layout().Vocab)
	for i, id := range r.Prompt {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("prompt token %d is id %d, outside the vocabulary of %d", i, id, vocab)
		}
	}
	if err := r.Params.Validate(); err != nil {
		return nil, err
	}
	l := &live{req: r, ctx: ctx, arrived: time.Now(), dec: b.text.Tokenizer.NewStreamDecoder(true),
		stops: stopper{stops: r.Stop}, notify: make(chan struct{}, 1)}
	l.pending.PromptTokens = len(r.Prompt)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.draining:
		return nil, ErrDraining
	case len(b.inbox)+b.queued >= b.max:
		return nil, ErrOverloaded
	}
	b.inFlight++
	b.nextID++
	l.seq = &Sequence{ID: b.nextID, Tokens: append([]int64(nil), r.Prompt...), Prompt: len(r.Prompt), MaxLen: len(r.Prompt) + r.MaxTokens}
	b.inbox = append(b.inbox, l)
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return &Handle{l: l}, nil
}

// Next waits for new output and returns it; once an output with Finish
// set has been returned, it returns false.
func (h *Handle) Next(ctx context.Context) (Output, bool) {
	l := h.l
	for {
		l.mu.Lock()
		if l.read {
			l.mu.Unlock()
			return Output{}, false
		}
		if l.pending.Text != "" || len(l.pending.Tokens) > 0 || l.finished {
			out := l.pending
			l.pending = Output{PromptTokens: out.PromptTokens, OutputTokens: out.OutputTokens}
			l.read = l.finished
			l.mu.Unlock()
			return out, true
		}
		l.mu.Unlock()
		select {
		case <-l.notify:
		case <-ctx.Done():
			return Output{Finish: "abort", Err: ctx.Err()}, true
		}
	}
}

// emit adds output for the caller.
func (l *live) emit(text string, tok *Token, finish string, err error) {
	l.mu.Lock()
	l.pending.Text += text
	if tok != nil {
		l.pending.Tokens = append(l.pending.Tokens, *tok)
		l.pending.OutputTokens++
	}
	if finish != "" && !l.finished {
		l.finished = true
		l.pending.Finish, l.pending.Err = finish, err
	}
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// loop runs steps while there is work, and sleeps when there is none.
func (b *Batcher) loop() {
	defer close(b.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		start := time.Now()
		b.admit()
		b.reap()
		p, err := b.sched.Schedule()
		if err != nil {
			b.failAll(err)
			continue
		}
		if p == nil {
			b.publish()
			select {
			case <-b.wake:
				continue
			case <-b.stop:
				b.failAll(ErrDraining)
				return
			}
		}
		draws := make([]Draw, len(p.Chunks))
		for i, c := range p.Chunks {
			draws[i] = Draw{Params: b.lives[c.Seq].req.Params, Index: uint64(c.Seq.Generated())}
		}
		host := time.Since(start)
		toks, err := b.engine.Step(ctx, p.Batch, draws)
		after := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				b.failAll(ErrDraining)
				return
			}
			// The step changed no pool slot; its sequences cannot
			// go on (the next step would fail alike), the others can.
			for _, c := range p.Chunks {
				b.finish(b.lives[c.Seq], "abort", fmt.Errorf("the step failed: %w", err))
			}
			continue
		}
		// The counts first, so that a caller who has its answer sees
		// the step that made it.
		b.metrics.preemptions.Add(float64(len(p.Preempted)))
		b.metrics.stepSeqs.Observe(float64(p.Batch.Seqs()))
		b.metrics.stepTokens.Observe(float64(p.Batch.Tokens()))
		b.mu.Lock()
		b.stats.Steps++
		b.stats.StepSeqs += p.Batch.Seqs()
		b.stats.StepTokens += p.Batch.Tokens()
		b.stats.Preemptions += len(p.Preempted)
		b.mu.Unlock()
		b.sched.Commit(p)
		for i, c := range p.Chunks {
			if c.Sampled {
				b.take(b.lives[c.Seq], toks[i])
			}
		}
		b.publish()
		host += time.Since(after)
		b.metrics.stepHost.Observe(host.Seconds())
		b.mu.Lock()
		b.stats.HostTime += host
		b.mu.Unlock()
	}
}

// admit moves the inbox to the scheduler.
func (b *Batcher) admit() {
	b.mu.Lock()
	in := b.inbox
	b.inbox = nil
	b.mu.Unlock()
	for _, l := range in {
		if err := b.sched.Add(l.seq); err != nil {
			b.mu.Lock()
			b.inFlight--
			b.mu.Unlock()
			l.emit("", nil, "abort", err)
			continue
		}
		b.lives[l.seq] = l
		b.metrics.promptTokens.Add(float64(len(l.req.Prompt)))
	}
}

// reap cancels the requests whose clients have gone.
func (b *Batcher) reap() {
	for _, l := range b.lives {
		if err := l.ctx.Err(); err != nil {
			b.finish(l, "abort", fmt.Errorf("the client went away: %w", err))
		}
	}
}

// take appends a sampled token to its sequence and streams its text,
// finishing the request when it is done.
func (b *Batcher) take(l *live, t Token) {
	q := l.seq
	now := time.Now()
	if l.first.IsZero() {
		l.first = now
		b.metrics.ttft.Observe(now.Sub(l.arrived).Seconds())
	}
	b.metrics.generationTokens.Inc()
	// Before min_tokens neither an end-of-sequence id nor a stop string
	// ends the generation.
	check := q.Generated() >= l.req.MinTokens // before this token is appended
	if !l.req.IgnoreEOS && check && b.text.IsEOS(t.ID) {
		// The decoder may hold the bytes of a character whose byte
		// tokens came last: they end the text.
		text, _ := l.stops.add(l.dec.Flush(), true)
		l.emit(text+l.stops.flush(), &t, "", nil)
		b.finish(l, "stop", nil)
		return
	}
	q.Tokens = append(q.Tokens, t.ID)
	piece, err := l.dec.Add(int(t.ID))
	if err != nil {
		l.emit("", &t, "", nil)
		b.finish(l, "abort", fmt.Errorf("detokenise token %d: %w", t.ID, err))
		return
	}
	t.Text = piece
	text, hit := l.stops.add(piece, check)
	length := !hit && (q.Generated() >= l.req.MaxTokens || len(q.Tokens) >= q.MaxLen)
	if length {
		// What the decoder holds is the text's end, stop strings
		// included.
		rest, hitRest := l.stops.add(l.dec.Flush(), check)
		text += rest
		if hit = hitRest; !hit {
			text += l.stops.flush()
		}
	}
	l.emit(text, &t, "", nil)
	switch {
	case hit:
		b.finish(l, "stop", nil)
	case length:
		b.finish(l, "length", nil)
	}
}

// finish ends a request, frees its blocks and records its latencies.
func (b *Batcher) finish(l *live, reason string, err error) {
	if _, ok := b.lives[l.seq]; !ok {
		return
	}
	delete(b.lives, l.seq)
	if rerr := b.sched.Remove(l.seq); rerr != nil && err == nil {
		err = rerr
	}
	now := time.Now()
	if reason != "abort" {
		b.metrics.e2e.Observe(now.Sub(l.arrived).Seconds())
		if n := l.seq.Generated(); n > 1 && !l.first.IsZero() {
			b.metrics.tpot.Observe(now.Sub(l.first).Seconds() / float64(n-1))
		}
	}
	b.metrics.finished.WithLabelValues(reason).Inc()
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	l.emit("", nil, reason, err)
}

// failAll ends every request with err, those still in the inbox too.
func (b *Batcher) failAll(err error) {
	b.admit()
	for _, l := range b.lives {
		b.finish(l, "abort", err)
	}
	b.publish()
}

// publish sets the gauges.
func (b *Batcher) publish() {
	waiting := b.sched.Waiting()
	b.mu.Lock()
	b.queued = waiting
	b.mu.Unlock()
	b.metrics.waiting.Set(float64(waiting))
	b.metrics.running.Set(float64(b.sched.Running()))
	b.metrics.blocksUsed.Set(float64(b.sched.Blocks().Used()))
	b.metrics.blocksFree.Set(float64(b.sched.Blocks().Free()))
}

// Draining says whether the batcher has stopped admitting.
func (b *Batcher) Draining() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draining
}

// Pending counts the requests submitted and not finished.
func (b *Batcher) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// Shutdown stops admitting, lets the requests in flight finish until ctx
// ends, then aborts what is left and stops the loop.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.draining = true
	b.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for b.Pending() > 0 {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("shutdown: %d requests aborted at the deadline: %w", b.Pending(), ctx.Err())
			break wait
		case <-tick.C:
		}
	}
	b.Close()
	return err
}

// Close stops the loop at once, aborting every request in flight.
func (b *Batcher) Close() {
	b.mu.Lock()
	b.draining = true
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.mu.Unlock()
	<-b.done
}
