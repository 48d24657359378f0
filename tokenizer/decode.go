package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoderSpec is the decoder pipelines this package implements: GPT-2's
// ByteLevel, or the SentencePiece-style Sequence of Replace, ByteFallback,
// Fuse and Strip.
type decoderSpec struct {
	byteLevel    bool
	replace      [][2]string // per token, before byte fallback
	byteFallback bool        // "<0xXX>" runs become their bytes
	stripStart   int         // leading copies of stripChar removed from the text
	stripChar    rune
}

type decJSON struct {
	Type     string            `json:"type"`
	Decoders []json.RawMessage `json:"decoders"`
	Pattern  map[string]string `json:"pattern"`
	Content  json.RawMessage   `json:"content"`
	Start    int               `json:"start"`
	Stop     int               `json:"stop"`
}

func parseDecoder(raw json.RawMessage) (decoderSpec, error) {
	var d decoderSpec
	typ, err := typeOf(raw)
	if err != nil {
		return d, err
	}
	switch typ {
	case "":
		return d, fmt.Errorf("a missing decoder is not supported")
	case "ByteLevel":
		d.byteLevel = true
		return d, nil
	case "Sequence":
	default:
		return d, fmt.Errorf("decoder %q is not supported", typ)
	}
	var j decJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return d, err
	}
	// The stages must come in this order, which is what lets Decode fuse
	// them into one pass and the stream decoder run them incrementally.
	stage := 0
	for i, r := range j.Decoders {
		var s decJSON
		if err := json.Unmarshal(r, &s); err != nil {
			return d, fmt.Errorf("step %d: %w", i, err)
		}
		switch {
		case s.Type == "Replace" && stage == 0:
			old, ok := s.Pattern["String"]
			var content string
			if !ok || len(s.Pattern) != 1 || old == "" || json.Unmarshal(s.Content, &content) != nil {
				return d, fmt.Errorf("step %d: Replace supports only a String pattern", i)
			}
			d.replace = append(d.replace, [2]string{old, content})
		case s.Type == "ByteFallback" && stage < 1:
			d.byteFallback, stage = true, 1
		case s.Type == "Fuse" && stage < 2:
			stage = 2
		case s.Type == "Strip" && stage == 2:
			var content string
			if json.Unmarshal(s.Content, &content) != nil || utf8.RuneCountInString(content) != 1 || s.Stop != 0 || s.Start < 0 {
				return d, fmt.Errorf("step %d: Strip supports one character stripped at the start only", i)
			}
			d.stripChar, _ = utf8.DecodeRuneInString(content)
			d.stripStart, stage = s.Start, 3
		default:
			return d, fmt.Errorf("step %d: decoder %q is not supported at this place in a Sequence", i, s.Type)
		}
	}
	if stage < 2 {
		return d, fmt.Errorf("a decoder Sequence without Fuse is not supported")
	}
	return d, nil
}

// Decode turns ids back into text. With skipSpecial, special added tokens
// are left out. Invalid UTF-8 (an id sequence cut inside a character)
// becomes U+FFFD, as Hugging Face's decoders do.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	s := t.NewStreamDecoder(skipSpecial)
	var b strings.Builder
	for _, id := range ids {
		text, err := s.Add(id)
		if err != nil {
			return "", err
		}
		b.WriteString(text)
	}
	b.WriteString(s.Flush())
	return b.String(), nil
}

// Token returns the piece of id, or an error when id is outside the
// vocabulary.
func (t *Tokenizer) Token(id int) (string, error) {
	if id < 0 || id >= len(t.idToToken) {
		return "", fmt.Errorf("tokenizer: id %d is outside the vocabulary (0..%d)", id, len(t.idToToken)-1)
	}
	return t.idToToken[id], nil
}

// TokenID returns the id of a piece (a vocabulary entry or an added token).
func (t *Tokenizer) TokenID(piece string) (int, bool) {
	id, ok := t.vocab[piece]
	return id, ok
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool { return t.added.special[id] }

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// byteDecoder maps GPT-2's printable characters back to bytes.
var byteDecoder, byteEncoder = func() (map[rune]byte, [256]rune) {
	var enc [256]rune
	dec := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
		r := rune(b)
		if !printable {
			r = rune(256 + n)
			n++
		}
		enc[b], dec[r] = r, byte(b)
	}
	return dec, enc
}()

// byteLevelBytes is the bytes a ByteLevel token stands for: its characters
// mapped back, or, as Hugging Face does, the token's own UTF-8 when any
// character is outside the map (added tokens such as "<|eot_id|>" map to
// themselves either way).
func byteLevelBytes(tok string, out []byte) []byte {
	start := len(out)
	for _, r := range tok {
		b, ok := byteDecoder[r]
		if !ok {
			return append(out[:start], tok...)
		}
		out = append(out, b)
	}
	return out
}

// appendLossy appends the valid UTF-8 of p to b with each maximal invalid
// subpart replaced by one U+FFFD, as Rust's String::from_utf8_lossy does.
func appendLossy(b *strings.Builder, p []byte) {
	for len(p) > 0 {
		r, w := utf8.DecodeRune(p)
		if r != utf8.RuneError || w > 1 {
			b.Write(p[:w])
			p = p[w:]
			continue
		}
		b.WriteRune(utf8.RuneError)
		p = p[maximalSubpart(p):]
	}
}

// maximalSubpart is the length of the invalid sequence at the start of p
// that counts as one error: a lead byte and the continuation bytes that
// could still have completed it.
func maximalSubpart(p []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := p[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c == 0xED:
		hi, need = 0x9F, 2
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(p); n++ {
		if p[n] < lo || p[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// incompleteTail is the length of a suffix of p that is a proper prefix of a
// valid UTF-8 sequence (a character that later bytes may complete), or 0.
func incompleteTail(p []byte) int {
	for n := 1; n <= 3 && n <= len(p); n++ {
		tail := p[len(p)-n:]
		if tail[0] >= 0x80 && tail[0] < 0xC0 {
			continue // a continuation byte: look further back
		}
		if maximalSubpart(tail) == n && !utf8.FullRune(tail) {
			return n
		}
		return 0
	}
	return 0
}
