package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// Limits of the values a request may carry.
const (
	// DefaultCompletionMaxTokens is max_tokens when a completion request
	// omits it, as OpenAI documents.
	DefaultCompletionMaxTokens = 16
	// MaxCompletionLogprobs bounds "logprobs" of completion requests.
	MaxCompletionLogprobs = 5
	// MaxTopLogprobs bounds "top_logprobs" of chat requests.
	MaxTopLogprobs = 20
)

// StreamOptions is "stream_options"; it is only allowed when streaming.
type StreamOptions struct {
	// IncludeUsage asks for a final chunk with usage and no choices.
	IncludeUsage bool
}

// Params holds the fields shared by completion and chat requests, as sent
// (nil when absent or null). Read them normalized through Sampling.
type Params struct {
	// Model is "model". It may be empty; the server decides whether that
	// means its only model or a 404.
	Model string
	// MaxTokens is "max_tokens".
	MaxTokens *int
	// MinTokens is vLLM's "min_tokens": tokens before EOS or stops may end
	// the generation.
	MinTokens *int
	// Temperature is "temperature", in [0, 2].
	Temperature *float64
	// TopP is "top_p", in (0, 1].
	TopP *float64
	// TopK is vLLM's "top_k": -1 or 0 turn it off.
	TopK *int
	// Seed is "seed".
	Seed *int64
	// Stop is "stop" as a list, empty strings dropped.
	Stop []string
	// Stream is "stream".
	Stream bool
	// StreamOptions is "stream_options".
	StreamOptions *StreamOptions
	// N is "n"; only 1 is supported.
	N *int
	// PresencePenalty is "presence_penalty"; only 0 is supported.
	PresencePenalty *float64
	// FrequencyPenalty is "frequency_penalty"; only 0 is supported.
	FrequencyPenalty *float64
	// User is "user", accepted and ignored.
	User string
	// IgnoreEOS is vLLM's "ignore_eos": generate through the EOS token.
	IgnoreEOS bool
}

// Sampling is what the engine needs of a request, normalized: defaults
// filled in, "off" spelled one way.
type Sampling struct {
	// Temperature is in [0, 2]; 0 means greedy. Default 1.
	Temperature float64
	// TopP is in (0, 1]; 1 means off. Default 1.
	TopP float64
	// TopK is 0 when off (the request sent -1, 0 or nothing), else >= 1.
	TopK int
	// Seed is the request's seed as bits (a negative seed wraps), valid
	// when Seeded.
	Seed uint64
	// Seeded says whether the request fixed a seed.
	Seeded bool
	// MaxTokens is the most tokens to generate, >= 1; 0 only for chat
	// requests that set no limit, leaving the server to bound it by the
	// context left.
	MaxTokens int
	// MinTokens is the fewest tokens before EOS or a stop may end, >= 0.
	MinTokens int
	// Stop holds the stop sequences, none empty, at most MaxStop.
	Stop []string
	// IgnoreEOS says to keep generating through EOS.
	IgnoreEOS bool
	// Logprobs says to return the sampled tokens' logprobs.
	Logprobs bool
	// TopLogprobs is how many alternatives to return per token with
	// Logprobs: up to MaxCompletionLogprobs or MaxTopLogprobs.
	TopLogprobs int
}

func (p *Params) decode(f *fields) {
	f.str("model", &p.Model)
	f.integer("max_tokens", &p.MaxTokens)
	f.integer("min_tokens", &p.MinTokens)
	f.float("temperature", &p.Temperature)
	f.float("top_p", &p.TopP)
	f.integer("top_k", &p.TopK)
	f.int64("seed", &p.Seed)
	f.stop(&p.Stop)
	f.boolean("stream", &p.Stream)
	f.streamOptions(&p.StreamOptions)
	f.integer("n", &p.N)
	f.float("presence_penalty", &p.PresencePenalty)
	f.float("frequency_penalty", &p.FrequencyPenalty)
	f.str("user", &p.User)
	f.boolean("ignore_eos", &p.IgnoreEOS)
}

// validate checks the shared fields; maxParam and limit name the limit that
// takes effect, which min_tokens must not exceed.
func (p *Params) validate(maxParam string, limit *int) *Error {
	switch {
	case p.MaxTokens != nil && *p.MaxTokens < 1:
		return invalidf("max_tokens", "must be at least 1, got %d", *p.MaxTokens)
	case limit != nil && *limit < 1:
		return invalidf(maxParam, "must be at least 1, got %d", *limit)
	case p.MinTokens != nil && *p.MinTokens < 0:
		return invalidf("min_tokens", "must be at least 0, got %d", *p.MinTokens)
	case p.MinTokens != nil && limit != nil && *p.MinTokens > *limit:
		return invalidf("min_tokens", "must be at most %s (%d), got %d", maxParam, *limit, *p.MinTokens)
	case p.Temperature != nil && (*p.Temperature < 0 || *p.Temperature > 2):
		return invalidf("temperature", "must be in [0, 2], got %g", *p.Temperature)
	case p.TopP != nil && (*p.TopP <= 0 || *p.TopP > 1):
		return invalidf("top_p", "must be in (0, 1], got %g", *p.TopP)
	case p.TopK != nil && *p.TopK < -1:
		return invalidf("top_k", "must be -1 (off), 0 (off) or a positive count, got %d", *p.TopK)
	case p.N != nil && *p.N != 1:
		return invalidf("n", "only n=1 is supported, got %d", *p.N)
	case p.PresencePenalty != nil && *p.PresencePenalty != 0:
		return invalidf("presence_penalty", "is not supported (only 0), got %g", *p.PresencePenalty)
	case p.FrequencyPenalty != nil && *p.FrequencyPenalty != 0:
		return invalidf("frequency_penalty", "is not supported (only 0), got %g", *p.FrequencyPenalty)
	case p.StreamOptions != nil && !p.Stream:
		return invalidf("stream_options", "is only allowed when stream is true")
	}
	return nil
}

func (p *Params) sampling() Sampling {
	s := Sampling{Temperature: 1, TopP: 1, Stop: p.Stop, IgnoreEOS: p.IgnoreEOS}
	if p.Temperature != nil {
		s.Temperature = *p.Temperature
	}
	if p.TopP != nil {
		s.TopP = *p.TopP
	}
	if p.TopK != nil && *p.TopK > 0 {
		s.TopK = *p.TopK
	}
	if p.Seed != nil {
		s.Seed, s.Seeded = uint64(*p.Seed), true
	}
	if p.MaxTokens != nil {
		s.MaxTokens = *p.MaxTokens
	}
	if p.MinTokens != nil {
		s.MinTokens = *p.MinTokens
	}
	return s
}

// rejectUnsupported fails on known OpenAI fields whose non-default values
// would silently change results if ignored.
func rejectUnsupported(f *fields, names ...string) {
	for _, name := range names {
		v := f.raw(name)
		if v == nil {
			continue
		}
		switch string(v) {
		case "false", "0", "1", `""`, "{}", "[]":
			continue // the defaults (best_of 1, echo false, empty bias/suffix)
		}
		f.fail(invalidf(name, "is not supported"))
	}
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Params
	// Prompt is the prompt text, when sent as a string or a one-element
	// array of strings.
	Prompt string
	// PromptTokens is the prompt when sent as token ids (an array of
	// integers, or a one-element array of such arrays); Prompt is then
	// empty.
	PromptTokens []int
	// Logprobs is "logprobs": return the sampled token's logprob and this
	// many alternatives, 0..MaxCompletionLogprobs.
	Logprobs *int
	// Echo is "echo"; only false is supported.
	Echo bool
}

// DecodeCompletion reads and validates a completion request of at most
// maxBytes (DefaultMaxBytes when <= 0). Every error is an *Error: 413 for a
// body too large, 400 otherwise, naming the field at fault. Unknown fields
// are ignored, as OpenAI does.
func DecodeCompletion(r io.Reader, maxBytes int64) (*CompletionRequest, error) {
	f, e := readObject(r, maxBytes)
	if e != nil {
		return nil, e
	}
	req := &CompletionRequest{}
	req.decode(&f)
	req.decodePrompt(&f)
	f.integer("logprobs", &req.Logprobs)
	f.boolean("echo", &req.Echo)
	rejectUnsupported(&f, "best_of", "logit_bias", "suffix")
	if f.err != nil {
		return nil, f.err
	}
	if e := req.validate("max_tokens", req.MaxTokens); e != nil {
		return nil, e
	}
	switch {
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > MaxCompletionLogprobs):
		return nil, invalidf("logprobs", "must be in [0, %d], got %d", MaxCompletionLogprobs, *req.Logprobs)
	case req.Echo:
		return nil, invalidf("echo", "is not supported")
	case req.MinTokens != nil && req.MaxTokens == nil && *req.MinTokens > DefaultCompletionMaxTokens:
		return nil, invalidf("min_tokens", "must be at most max_tokens (default %d), got %d", DefaultCompletionMaxTokens, *req.MinTokens)
	}
	return req, nil
}

func (req *CompletionRequest) decodePrompt(f *fields) {
	v := f.raw("prompt")
	if v == nil {
		if f.err == nil {
			f.fail(invalidf("prompt", "is required"))
		}
		return
	}
	const want = "a string, an array of strings, or an array of token ids"
	switch v[0] {
	case '"':
		f.decodeString("prompt", v, &req.Prompt)
	case '[':
		elems, ok := f.array("prompt", v)
		if !ok {
			return
		}
		if len(elems) == 0 {
			f.fail(invalidf("prompt", "must not be empty"))
			return
		}
		switch kind(elems[0]) {
		case "a number":
			req.PromptTokens = f.tokens("prompt", elems)
			return
		case "a string", "an array":
		default:
			f.typeErr("prompt[0]", want, elems[0])
			return
		}
		if len(elems) > 1 {
			f.fail(invalidf("prompt", "got %d prompts; only one prompt per request is supported", len(elems)))
			return
		}
		if elems[0][0] == '"' {
			f.decodeString("prompt[0]", elems[0], &req.Prompt)
			break
		}
		toks, ok := f.array("prompt[0]", elems[0])
		if !ok {
			return
		}
		req.PromptTokens = f.tokens("prompt[0]", toks)
	default:
		f.typeErr("prompt", want, v)
		return
	}
	if f.err == nil && req.Prompt == "" && len(req.PromptTokens) == 0 {
		f.fail(invalidf("prompt", "must not be empty"))
	}
}

// tokens decodes token ids; they must fit an int32 like every vocabulary.
func (f *fields) tokens(param string, elems []json.RawMessage) []int {
	ids := make([]int, 0, len(elems))
	for i, e := range elems {
		x, ok := f.parseInt(fmt.Sprintf("%s[%d]", param, i), e, 0, math.MaxInt32)
		if !ok {
			return nil
		}
		ids = append(ids, int(x))
	}
	return ids
}

// Sampling returns the request's sampling parameters normalized: max_tokens
// defaults to DefaultCompletionMaxTokens; logprobs k asks for the sampled
// token and k alternatives.
func (req *CompletionRequest) Sampling() Sampling {
	s := req.sampling()
	if req.MaxTokens == nil {
		s.MaxTokens = DefaultCompletionMaxTokens
	}
	if req.Logprobs != nil {
		s.Logprobs, s.TopLogprobs = true, *req.Logprobs
	}
	return s
}

// Chat roles accepted in messages.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message with its content flattened to text.
type Message struct {
	// Role is one of the Role constants.
	Role string
	// Content is the text: the string sent, or the text parts joined by
	// "\n" as vLLM joins them; empty for an assistant message with null
	// content.
	Content string
	// Name is the optional participant "name".
	Name string
	// ToolCallID is "tool_call_id" of tool messages.
	ToolCallID string
}

// ChatCompletionRequest is a POST /v1/chat/completions body.
type ChatCompletionRequest struct {
	Params
	// Messages is the conversation, at least one message.
	Messages []Message
	// MaxCompletionTokens is "max_completion_tokens", which OpenAI prefers
	// to the deprecated max_tokens; it wins when both are sent.
	MaxCompletionTokens *int
	// Logprobs is "logprobs".
	Logprobs bool
	// TopLogprobs is "top_logprobs", 0..MaxTopLogprobs, only with logprobs.
	TopLogprobs *int
}

// DecodeChat reads and validates a chat completion request; errors are as
// for DecodeCompletion.
func DecodeChat(r io.Reader, maxBytes int64) (*ChatCompletionRequest, error) {
	f, e := readObject(r, maxBytes)
	if e != nil {
		return nil, e
	}
	req := &ChatCompletionRequest{}
	req.decode(&f)
	req.decodeMessages(&f)
	f.integer("max_completion_tokens", &req.MaxCompletionTokens)
	f.boolean("logprobs", &req.Logprobs)
	f.integer("top_logprobs", &req.TopLogprobs)
	rejectUnsupported(&f, "logit_bias")
	if f.err != nil {
		return nil, f.err
	}
	maxParam, limit := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxParam, limit = "max_completion_tokens", req.MaxCompletionTokens
	}
	if e := req.validate(maxParam, limit); e != nil {
		return nil, e
	}
	switch {
	case req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > MaxTopLogprobs):
		return nil, invalidf("top_logprobs", "must be in [0, %d], got %d", MaxTopLogprobs, *req.TopLogprobs)
	case req.TopLogprobs != nil && !req.Logprobs:
		return nil, invalidf("top_logprobs", "requires logprobs to be true")
	}
	return req, nil
}

func (req *ChatCompletionRequest) decodeMessages(f *fields) {
	v := f.raw("messages")
	if v == nil {
		if f.err == nil {
			f.fail(invalidf("messages", "is required"))
		}
		return
	}
	elems, ok := f.array("messages", v)
	if !ok {
		return
	}
	if len(elems) == 0 {
		f.fail(invalidf("messages", "must not be empty"))
		return
	}
	for i, e := range elems {
		param := fmt.Sprintf("messages[%d]", i)
		if len(e) == 0 {
			f.typeErr(param, "an object", e)
			return
		}
		m, ok := f.object(param, e)
		if !ok {
			return
		}
		var msg Message
		m.str("role", &msg.Role)
		m.str("name", &msg.Name)
		m.str("tool_call_id", &msg.ToolCallID)
		if m.err == nil {
			switch msg.Role {
			case RoleSystem, RoleDeveloper, RoleUser, RoleAssistant, RoleTool:
			case "":
				m.fail(invalidf(m.param("role"), "is required"))
			default:
				m.fail(invalidf(m.param("role"), "must be one of system, developer, user, assistant, tool; got %q", msg.Role))
			}
		}
		m.content(msg.Role, &msg.Content)
		if m.err != nil {
			f.fail(m.err)
			return
		}
		req.Messages = append(req.Messages, msg)
	}
}

// content decodes a message's "content": a string, or an array of text
// parts. Only an assistant message may leave it out (it had tool calls).
func (f *fields) content(role string, dst *string) {
	param := f.param("content")
	v := f.raw("content")
	if v == nil {
		if f.err == nil && role != RoleAssistant {
			f.fail(invalidf(param, "is required"))
		}
		return
	}
	if v[0] == '"' {
		f.decodeString(param, v, dst)
		return
	}
	if v[0] != '[' {
		f.typeErr(param, "a string or an array of content parts", v)
		return
	}
	parts, ok := f.array(param, v)
	if !ok {
		return
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if len(p) == 0 {
			f.typeErr(pp, "an object", p)
			return
		}
		part, ok := f.object(pp, p)
		if !ok {
			return
		}
		var typ, text string
		part.str("type", &typ)
		if part.err == nil && typ != "text" {
			part.fail(invalidf(part.param("type"), "only \"text\" content parts are supported, got %q", typ))
		}
		if part.err == nil && part.raw("text") == nil {
			part.fail(invalidf(part.param("text"), "is required"))
		}
		part.str("text", &text)
		if part.err != nil {
			f.fail(part.err)
			return
		}
		texts = append(texts, text)
	}
	*dst = strings.Join(texts, "\n")
}

// Sampling returns the request's sampling parameters normalized:
// max_completion_tokens wins over max_tokens, and neither leaves MaxTokens
// 0 for the server to bound by the context left.
func (req *ChatCompletionRequest) Sampling() Sampling {
	s := req.sampling()
	if req.MaxCompletionTokens != nil {
		s.MaxTokens = *req.MaxCompletionTokens
	}
	s.Logprobs = req.Logprobs
	if req.Logprobs && req.TopLogprobs != nil {
		s.TopLogprobs = *req.TopLogprobs
	}
	return s
}
