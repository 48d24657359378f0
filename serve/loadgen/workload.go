package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Request is one request of a workload: a prompt, given as text or as a
// length, and how many tokens to generate.
type Request struct {
	// Prompt is the prompt's text; when empty, the prompt is PromptTokens
	// words that the load generator makes up.
	Prompt string
	// PromptTokens is the made-up prompt's length in words, about one token
	// each for common tokenizers (a client does not know the server's).
	PromptTokens int
	// OutputTokens is the max_tokens asked for; with ignore_eos, the
	// number generated.
	OutputTokens int
}

// validate says what is wrong with r, if anything.
func (r Request) validate() error {
	switch {
	case r.Prompt == "" && r.PromptTokens <= 0:
		return fmt.Errorf("want a prompt or a positive prompt_tokens, got prompt_tokens %d", r.PromptTokens)
	case r.Prompt != "" && r.PromptTokens != 0:
		return errors.New("prompt and prompt_tokens both given: want one")
	case r.OutputTokens <= 0:
		return fmt.Errorf("want a positive output_tokens (or max_tokens), got %d", r.OutputTokens)
	}
	return nil
}

// text is the prompt r sends as request number i. A made-up prompt starts
// with i so that no two prompts share a prefix the server could serve from
// its prefix cache, which would make prefill look free.
func (r Request) text(i int) string {
	if r.Prompt != "" {
		return r.Prompt
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(i))
	for range r.PromptTokens - 1 {
		b.WriteString(" hello")
	}
	return b.String()
}

// workloadLine is one line of a workload file as written: max_tokens and
// output_tokens are two names for one field.
type workloadLine struct {
	Prompt       *string `json:"prompt"`
	PromptTokens *int    `json:"prompt_tokens"`
	MaxTokens    *int    `json:"max_tokens"`
	OutputTokens *int    `json:"output_tokens"`
}

// parseWorkloadLine reads one JSON object of a workload file:
// {"prompt": "...", "max_tokens": M} or {"prompt_tokens": N,
// "output_tokens": M}. Unknown fields are refused, since a misspelt one
// would otherwise silently fall back to a default.
func parseWorkloadLine(line []byte) (Request, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w workloadLine
	if err := dec.Decode(&w); err != nil {
		return Request{}, fmt.Errorf("want a JSON object: %w", err)
	}
	if dec.More() {
		return Request{}, errors.New("text after the JSON object: want one object per line")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, errors.New("text after the JSON object: want one object per line")
	}
	var r Request
	if w.Prompt != nil {
		if *w.Prompt == "" {
			return Request{}, errors.New("empty prompt")
		}
		r.Prompt = *w.Prompt
	}
	if w.PromptTokens != nil {
		if w.Prompt != nil {
			return Request{}, errors.New("prompt and prompt_tokens both given: want one")
		}
		if *w.PromptTokens <= 0 {
			return Request{}, fmt.Errorf("prompt_tokens %d: want a positive count", *w.PromptTokens)
		}
		r.PromptTokens = *w.PromptTokens
	}
	switch {
	case w.MaxTokens != nil && w.OutputTokens != nil:
		return Request{}, errors.New("max_tokens and output_tokens both given: they are one field, want one")
	case w.MaxTokens != nil:
		r.OutputTokens = *w.MaxTokens
	case w.OutputTokens != nil:
		r.OutputTokens = *w.OutputTokens
	}
	if err := r.validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// ParseWorkload reads a JSON-lines workload from r, one request per line
// (see ReadWorkload); name is what errors call the input. Blank lines are
// skipped.
func ParseWorkload(r io.Reader, name string) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // a long prompt is one line
	var reqs []Request
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		req, err := parseWorkloadLine(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read workload %s: %w", name, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("workload %s: no requests", name)
	}
	return reqs, nil
}

// ReadWorkload reads the JSON-lines workload file at path: each line is
// {"prompt": "...", "max_tokens": M} (a prompt's text) or
// {"prompt_tokens": N, "output_tokens": M} (a made-up prompt of N words);
// max_tokens and output_tokens are synonyms. Errors name path:line.
func ReadWorkload(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	return ParseWorkload(f, path)
}
