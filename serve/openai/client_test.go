package openai

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeServer answers as the real server would, built only from this
// package: it echoes the prompt back in pieces and records what it decoded.
type fakeServer struct {
	mu       sync.Mutex
	sampling Sampling
	prompt   string
}

const testModel = "m"

func (s *fakeServer) record(sp Sampling, prompt string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampling, s.prompt = sp, prompt
}

func (s *fakeServer) last() (Sampling, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sampling, s.prompt
}

// pieces is the reply to prompt, as the tokens a model would produce.
func pieces(prompt string) []string { return []string{"echo", ": ", prompt} }

func completionLogprobs(ps []string, top int) *CompletionLogprobs {
	lp := &CompletionLogprobs{}
	off := 0
	for i, p := range ps {
		lp.Tokens = append(lp.Tokens, p)
		lp.TokenLogprobs = append(lp.TokenLogprobs, Logprob(-float64(i)))
		alts := map[string]Logprob{}
		for k := range top {
			alts[strings.Repeat("x", k+1)] = Logprob(-float64(k + 1))
		}
		lp.TopLogprobs = append(lp.TopLogprobs, alts)
		lp.TextOffset = append(lp.TextOffset, off)
		off += len(p)
	}
	return lp
}

func chatLogprobs(ps []string, top int) *ChatLogprobs {
	lp := &ChatLogprobs{}
	for _, p := range ps {
		t := TokenLogprob{Token: p, Logprob: -0.5, Bytes: bytesOf(p)}
		for k := range top {
			t.TopLogprobs = append(t.TopLogprobs, TopLogprob{Token: p, Logprob: Logprob(-float64(k)), Bytes: bytesOf(p)})
		}
		lp.Content = append(lp.Content, t)
	}
	return lp
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

func (s *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_ = WriteJSON(w, NewModelList(1700000000, testModel, "other"))
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		req, err := DecodeCompletion(r.Body, 1<<20)
		if err != nil {
			WriteError(w, err.(*Error))
			return
		}
		if req.Model != testModel {
			WriteError(w, ModelNotFound(req.Model))
			return
		}
		sp := req.Sampling()
		s.record(sp, req.Prompt)
		ps := pieces(req.Prompt)
		id, usage := NewID("cmpl-"), NewUsage(3, len(ps))
		if !req.Stream {
			c := Completion{ID: id, Created: 1, Model: req.Model, Usage: usage,
				Choices: []CompletionChoice{{Text: strings.Join(ps, ""), FinishReason: FinishLength}}}
			if sp.Logprobs {
				c.Choices[0].Logprobs = completionLogprobs(ps, sp.TopLogprobs)
			}
			_ = WriteJSON(w, c)
			return
		}
		ew := NewEventWriter(w)
		ew.WriteHeader()
		for i, p := range ps {
			ch := CompletionChunk{ID: id, Created: 1, Model: req.Model, Choices: []CompletionChoice{{Text: p}}}
			if sp.Logprobs {
				ch.Choices[0].Logprobs = completionLogprobs([]string{p}, sp.TopLogprobs)
			}
			if i == len(ps)-1 {
				ch.Choices[0].FinishReason = FinishStop
			}
			if ew.Send(ch) != nil {
				return // the client went away; its side of the test reports
			}
			if req.Prompt == "fail" {
				_ = ew.SendError(ServerError("engine failed mid-stream"))
				_ = ew.Done()
				return
			}
		}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			_ = ew.Send(CompletionChunk{ID: id, Created: 1, Model: req.Model, Usage: &usage})
		}
		_ = ew.Done()
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		req, err := DecodeChat(r.Body, 1<<20)
		if err != nil {
			WriteError(w, err.(*Error))
			return
		}
		sp := req.Sampling()
		last := req.Messages[len(req.Messages)-1]
		s.record(sp, last.Content)
		ps := pieces(last.Content)
		id, usage := NewID("chatcmpl-"), NewUsage(5, len(ps))
		var lp *ChatLogprobs
		if sp.Logprobs {
			lp = chatLogprobs(ps, sp.TopLogprobs)
		}
		if !req.Stream {
			_ = WriteJSON(w, ChatCompletion{ID: id, Created: 1, Model: req.Model, Usage: usage,
				Choices: []ChatChoice{{Message: ChatMessage{Content: strings.Join(ps, "")}, Logprobs: lp, FinishReason: FinishStop}}})
			return
		}
		ew := NewEventWriter(w)
		empty := ""
		_ = ew.Send(ChatCompletionChunk{ID: id, Created: 1, Model: req.Model,
			Choices: []ChatChunkChoice{{Delta: ChatDelta{Role: RoleAssistant, Content: &empty}}}})
		for i, p := range ps {
			ch := ChatChunkChoice{Delta: ChatDelta{Content: &p}}
			if lp != nil {
				ch.Logprobs = &ChatLogprobs{Content: lp.Content[i : i+1]}
			}
			_ = ew.Send(ChatCompletionChunk{ID: id, Created: 1, Model: req.Model, Choices: []ChatChunkChoice{ch}})
		}
		_ = ew.Send(ChatCompletionChunk{ID: id, Created: 1, Model: req.Model,
			Choices: []ChatChunkChoice{{FinishReason: FinishLength}}})
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			_ = ew.Send(ChatCompletionChunk{ID: id, Created: 1, Model: req.Model, Usage: &usage})
		}
		_ = ew.Done()
	})
	return mux
}

func newClient(tb testing.TB) (oai.Client, *fakeServer) {
	fs := &fakeServer{}
	srv := httptest.NewServer(fs.handler())
	tb.Cleanup(srv.Close)
	return oai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0)), fs
}

func TestClientCompletion(t *testing.T) {
	client, fs := newClient(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		params oai.CompletionNewParams
		want   Sampling
	}{
		{"defaults", oai.CompletionNewParams{Model: testModel, Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("hi")}},
			Sampling{Temperature: 1, TopP: 1, MaxTokens: 16}},
		{"sampling and logprobs", oai.CompletionNewParams{Model: testModel,
			Prompt:      oai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"hi"}},
			Temperature: oai.Float(0.25), TopP: oai.Float(0.5), Seed: oai.Int(7), MaxTokens: oai.Int(9),
			Stop:     oai.CompletionNewParamsStopUnion{OfStringArray: []string{"\n", "END"}},
			Logprobs: oai.Int(2), N: oai.Int(1)},
			Sampling{Temperature: 0.25, TopP: 0.5, Seed: 7, Seeded: true, MaxTokens: 9, Stop: []string{"\n", "END"},
				Logprobs: true, TopLogprobs: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Completions.New(ctx, tt.params)
			require.NoError(t, err)
			got, prompt := fs.last()
			assert.Equal(t, tt.want, got)
			assert.Equal(t, "hi", prompt)
			assert.True(t, strings.HasPrefix(resp.ID, "cmpl-"))
			assert.Equal(t, "text_completion", string(resp.Object))
			require.Len(t, resp.Choices, 1)
			c := resp.Choices[0]
			assert.Equal(t, "echo: hi", c.Text)
			assert.Equal(t, oai.CompletionChoiceFinishReasonLength, c.FinishReason)
			assert.Equal(t, int64(3), resp.Usage.PromptTokens)
			assert.Equal(t, int64(3), resp.Usage.CompletionTokens)
			assert.Equal(t, int64(6), resp.Usage.TotalTokens)
			if !tt.want.Logprobs {
				assert.False(t, c.Logprobs.JSON.Tokens.Valid())
				return
			}
			assert.Equal(t, []string{"echo", ": ", "hi"}, c.Logprobs.Tokens)
			assert.Equal(t, []float64{0, -1, -2}, c.Logprobs.TokenLogprobs)
			assert.Equal(t, []int64{0, 4, 6}, c.Logprobs.TextOffset)
			require.Len(t, c.Logprobs.TopLogprobs, 3)
			assert.Equal(t, map[string]float64{"x": -1, "xx": -2}, c.Logprobs.TopLogprobs[0])
		})
	}
}

func TestClientCompletionStreaming(t *testing.T) {
	client, fs := newClient(t)
	tests := []struct {
		name         string
		includeUsage bool
	}{
		{"without usage", false},
		{"with usage", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := oai.CompletionNewParams{Model: testModel, Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("yo")},
				Logprobs: oai.Int(0), Stop: oai.CompletionNewParamsStopUnion{OfString: oai.String("!")}}
			if tt.includeUsage {
				params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
			}
			stream := client.Completions.NewStreaming(context.Background(), params)
			var text strings.Builder
			var finish []string
			var usage *oai.CompletionUsage
			var tokens []string
			for stream.Next() {
				ch := stream.Current()
				assert.Equal(t, "text_completion", string(ch.Object))
				for _, c := range ch.Choices {
					text.WriteString(c.Text)
					finish = append(finish, string(c.FinishReason))
					tokens = append(tokens, c.Logprobs.Tokens...)
				}
				if ch.JSON.Usage.Valid() {
					assert.Empty(t, ch.Choices, "usage chunk has no choices")
					u := ch.Usage
					usage = &u
				}
			}
			require.NoError(t, stream.Err())
			assert.Equal(t, "echo: yo", text.String())
			assert.Equal(t, []string{"", "", "stop"}, finish, "finish_reason null until the last chunk")
			assert.Equal(t, []string{"echo", ": ", "yo"}, tokens)
			sp, _ := fs.last()
			assert.Equal(t, Sampling{Temperature: 1, TopP: 1, MaxTokens: 16, Stop: []string{"!"}, Logprobs: true}, sp)
			if !tt.includeUsage {
				assert.Nil(t, usage)
				return
			}
			require.NotNil(t, usage)
			assert.Equal(t, int64(6), usage.TotalTokens)
		})
	}
}

func TestClientStreamErrorMidStream(t *testing.T) {
	client, _ := newClient(t)
	stream := client.Completions.NewStreaming(context.Background(), oai.CompletionNewParams{
		Model: testModel, Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("fail")}})
	n := 0
	for stream.Next() {
		n++
	}
	assert.Equal(t, 1, n, "the chunk before the error arrives")
	var se *ssestream.StreamError
	require.True(t, errors.As(stream.Err(), &se), "got %v", stream.Err())
	assert.Contains(t, se.Message, "engine failed mid-stream")
}

func TestClientChat(t *testing.T) {
	client, fs := newClient(t)
	tests := []struct {
		name   string
		params oai.ChatCompletionNewParams
		want   Sampling
		prompt string
	}{
		{"defaults", oai.ChatCompletionNewParams{Model: testModel, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}},
			Sampling{Temperature: 1, TopP: 1}, "hi"},
		{"everything", oai.ChatCompletionNewParams{Model: testModel,
			Messages: []oai.ChatCompletionMessageParamUnion{
				oai.SystemMessage("be brief"), oai.DeveloperMessage("dev"), oai.UserMessage("q"), oai.AssistantMessage("a"),
				oai.UserMessage([]oai.ChatCompletionContentPartUnionParam{oai.TextContentPart("x"), oai.TextContentPart("y")})},
			Temperature: oai.Float(0), TopP: oai.Float(1), Seed: oai.Int(-3), MaxCompletionTokens: oai.Int(12), MaxTokens: oai.Int(4),
			Stop: oai.ChatCompletionNewParamsStopUnion{OfString: oai.String("STOP")}, Logprobs: oai.Bool(true), TopLogprobs: oai.Int(2)},
			Sampling{TopP: 1, Seed: uint64(1<<64 - 3), Seeded: true, MaxTokens: 12, Stop: []string{"STOP"}, Logprobs: true, TopLogprobs: 2},
			"x\ny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Chat.Completions.New(context.Background(), tt.params)
			require.NoError(t, err)
			sp, prompt := fs.last()
			assert.Equal(t, tt.want, sp)
			assert.Equal(t, tt.prompt, prompt)
			assert.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"))
			assert.Equal(t, "chat.completion", string(resp.Object))
			require.Len(t, resp.Choices, 1)
			c := resp.Choices[0]
			assert.Equal(t, "assistant", string(c.Message.Role))
			assert.Equal(t, "echo: "+tt.prompt, c.Message.Content)
			assert.Equal(t, "stop", c.FinishReason)
			assert.Equal(t, int64(8), resp.Usage.TotalTokens)
			if !sp.Logprobs {
				assert.Empty(t, c.Logprobs.Content)
				return
			}
			require.Len(t, c.Logprobs.Content, 3)
			lp := c.Logprobs.Content[2]
			assert.Equal(t, tt.prompt, lp.Token)
			assert.Equal(t, -0.5, lp.Logprob)
			assert.Len(t, lp.TopLogprobs, 2)
			assert.Equal(t, int64(tt.prompt[0]), lp.Bytes[0])
		})
	}
}

func TestClientChatStreaming(t *testing.T) {
	client, fs := newClient(t)
	stream := client.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{
		Model: testModel, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hey")},
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		Logprobs:      oai.Bool(true), TopP: oai.Float(0.75)})
	acc := oai.ChatCompletionAccumulator{}
	var roles []string
	chunks := 0
	for stream.Next() {
		ch := stream.Current()
		chunks++
		assert.Equal(t, "chat.completion.chunk", string(ch.Object))
		for _, c := range ch.Choices {
			roles = append(roles, c.Delta.Role)
		}
		require.True(t, acc.AddChunk(ch))
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, 6, chunks, "role, three pieces, finish, usage")
	assert.Equal(t, []string{"assistant", "", "", "", ""}, roles)
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "echo: hey", acc.Choices[0].Message.Content)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.Len(t, acc.Choices[0].Logprobs.Content, 3)
	assert.Equal(t, int64(3), acc.Usage.CompletionTokens)
	assert.Equal(t, int64(8), acc.Usage.TotalTokens)
	sp, _ := fs.last()
	assert.Equal(t, Sampling{Temperature: 1, TopP: 0.75, Logprobs: true}, sp)
}

func TestClientModels(t *testing.T) {
	client, _ := newClient(t)
	page, err := client.Models.List(context.Background())
	require.NoError(t, err)
	require.Len(t, page.Data, 2)
	for i, id := range []string{testModel, "other"} {
		m := page.Data[i]
		assert.Equal(t, id, m.ID)
		assert.Equal(t, "model", string(m.Object))
		assert.Equal(t, "lumsearch", m.OwnedBy)
		assert.Equal(t, int64(1700000000), m.Created)
	}
}

func TestClientErrors(t *testing.T) {
	client, _ := newClient(t)
	prompt := oai.CompletionNewParamsPromptUnion{OfString: oai.String("hi")}
	tests := []struct {
		name   string
		call   func() error
		status int
		param  string
		code   string
		msg    string
	}{
		{"temperature", func() error {
			_, err := client.Completions.New(context.Background(), oai.CompletionNewParams{Model: testModel, Prompt: prompt, Temperature: oai.Float(3)})
			return err
		}, 400, "temperature", "", "temperature: must be in [0, 2], got 3"},
		{"two prompts", func() error {
			_, err := client.Completions.New(context.Background(), oai.CompletionNewParams{Model: testModel,
				Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}}})
			return err
		}, 400, "prompt", "", "only one prompt per request is supported"},
		{"unknown model", func() error {
			_, err := client.Completions.New(context.Background(), oai.CompletionNewParams{Model: "gpt-9", Prompt: prompt})
			return err
		}, 404, "model", CodeModelNotFound, "The model `gpt-9` does not exist."},
		{"chat n", func() error {
			_, err := client.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: testModel,
				Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, N: oai.Int(2)})
			return err
		}, 400, "n", "", "only n=1"},
		{"streaming request error", func() error {
			s := client.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: testModel,
				Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, PresencePenalty: oai.Float(1)})
			for s.Next() {
			}
			return s.Err()
		}, 400, "presence_penalty", "", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var apiErr *oai.Error
			require.True(t, errors.As(err, &apiErr), "got %T %v", err, err)
			assert.Equal(t, tt.status, apiErr.StatusCode)
			assert.Equal(t, tt.param, apiErr.Param)
			assert.Equal(t, tt.code, apiErr.Code)
			assert.Equal(t, TypeInvalidRequest, apiErr.Type)
			assert.Contains(t, apiErr.Message, tt.msg)
		})
	}
}
