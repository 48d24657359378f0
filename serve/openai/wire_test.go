package openai

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMarshalShapes(t *testing.T) {
	content := "hi"
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"completion chunk mid-stream", CompletionChunk{ID: "cmpl-1", Created: 2, Model: "m", Choices: []CompletionChoice{{Text: "a"}}},
			`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null}],"usage":null}`},
		{"completion usage chunk", CompletionChunk{ID: "cmpl-1", Created: 2, Model: "m", Usage: &Usage{1, 2, 3}},
			`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`},
		{"completion", Completion{ID: "c", Model: "m", Usage: NewUsage(1, 2), Choices: []CompletionChoice{{Text: "a", FinishReason: FinishStop,
			Logprobs: &CompletionLogprobs{Tokens: []string{"a"}, TokenLogprobs: []Logprob{Logprob(math.Inf(-1))},
				TopLogprobs: []map[string]Logprob{{"a": -0.5}}, TextOffset: []int{0}}}}},
			`{"id":"c","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-9999],"top_logprobs":[{"a":-0.5}],"text_offset":[0]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`},
		{"chat completion", ChatCompletion{ID: "x", Model: "m", Choices: []ChatChoice{{Message: ChatMessage{Content: "a"}, FinishReason: FinishLength}}},
			`{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
		{"chat first chunk", ChatCompletionChunk{ID: "x", Model: "m", Choices: []ChatChunkChoice{{Delta: ChatDelta{Role: RoleAssistant, Content: &content}}}},
			`{"id":"x","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null}`},
		{"chat last chunk", ChatCompletionChunk{ID: "x", Model: "m", Choices: []ChatChunkChoice{{FinishReason: FinishStop,
			Logprobs: &ChatLogprobs{Content: []TokenLogprob{{Token: "a", Logprob: Logprob(math.NaN()), Bytes: []int{97}, TopLogprobs: []TopLogprob{}}}}}}},
			`{"id":"x","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":-9999,"bytes":[97],"top_logprobs":[]}]},"finish_reason":"stop"}],"usage":null}`},
		{"models", NewModelList(5, "a"),
			`{"object":"list","data":[{"id":"a","object":"model","created":5,"owned_by":"lumsearch"}]}`},
		{"empty models", NewModelList(5), `{"object":"list","data":[]}`},
		{"error", InvalidRequest("", "bad"), `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`},
		{"model not found", ModelNotFound("x"),
			"{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(b))
		})
	}
}

func TestErrorConstructors(t *testing.T) {
	tests := []struct {
		name   string
		err    *Error
		status int
		typ    string
	}{
		{"invalid", InvalidRequest("temperature", "x"), http.StatusBadRequest, TypeInvalidRequest},
		{"not found", ModelNotFound("x"), http.StatusNotFound, TypeInvalidRequest},
		{"too large", TooLarge(10), http.StatusRequestEntityTooLarge, TypeInvalidRequest},
		{"rate limited", RateLimited("busy"), http.StatusTooManyRequests, TypeRateLimit},
		{"overloaded", Overloaded("starting"), http.StatusServiceUnavailable, TypeServer},
		{"server", ServerError("boom"), http.StatusInternalServerError, TypeServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.status, tt.err.Status)
			assert.Equal(t, tt.typ, tt.err.Type)
			rec := httptest.NewRecorder()
			WriteError(rec, tt.err)
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var back Error
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &back))
			back.Status = tt.err.Status
			assert.Equal(t, *tt.err, back)
			assert.NotContains(t, rec.Body.String(), "Status")
		})
	}
	rec := httptest.NewRecorder()
	WriteError(rec, &Error{Message: "no status"})
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
}

func TestEventWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	ew := NewEventWriter(rec)
	require.NoError(t, ew.Send(map[string]int{"a": 1}))
	ew.WriteHeader() // a second call is a no-op
	require.NoError(t, ew.SendError(ServerError("boom")))
	require.NoError(t, ew.Done())
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	assert.Equal(t, "keep-alive", rec.Header().Get("Connection"))
	assert.True(t, rec.Flushed)
	assert.Equal(t, `data: {"a":1}`+"\n\n"+
		`data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}`+"\n\n"+
		"data: [DONE]\n\n", rec.Body.String())
	assert.Error(t, ew.Send(func() {}), "unmarshalable values fail, not panic")
}

type failingWriter struct{ *httptest.ResponseRecorder }

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("client gone") }

func TestEventWriterClientGone(t *testing.T) {
	ew := NewEventWriter(failingWriter{httptest.NewRecorder()})
	assert.ErrorContains(t, ew.Send(1), "client gone")
	assert.ErrorContains(t, ew.Done(), "client gone")
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID("chatcmpl-")
		assert.True(t, strings.HasPrefix(id, "chatcmpl-"))
		assert.Len(t, id, len("chatcmpl-")+26)
		assert.False(t, seen[id])
		seen[id] = true
	}
}

func TestFinishReasonRoundTrip(t *testing.T) {
	for _, r := range []FinishReason{"", FinishStop, FinishLength} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		var back FinishReason = "junk"
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, r, back)
	}
}
