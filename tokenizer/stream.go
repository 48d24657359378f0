package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// StreamDecoder decodes ids one at a time, as a model generates them. The
// text it returns never ends inside a UTF-8 character (bytes that a later
// id may complete are held back), and the concatenation of everything Add
// and Flush return equals Decode of all the ids. One StreamDecoder serves
// one sequence and one goroutine.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // bytes not yet returned (ByteLevel: an incomplete character; ByteFallback: a run of byte tokens)
	stripped    int    // leading strip characters removed so far
	started     bool   // some text has been returned (the strip applies no more)
}

// NewStreamDecoder returns a decoder for one generated sequence.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add feeds one id and returns the text that became final with it (often
// empty while a multi-byte character is incomplete).
func (s *StreamDecoder) Add(id int) (string, error) {
	tok, err := s.t.Token(id)
	if err != nil {
		return "", err
	}
	if s.skipSpecial && s.t.IsSpecial(id) {
		return "", nil
	}
	d := &s.t.dec
	var b strings.Builder
	if d.byteLevel {
		s.pending = byteLevelBytes(tok, s.pending)
		keep := incompleteTail(s.pending)
		appendLossy(&b, s.pending[:len(s.pending)-keep])
		s.pending = append(s.pending[:0], s.pending[len(s.pending)-keep:]...)
		return b.String(), nil
	}
	if d.byteFallback {
		if c, ok := byteToken(tok); ok {
			s.pending = append(s.pending, c)
			return "", nil
		}
	}
	s.flushBytes(&b)
	for _, r := range d.replace {
		tok = strings.ReplaceAll(tok, r[0], r[1])
	}
	b.WriteString(tok)
	return s.strip(b.String()), nil
}

// Flush returns the text still held back: an incomplete character at the end
// of the ids becomes U+FFFD, as Decode does.
func (s *StreamDecoder) Flush() string {
	var b strings.Builder
	if s.t.dec.byteLevel {
		appendLossy(&b, s.pending)
		s.pending = s.pending[:0]
		return b.String()
	}
	s.flushBytes(&b)
	return s.strip(b.String())
}

// flushBytes writes a finished run of byte-fallback tokens: its text when it
// is valid UTF-8, else one U+FFFD per byte, as Hugging Face's ByteFallback
// decoder does (which is why the run is held whole until it ends).
func (s *StreamDecoder) flushBytes(b *strings.Builder) {
	if len(s.pending) == 0 {
		return
	}
	if utf8.Valid(s.pending) {
		b.Write(s.pending)
	} else {
		for range s.pending {
			b.WriteRune('\uFFFD')
		}
	}
	s.pending = s.pending[:0]
}

// strip removes the leading characters the Strip decoder takes off the start
// of the whole text.
func (s *StreamDecoder) strip(text string) string {
	d := &s.t.dec
	for !s.started && s.stripped < d.stripStart && text != "" {
		if !strings.HasPrefix(text, string(d.stripChar)) {
			s.started = true
			break
		}
		text = text[len(string(d.stripChar)):]
		s.stripped++
	}
	if text != "" {
		s.started = true
	}
	return text
}

// byteToken reads a "<0xXX>" byte-fallback token.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[:3] != "<0x" || tok[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(tok[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}
