// Package loadgen owns load generation against an OpenAI-compatible
// completions server (vLLM, SGLang, any other): it sends streamed
// /v1/completions or /v1/chat/completions requests at a rate or all at
// once under a concurrency limit, times each request's first token and
// every later one from the server-sent events, and summarises the run in a
// Report (throughput, TTFT, TPOT, inter-token and end-to-end latency).
//
// The HTTP and event-stream reading are done here on net/http rather than
// through an SDK so that each chunk is timed when its bytes arrive.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a run. The zero values of the optional fields are the
// defaults their comments give.
type Options struct {
	// URL is the server's base URL, such as http://127.0.0.1:8000; a
	// trailing /v1 is accepted, as OpenAI clients write it.
	URL string
	// Model is the model asked for; empty means the first that GET
	// /v1/models lists.
	Model string
	// Chat drives /v1/chat/completions with the prompt as one user message,
	// instead of /v1/completions.
	Chat bool
	// APIKey, when set, is sent as a bearer token.
	APIKey string

	// Rate is the requests sent per second; 0 or +Inf sends them all at
	// once, so that only Concurrency limits them.
	Rate float64
	// Arrivals spaces requests at Rate; empty means Poisson.
	Arrivals Arrivals
	// Seed seeds the Poisson gaps.
	Seed int64
	// Requests is how many requests to send: the workload's requests in
	// turn, from the first again when there are fewer. 0 means one of each
	// of Workload's.
	Requests int
	// Concurrency is the most requests in flight; a request due while that
	// many are waits for one to end. 0 means no limit.
	Concurrency int

	// Workload is the requests to send. When empty, every request is a
	// made-up prompt of PromptTokens words asking for OutputTokens tokens.
	Workload []Request
	// PromptTokens and OutputTokens size the requests without a Workload.
	PromptTokens, OutputTokens int
	// StopAtEOS leaves out ignore_eos, vLLM's extension that makes every
	// request generate its max_tokens: for servers that refuse unknown
	// fields, at the cost of requests that may end early.
	StopAtEOS bool

	// Client sends the requests; nil means a client of Run's own, with
	// compression off (a gzipped stream arrives in lumps) and enough idle
	// connections kept for the concurrency.
	Client *http.Client
}

// run is one run's settled options.
type run struct {
	o        Options
	base     string // the URL without a trailing "/" or "/v1"
	endpoint string // the completions URL
	reqs     []Request
	offsets  []time.Duration
	client   *http.Client
}

// prepare checks o and settles its defaults, everything but the model.
func prepare(o Options) (*run, error) {
	base := strings.TrimSuffix(strings.TrimRight(o.URL, "/"), "/v1")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, optionErrorf("loadgen: url %q: want a base URL such as http://127.0.0.1:8000", o.URL)
	}
	if o.Arrivals == "" {
		o.Arrivals = Poisson
	}
	if o.Concurrency < 0 {
		return nil, optionErrorf("loadgen: concurrency %d: want a count >= 0 (0 for no limit)", o.Concurrency)
	}
	if math.IsNaN(o.Rate) || o.Rate < 0 {
		return nil, optionErrorf("loadgen: rate %v: want requests per second >= 0 (0 or +Inf for all at once)", o.Rate)
	}
	work := o.Workload
	if len(work) == 0 {
		work = []Request{{PromptTokens: o.PromptTokens, OutputTokens: o.OutputTokens}}
		if o.Requests <= 0 {
			return nil, optionErrorf("loadgen: requests %d: want a positive count", o.Requests)
		}
	}
	for i, r := range work {
		if err := r.validate(); err != nil {
			if len(o.Workload) == 0 {
				return nil, optionErrorf("loadgen: prompt %d tokens, output %d tokens: %w", o.PromptTokens, o.OutputTokens, err)
			}
			return nil, optionErrorf("loadgen: workload request %d: %w", i+1, err)
		}
	}
	n := o.Requests
	switch {
	case n < 0:
		return nil, optionErrorf("loadgen: requests %d: want a count >= 0 (0 for one of each of the workload's)", n)
	case n == 0:
		n = len(work)
	}
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = work[i%len(work)]
	}
	offsets, err := Schedule(n, o.Rate, o.Arrivals, o.Seed)
	if err != nil {
		return nil, optionErrorf("loadgen: %w", err)
	}
	path := "/v1/completions"
	if o.Chat {
		path = "/v1/chat/completions"
	}
	client := o.Client
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true
		t.MaxIdleConnsPerHost = n
		if o.Concurrency > 0 {
			t.MaxIdleConnsPerHost = min(n, o.Concurrency)
		}
		client = &http.Client{Transport: t}
	}
	return &run{o: o, base: base, endpoint: base + path, reqs: reqs, offsets: offsets, client: client}, nil
}

// Run drives the server as o says and returns the report. A request's
// failure (an HTTP error status, an error in the stream, a stream cut
// short) is counted in the report, not returned; Run's error is for
// options it cannot use (an *OptionError) and a model it cannot find.
//
// When ctx ends, Run stops sending, cancels the requests in flight (counted
// as canceled) and returns the partial report, marked Interrupted, with an
// error wrapping ctx's.
func Run(ctx context.Context, o Options) (*Report, error) {
	r, err := prepare(o)
	if err != nil {
		return nil, err
	}
	if o.Client == nil {
		defer r.client.CloseIdleConnections()
	}
	if r.o.Model == "" {
		if r.o.Model, err = r.firstModel(ctx); err != nil {
			return nil, err
		}
	}
	samples, peak, elapsed := r.drive(ctx)
	rep := summarize(samples, elapsed)
	rep.URL, rep.Model, rep.Requests, rep.PeakInFlight = r.endpoint, r.o.Model, len(r.reqs), peak
	if err := ctx.Err(); err != nil {
		rep.Interrupted = true
		return rep, fmt.Errorf("loadgen: interrupted after %d of %d requests sent: %w", rep.Sent, rep.Requests, err)
	}
	return rep, nil
}

// drive sends the requests on schedule and waits for them: it returns the
// samples of those sent, the most in flight at once and the time taken.
func (r *run) drive(ctx context.Context) ([]sample, int, time.Duration) {
	samples := make([]sample, len(r.reqs))
	var slots chan struct{}
	if r.o.Concurrency > 0 {
		slots = make(chan struct{}, r.o.Concurrency)
	}
	var wg sync.WaitGroup
	var inFlight, peak atomic.Int64
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	sent := 0
send:
	for i, req := range r.reqs {
		if wait := time.Until(start.Add(r.offsets[i])); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break send
			}
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				break send
			}
		}
		if ctx.Err() != nil {
			break
		}
		sent++
		wg.Go(func() {
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			samples[i] = r.send(ctx, i, req, start)
			inFlight.Add(-1)
			if slots != nil {
				<-slots
			}
		})
	}
	wg.Wait()
	return samples[:sent], int(peak.Load()), time.Since(start)
}

// OptionError is an Options field Run cannot use: the caller's mistake,
// not the server's.
type OptionError struct{ Err error }

// Error returns the message of the wrapped error.
func (e *OptionError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *OptionError) Unwrap() error { return e.Err }

// optionErrorf makes an OptionError.
func optionErrorf(format string, a ...any) error {
	return &OptionError{Err: fmt.Errorf(format, a...)}
}

// errNoDone is a stream that ended without its closing "data: [DONE]".
var errNoDone = errors.New("the stream ended before data: [DONE]")
