package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one stretch of raw text (between added tokens) before
// pre-tokenisation; nil steps mean none.
type normalizer struct {
	steps []func(string) string
}

func (n normalizer) apply(s string) string {
	for _, f := range n.steps {
		s = f(s)
	}
	return s
}

type normJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     map[string]string `json:"pattern"`
	Content     string            `json:"content"`
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	var n normalizer
	typ, err := typeOf(raw)
	if err != nil || typ == "" {
		return n, err
	}
	var j normJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return n, err
	}
	if typ != "Sequence" {
		f, err := normStep(j)
		n.steps = []func(string) string{f}
		return n, err
	}
	for i, r := range j.Normalizers {
		var s normJSON
		if err := json.Unmarshal(r, &s); err != nil {
			return n, fmt.Errorf("step %d: %w", i, err)
		}
		f, err := normStep(s)
		if err != nil {
			return n, fmt.Errorf("step %d: %w", i, err)
		}
		n.steps = append(n.steps, f)
	}
	return n, nil
}

func normStep(j normJSON) (func(string) string, error) {
	switch j.Type {
	case "NFC":
		// Qwen's vocabulary was trained on NFC text: other forms would
		// encode to different (longer) ids.
		return norm.NFC.String, nil
	case "Prepend":
		p := j.Prepend
		return func(s string) string {
			if s == "" { // Hugging Face prepends only to non-empty text
				return s
			}
			return p + s
		}, nil
	case "Replace":
		old, ok := j.Pattern["String"]
		if !ok || len(j.Pattern) != 1 || old == "" {
			return nil, fmt.Errorf("Replace supports only a non-empty String pattern, not %v", j.Pattern)
		}
		content := j.Content
		return func(s string) string { return strings.ReplaceAll(s, old, content) }, nil
	case "":
		return nil, fmt.Errorf("normalizer without a type")
	}
	return nil, fmt.Errorf("normalizer %q is not supported", j.Type)
}
