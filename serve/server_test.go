package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/step"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testModel = "tiny-llama2"

// testServer serves engine behind the API on loopback, with the Llama 2
// tokenizer and the test chat template.
type testServer struct {
	b      *Batcher
	srv    *httptest.Server
	client oai.Client
}

func newTestServer(t testing.TB, eng Engine, o Options) *testServer {
	t.Helper()
	txt := sharedText(t, TextOptions{Tokenizer: llama2Path(t), ChatTemplate: "testdata/tiny-llama2/chat_template.jinja"}, eng.Layout().Vocab)
	b, err := NewBatcher(eng, txt, o)
	require.NoError(t, err)
	srv := httptest.NewServer(NewServer(b, ServerOptions{Model: testModel}))
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	return &testServer{b: b, srv: srv, client: oai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))}
}

// clientRequest is one request as a client sends it.
type clientRequest struct {
	prompt    string
	chat      bool
	stream    bool
	maxTokens int
	temp      float64
	topP      float64
	topK      int
	seed      int64
}

// answer is what a client got back.
type answer struct {
	text   string
	finish string
	tokens int64
}

// words are what random prompts are made of.
var words = strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly hum old songs about rivers mountains and bread")

func drawClientRequests(rng *rand.Rand, n, maxOut int, sampled bool) []clientRequest {
	var rs []clientRequest
	for range n {
		var p []string
		for range 1 + rng.IntN(30) {
			p = append(p, words[rng.IntN(len(words))])
		}
		r := clientRequest{prompt: strings.Join(p, " "), chat: rng.IntN(3) == 0, stream: rng.IntN(2) == 0, maxTokens: 1 + rng.IntN(maxOut), topP: 1}
		if sampled && rng.IntN(2) == 0 {
			r.temp, r.topP, r.topK, r.seed = 0.6+rng.Float64(), 0.7+rng.Float64()*0.3, rng.IntN(40), rng.Int64()
		}
		rs = append(rs, r)
	}
	return rs
}

// ask sends one request through the official client.
func (ts *testServer) ask(ctx context.Context, r clientRequest) (answer, error) {
	extra := []option.RequestOption{option.WithJSONSet("ignore_eos", true)}
	if r.topK > 0 {
		extra = append(extra, option.WithJSONSet("top_k", r.topK))
	}
	if r.seed != 0 {
		extra = append(extra, option.WithJSONSet("seed", r.seed))
	}
	var a answer
	if r.chat {
		p := oai.ChatCompletionNewParams{Model: testModel, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(r.prompt)},
			MaxTokens: oai.Int(int64(r.maxTokens)), Temperature: oai.Float(r.temp), TopP: oai.Float(r.topP)}
		if !r.stream {
			res, err := ts.client.Chat.Completions.New(ctx, p, extra...)
			if err != nil {
				return a, err
			}
			return answer{res.Choices[0].Message.Content, res.Choices[0].FinishReason, res.Usage.CompletionTokens}, nil
		}
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		s := ts.client.Chat.Completions.NewStreaming(ctx, p, extra...)
		for s.Next() {
			ch := s.Current()
			for _, c := range ch.Choices {
				a.text += c.Delta.Content
				if c.FinishReason != "" {
					a.finish = c.FinishReason
				}
			}
			if ch.JSON.Usage.Valid() {
				a.tokens = ch.Usage.CompletionTokens
			}
		}
		return a, s.Err()
	}
	p := oai.CompletionNewParams{Model: testModel, Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String(r.prompt)},
		MaxTokens: oai.Int(int64(r.maxTokens)), Temperature: oai.Float(r.temp), TopP: oai.Float(r.topP)}
	if !r.stream {
		res, err := ts.client.Completions.New(ctx, p, extra...)
		if err != nil {
			return a, err
		}
		return answer{res.Choices[0].Text, string(res.Choices[0].FinishReason), res.Usage.CompletionTokens}, nil
	}
	p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	s := ts.client.Completions.NewStreaming(ctx, p, extra...)
	for s.Next() {
		ch := s.Current()
		for _, c := range ch.Choices {
			a.text += c.Text
			if c.FinishReason != "" {
				a.finish = string(c.FinishReason)
			}
		}
		if ch.JSON.Usage.Valid() {
			a.tokens = ch.Usage.CompletionTokens
		}
	}
	return a, s.Err()
}

// askAll sends every request at once, each from its own client goroutine.
func (ts *testServer) askAll(t testing.TB, rs []clientRequest) []answer {
	t.Helper()
	out, err := ts.askAllErr(rs)
	require.NoError(t, err)
	return out
}

// askAllErr is askAll for a goroutine other than the test's.
func (ts *testServer) askAllErr(rs []clientRequest) ([]answer, error) {
	out := make([]answer, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { out[i], errs[i] = ts.ask(context.Background(), r) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// checkConcurrentClients: many clients at once get, greedy or seeded, the
// answers the first alone of them get alone, also from a pool cut to
// tightBlocks blocks, small enough to preempt (0: not tried); steps carry
// many sequences at once. Each asks for 1..maxOut tokens.
func checkConcurrentClients(t *testing.T, newEngine func() Engine, tightBlocks, clients, alone, maxOut int) {
	rng := rand.New(rand.NewPCG(11, 12))
	rs := drawClientRequests(rng, clients, maxOut, true)
	gate := &gatedEngine{Engine: newEngine()}
	ts := newTestServer(t, gate, Options{})
	want := make([]answer, alone)
	for i := range alone {
		want[i] = ts.askAll(t, rs[i:i+1])[0]
		require.Equal(t, int64(rs[i].maxTokens), want[i].tokens, "request %d", i)
		require.Equal(t, "length", want[i].finish)
	}
	// Steps wait until every client's request has reached the batcher, so
	// that how many sequences a step carries measures the batcher, not how
	// soon a busy machine ran the client goroutines.
	gate.close()
	before := ts.b.Stats()
	var got []answer
	var askErr error
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		got, askErr = ts.askAllErr(rs)
	}()
	require.Eventually(t, func() bool { return ts.b.Pending() == clients }, time.Minute, time.Millisecond,
		"the clients' requests never all reached the batcher")
	gate.open()
	<-asked
	require.NoError(t, askErr)
	require.Equal(t, want, got[:alone])
	for i, a := range got {
		require.Equal(t, int64(rs[i].maxTokens), a.tokens, "request %d", i)
	}
	st := ts.b.Stats()
	mean := float64(st.StepSeqs-before.StepSeqs) / float64(st.Steps-before.Steps)
	t.Logf("%d clients at once: %d steps, %.1f sequences a step, %d tokens", clients, st.Steps-before.Steps, mean, st.StepTokens-before.StepTokens)
	// One request at a time would carry about one sequence a step; the
	// token budget over these prompts caps a full batch near ten, and the
	// order the clients' requests arrived in moves it by about one.
	require.GreaterOrEqual(t, mean, 6.0, "mean sequences a step")

	if tightBlocks == 0 {
		return
	}
	tight := newTestServer(t, newEngine(), Options{KVBlocks: tightBlocks})
	require.Equal(t, want, tight.askAll(t, rs)[:alone])
	require.Positive(t, tight.b.Stats().Preemptions, "the small pool preempted nothing")
	require.Positive(t, metricValue(t, tight.b, "lumsearch_preemptions_total"))
}

// gatedEngine holds every step while closed.
type gatedEngine struct {
	Engine
	mu   sync.Mutex
	wait chan struct{} // nil while open
}

func (g *gatedEngine) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.wait == nil {
		g.wait = make(chan struct{})
	}
}

func (g *gatedEngine) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.wait != nil {
		close(g.wait)
		g.wait = nil
	}
}

// Step waits for the gate (or the context) before running the step.
func (g *gatedEngine) Step(ctx context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	g.mu.Lock()
	wait := g.wait
	g.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Engine.Step(ctx, b, draws)
}

func TestConcurrentClientsOverSimulatedStep(t *testing.T) {
	t.Parallel() // beside the emulated step's test
	checkConcurrentClients(t, func() Engine {
		eng, err := NewSimulatedEngine(simLayout(256), time.Millisecond)
		require.NoError(t, err)
		return eng
	}, 24, 32, 32, 12)
}

// TestCancelMidStream: a client that leaves mid-stream has its request
// cancelled and its blocks returned.
func TestCancelMidStream(t *testing.T) {
	eng, err := NewSimulatedEngine(simLayout(64), 5*time.Millisecond)
	require.NoError(t, err)
	ts := newTestServer(t, eng, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	s := ts.client.Completions.NewStreaming(ctx, oai.CompletionNewParams{Model: testModel, Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("once upon a time")},
		MaxTokens: oai.Int(40)}, option.WithJSONSet("ignore_eos", true))
	require.True(t, s.Next())
	require.Eventually(t, func() bool { return metricValue(t, ts.b, "lumsearch_kv_blocks_used") > 0 }, 5*time.Second, time.Millisecond)
	cancel()
	for s.Next() {
	}
	require.Eventually(t, func() bool {
		return metricValue(t, ts.b, "lumsearch_kv_blocks_used") == 0 && metricValue(t, ts.b, "lumsearch_requests_running") == 0
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, 1.0, metricValue(t, ts.b, "lumsearch_requests_finished_total"))
}

// post sends a raw body and returns the status and the body.
func post(t testing.TB, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func TestErrorObjects(t *testing.T) {
	eng, err := NewSimulatedEngine(simLayout(64), 0)
	require.NoError(t, err)
	ts := newTestServer(t, eng, Options{})
	for _, tc := range []struct {
		path, body string
		status     int
		param      string
	}{
		{"/v1/completions", `{"model":"gpt-5","prompt":"hi"}`, 404, ""},
		{"/v1/completions", `{"prompt":"hi","temperature":3}`, 400, "temperature"},
		{"/v1/completions", `{"prompt":"hi","max_tokens":100}`, 400, "max_tokens"},
		{"/v1/completions", `{"prompt":[40000]}`, 400, "prompt"},
		{"/v1/completions", `{"prompt":"hi","logprobs":2}`, 400, "logprobs"},
		{"/v1/completions", `{"prompt":"` + strings.Repeat("hello ", 70) + `"}`, 400, "prompt"},
		{"/v1/chat/completions", `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"/v1/chat/completions", `{"messages":[{"role":"tool","content":"hi","tool_call_id":"x"}]}`, 400, "messages"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3}`, 400, "top_logprobs"},
		{"/v1/nothing", `{}`, 404, ""},
	} {
		status, body := post(t, ts.srv.URL+tc.path, tc.body)
		require.Equal(t, tc.status, status, "%s %s: %s", tc.path, tc.body, body)
		require.Contains(t, body, `"error"`)
		if tc.param != "" {
			require.Contains(t, body, fmt.Sprintf(`"param":%q`, tc.param), "%s", tc.body)
		}
	}
	res, err := http.Get(ts.srv.URL + "/health")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	models, err := ts.client.Models.List(context.Background())
	require.NoError(t, err)
	require.Equal(t, testModel, models.Data[0].ID)
	res, err = http.Get(ts.srv.URL + "/metrics")
	require.NoError(t, err)
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, name := range []string{"lumsearch_requests_waiting", "lumsearch_kv_blocks_free", "lumsearch_time_to_first_token_seconds", "lumsearch_time_per_output_token_seconds", "lumsearch_e2e_request_latency_seconds", "lumsearch_generation_tokens_total", "lumsearch_preemptions_total"} {
		require.Contains(t, string(m), name)
	}
}

// TestQueueFullAndDrain: past the waiting queue's bound requests get 429;
// a draining server answers 503 to new requests and lets those in flight
// finish.
func TestQueueFullAndDrain(t *testing.T) {
	l := simLayout(64)
	l.MaxSeqs, l.MaxTokens = 1, 16
	eng, err := NewSimulatedEngine(l, 20*time.Millisecond)
	require.NoError(t, err)
	ts := newTestServer(t, eng, Options{MaxWaiting: 1})
	body := `{"prompt":"hi","max_tokens":5,"ignore_eos":true}`
	codes := make([]int, 4)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i], _ = post(t, ts.srv.URL+"/v1/completions", body) })
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	require.Contains(t, codes, 429, "codes %v", codes)
	require.Contains(t, codes, 200, "codes %v", codes)

	done := make(chan int)
	go func() {
		code, _ := post(t, ts.srv.URL+"/v1/completions", body)
		done <- code
	}()
	require.Eventually(t, func() bool { return ts.b.Pending() == 1 }, 5*time.Second, time.Millisecond)
	shut := make(chan error)
	go func() { shut <- ts.b.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		code, _ := post(t, ts.srv.URL+"/v1/completions", body)
		return code == 503
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, 200, <-done, "the request in flight finishes")
	require.NoError(t, <-shut)
}

// FuzzRequestBodies: any body gets a 2xx or a 4xx, never a 5xx or a crash.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi","max_tokens":3}`,
		`{"prompt":[1,2,3],"max_tokens":2,"temperature":0.5,"top_k":5,"seed":7,"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stop":["a","b"]}`,
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":2,"logprobs":true}`,
		`{"prompt":"","max_tokens":0}`, `[]`, `{"prompt":null}`, `{"prompt":"x","min_tokens":3,"max_tokens":4}`,
	} {
		f.Add(s)
	}
	eng, err := NewSimulatedEngine(simLayout(64), 0)
	require.NoError(f, err)
	ts := newTestServer(f, eng, Options{})
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			res, err := http.Post(ts.srv.URL+path, "application/json", bytes.NewBufferString(body))
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			assert.Less(t, res.StatusCode, 500, "%s %q: %s", path, body, b)
		}
	})
}

// TestChatTemplateRequired: a model without a chat template refuses chat
// requests, naming the way out.
func TestChatTemplateRequired(t *testing.T) {
	eng, err := NewSimulatedEngine(simLayout(64), 0)
	require.NoError(t, err)
	b, err := NewBatcher(eng, llama2Text(t), Options{})
	require.NoError(t, err)
	defer b.Close()
	srv := httptest.NewServer(NewServer(b, ServerOptions{Model: testModel}))
	defer srv.Close()
	status, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 400, status)
	require.Contains(t, body, "--chat-template")
}

// TestDrainDeadline: requests still running at the drain's deadline are
// aborted (a stream ends with an error event) and Shutdown returns soon
// after the deadline, not when the requests would have ended.
func TestDrainDeadline(t *testing.T) {
	eng, err := NewSimulatedEngine(simLayout(64), 20*time.Millisecond)
	require.NoError(t, err)
	ts := newTestServer(t, eng, Options{})
	s := ts.client.Completions.NewStreaming(context.Background(), oai.CompletionNewParams{Model: testModel,
		Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("hi")}, MaxTokens: oai.Int(60)}, option.WithJSONSet("ignore_eos", true))
	require.True(t, s.Next(), "the first token")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = ts.b.Shutdown(ctx)
	require.ErrorContains(t, err, "1 requests aborted at the deadline")
	// 60 tokens take 1.2 s; the deadline, 0.1 s (generous: a loaded
	// machine may be slow to schedule the loop).
	require.Less(t, time.Since(start), time.Second)
	for s.Next() {
	}
	require.Error(t, s.Err(), "the stream ends with an error, not as if complete")
}
