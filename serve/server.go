package serve

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lumsearch/lumsearch/serve/openai"
	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/tokenizer"
)

// ServerOptions tune the HTTP API.
type ServerOptions struct {
	// Model is the name the API serves the model by (GET /v1/models; a
	// request naming another gets a 404).
	Model string
	// MaxBody bounds a request body in bytes (0: 4 MiB).
	MaxBody int64
	// Gatherer, when set, is what /metrics serves (the batcher's own
	// registry otherwise).
	Gatherer prometheus.Gatherer
}

// Server is the OpenAI-compatible HTTP API over a Batcher:
// /v1/completions, /v1/chat/completions (both streaming as server-sent
// events ending with "data: [DONE]"), /v1/models, /health and /metrics.
type Server struct {
	b       *Batcher
	o       ServerOptions
	created int64
	mux     *http.ServeMux
}

// NewServer makes the API over b.
func NewServer(b *Batcher, o ServerOptions) *Server {
	if o.MaxBody <= 0 {
		o.MaxBody = 4 << 20
	}
	s := &Server{b: b, o: o, created: time.Now().Unix(), mux: http.NewServeMux()}
	var g prometheus.Gatherer
	switch {
	case o.Gatherer != nil:
		g = o.Gatherer
	case b.Registry() != nil:
		g = b.Registry()
	}
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", s.health)
	if g != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	_ = openai.WriteJSON(w, openai.NewModelList(s.created, s.o.Model))
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.b.Draining() {
		openai.WriteError(w, openai.Overloaded("the server is shutting down"))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// generation is a decoded request in the engine's terms.
type generation struct {
	model    string
	prompt   []int64
	sampling openai.Sampling
	stream   bool
	usage    bool // stream_options.include_usage
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	req, err := openai.DecodeCompletion(r.Body, s.o.MaxBody)
	if err != nil {
		writeErr(w, err)
		return
	}
	g := generation{model: req.Model, sampling: req.Sampling(), stream: req.Stream, usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	if req.PromptTokens != nil {
		for _, id := range req.PromptTokens {
			g.prompt = append(g.prompt, int64(id))
		}
	} else {
		ids, err := s.b.Text().Tokenizer.Encode(req.Prompt, true)
		if err != nil {
			openai.WriteError(w, openai.InvalidRequest("prompt", fmt.Sprintf("cannot tokenise the prompt: %v", err)))
			return
		}
		g.prompt = toInt64(ids)
	}
	s.generate(w, r, g, "prompt", false)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	req, err := openai.DecodeChat(r.Body, s.o.MaxBody)
	if err != nil {
		writeErr(w, err)
		return
	}
	tmpl := s.b.Text().Chat
	if tmpl == nil {
		openai.WriteError(w, openai.InvalidRequest("messages", "the model has no chat template: serve it with --chat-template FILE, or use /v1/completions"))
		return
	}
	msgs := make([]tokenizer.ChatMessage, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = tokenizer.ChatMessage{Role: m.Role, Content: m.Content}
	}
	text, err := tmpl.Render(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		var raise *tokenizer.ChatRaiseError
		if errors.As(err, &raise) {
			openai.WriteError(w, openai.InvalidRequest("messages", raise.Message))
			return
		}
		openai.WriteError(w, openai.InvalidRequest("messages", fmt.Sprintf("the chat template cannot render these messages: %v", err)))
		return
	}
	// The template writes the special tokens (BOS included) itself.
	ids, err := s.b.Text().Tokenizer.Encode(text, false)
	if err != nil {
		openai.WriteError(w, openai.InvalidRequest("messages", fmt.Sprintf("cannot tokenise the conversation: %v", err)))
		return
	}
	g := generation{model: req.Model, prompt: toInt64(ids), sampling: req.Sampling(), stream: req.Stream, usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	s.generate(w, r, g, "messages", true)
}

// request turns a decoded generation into the batcher's request, or an
// error naming the field at fault.
func (s *Server) request(g generation, promptField string) (Request, *openai.Error) {
	if g.model != "" && g.model != s.o.Model {
		return Request{}, openai.ModelNotFound(g.model)
	}
	maxLen := s.b.MaxLen()
	vocab := int64(s.b.Engine().Layout().Vocab)
	for i, id := range g.prompt {
		if id < 0 || id >= vocab {
			return Request{}, openai.InvalidRequest(promptField, fmt.Sprintf("token %d of the prompt is id %d, outside the model's vocabulary of %d", i, id, vocab))
		}
	}
	switch {
	case len(g.prompt) == 0:
		return Request{}, openai.InvalidRequest(promptField, "the prompt is empty")
	case len(g.prompt) >= maxLen:
		return Request{}, openai.InvalidRequest(promptField, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens.", maxLen, len(g.prompt)))
	}
	sm := g.sampling
	max := sm.MaxTokens
	if max == 0 {
		max = maxLen - len(g.prompt)
	}
	if max > maxLen-len(g.prompt) {
		return Request{}, openai.InvalidRequest("max_tokens", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the prompt and max_tokens %d. Please reduce the length of the prompt or max_tokens.", maxLen, len(g.prompt), max))
	}
	if sm.TopLogprobs > 0 {
		field := "logprobs"
		if promptField == "messages" {
			field = "top_logprobs"
		}
		return Request{}, openai.InvalidRequest(field, fmt.Sprintf("%d alternatives a token asked for; only the sampled token's logprob is returned (0)", sm.TopLogprobs))
	}
	seed := sm.Seed
	if !sm.Seeded {
		seed = randomSeed()
	}
	p := sample.Params{Temperature: sm.Temperature, TopK: sm.TopK, TopP: sm.TopP, Seed: seed}
	if err := p.Validate(); err != nil {
		return Request{}, openai.InvalidRequest("", err.Error())
	}
	return Request{Prompt: g.prompt, Params: p, MaxTokens: max, MinTokens: sm.MinTokens, Stop: sm.Stop, IgnoreEOS: sm.IgnoreEOS}, nil
}

// generate runs a request and writes its response or stream.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, g generation, promptField string, chat bool) {
	req, oerr := s.request(g, promptField)
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	h, err := s.b.Submit(r.Context(), req)
	switch {
	case errors.Is(err, ErrOverloaded):
		openai.WriteError(w, openai.RateLimited(err.Error()))
		return
	case errors.Is(err, ErrDraining):
		openai.WriteError(w, openai.Overloaded(err.Error()))
		return
	case err != nil:
		openai.WriteError(w, openai.InvalidRequest(promptField, err.Error()))
		return
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	rs := &response{s: s, g: g, chat: chat, id: openai.NewID(prefix), created: time.Now().Unix()}
	if g.stream {
		rs.stream(w, r, h)
		return
	}
	rs.whole(w, r, h)
}

func writeErr(w http.ResponseWriter, err error) {
	var oe *openai.Error
	if errors.As(err, &oe) {
		openai.WriteError(w, oe)
		return
	}
	openai.WriteError(w, openai.InvalidRequest("", err.Error()))
}

func toInt64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, v := range ids {
		out[i] = int64(v)
	}
	return out
}

// randomSeed draws the seed of a request that named none.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.LittleEndian.Uint64(b[:])
}
