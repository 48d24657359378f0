package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeServer is a small OpenAI-compatible streaming server: each request
// gets its chunks after the delays set, then the usage and [DONE]. It
// records the requests and the most in flight at once.
type fakeServer struct {
	chunks     int           // chunks with text per request
	first, gap time.Duration // delay before the first chunk, and between chunks
	crlf       bool          // end lines with "\r\n", with keep-alive comments between events
	noUsage    bool          // leave out the usage chunk
	status     int           // non-zero: answer with this status and body
	body       string        // the body sent with status
	streamErr  string        // non-empty: after the first chunk, an error object in the stream
	noDone     bool          // end the stream without [DONE]
	notStream  bool          // answer with a JSON completion, as a server that ignores stream
	hang       bool          // send the headers, then wait until the client goes
	models     string        // the body of /v1/models; empty for a 404

	inFlight, peak atomic.Int64
	mu             sync.Mutex
	bodies         []map[string]any
}

// start serves f on loopback until the test ends.
func (f *fakeServer) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

// requests is the decoded bodies of the requests f got.
func (f *fakeServer) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		if f.models == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, f.models)
		return
	}
	n := f.inFlight.Add(1)
	// A request is in flight until its last byte is written: the client may
	// send the next one as soon as it reads that, before the handler returns.
	leave := sync.OnceFunc(func() { f.inFlight.Add(-1) })
	defer leave()
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	if f.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprint(w, f.body)
		return
	}
	if f.notStream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"text":"hello"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	if f.hang {
		<-r.Context().Done()
		return
	}
	eol := "\n"
	if f.crlf {
		eol = "\r\n"
	}
	event := func(data string) {
		if f.crlf {
			fmt.Fprint(w, ": keep-alive"+eol+eol)
		}
		fmt.Fprint(w, "data: "+data+eol+eol)
		flusher.Flush()
	}
	_, chat := body["messages"]
	if chat {
		event(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`) // a role, not a token
	}
	for i := range f.chunks {
		delay := f.gap
		if i == 0 {
			delay = f.first
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		if chat {
			event(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"tok%d "}}]}`, i))
		} else {
			event(fmt.Sprintf(`{"choices":[{"index":0,"text":"tok%d "}]}`, i))
		}
		if f.streamErr != "" {
			event(`{"error":{"message":"` + f.streamErr + `","type":"InternalServerError","code":500}}`)
			return
		}
	}
	if !f.noUsage {
		prompt, _ := body["prompt"].(string)
		event(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(strings.Fields(prompt)), f.chunks))
	}
	leave()
	if !f.noDone {
		event("[DONE]")
	}
}

// TestRunTimings: the figures measured over a real loopback server are the
// delays it injects. The bounds are wide (a loaded machine slows the
// client, never speeds it); the arithmetic is checked exactly on recorded
// timestamps in TestMeasure.
func TestRunTimings(t *testing.T) {
	for _, chat := range []bool{false, true} {
		t.Run(fmt.Sprintf("chat=%v", chat), func(t *testing.T) {
			f := &fakeServer{chunks: 4, first: 50 * ms, gap: 20 * ms, crlf: chat}
			url := f.start(t)
			rep, err := Run(t.Context(), Options{URL: url + "/v1/", Model: "m", Chat: chat, Requests: 3, PromptTokens: 5, OutputTokens: 4})
			require.NoError(t, err)
			assert.Equal(t, 3, rep.Completed, rep.FirstError)
			assert.Zero(t, rep.Failed)
			assert.Equal(t, 12, rep.OutputTokens)
			if chat {
				assert.Equal(t, url+"/v1/chat/completions", rep.URL)
				assert.Zero(t, rep.InputTokens, "the fake counts only a completion's prompt")
			} else {
				assert.Equal(t, url+"/v1/completions", rep.URL)
				assert.Equal(t, 15, rep.InputTokens)
			}
			assert.Equal(t, 3, rep.TTFT.Count)
			assert.GreaterOrEqual(t, rep.TTFT.Mean, 45.0)
			assert.Less(t, rep.TTFT.Mean, 500.0)
			assert.Equal(t, 3, rep.TPOT.Count)
			assert.GreaterOrEqual(t, rep.TPOT.Mean, 10.0)
			assert.Less(t, rep.TPOT.Mean, 300.0)
			assert.Equal(t, 9, rep.ITL.Count)
			assert.GreaterOrEqual(t, rep.Latency.Min, 100.0, "50 ms then 3 gaps of 20 ms")
			assert.Greater(t, rep.RequestRate, 0.0)
			assert.Greater(t, rep.OutputTokenRate, rep.RequestRate)
		})
	}
}

func TestRunRequestBody(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want map[string]any
	}{
		{"completions", Options{Model: "m", PromptTokens: 3, OutputTokens: 2},
			map[string]any{"model": "m", "prompt": "0 hello hello", "max_tokens": 2.0, "stream": true,
				"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true}},
		{"chat", Options{Model: "m", Chat: true, PromptTokens: 2, OutputTokens: 2},
			map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "0 hello"}},
				"max_completion_tokens": 2.0, "stream": true, "stream_options": map[string]any{"include_usage": true}, "ignore_eos": true}},
		{"stop at eos", Options{Model: "m", PromptTokens: 1, OutputTokens: 2, StopAtEOS: true},
			map[string]any{"model": "m", "prompt": "0", "max_tokens": 2.0, "stream": true,
				"stream_options": map[string]any{"include_usage": true}}},
		{"workload text", Options{Model: "m", Workload: []Request{{Prompt: "Say hi", OutputTokens: 2}}},
			map[string]any{"model": "m", "prompt": "Say hi", "max_tokens": 2.0, "stream": true,
				"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeServer{chunks: 2}
			tt.o.URL = f.start(t)
			if tt.o.Workload == nil {
				tt.o.Requests = 1
			}
			rep, err := Run(t.Context(), tt.o)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Completed, rep.FirstError)
			require.Len(t, f.requests(), 1)
			assert.Equal(t, tt.want, f.requests()[0])
		})
	}
}

// TestRunWorkloadCycles: more requests than workload lines take the lines
// in turn; none takes each once.
func TestRunWorkloadCycles(t *testing.T) {
	work := []Request{{Prompt: "a", OutputTokens: 1}, {PromptTokens: 2, OutputTokens: 3}}
	for _, tt := range []struct {
		requests int
		prompts  []string
	}{{0, []string{"a", "1 hello"}}, {5, []string{"a", "1 hello", "a", "3 hello", "a"}}} {
		f := &fakeServer{chunks: 1}
		rep, err := Run(t.Context(), Options{URL: f.start(t), Model: "m", Workload: work, Requests: tt.requests, Concurrency: 1})
		require.NoError(t, err)
		assert.Equal(t, len(tt.prompts), rep.Completed)
		var prompts []string
		for _, b := range f.requests() {
			prompts = append(prompts, b["prompt"].(string))
		}
		assert.Equal(t, tt.prompts, prompts, "one at a time, in order")
	}
}

// TestRunCountsChunksWithoutUsage: without a usage chunk, each chunk with
// text is a token.
func TestRunCountsChunksWithoutUsage(t *testing.T) {
	f := &fakeServer{chunks: 5, noUsage: true}
	rep, err := Run(t.Context(), Options{URL: f.start(t), Model: "m", Requests: 2, PromptTokens: 7, OutputTokens: 5})
	require.NoError(t, err)
	assert.Equal(t, 10, rep.OutputTokens)
	assert.Equal(t, 14, rep.InputTokens, "the lengths asked for")
}

func TestRunModelFromServer(t *testing.T) {
	tests := []struct {
		name   string
		models string
		want   string // the model, or a substring of the error
		ok     bool
	}{
		{"first listed", `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B"},{"id":"lora"}]}`, "Qwen/Qwen3-0.6B", true},
		{"empty list", `{"object":"list","data":[]}`, "lists no model; give one", false},
		{"not a list", `[1]`, "want a model list", false},
		{"no endpoint", "", "HTTP 404", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeServer{chunks: 1, models: tt.models}
			rep, err := Run(t.Context(), Options{URL: f.start(t), Requests: 1, PromptTokens: 1, OutputTokens: 1})
			if !tt.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.want)
				assert.Contains(t, err.Error(), "/v1/models")
				assert.Empty(t, f.requests(), "nothing sent without a model")
				var opt *OptionError
				assert.False(t, errors.As(err, &opt), "the server's answer, not an option")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, rep.Model)
			assert.Equal(t, tt.want, f.requests()[0]["model"])
		})
	}
}

func TestRunConcurrencyLimit(t *testing.T) {
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			f := &fakeServer{chunks: 3, first: 5 * ms, gap: 5 * ms}
			rep, err := Run(t.Context(), Options{URL: f.start(t), Model: "m", Requests: 12, Concurrency: limit, PromptTokens: 1, OutputTokens: 3})
			require.NoError(t, err)
			assert.Equal(t, 12, rep.Completed)
			assert.LessOrEqual(t, int(f.peak.Load()), limit, "in flight at the server")
			assert.LessOrEqual(t, rep.PeakInFlight, limit)
			assert.Positive(t, rep.PeakInFlight)
		})
	}
}

// TestRunFixedRate: each request goes no earlier than its slot at 1/rate
// spacing, and not long after.
func TestRunFixedRate(t *testing.T) {
	f := &fakeServer{chunks: 1}
	r, err := prepare(Options{URL: f.start(t), Model: "m", Requests: 5, Rate: 40, Arrivals: Fixed, PromptTokens: 1, OutputTokens: 1})
	require.NoError(t, err)
	defer r.client.CloseIdleConnections()
	samples, _, elapsed := r.drive(t.Context())
	require.Len(t, samples, 5)
	for i, s := range samples {
		require.NoError(t, s.err)
		slot := time.Duration(i) * 25 * ms
		assert.GreaterOrEqual(t, s.sent, slot, "request %d", i)
		assert.Less(t, s.sent, slot+250*ms, "request %d", i)
	}
	assert.GreaterOrEqual(t, elapsed, 100*ms)
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name string
		f    *fakeServer
		want string
	}{
		{"500 plain text", &fakeServer{status: 500, body: "Internal Server Error\n"}, "HTTP 500: Internal Server Error"},
		{"400 openai error", &fakeServer{status: 400, body: `{"error":{"message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}}`},
			"HTTP 400: max_tokens is too large (BadRequestError)"},
		{"400 vllm flat error", &fakeServer{status: 400, body: `{"object":"error","message":"The model m does not exist.","type":"NotFoundError","code":404}`},
			"HTTP 400: The model m does not exist. (NotFoundError)"},
		{"503 empty", &fakeServer{status: 503}, "HTTP 503: (empty body)"},
		{"error in the stream", &fakeServer{chunks: 3, streamErr: "CUDA out of memory"}, "error in the stream: CUDA out of memory (InternalServerError)"},
		{"no done", &fakeServer{chunks: 2, noDone: true}, "the stream ended before data: [DONE]"},
		{"not streamed", &fakeServer{notStream: true}, `the response is "application/json", not text/event-stream`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Run(t.Context(), Options{URL: tt.f.start(t), Model: "m", Requests: 3, PromptTokens: 1, OutputTokens: 3})
			require.NoError(t, err, "a request's failure is in the report")
			assert.Equal(t, 3, rep.Failed)
			assert.Zero(t, rep.Completed)
			assert.Contains(t, rep.FirstError, tt.want)
			assert.Equal(t, 3, rep.Errors[rep.FirstError])
			assert.Zero(t, rep.OutputTokens)
			assert.Zero(t, rep.TTFT.Count)
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		rep, err := Run(t.Context(), Options{URL: url, Model: "m", Requests: 2, PromptTokens: 1, OutputTokens: 1})
		require.NoError(t, err)
		assert.Equal(t, 2, rep.Failed)
		assert.Contains(t, rep.FirstError, url)
	})
}

// TestRunCanceled: canceling stops sending and cancels the requests in
// flight at once, and the partial report comes back with the error.
func TestRunCanceled(t *testing.T) {
	tests := []struct {
		name     string
		f        *fakeServer
		o        Options
		sent     int
		canceled int
	}{
		{"requests in flight", &fakeServer{hang: true}, Options{Requests: 3}, 3, 3},
		{"waiting on the schedule", &fakeServer{chunks: 1}, Options{Requests: 3, Rate: 0.01, Arrivals: Fixed}, 1, 0},
		{"waiting for a slot", &fakeServer{hang: true}, Options{Requests: 3, Concurrency: 1}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.URL, tt.o.Model, tt.o.PromptTokens, tt.o.OutputTokens = tt.f.start(t), "m", 1, 1
			ctx, cancel := context.WithTimeout(t.Context(), 200*ms)
			defer cancel()
			begin := time.Now()
			rep, err := Run(ctx, tt.o)
			took := time.Since(begin)
			require.Error(t, err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), fmt.Sprintf("interrupted after %d of 3 requests sent", tt.sent))
			require.NotNil(t, rep, "the partial report")
			assert.True(t, rep.Interrupted)
			assert.Equal(t, tt.sent, rep.Sent)
			assert.Equal(t, tt.canceled, rep.Canceled)
			assert.Equal(t, tt.sent-tt.canceled, rep.Completed)
			assert.Zero(t, rep.Failed, "a canceled request is not a failure")
			assert.Less(t, took, 3*time.Second, "prompt return")
		})
	}
}

func TestRunOptionErrors(t *testing.T) {
	ok := Options{URL: "http://127.0.0.1:1", Model: "m", Requests: 1, PromptTokens: 1, OutputTokens: 1}
	tests := []struct {
		name   string
		change func(*Options)
		err    string
	}{
		{"no url", func(o *Options) { o.URL = "" }, `url "": want a base URL`},
		{"not http", func(o *Options) { o.URL = "ftp://x" }, `url "ftp://x"`},
		{"no host", func(o *Options) { o.URL = "http://" }, `url "http://"`},
		{"negative rate", func(o *Options) { o.Rate = -2 }, "rate -2"},
		{"NaN rate", func(o *Options) { o.Rate = math.NaN() }, "rate NaN"},
		{"arrivals", func(o *Options) { o.Rate, o.Arrivals = 1, "burst" }, `arrivals "burst"`},
		{"concurrency", func(o *Options) { o.Concurrency = -1 }, "concurrency -1"},
		{"no requests", func(o *Options) { o.Requests = 0 }, "requests 0: want a positive count"},
		{"negative requests", func(o *Options) { o.Workload, o.Requests = []Request{{Prompt: "a", OutputTokens: 1}}, -1 }, "requests -1"},
		{"prompt tokens", func(o *Options) { o.PromptTokens = 0 }, "prompt 0 tokens, output 1 tokens: want a prompt or a positive prompt_tokens"},
		{"output tokens", func(o *Options) { o.OutputTokens = -3 }, "want a positive output_tokens"},
		{"bad workload request", func(o *Options) { o.Workload = []Request{{Prompt: "a", OutputTokens: 1}, {Prompt: "b"}} }, "workload request 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.change(&o)
			rep, err := Run(t.Context(), o)
			require.Error(t, err)
			assert.Nil(t, rep)
			assert.Contains(t, err.Error(), tt.err)
			var opt *OptionError
			assert.ErrorAs(t, err, &opt)
		})
	}
}
