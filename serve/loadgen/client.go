package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// maxErrorBody bounds what is read of an error response: enough for any
// error object, not a whole HTML page.
const maxErrorBody = 64 << 10

// message is one chat message.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// streamOptions asks for the usage chunk at the end of the stream.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// requestBody is a completions or chat completions request: Prompt and
// MaxTokens for the first, Messages and MaxCompletionTokens (as vLLM's
// benchmark sends it) for the second.
type requestBody struct {
	Model               string        `json:"model"`
	Prompt              string        `json:"prompt,omitempty"`
	Messages            []message     `json:"messages,omitempty"`
	MaxTokens           int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
	Stream              bool          `json:"stream"`
	StreamOptions       streamOptions `json:"stream_options"`
	IgnoreEOS           bool          `json:"ignore_eos,omitempty"`
}

// body is the JSON of request number i.
func (r *run) body(i int, req Request) ([]byte, error) {
	b := requestBody{
		Model:         r.o.Model,
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
		IgnoreEOS:     !r.o.StopAtEOS,
	}
	if r.o.Chat {
		b.Messages = []message{{Role: "user", Content: req.text(i)}}
		b.MaxCompletionTokens = req.OutputTokens
	} else {
		b.Prompt = req.text(i)
		b.MaxTokens = req.OutputTokens
	}
	return json.Marshal(b)
}

// apiError is an OpenAI error object; vLLM has also sent its fields at the
// top level, with "object": "error".
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"` // a string for OpenAI, a number for vLLM
}

// text is e's message with its type.
func (e *apiError) text() string {
	if e.Type != "" {
		return e.Message + " (" + e.Type + ")"
	}
	return e.Message
}

// errorMessage is what an error response's body says: the message of its
// error object, else the body's start.
func errorMessage(body []byte) string {
	var wrapped struct {
		Error *apiError `json:"error"`
		apiError
	}
	if json.Unmarshal(body, &wrapped) == nil {
		if wrapped.Error != nil && wrapped.Error.Message != "" {
			return wrapped.Error.text()
		}
		if wrapped.Message != "" {
			return wrapped.apiError.text()
		}
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	if text == "" {
		return "(empty body)"
	}
	return text
}

// chunk is one streamed chunk: a completion's text or a chat delta, the
// usage at the end, or an error the server met mid-stream.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
			// Reasoning models stream their thinking apart from the
			// answer; it is generated tokens all the same.
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

// hasText says whether c carries generated text.
func (c *chunk) hasText() bool {
	for _, ch := range c.Choices {
		if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" || ch.Delta.Reasoning != "" {
			return true
		}
	}
	return false
}

// readStream reads a completions stream from body, with sent the moment
// the request went, into s: each chunk with text is timed when it is read.
func readStream(body io.Reader, sent time.Time, s *sample) error {
	done, err := readSSE(body, func(data []byte) error {
		at := time.Since(sent)
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("a chunk is not JSON (%w): %.100q", err, data)
		}
		if c.Error != nil {
			return fmt.Errorf("error in the stream: %s", c.Error.text())
		}
		if c.hasText() {
			s.chunks = append(s.chunks, at)
		}
		if c.Usage != nil {
			s.usage = c.Usage
		}
		return nil
	})
	s.done = time.Since(sent)
	switch {
	case err != nil:
		return err
	case !done:
		return errNoDone
	}
	return nil
}

// send sends request number i and reads its stream, with start the start
// of the run.
func (r *run) send(ctx context.Context, i int, req Request, start time.Time) sample {
	s := sample{promptTokens: req.PromptTokens}
	s.err = r.post(ctx, i, req, start, &s)
	s.canceled = s.err != nil && ctx.Err() != nil
	return s
}

// post does send's work; its error is the request's failure.
func (r *run) post(ctx context.Context, i int, req Request, start time.Time, s *sample) error {
	body, err := r.body(i, req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", r.endpoint, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	r.authorize(hreq)
	sent := time.Now()
	s.sent = sent.Sub(start)
	resp, err := r.client.Do(hreq)
	if err != nil {
		s.done = time.Since(sent)
		return err // a *url.Error, which names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		s.done = time.Since(sent)
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, errorMessage(msg))
	}
	err = readStream(resp.Body, sent, s)
	if errors.Is(err, errNoDone) {
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
			return fmt.Errorf("%w (the response is %q, not text/event-stream: does the server stream?)", err, mt)
		}
	}
	return err
}

// authorize adds the API key to hreq, if there is one.
func (r *run) authorize(hreq *http.Request) {
	if r.o.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+r.o.APIKey)
	}
}

// firstModel is the first model GET /v1/models lists.
func (r *run) firstModel(ctx context.Context) (string, error) {
	where := r.base + "/v1/models"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return "", fmt.Errorf("loadgen: GET %s: %w", where, err)
	}
	r.authorize(hreq)
	resp, err := r.client.Do(hreq)
	if err != nil {
		return "", fmt.Errorf("loadgen: find the model (or give one): %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSSELine))
	if err != nil {
		return "", fmt.Errorf("loadgen: GET %s: %w", where, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("loadgen: GET %s: HTTP %d: %s", where, resp.StatusCode, errorMessage(body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("loadgen: GET %s: want a model list: %w", where, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("loadgen: GET %s: the server lists no model; give one", where)
	}
	return list.Data[0].ID, nil
}
