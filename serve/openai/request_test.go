package openai

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "want *Error, got %T %v", err, err)
	return e
}

func TestDecodeCompletionSampling(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		prompt string
		tokens []int
		want   Sampling
	}{
		{"defaults", `{"model":"m","prompt":"hi"}`, "hi", nil,
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 16}},
		{"all fields", `{"model":"m","prompt":["hi"],"max_tokens":7,"min_tokens":2,"temperature":0.5,"top_p":0.9,
			"top_k":40,"seed":-1,"stop":["a","","b"],"stream":true,"stream_options":{"include_usage":true},
			"logprobs":3,"n":1,"echo":false,"presence_penalty":0,"frequency_penalty":0,"user":"u","ignore_eos":true,
			"best_of":1,"unknown":{"x":[1]}}`, "hi", nil,
			Sampling{Temperature: 0.5, TopP: 0.9, TopK: 40, Seed: ^uint64(0), Seeded: true, MaxTokens: 7,
				MinTokens: 2, Stop: []string{"a", "b"}, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}},
		{"nulls are defaults", `{"prompt":"hi","temperature":null,"top_p":null,"seed":null,"stop":null,"max_tokens":null}`,
			"hi", nil, Sampling{Temperature: 1, TopP: 1, MaxTokens: 16}},
		{"top_k -1 is off", `{"prompt":"hi","top_k":-1,"stop":"x","max_tokens":16.0}`, "hi", nil,
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 16, Stop: []string{"x"}}},
		{"token ids", `{"prompt":[1,2,3],"temperature":0}`, "", []int{1, 2, 3},
			Sampling{TopP: 1, MaxTokens: 16}},
		{"one token array", `{"prompt":[[5,6]],"logprobs":0}`, "", []int{5, 6},
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 16, Logprobs: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeCompletion(strings.NewReader(tt.body), 0)
			require.NoError(t, err)
			assert.Equal(t, tt.prompt, req.Prompt)
			assert.Equal(t, tt.tokens, req.PromptTokens)
			assert.Equal(t, tt.want, req.Sampling())
		})
	}
}

func TestDecodeChatSampling(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		messages []Message
		want     Sampling
	}{
		{"defaults", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			[]Message{{Role: "user", Content: "hi"}},
			Sampling{Temperature: 1, TopP: 1}},
		{"parts and roles", `{"messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
			{"role":"assistant","content":null},{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"user","content":"q","name":"n"}],
			"max_tokens":5,"max_completion_tokens":9,"logprobs":true,"top_logprobs":2,"seed":42,"stop":["\n"]}`,
			[]Message{{Role: "developer", Content: "a\nb"}, {Role: "assistant"}, {Role: "tool", Content: "r", ToolCallID: "c1"},
				{Role: "user", Content: "q", Name: "n"}},
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 9, Seed: 42, Seeded: true, Stop: []string{"\n"},
				Logprobs: true, TopLogprobs: 2}},
		{"max_completion_tokens wins", `{"messages":[{"role":"user","content":"q"}],"max_tokens":2,"max_completion_tokens":10,"min_tokens":5}`,
			[]Message{{Role: "user", Content: "q"}},
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 10, MinTokens: 5}},
		{"max_tokens alone", `{"messages":[{"role":"system","content":""}],"max_tokens":3,"temperature":2,"top_p":1e-3}`,
			[]Message{{Role: "system"}},
			Sampling{Temperature: 2, TopP: 1e-3, MaxTokens: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeChat(strings.NewReader(tt.body), 0)
			require.NoError(t, err)
			assert.Equal(t, tt.messages, req.Messages)
			assert.Equal(t, tt.want, req.Sampling())
		})
	}
}

func TestDecodeCompletionErrors(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		param string
		msg   string
	}{
		{"empty body", ``, "", "empty"},
		{"whitespace body", " \n", "", "empty"},
		{"invalid json", `{"prompt":`, "", "offset"},
		{"not an object", `[1]`, "", "JSON object"},
		{"missing prompt", `{"model":"m"}`, "prompt", "required"},
		{"prompt number", `{"prompt":3}`, "prompt", "expected"},
		{"prompt empty string", `{"prompt":""}`, "prompt", "empty"},
		{"prompt empty array", `{"prompt":[]}`, "prompt", "empty"},
		{"two prompts", `{"prompt":["a","b"]}`, "prompt", "only one prompt per request is supported"},
		{"two token prompts", `{"prompt":[[1],[2]]}`, "prompt", "only one prompt"},
		{"mixed prompt", `{"prompt":["a",1]}`, "prompt", "only one prompt"},
		{"prompt object elem", `{"prompt":[{}]}`, "prompt[0]", "expected"},
		{"negative token", `{"prompt":[1,-2]}`, "prompt[1]", "out of range"},
		{"string token", `{"prompt":[1,"a"]}`, "prompt[1]", "integer"},
		{"model number", `{"prompt":"a","model":1}`, "model", "expected a string"},
		{"max_tokens string", `{"prompt":"a","max_tokens":"5"}`, "max_tokens", "integer"},
		{"max_tokens fraction", `{"prompt":"a","max_tokens":1.5}`, "max_tokens", "integer"},
		{"max_tokens zero", `{"prompt":"a","max_tokens":0}`, "max_tokens", "at least 1"},
		{"max_tokens huge", `{"prompt":"a","max_tokens":1e30}`, "max_tokens", "out of range"},
		{"min_tokens negative", `{"prompt":"a","min_tokens":-1}`, "min_tokens", "at least 0"},
		{"min over max", `{"prompt":"a","min_tokens":5,"max_tokens":4}`, "min_tokens", "at most"},
		{"min over default max", `{"prompt":"a","min_tokens":17}`, "min_tokens", "default 16"},
		{"temperature string", `{"prompt":"a","temperature":"hot"}`, "temperature", "expected a number"},
		{"temperature high", `{"prompt":"a","temperature":2.5}`, "temperature", "[0, 2]"},
		{"temperature negative", `{"prompt":"a","temperature":-0.1}`, "temperature", "[0, 2]"},
		{"temperature overflow", `{"prompt":"a","temperature":1e999}`, "temperature", "out of range"},
		{"top_p zero", `{"prompt":"a","top_p":0}`, "top_p", "(0, 1]"},
		{"top_p high", `{"prompt":"a","top_p":1.01}`, "top_p", "(0, 1]"},
		{"top_k below -1", `{"prompt":"a","top_k":-2}`, "top_k", "positive"},
		{"seed string", `{"prompt":"a","seed":"1"}`, "seed", "integer"},
		{"seed too big", `{"prompt":"a","seed":18446744073709551616}`, "seed", "out of range"},
		{"stop number", `{"prompt":"a","stop":1}`, "stop", "string or an array"},
		{"stop elem number", `{"prompt":"a","stop":["a",2]}`, "stop[1]", "expected a string"},
		{"stop elem null", `{"prompt":"a","stop":[null]}`, "stop[0]", "expected a string"},
		{"too many stops", `{"prompt":"a","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`, "stop", "at most 16"},
		{"stream string", `{"prompt":"a","stream":"yes"}`, "stream", "boolean"},
		{"stream_options without stream", `{"prompt":"a","stream_options":{"include_usage":true}}`, "stream_options", "stream is true"},
		{"stream_options type", `{"prompt":"a","stream":true,"stream_options":[]}`, "stream_options", "object"},
		{"include_usage type", `{"prompt":"a","stream":true,"stream_options":{"include_usage":1}}`, "stream_options.include_usage", "boolean"},
		{"logprobs high", `{"prompt":"a","logprobs":6}`, "logprobs", "[0, 5]"},
		{"logprobs bool", `{"prompt":"a","logprobs":true}`, "logprobs", "integer"},
		{"n two", `{"prompt":"a","n":2}`, "n", "only n=1"},
		{"echo", `{"prompt":"a","echo":true}`, "echo", "not supported"},
		{"presence penalty", `{"prompt":"a","presence_penalty":0.5}`, "presence_penalty", "not supported"},
		{"frequency penalty", `{"prompt":"a","frequency_penalty":-1}`, "frequency_penalty", "not supported"},
		{"best_of", `{"prompt":"a","best_of":3}`, "best_of", "not supported"},
		{"logit_bias", `{"prompt":"a","logit_bias":{"1":5}}`, "logit_bias", "not supported"},
		{"user number", `{"prompt":"a","user":5}`, "user", "string"},
		{"ignore_eos type", `{"prompt":"a","ignore_eos":"true"}`, "ignore_eos", "boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCompletion(strings.NewReader(tt.body), 0)
			e := asError(t, err)
			assert.Equal(t, http.StatusBadRequest, e.Status)
			assert.Equal(t, TypeInvalidRequest, e.Type)
			assert.Equal(t, tt.param, e.Param)
			assert.Contains(t, e.Message, tt.msg)
		})
	}
}

func TestDecodeChatErrors(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	tests := []struct {
		name  string
		body  string
		param string
		msg   string
	}{
		{"missing messages", `{"model":"m"}`, "messages", "required"},
		{"messages object", `{"messages":{}}`, "messages", "expected an array"},
		{"messages empty", `{"messages":[]}`, "messages", "empty"},
		{"message string", `{"messages":["hi"]}`, "messages[0]", "expected an object"},
		{"role missing", `{"messages":[` + user + `,{"content":"x"}]}`, "messages[1].role", "required"},
		{"role bad", `{"messages":[` + user + `,{"role":"robot","content":"x"}]}`, "messages[1].role", "must be one of"},
		{"role number", `{"messages":[{"role":1,"content":"x"}]}`, "messages[0].role", "expected a string"},
		{"content missing", `{"messages":[{"role":"user"}]}`, "messages[0].content", "required"},
		{"content number", `{"messages":[{"role":"user","content":1}]}`, "messages[0].content", "string or an array"},
		{"part image", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]}`,
			"messages[0].content[1].type", "only \"text\""},
		{"part no text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", "required"},
		{"part text number", `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, "messages[0].content[0].text", "string"},
		{"part string", `{"messages":[{"role":"user","content":["a"]}]}`, "messages[0].content[0]", "object"},
		{"name number", `{"messages":[{"role":"user","content":"a","name":2}]}`, "messages[0].name", "string"},
		{"max_completion_tokens zero", `{"messages":[` + user + `],"max_completion_tokens":0}`, "max_completion_tokens", "at least 1"},
		{"max_completion_tokens type", `{"messages":[` + user + `],"max_completion_tokens":"9"}`, "max_completion_tokens", "integer"},
		{"logprobs int", `{"messages":[` + user + `],"logprobs":1}`, "logprobs", "boolean"},
		{"top_logprobs high", `{"messages":[` + user + `],"logprobs":true,"top_logprobs":21}`, "top_logprobs", "[0, 20]"},
		{"top_logprobs alone", `{"messages":[` + user + `],"top_logprobs":2}`, "top_logprobs", "requires logprobs"},
		{"temperature", `{"messages":[` + user + `],"temperature":3}`, "temperature", "[0, 2]"},
		{"n", `{"messages":[` + user + `],"n":3}`, "n", "only n=1"},
		{"min over mct", `{"messages":[` + user + `],"min_tokens":4,"max_completion_tokens":3}`, "min_tokens", "max_completion_tokens"},
		{"stop", `{"messages":[` + user + `],"stop":{}}`, "stop", "string or an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeChat(strings.NewReader(tt.body), 0)
			e := asError(t, err)
			assert.Equal(t, http.StatusBadRequest, e.Status)
			assert.Equal(t, tt.param, e.Param)
			assert.Contains(t, e.Message, tt.msg)
		})
	}
}

func TestDecodeBodyLimits(t *testing.T) {
	body := `{"prompt":"` + strings.Repeat("a", 100) + `"}`
	tests := []struct {
		name   string
		limit  int64
		status int
	}{
		{"over the limit", 50, http.StatusRequestEntityTooLarge},
		{"at the limit", int64(len(body)), 0},
		{"default limit", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCompletion(strings.NewReader(body), tt.limit)
			_, chatErr := DecodeChat(strings.NewReader(body), tt.limit)
			if tt.status == 0 {
				require.NoError(t, err)
				assert.Equal(t, "messages", asError(t, chatErr).Param)
				return
			}
			assert.Equal(t, tt.status, asError(t, err).Status)
			assert.Equal(t, tt.status, asError(t, chatErr).Status)
		})
	}
	rec := httptest.NewRecorder()
	_, err := DecodeChat(http.MaxBytesReader(rec, io.NopCloser(strings.NewReader(body)), 10), 1000)
	assert.Equal(t, http.StatusRequestEntityTooLarge, asError(t, err).Status)
	_, err = DecodeCompletion(nil, 0)
	assert.Equal(t, http.StatusBadRequest, asError(t, err).Status)
}
