package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Encode turns text into token ids. Added tokens written in the text (such
// as "<|im_start|>") become their ids whatever addSpecial says; addSpecial
// applies the post-processor (Llama 2's leading <s>), as Hugging Face's
// add_special_tokens does.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	ids := []int{} // empty text encodes to an empty, non-nil slice
	for _, seg := range t.added.raw.split(text, nil) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		var err error
		if ids, err = t.encodeText(seg.text, ids); err != nil {
			return nil, err
		}
	}
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids, nil
}

// EncodeTokens is Encode returning the pieces beside the ids. An added
// token's piece is its content, where Hugging Face reports the text matched
// (with the whitespace lstrip/rstrip absorbed, or normalized).
func (t *Tokenizer) EncodeTokens(text string, addSpecial bool) ([]int, []string, error) {
	ids, err := t.Encode(text, addSpecial)
	if err != nil {
		return nil, nil, err
	}
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i] = t.idToToken[id]
	}
	return ids, toks, nil
}

// encodeText encodes a stretch of text holding no raw-matched added token:
// it normalizes it, cuts it at the normalized added tokens, and encodes the
// pieces between them.
func (t *Tokenizer) encodeText(text string, ids []int) ([]int, error) {
	var err error
	for _, seg := range t.added.norm.split(t.norm.apply(text), nil) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		if ids, err = t.encodeNormalized(seg.text, ids); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// encodeNormalized pre-tokenizes and encodes normalized text holding no
// added token.
func (t *Tokenizer) encodeNormalized(text string, ids []int) ([]int, error) {
	var buf []int
	err := t.pre.words(text, func(w string) error {
		if !t.pre.byteLevel {
			var err error
			ids, err = t.model.encodeChars(w, t.vocab, ids)
			return err
		}
		if t.model.ignoreMerges {
			if id, ok := t.vocab[byteLevelString(w)]; ok && id < len(t.model.pieces) {
				ids = append(ids, id)
				return nil
			}
		}
		buf = buf[:0]
		for i := 0; i < len(w); i++ {
			buf = append(buf, t.byteIDs[w[i]])
		}
		ids = t.model.mergeSymbols(buf, ids)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	return ids, nil
}

// byteLevelString maps each byte of s to GPT-2's printable character for it.
func byteLevelString(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = byteEncoder[s[i]]
	}
	return string(r)
}

// postProcessor adds the special tokens of a template around encoded text.
type postProcessor struct {
	before, after []int
}

func (p postProcessor) apply(ids []int) []int {
	if len(p.before) == 0 && len(p.after) == 0 {
		return ids
	}
	out := make([]int, 0, len(p.before)+len(ids)+len(p.after))
	out = append(append(append(out, p.before...), ids...), p.after...)
	return out
}

type postJSON struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct{ ID string } `json:"SpecialToken"`
		Sequence     *struct{ ID string } `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
	TrimOffsets bool `json:"trim_offsets"`
}

func parsePostProcessor(raw json.RawMessage, size int) (postProcessor, error) {
	var p postProcessor
	typ, err := typeOf(raw)
	if err != nil || typ == "" {
		return p, err
	}
	var j postJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return p, err
	}
	steps := []postJSON{j}
	if typ == "Sequence" {
		steps = steps[:0]
		for i, r := range j.Processors {
			var s postJSON
			if err := json.Unmarshal(r, &s); err != nil {
				return p, fmt.Errorf("step %d: %w", i, err)
			}
			steps = append(steps, s)
		}
	}
	for i, s := range steps {
		switch s.Type {
		case "ByteLevel":
			// Only adjusts offsets, which this package does not report.
		case "TemplateProcessing":
			if len(p.before)+len(p.after) > 0 {
				return p, fmt.Errorf("step %d: a second TemplateProcessing is not supported", i)
			}
			seen := false
			for _, piece := range s.Single {
				switch {
				case piece.Sequence != nil && !seen && piece.Sequence.ID == "A":
					seen = true
				case piece.SpecialToken != nil:
					st, ok := s.SpecialTokens[piece.SpecialToken.ID]
					if !ok {
						return p, fmt.Errorf("step %d: special token %q is not defined", i, piece.SpecialToken.ID)
					}
					for _, id := range st.IDs {
						if id < 0 || id >= size {
							return p, fmt.Errorf("step %d: special token id %d is outside the vocabulary", i, id)
						}
					}
					if seen {
						p.after = append(p.after, st.IDs...)
					} else {
						p.before = append(p.before, st.IDs...)
					}
				default:
					return p, fmt.Errorf("step %d: template piece not supported (only one Sequence A and SpecialTokens)", i)
				}
			}
			if !seen {
				return p, fmt.Errorf("step %d: template without Sequence A", i)
			}
		default:
			return p, fmt.Errorf("post-processor %q is not supported", s.Type)
		}
	}
	return p, nil
}
