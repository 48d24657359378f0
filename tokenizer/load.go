// Package tokenizer owns text-to-token conversion for the models lumsearch
// serves: it reads a Hugging Face tokenizer.json (and the bos/eos names of a
// tokenizer_config.json beside it), encodes text to token ids, and decodes ids
// back to text, whole or incrementally while a model streams tokens.
//
// Only the components the supported model families use are implemented
// (byte-level BPE with the Llama 3 / Qwen split regexes, SentencePiece-style
// BPE with byte fallback). Any other model, normalizer, pre-tokenizer,
// post-processor, decoder or split regex is refused by name when loading,
// because encoding it approximately would silently feed a model wrong ids.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Tokenizer encodes and decodes text for one model. It is immutable after
// loading and safe for concurrent use.
type Tokenizer struct {
	idToToken []string       // every id's piece, added tokens included
	vocab     map[string]int // piece -> id, added tokens included
	model     bpeModel
	added     addedVocab
	norm      normalizer
	pre       preTokenizer
	post      postProcessor
	dec       decoderSpec
	byteIDs   [256]int // ByteLevel: the id of each byte's character

	// Special holds the bos/eos tokens named by tokenizer_config.json, when
	// Load found one.
	Special SpecialTokens
}

// SpecialTokens are the beginning- and end-of-sequence tokens a model's
// tokenizer_config.json names; an empty Token means the config names none.
type SpecialTokens struct {
	BOS SpecialToken
	EOS SpecialToken
}

// SpecialToken is one named special token and its id (-1 when Token is "").
type SpecialToken struct {
	Token string
	ID    int
}

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Load reads a tokenizer from a folder holding tokenizer.json (and, when
// present, tokenizer_config.json for the bos/eos names) or from the path of a
// tokenizer.json itself.
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	dir, file := filepath.Dir(path), path
	if fi.IsDir() {
		dir, file = path, filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := t.SetConfig(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	return t, nil
}

// SetConfig reads the bos_token and eos_token of a tokenizer_config.json into
// t.Special. Either may be a string, an AddedToken object, or null. Load
// calls it; call it before sharing t between goroutines.
func (t *Tokenizer) SetConfig(data []byte) error {
	var cfg struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("tokenizer config: %w", err)
	}
	var err error
	if t.Special.BOS, err = t.configToken("bos_token", cfg.BOS); err != nil {
		return err
	}
	t.Special.EOS, err = t.configToken("eos_token", cfg.EOS)
	return err
}

func (t *Tokenizer) configToken(field string, raw json.RawMessage) (SpecialToken, error) {
	none := SpecialToken{ID: -1}
	if len(raw) == 0 || string(raw) == "null" {
		return none, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return none, fmt.Errorf("tokenizer config: %s is neither a string nor a token object", field)
		}
		s = obj.Content
	}
	id, ok := t.vocab[s]
	if !ok {
		return none, fmt.Errorf("tokenizer config: %s %q is not in the vocabulary", field, s)
	}
	return SpecialToken{Token: s, ID: id}, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse: %w", err)
	}
	t := &Tokenizer{Special: SpecialTokens{BOS: SpecialToken{ID: -1}, EOS: SpecialToken{ID: -1}}}
	var err error
	if t.model, t.vocab, err = parseModel(f.Model); err != nil {
		return nil, fmt.Errorf("tokenizer: model: %w", err)
	}
	if err := t.addTokens(f.AddedTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: added_tokens: %w", err)
	}
	if t.model.unkToken != "" {
		id, ok := t.vocab[t.model.unkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model: unk_token %q is not in the vocabulary", t.model.unkToken)
		}
		t.model.unkID = id
	}
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: normalizer: %w", err)
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, len(t.idToToken)); err != nil {
		return nil, fmt.Errorf("tokenizer: post_processor: %w", err)
	}
	if t.dec, err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: decoder: %w", err)
	}
	if t.pre.byteLevel != t.dec.byteLevel {
		// A byte-level vocabulary decoded without the byte map (or the
		// reverse) would produce mojibake, so the pairing is required.
		return nil, fmt.Errorf("tokenizer: a ByteLevel pre-tokenizer needs a ByteLevel decoder and the reverse")
	}
	if t.pre.byteLevel {
		for b, r := range byteEncoder {
			id, ok := t.vocab[string(r)]
			if !ok || id >= len(t.model.pieces) {
				return nil, fmt.Errorf("tokenizer: model: byte 0x%02X's character %q is not in the vocabulary", b, r)
			}
			t.byteIDs[b] = id
		}
	}
	return t, nil
}

// addTokens registers the added tokens: they extend the id space beyond the
// model's vocabulary (or name existing entries) and are matched in the raw
// text before normalisation.
func (t *Tokenizer) addTokens(list []addedTokenJSON) error {
	size := len(t.model.pieces)
	for _, a := range list {
		if a.ID != nil && *a.ID+1 > size {
			size = *a.ID + 1
		}
	}
	if size > 1<<24 {
		return fmt.Errorf("id space of %d is implausibly large", size)
	}
	t.idToToken = make([]string, size)
	copy(t.idToToken, t.model.pieces)
	for i, a := range list {
		if a.ID == nil || *a.ID < 0 {
			return fmt.Errorf("token %d (%q) has no valid id", i, a.Content)
		}
		if a.Content == "" {
			return fmt.Errorf("token %d is empty", *a.ID)
		}
		if a.SingleWord || a.LStrip || a.RStrip {
			return fmt.Errorf("token %q: single_word, lstrip and rstrip are not supported", a.Content)
		}
		if a.Normalized {
			// Normalized added tokens are matched in the normalized text,
			// which this package does not implement.
			return fmt.Errorf("token %q: normalized added tokens are not supported", a.Content)
		}
		if old, ok := t.vocab[a.Content]; ok && old != *a.ID {
			return fmt.Errorf("token %q has id %d but the vocabulary gives it %d", a.Content, *a.ID, old)
		}
		if prev := t.idToToken[*a.ID]; prev != "" && prev != a.Content {
			return fmt.Errorf("id %d is both %q and %q", *a.ID, prev, a.Content)
		}
		t.idToToken[*a.ID] = a.Content
		t.vocab[a.Content] = *a.ID
		t.added.add(a.Content, *a.ID, a.Special)
	}
	for id, s := range t.idToToken {
		if s == "" {
			return fmt.Errorf("id %d has no token (the id space has a hole)", id)
		}
	}
	t.added.finish()
	return nil
}

// addedVocab matches added tokens in raw text, leftmost then longest, as
// Hugging Face's aho-corasick LeftmostLongest matcher does.
type addedVocab struct {
	byFirst [256][]addedToken // candidates by first byte, longest first
	special map[int]bool
	any     bool
}

type addedToken struct {
	content string
	id      int
}

func (a *addedVocab) add(content string, id int, special bool) {
	if a.special == nil {
		a.special = map[int]bool{}
	}
	a.byFirst[content[0]] = append(a.byFirst[content[0]], addedToken{content, id})
	a.special[id] = special
	a.any = true
}

func (a *addedVocab) finish() {
	for i := range a.byFirst {
		sort.SliceStable(a.byFirst[i], func(x, y int) bool {
			return len(a.byFirst[i][x].content) > len(a.byFirst[i][y].content)
		})
	}
}

// segment is a piece of the input: raw text, or an added token (id >= 0).
type segment struct {
	text string
	id   int
}

// split cuts text at the added tokens it contains.
func (a *addedVocab) split(text string) []segment {
	if !a.any {
		return []segment{{text: text, id: -1}}
	}
	var out []segment
	start := 0
	for i := 0; i < len(text); i++ {
		for _, c := range a.byFirst[text[i]] {
			if strings.HasPrefix(text[i:], c.content) {
				if i > start {
					out = append(out, segment{text: text[start:i], id: -1})
				}
				out = append(out, segment{text: c.content, id: c.id})
				i += len(c.content) - 1
				start = i + 1
				break
			}
		}
	}
	if start < len(text) {
		out = append(out, segment{text: text[start:], id: -1})
	}
	return out
}

// typeOf reads the "type" field of a component, "" for null.
func typeOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var h struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", err
	}
	if h.Type == "" {
		return "", fmt.Errorf("component without a type")
	}
	return h.Type, nil
}
