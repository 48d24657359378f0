package openai

import (
	"crypto/rand"
	"encoding/json"
	"math"
)

// Object names of the response shapes; MarshalJSON fills them in when a
// value leaves them empty.
const (
	ObjectTextCompletion = "text_completion"
	ObjectChatCompletion = "chat.completion"
	ObjectChatChunk      = "chat.completion.chunk"
	ObjectList           = "list"
	ObjectModel          = "model"
	// OwnedBy is owned_by of every model this server lists.
	OwnedBy = "lumsearch"
)

// NewID returns prefix followed by 26 random base32 characters, such as
// NewID("cmpl-") or NewID("chatcmpl-").
func NewID(prefix string) string {
	return prefix + rand.Text()
}

// FinishReason is why a choice ended. The zero value, used by stream chunks
// before the last, marshals as null.
type FinishReason string

// Finish reasons as OpenAI spells them.
const (
	// FinishStop: EOS or a stop sequence.
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens or the context ran out.
	FinishLength FinishReason = "length"
)

// MarshalJSON writes null for the zero value.
func (r FinishReason) MarshalJSON() ([]byte, error) {
	if r == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(r))
}

// UnmarshalJSON reads null as the zero value.
func (r *FinishReason) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = ""
		return nil
	}
	return json.Unmarshal(b, (*string)(r))
}

// NoLogprob is what a logprob of -Inf or NaN is sent as: JSON has no
// infinities, and vLLM sends the same stand-in.
const NoLogprob = -9999.0

// Logprob is a log probability that always marshals: non-finite values go
// out as NoLogprob rather than failing the whole response.
type Logprob float64

// MarshalJSON writes the value, or NoLogprob when it is not finite.
func (l Logprob) MarshalJSON() ([]byte, error) {
	f := float64(l)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		f = NoLogprob
	}
	return json.Marshal(f)
}

// Usage counts the tokens of a request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// NewUsage fills TotalTokens from the two counts.
func NewUsage(prompt, completion int) Usage {
	return Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// CompletionLogprobs is the legacy completions logprobs format: parallel
// arrays over the generated tokens.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []Logprob            `json:"token_logprobs"`
	TopLogprobs   []map[string]Logprob `json:"top_logprobs"`
	// TextOffset is each token's byte offset in the choice's text.
	TextOffset []int `json:"text_offset"`
}

// CompletionChoice is one choice of a completion or completion chunk.
type CompletionChoice struct {
	Index int    `json:"index"`
	Text  string `json:"text"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason FinishReason        `json:"finish_reason"`
}

// Completion is the response to a non-streaming completion request.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   Usage              `json:"usage"`
}

// MarshalJSON fills in Object and sends no choices as [].
func (c Completion) MarshalJSON() ([]byte, error) {
	type plain Completion
	if c.Object == "" {
		c.Object = ObjectTextCompletion
	}
	if c.Choices == nil {
		c.Choices = []CompletionChoice{}
	}
	return json.Marshal(plain(c))
}

// CompletionChunk is one event of a streamed completion. Usage is null
// except in the final usage chunk (stream_options.include_usage), which has
// no choices.
type CompletionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage"`
}

// MarshalJSON fills in Object and sends no choices as [].
func (c CompletionChunk) MarshalJSON() ([]byte, error) {
	type plain CompletionChunk
	if c.Object == "" {
		c.Object = ObjectTextCompletion
	}
	if c.Choices == nil {
		c.Choices = []CompletionChoice{}
	}
	return json.Marshal(plain(c))
}

// TopLogprob is one alternative at a position of a chat logprobs list.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob Logprob `json:"logprob"`
	// Bytes is the token's UTF-8 bytes, for tokens that are not whole
	// characters.
	Bytes []int `json:"bytes"`
}

// TokenLogprob is one generated token of a chat logprobs list.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     Logprob      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// ChatLogprobs is a chat choice's "logprobs".
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// ChatMessage is the assistant message of a chat choice.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index   int         `json:"index"`
	Message ChatMessage `json:"message"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason FinishReason  `json:"finish_reason"`
}

// ChatCompletion is the response to a non-streaming chat request.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// MarshalJSON fills in Object and each message's role, and sends no
// choices as [].
func (c ChatCompletion) MarshalJSON() ([]byte, error) {
	type plain ChatCompletion
	if c.Object == "" {
		c.Object = ObjectChatCompletion
	}
	choices := make([]ChatChoice, len(c.Choices))
	for i, ch := range c.Choices {
		if ch.Message.Role == "" {
			ch.Message.Role = RoleAssistant
		}
		choices[i] = ch
	}
	c.Choices = choices
	return json.Marshal(plain(c))
}

// ChatDelta is the new part of a streamed chat message. Role is sent only
// in the first chunk; Content is a pointer so that first chunk can carry
// an explicit "" as OpenAI's does, and the last chunk an empty delta.
type ChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat chunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason FinishReason  `json:"finish_reason"`
}

// ChatCompletionChunk is one event of a streamed chat completion. Usage is
// null except in the final usage chunk, which has no choices.
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage"`
}

// MarshalJSON fills in Object and sends no choices as [].
func (c ChatCompletionChunk) MarshalJSON() ([]byte, error) {
	type plain ChatCompletionChunk
	if c.Object == "" {
		c.Object = ObjectChatChunk
	}
	if c.Choices == nil {
		c.Choices = []ChatChunkChoice{}
	}
	return json.Marshal(plain(c))
}

// Model is one entry of the models list.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the response to GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// NewModelList lists ids as models created at created (Unix seconds) and
// owned by OwnedBy.
func NewModelList(created int64, ids ...string) ModelList {
	l := ModelList{Object: ObjectList, Data: make([]Model, len(ids))}
	for i, id := range ids {
		l.Data[i] = Model{ID: id, Object: ObjectModel, Created: created, OwnedBy: OwnedBy}
	}
	return l
}
