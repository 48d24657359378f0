package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// scriptEngine draws script[i] as every sequence's i-th generated token
// (a space after the script), to test what the host makes of given tokens.
type scriptEngine struct {
	layout step.Layout
	script []int64
}

func (e *scriptEngine) Layout() step.Layout { return e.layout }
func (e *scriptEngine) Device() string      { return "script" }
func (e *scriptEngine) Step(_ context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	out := make([]Token, len(draws))
	for i, d := range draws {
		id := int64(3186) // "▁world"
		if int(d.Index) < len(e.script) {
			id = e.script[d.Index]
		}
		out[i] = Token{ID: id, Logprob: -float64(d.Index) - 0.5}
	}
	return out, nil
}

// encode is the Llama 2 ids of text, without special tokens.
func encode(t testing.TB, txt *Text, text string) []int64 {
	ids, err := txt.Tokenizer.Encode(text, false)
	require.NoError(t, err)
	return toInt64(ids)
}

// TestGeneratedText: the text a request gets for given tokens, with the
// Llama 2 tokenizer (byte-fallback tokens held by the stream decoder):
// EOS, max_tokens, stop strings and min_tokens.
func TestGeneratedText(t *testing.T) {
	txt := llama2Text(t)
	hello := encode(t, txt, "Hello")
	nl := []int64{13}            // <0x0A>
	smile := encode(t, txt, "😀") // byte tokens
	eos := []int64{2}
	cat := func(parts ...[]int64) []int64 {
		var out []int64
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		script []int64
		r      Request
		text   string
		finish string
		tokens int
	}{
		{"EOS after a byte token keeps its character", cat(hello, nl, eos), Request{MaxTokens: 10}, "Hello\n", "stop", 3},
		{"EOS after an emoji", cat(hello, smile, eos), Request{MaxTokens: 20}, "Hello 😀", "stop", len(hello) + len(smile) + 1},
		{"max_tokens with a held byte", cat(hello, nl), Request{MaxTokens: 2}, "Hello\n", "length", 2},
		{"a stop string held by the decoder at max_tokens", cat(hello, nl), Request{MaxTokens: 2, Stop: []string{"\n"}}, "Hello", "stop", 2},
		{"a stop string mid-text", cat(hello, nl, hello), Request{MaxTokens: 10, Stop: []string{"\n H"}}, "Hello", "stop", 3},
		{"ignore_eos", cat(hello, eos, hello), Request{MaxTokens: 3, IgnoreEOS: true}, "Hello Hello", "length", 3},
		{"EOS before min_tokens is a token", cat(eos, hello, eos), Request{MaxTokens: 10, MinTokens: 2}, "Hello", "stop", 3},
		// The decoder holds a byte token until the run of byte tokens
		// ends (Hugging Face decodes an invalid run as a whole), so a
		// stop string of byte tokens is seen a token late.
		{"a stop string before min_tokens is text", cat(hello, nl, hello, nl), Request{MaxTokens: 10, MinTokens: 3, Stop: []string{"\n"}}, "Hello\n Hello", "stop", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBatcher(&scriptEngine{layout: simLayout(64), script: tc.script}, txt, Options{})
			require.NoError(t, err)
			defer b.Close()
			tc.r.Prompt, tc.r.Params = []int64{1, 15043}, sample.Params{TopP: 1}
			h, err := b.Submit(context.Background(), tc.r)
			require.NoError(t, err)
			text, ids, finish := collect(t, h)
			require.Equal(t, tc.text, text)
			require.Equal(t, tc.finish, finish)
			require.Len(t, ids, tc.tokens)
		})
	}
}

// TestLogprobsTextOffsets: completions' logprobs name each token by the
// text it added, with offsets in characters.
func TestLogprobsTextOffsets(t *testing.T) {
	txt := llama2Text(t)
	script := encode(t, txt, "Hello wörld 😀 bar")
	b, err := NewBatcher(&scriptEngine{layout: simLayout(64), script: script}, txt, Options{})
	require.NoError(t, err)
	defer b.Close()
	srv := httptest.NewServer(NewServer(b, ServerOptions{Model: "m"}))
	defer srv.Close()
	status, body := post(t, srv.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"hi","max_tokens":%d,"logprobs":0}`, len(script)))
	require.Equal(t, 200, status, body)
	var res struct {
		Choices []struct {
			Text     string
			Logprobs struct {
				Tokens        []string  `json:"tokens"`
				TokenLogprobs []float64 `json:"token_logprobs"`
				TextOffset    []int     `json:"text_offset"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	c := res.Choices[0]
	require.Equal(t, "Hello wörld 😀 bar", c.Text)
	require.Equal(t, c.Text, strings.Join(c.Logprobs.Tokens, ""), "the tokens' texts make the text")
	require.Len(t, c.Logprobs.TokenLogprobs, len(script))
	require.Equal(t, -0.5, c.Logprobs.TokenLogprobs[0])
	off := 0
	for i, tok := range c.Logprobs.Tokens {
		require.Equal(t, off, c.Logprobs.TextOffset[i], "token %d %q", i, tok)
		off += len([]rune(tok))
	}
}

// TestServerEdges: a max_tokens that would overflow is a 400, and
// /metrics serves a batcher whose metrics went to a caller's registry.
func TestServerEdges(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, err := NewBatcher(&scriptEngine{layout: simLayout(64)}, llama2Text(t), Options{Registerer: reg})
	require.NoError(t, err)
	defer b.Close()
	_, err = NewBatcher(&scriptEngine{layout: simLayout(64)}, llama2Text(t), Options{Registerer: reg})
	require.ErrorContains(t, err, "metrics", "a second batcher on the same registry is refused, not a panic")
	srv := httptest.NewServer(NewServer(b, ServerOptions{Model: "m"}))
	defer srv.Close()
	status, body := post(t, srv.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"hi","max_tokens":%d}`, math.MaxInt64))
	require.Equal(t, 400, status, body)
	require.Contains(t, body, `"param":"max_tokens"`)
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 404, res.StatusCode, "the caller's registry is the caller's to serve")
	srv2 := httptest.NewServer(NewServer(b, ServerOptions{Model: "m", Gatherer: reg}))
	defer srv2.Close()
	res, err = http.Get(srv2.URL + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
}
