package openai

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var fuzzSeeds = []string{
	``, `null`, `[]`, `{`, `{}`, `"x"`, `{"prompt":"hi"}`, `{"prompt":["a","b"]}`, `{"prompt":[[1,2]]}`,
	`{"prompt":[1e400]}`, `{"prompt":[-0.0]}`, `{"prompt":"a","max_tokens":1e19,"seed":-9223372036854775808}`,
	`{"prompt":"a","temperature":0,"top_p":1,"top_k":-1,"stop":["x",""],"stream":true,"stream_options":{"include_usage":true},"logprobs":5}`,
	`{"messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant"}],"logprobs":true,"top_logprobs":20}`,
	`{"messages":[{"role":"user","content":[null]}]}`, `{"messages":[null,{}]}`, `{"messages":[{"role":"robot","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0}`, `{"prompt":"\ud800","stop":"\u0000"}`,
}

// checkDecoded holds for every decode: either a valid request whose
// Sampling is in range, or a 4xx *Error naming what went wrong.
func checkDecoded(t *testing.T, s *Sampling, err error) {
	if err != nil {
		var e *Error
		require.True(t, errors.As(err, &e), "got %T %v", err, err)
		assert.GreaterOrEqual(t, e.Status, 400)
		assert.Less(t, e.Status, 500)
		assert.NotEmpty(t, e.Message)
		return
	}
	assert.True(t, s.Temperature >= 0 && s.Temperature <= 2, "temperature %g", s.Temperature)
	assert.True(t, s.TopP > 0 && s.TopP <= 1, "top_p %g", s.TopP)
	assert.GreaterOrEqual(t, s.TopK, 0)
	assert.GreaterOrEqual(t, s.MaxTokens, 0)
	assert.GreaterOrEqual(t, s.MinTokens, 0)
	assert.LessOrEqual(t, len(s.Stop), MaxStop)
	for _, stop := range s.Stop {
		assert.NotEmpty(t, stop)
	}
	assert.True(t, s.TopLogprobs >= 0 && s.TopLogprobs <= MaxTopLogprobs)
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCompletion(bytes.NewReader(body), 1<<16)
		if err != nil {
			checkDecoded(t, nil, err)
			return
		}
		s := req.Sampling()
		checkDecoded(t, &s, nil)
		assert.GreaterOrEqual(t, s.MaxTokens, 1)
		assert.True(t, req.Prompt != "" || len(req.PromptTokens) > 0)
	})
}

func FuzzDecodeChat(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeChat(bytes.NewReader(body), 1<<16)
		if err != nil {
			checkDecoded(t, nil, err)
			return
		}
		s := req.Sampling()
		checkDecoded(t, &s, nil)
		assert.NotEmpty(t, req.Messages)
	})
}
