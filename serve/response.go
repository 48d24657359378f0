package serve

import (
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/lumsearch/lumsearch/serve/openai"
)

// response writes one request's answer: a whole completion, or a stream of
// chunks ending with "data: [DONE]".
type response struct {
	s       *Server
	g       generation
	chat    bool
	id      string
	created int64
	offset  int // the completions logprobs' text offset so far
}

// logprobs renders tokens' log-probabilities in the completions form
// (advancing the text offset) or the chat form. A token's text is what it
// added to the stream: a byte token of an unfinished character shows
// empty, the one that completes it the whole character.
func (rs *response) logprobs(toks []Token) (*openai.CompletionLogprobs, *openai.ChatLogprobs) {
	if !rs.g.sampling.Logprobs || len(toks) == 0 {
		return nil, nil
	}
	if rs.chat {
		lp := &openai.ChatLogprobs{}
		for _, t := range toks {
			piece := t.Text
			bytes := make([]int, len(piece))
			for i := range len(piece) {
				bytes[i] = int(piece[i])
			}
			lp.Content = append(lp.Content, openai.TokenLogprob{Token: piece, Logprob: openai.Logprob(t.Logprob), Bytes: bytes, TopLogprobs: []openai.TopLogprob{}})
		}
		return nil, lp
	}
	lp := &openai.CompletionLogprobs{}
	for _, t := range toks {
		piece := t.Text
		lp.Tokens = append(lp.Tokens, piece)
		lp.TokenLogprobs = append(lp.TokenLogprobs, openai.Logprob(t.Logprob))
		lp.TopLogprobs = append(lp.TopLogprobs, nil)
		lp.TextOffset = append(lp.TextOffset, rs.offset)
		rs.offset += utf8.RuneCountInString(piece) // OpenAI counts characters
	}
	return lp, nil
}

// finishReason maps the batcher's reason to the API's.
func finishReason(f string) openai.FinishReason {
	switch f {
	case "stop":
		return openai.FinishStop
	case "length":
		return openai.FinishLength
	}
	return ""
}

// whole waits for the generation's end and writes one response.
func (rs *response) whole(w http.ResponseWriter, r *http.Request, h *Handle) {
	var text string
	var toks []Token
	var last Output
	for {
		out, ok := h.Next(r.Context())
		if !ok {
			break
		}
		text += out.Text
		toks = append(toks, out.Tokens...)
		last = out
		if out.Finish != "" {
			break
		}
	}
	if last.Finish == "abort" {
		if r.Context().Err() == nil {
			openai.WriteError(w, abortError(last.Err))
		}
		return
	}
	usage := openai.NewUsage(last.PromptTokens, last.OutputTokens)
	clp, chlp := rs.logprobs(toks)
	if rs.chat {
		_ = openai.WriteJSON(w, openai.ChatCompletion{ID: rs.id, Object: openai.ObjectChatCompletion, Created: rs.created, Model: rs.s.o.Model, Usage: usage,
			Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: openai.RoleAssistant, Content: text}, Logprobs: chlp, FinishReason: finishReason(last.Finish)}}})
		return
	}
	_ = openai.WriteJSON(w, openai.Completion{ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.s.o.Model, Usage: usage,
		Choices: []openai.CompletionChoice{{Text: text, Logprobs: clp, FinishReason: finishReason(last.Finish)}}})
}

// stream writes a chunk for each output as it comes.
func (rs *response) stream(w http.ResponseWriter, r *http.Request, h *Handle) {
	ew := openai.NewEventWriter(w)
	ew.WriteHeader()
	first := true
	for {
		out, ok := h.Next(r.Context())
		if !ok {
			break
		}
		if out.Finish == "abort" {
			if r.Context().Err() == nil {
				_ = ew.SendError(abortError(out.Err))
				_ = ew.Done()
			}
			return
		}
		if out.Text != "" || len(out.Tokens) > 0 || out.Finish != "" || first {
			if err := rs.chunk(ew, out, first); err != nil {
				return // the client is gone; the batcher reaps the request
			}
			first = false
		}
		if out.Finish != "" {
			if rs.g.usage {
				u := openai.NewUsage(out.PromptTokens, out.OutputTokens)
				if rs.chat {
					_ = ew.Send(openai.ChatCompletionChunk{ID: rs.id, Object: openai.ObjectChatChunk, Created: rs.created, Model: rs.s.o.Model, Choices: []openai.ChatChunkChoice{}, Usage: &u})
				} else {
					_ = ew.Send(openai.CompletionChunk{ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.s.o.Model, Choices: []openai.CompletionChoice{}, Usage: &u})
				}
			}
			_ = ew.Done()
			return
		}
	}
}

// chunk sends one output as a chunk; the first chat chunk carries the
// assistant's role.
func (rs *response) chunk(ew *openai.EventWriter, out Output, first bool) error {
	clp, chlp := rs.logprobs(out.Tokens)
	if rs.chat {
		d := openai.ChatDelta{}
		if first {
			d.Role = openai.RoleAssistant
		}
		text := out.Text // the role's chunk carries "" as OpenAI's does
		d.Content = &text
		return ew.Send(openai.ChatCompletionChunk{ID: rs.id, Object: openai.ObjectChatChunk, Created: rs.created, Model: rs.s.o.Model,
			Choices: []openai.ChatChunkChoice{{Delta: d, Logprobs: chlp, FinishReason: finishReason(out.Finish)}}})
	}
	return ew.Send(openai.CompletionChunk{ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.s.o.Model,
		Choices: []openai.CompletionChoice{{Text: out.Text, Logprobs: clp, FinishReason: finishReason(out.Finish)}}})
}

// abortError is the error object of an aborted request: 503 when the
// server is shutting down, else 500.
func abortError(err error) *openai.Error {
	switch {
	case err == nil:
		return openai.ServerError("the request was aborted")
	case errors.Is(err, ErrDraining):
		return openai.Overloaded(err.Error())
	}
	return openai.ServerError(err.Error())
}
