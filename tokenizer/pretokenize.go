package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// preTokenizer cuts normalized text into words that BPE encodes separately.
type preTokenizer struct {
	split       splitFunc // nil: the whole text is one word
	byteLevel   bool      // words are mapped byte by byte to GPT-2's printable characters
	prefixSpace bool      // ByteLevel add_prefix_space: " " before text not starting with one
}

// splitFunc returns the length in bytes of the match at the start of s (s is
// not empty; the result is at least one character).
type splitFunc func(s string) int

// The split regexes with hand-written matchers. Go's regexp has no
// lookahead, and a matcher written for the exact pattern is both faster and
// exact; any other pattern is refused rather than approximated.
const (
	llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Regex  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Regex is the split a ByteLevel pre-tokenizer with use_regex makes
	// (GPT-2's): it is not written in tokenizer.json but built into Hugging
	// Face's ByteLevel.
	gpt2Regex = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

var knownRegexes = map[string]splitFunc{
	llama3Regex: func(s string) int { return matchLlama3(s, 3) },
	qwen2Regex:  func(s string) int { return matchLlama3(s, 1) },
	gpt2Regex:   matchGPT2,
}

type preJSON struct {
	Type           string            `json:"type"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        map[string]string `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	var p preTokenizer
	typ, err := typeOf(raw)
	if err != nil || typ == "" {
		return p, err
	}
	var j preJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return p, err
	}
	steps := []preJSON{j}
	if typ == "Sequence" {
		steps = steps[:0]
		for i, r := range j.PreTokenizers {
			var s preJSON
			if err := json.Unmarshal(r, &s); err != nil {
				return p, fmt.Errorf("step %d: %w", i, err)
			}
			steps = append(steps, s)
		}
	}
	for i, s := range steps {
		switch {
		case s.Type == "Split" && p.split == nil && !p.byteLevel:
			re, ok := s.Pattern["Regex"]
			if !ok || len(s.Pattern) != 1 {
				return p, fmt.Errorf("step %d: Split needs a Regex pattern", i)
			}
			if s.Behavior != "Isolated" || s.Invert {
				return p, fmt.Errorf("step %d: Split behavior %q (invert %v) is not supported (only Isolated)", i, s.Behavior, s.Invert)
			}
			f, ok := knownRegexes[re]
			if !ok {
				return p, fmt.Errorf("step %d: Split regex %q is not supported", i, re)
			}
			p.split = f
		case s.Type == "ByteLevel" && !p.byteLevel:
			// Hugging Face defaults use_regex to true when it is absent.
			if s.UseRegex == nil || *s.UseRegex {
				if p.split != nil {
					// Splitting twice is well defined but no supported
					// model does it, so it is refused rather than untested.
					return p, fmt.Errorf("step %d: ByteLevel with use_regex after a Split is not supported", i)
				}
				p.split = matchGPT2
			}
			if s.AddPrefixSpace && p.split == nil {
				return p, fmt.Errorf("step %d: ByteLevel with add_prefix_space but not use_regex is not supported", i)
			}
			p.byteLevel, p.prefixSpace = true, s.AddPrefixSpace
		default:
			return p, fmt.Errorf("step %d: pre-tokenizer %q is not supported here", i, s.Type)
		}
	}
	return p, nil
}

// words calls f on each word of s.
func (p *preTokenizer) words(s string, f func(string) error) error {
	if p.prefixSpace && s != "" && s[0] != ' ' {
		// As Hugging Face's ByteLevel does, so that a leading word gets
		// the "Ġword" id it has inside a sentence.
		s = " " + s
	}
	if p.split == nil {
		return f(s)
	}
	for len(s) > 0 {
		n := p.split(s)
		if err := f(s[:n]); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// The character classes are Unicode 16.0's, as Hugging Face's regex
// engine has them: Go's tables (Unicode 15.0) plus the later characters
// in unicode16.go.
func isLetter(r rune) bool { return unicode.IsLetter(r) || unicode.Is(unicode16Letters, r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) || unicode.Is(unicode16Numbers, r) }
func isSpace(r rune) bool  { return unicode.IsSpace(r) }
func isCRLF(r rune) bool   { return r == '\r' || r == '\n' }

// matchLlama3 matches, at the start of s, the Llama 3 split regex (maxDigits
// 3) or Qwen2's (maxDigits 1), trying the alternatives in order as a
// backtracking regex engine does.
func matchLlama3(s string, maxDigits int) int {
	r0, w0 := utf8.DecodeRuneInString(s)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		if n := matchContraction(s[1:]); n > 0 {
			return 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r0) {
		return w0 + runWhile(s[w0:], isLetter, -1)
	}
	if !isCRLF(r0) && !isNumber(r0) {
		if n := runWhile(s[w0:], isLetter, -1); n > 0 {
			return w0 + n
		}
	}
	// \p{N}{1,maxDigits}
	if isNumber(r0) {
		return w0 + runWhile(s[w0:], isNumber, maxDigits-1)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	isOther := func(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }
	start := 0
	if r0 == ' ' {
		start = 1
	}
	if n := runWhile(s[start:], isOther, -1); n > 0 {
		end := start + n
		return end + runWhile(s[end:], isCRLF, -1)
	}
	if !isSpace(r0) {
		return w0 // unreachable: every other character matched above
	}
	// \s*[\r\n]+ : the whitespace run up to its last \r or \n.
	run := runWhile(s, isSpace, -1)
	lastNL := -1
	for i := 0; i < run; i++ {
		if isCRLF(rune(s[i])) {
			lastNL = i
		}
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : the run, less its last character when a non-space follows.
	if run == len(s) {
		return run
	}
	_, lw := utf8.DecodeLastRuneInString(s[:run])
	if run-lw > 0 {
		return run - lw
	}
	// \s+
	return run
}

// matchGPT2 matches, at the start of s, GPT-2's split regex (gpt2Regex),
// trying the alternatives in order as a backtracking regex engine does.
func matchGPT2(s string) int {
	r0, w0 := utf8.DecodeRuneInString(s)
	// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive unlike Llama 3's.
	if r0 == '\'' && len(s) > 1 {
		switch s[1] {
		case 's', 't', 'm', 'd':
			return 2
		case 'r', 'v':
			if len(s) > 2 && s[2] == 'e' {
				return 3
			}
		case 'l':
			if len(s) > 2 && s[2] == 'l' {
				return 3
			}
		}
	}
	//  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
	start := 0
	if r0 == ' ' && len(s) > 1 {
		start = 1
	}
	r1, _ := utf8.DecodeRuneInString(s[start:])
	isOther := func(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }
	for _, class := range []func(rune) bool{isLetter, isNumber, isOther} {
		if class(r1) {
			return start + runWhile(s[start:], class, -1)
		}
	}
	if !isSpace(r0) {
		return w0 // unreachable: every other character matched above
	}
	// \s+(?!\S) : the run, less its last character when a non-space follows.
	run := runWhile(s, isSpace, -1)
	if run == len(s) {
		return run
	}
	_, lw := utf8.DecodeLastRuneInString(s[:run])
	if run-lw > 0 {
		return run - lw
	}
	// \s+
	return run
}

// runWhile returns the byte length of the longest prefix of s whose runes
// satisfy f, at most max runes (no limit when max < 0).
func runWhile(s string, f func(rune) bool, max int) int {
	n := 0
	for i := 0; max < 0 || i < max; i++ {
		r, w := utf8.DecodeRuneInString(s[n:])
		if w == 0 || !f(r) {
			break
		}
		n += w
	}
	return n
}

// matchContraction matches s|t|re|ve|m|ll|d case-insensitively, as Unicode
// simple case folding does (ſ folds to s, and the Kelvin sign does not occur).
func matchContraction(s string) int {
	fold := func(i int) (rune, int) {
		if i >= len(s) {
			return 0, 0
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == 'ſ' {
			return 's', w
		}
		return unicode.ToLower(r), w
	}
	a, wa := fold(0)
	switch a {
	case 's', 't', 'm', 'd':
		return wa
	case 'r', 'v', 'l':
		b, wb := fold(wa)
		if (a == 'r' || a == 'v') && b == 'e' || a == 'l' && b == 'l' {
			return wa + wb
		}
	}
	return 0
}
