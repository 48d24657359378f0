// Package tokenizer owns text-to-token conversion for the models lumsearch
// serves: it reads a Hugging Face tokenizer.json (and the bos/eos names of a
// tokenizer_config.json beside it), encodes text to token ids, and decodes ids
// back to text, whole or incrementally while a model streams tokens.
//
// Only the components the supported model families use are implemented
// (byte-level BPE with the Llama 3 / Qwen split regexes or GPT-2's ByteLevel
// split, SentencePiece-style BPE with byte fallback, added tokens with
// Hugging Face's lstrip, rstrip, single_word and normalized flags). Any other model, normalizer, pre-tokenizer,
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
	"unicode"
	"unicode/utf8"
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
	if err := t.added.finish(t.norm); err != nil {
		return nil, fmt.Errorf("tokenizer: added_tokens: %w", err)
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
// text before normalisation, or in the normalized text when marked
// "normalized".
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
		if old, ok := t.vocab[a.Content]; ok && old != *a.ID {
			return fmt.Errorf("token %q has id %d but the vocabulary gives it %d", a.Content, *a.ID, old)
		}
		if prev := t.idToToken[*a.ID]; prev != "" && prev != a.Content {
			return fmt.Errorf("id %d is both %q and %q", *a.ID, prev, a.Content)
		}
		t.idToToken[*a.ID] = a.Content
		t.vocab[a.Content] = *a.ID
		t.added.add(a)
	}
	for id, s := range t.idToToken {
		if s == "" {
			return fmt.Errorf("id %d has no token (the id space has a hole)", id)
		}
	}
	return nil
}

// addedVocab matches added tokens in text, leftmost then longest, as
// Hugging Face's aho-corasick LeftmostLongest matchers do: one matcher for
// the tokens matched in the raw text, one for the "normalized" tokens,
// matched in each stretch of text after normalisation.
type addedVocab struct {
	raw, norm tokenMatcher
	special   map[int]bool
}

// tokenMatcher finds one set of added tokens.
type tokenMatcher struct {
	byFirst [256][]addedToken // candidates by first byte, longest first
	any     bool
}

type addedToken struct {
	content    string // as matched: normalized tokens' content is normalized
	id         int
	lstrip     bool // the match absorbs the whitespace on its left
	rstrip     bool // the match absorbs the whitespace on its right
	singleWord bool // the match counts only outside a word
}

func (a *addedVocab) add(j addedTokenJSON) {
	if a.special == nil {
		a.special = map[int]bool{}
	}
	c := addedToken{content: j.Content, id: *j.ID, lstrip: j.LStrip, rstrip: j.RStrip, singleWord: j.SingleWord}
	if j.Normalized {
		a.norm.add(c)
	} else {
		a.raw.add(c)
	}
	a.special[c.id] = j.Special
}

func (m *tokenMatcher) add(c addedToken) {
	m.byFirst[c.content[0]] = append(m.byFirst[c.content[0]], c)
	m.any = true
}

// finish normalizes the normalized tokens' content, as Hugging Face does
// (with Llama 2's normalizer "x" is matched as "▁x"), and orders the
// candidates longest first.
func (a *addedVocab) finish(n normalizer) error {
	var norm []addedToken
	for i := range a.norm.byFirst {
		norm = append(norm, a.norm.byFirst[i]...)
		a.norm.byFirst[i] = nil
	}
	for _, c := range norm {
		orig := c.content
		if c.content = n.apply(c.content); c.content == "" {
			return fmt.Errorf("token %q is empty once normalized", orig)
		}
		a.norm.add(c)
	}
	for _, m := range []*tokenMatcher{&a.raw, &a.norm} {
		for i := range m.byFirst {
			sort.SliceStable(m.byFirst[i], func(x, y int) bool {
				return len(m.byFirst[i][x].content) > len(m.byFirst[i][y].content)
			})
		}
	}
	return nil
}

// segment is a piece of the input: text, or an added token (id >= 0).
type segment struct {
	text string
	id   int
}

// split cuts text at the added tokens it contains, appending to out, with
// the semantics of Hugging Face's AddedVocabulary::find_matches.
func (m *tokenMatcher) split(text string, out []segment) []segment {
	if !m.any {
		return append(out, segment{text: text, id: -1})
	}
	done := 0 // the end of the last token kept
	for i := 0; i < len(text); {
		c, ok := m.longestAt(text, i)
		if !ok {
			i++
			continue
		}
		start, stop := i, i+len(c.content)
		// The search resumes after the match even when the match is
		// discarded or its rstrip absorbs more, as aho-corasick's
		// non-overlapping iterator does.
		i = stop
		if c.singleWord && (endsWithWord(text[:start]) || startsWithWord(text[stop:])) {
			continue
		}
		if c.lstrip {
			// Never before the previous token, which may have absorbed
			// the same spaces with rstrip.
			start = max(done, start-trailingSpace(text[:start]))
		}
		if c.rstrip {
			stop += leadingSpace(text[stop:])
		}
		if done < start {
			out = append(out, segment{text: text[done:start], id: -1})
		}
		out = append(out, segment{text: c.content, id: c.id})
		// Not max(done, stop): after a token found inside the whitespace
		// an rstrip absorbed, Hugging Face encodes the rest of that
		// whitespace again, and so must this.
		done = stop
	}
	if done < len(text) {
		out = append(out, segment{text: text[done:], id: -1})
	}
	return out
}

// longestAt returns the longest token that starts text[i:].
func (m *tokenMatcher) longestAt(text string, i int) (addedToken, bool) {
	for _, c := range m.byFirst[text[i]] {
		if strings.HasPrefix(text[i:], c.content) {
			return c, true
		}
	}
	return addedToken{}, false
}

// isWordChar is the regex class \w that Hugging Face's single_word test
// uses: Unicode alphabetic characters, marks, decimal digits, connector
// punctuation and joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc, unicode.Other_Alphabetic, unicode.Join_Control)
}

func endsWithWord(s string) bool {
	r, w := utf8.DecodeLastRuneInString(s)
	return w > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, w := utf8.DecodeRuneInString(s)
	return w > 0 && isWordChar(r)
}

// trailingSpace is the byte length of the whitespace that ends s.
func trailingSpace(s string) int {
	n := len(s)
	for n > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:n])
		if !unicode.IsSpace(r) {
			break
		}
		n -= w
	}
	return len(s) - n
}

// leadingSpace is the byte length of the whitespace that starts s.
func leadingSpace(s string) int { return runWhile(s, unicode.IsSpace, -1) }

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
