package tokenizer

// A deliberately simple Llama 3 encoder, the yardstick the package's
// throughput is measured against: a regexp split, GPT-2's byte-to-character
// map, and the textbook BPE loop that rescans every adjacent pair for the
// lowest-rank merge after each merge (quadratic per word). It reads
// tokenizer.json itself and shares no code with the package, so that the
// benchmarks compare two independent implementations doing the same work;
// TestBaselineAgrees checks that the work is indeed the same.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// baselineSplit is Llama 3's split regex in Go's syntax. Two rewrites:
//
//   - Go's \s is ASCII only, where Hugging Face's is Unicode White_Space;
//     the class ws spells that set out (\t..\r, U+0085 and the Z categories).
//   - Go's regexp has no lookahead, so the alternative `\s+(?!\S)` is dropped
//     and the final `\s+` takes its place; baselineWords then gives back the
//     last character of a whitespace-only match that has text after it,
//     which is what the lookahead does (a whitespace run before a word
//     leaves its last space to that word, so "a   b" is "a", "  ", " b").
//
// The letter and number classes are Go's (Unicode 15.0), while Hugging Face
// and the package use Unicode 16.0; texts with the characters new in 16.0
// are the one place where the two may split differently.
var baselineSplit = func() *regexp.Regexp {
	const ws = `\t-\r\x{85}\p{Z}`
	return regexp.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}` +
		`| ?[^` + ws + `\p{L}\p{N}]+[\r\n]*|[` + ws + `]*[\r\n]+|[` + ws + `]+`)
}()

// baselineTokenizer is what the simple encoder needs from tokenizer.json.
type baselineTokenizer struct {
	vocab        map[string]int
	ranks        map[[2]string]int // merge pair -> rank, lower merges first
	ignoreMerges bool              // a word that is a vocab entry is one token
	added        *regexp.Regexp    // the added tokens, longest first
	addedIDs     map[string]int
	byteChars    [256]string // GPT-2's printable character for each byte
}

func newBaseline(path string) (*baselineTokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Model struct {
			Vocab        map[string]int `json:"vocab"`
			Merges       []string       `json:"merges"` // Llama 3 writes merges as "a b"
			IgnoreMerges bool           `json:"ignore_merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, err
	}
	bt := &baselineTokenizer{
		vocab:        j.Model.Vocab,
		ranks:        make(map[[2]string]int, len(j.Model.Merges)),
		ignoreMerges: j.Model.IgnoreMerges,
		addedIDs:     map[string]int{},
	}
	for rank, m := range j.Model.Merges {
		a, b, _ := strings.Cut(m, " ")
		if _, dup := bt.ranks[[2]string{a, b}]; !dup {
			bt.ranks[[2]string{a, b}] = rank
		}
	}
	// Hugging Face matches added tokens longest first; Go's alternation
	// takes the first alternative that matches, hence the sort.
	var quoted []string
	for _, a := range j.AddedTokens {
		bt.addedIDs[a.Content] = a.ID
		quoted = append(quoted, a.Content)
	}
	sort.Slice(quoted, func(i, k int) bool { return len(quoted[i]) > len(quoted[k]) })
	for i, q := range quoted {
		quoted[i] = regexp.QuoteMeta(q)
	}
	bt.added = regexp.MustCompile(strings.Join(quoted, "|"))
	// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
	// themselves, the others for the characters from U+0100 on.
	n := 0
	for b := range 256 {
		if '!' <= b && b <= '~' || '¡' <= b && b <= '¬' || '®' <= b && b <= 'ÿ' {
			bt.byteChars[b] = string(rune(b))
		} else {
			bt.byteChars[b] = string(rune(256 + n))
			n++
		}
	}
	return bt, nil
}

// encode encodes text as Hugging Face's Llama 3 tokenizer does without
// special tokens added around it.
func (bt *baselineTokenizer) encode(text string) []int {
	ids := []int{}
	for len(text) > 0 {
		loc := bt.added.FindStringIndex(text)
		end := len(text)
		if loc != nil {
			end = loc[0]
		}
		for _, w := range baselineWords(text[:end]) {
			ids = bt.encodeWord(w, ids)
		}
		if loc == nil {
			break
		}
		ids = append(ids, bt.addedIDs[text[loc[0]:loc[1]]])
		text = text[loc[1]:]
	}
	return ids
}

// baselineWords splits s with baselineSplit, emulating `\s+(?!\S)`.
func baselineWords(s string) []string {
	var words []string
	for len(s) > 0 {
		loc := baselineSplit.FindStringIndex(s)
		n := loc[1] // every character matches an alternative, so loc[0] is 0
		m := s[:n]
		if n < len(s) && strings.TrimFunc(m, unicode.IsSpace) == "" && !strings.ContainsAny(m, "\r\n") {
			// Only the last alternative matches whitespace without \r or \n,
			// and only its lookahead-free stand-in can end right before a
			// non-space: give that non-space its preceding space back.
			if _, w := utf8.DecodeLastRuneInString(m); w < n {
				n -= w
			}
		}
		words = append(words, s[:n])
		s = s[n:]
	}
	return words
}

// encodeWord appends the ids of one pre-tokenized word.
func (bt *baselineTokenizer) encodeWord(word string, ids []int) []int {
	syms := make([]string, len(word))
	for i := 0; i < len(word); i++ {
		syms[i] = bt.byteChars[word[i]]
	}
	if bt.ignoreMerges {
		if id, ok := bt.vocab[strings.Join(syms, "")]; ok {
			return append(ids, id)
		}
	}
	// The textbook loop: find the lowest-rank adjacent pair (the leftmost
	// among equals), merge it, and scan again from the start.
	for len(syms) > 1 {
		best, at := 0, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := bt.ranks[[2]string{syms[i], syms[i+1]}]; ok && (at < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] += syms[at+1]
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	for _, s := range syms {
		ids = append(ids, bt.vocab[s]) // every merge result and byte is in the vocabulary
	}
	return ids
}

var (
	baselineOnce sync.Once
	baselineTk   *baselineTokenizer
	baselineErr  error
)

// loadBaseline parses Llama 3's tokenizer.json once per test binary.
func loadBaseline(t testing.TB) *baselineTokenizer {
	t.Helper()
	dir := dataDir(t)
	baselineOnce.Do(func() {
		baselineTk, baselineErr = newBaseline(filepath.Join(dir, "llama3", "tokenizer.json"))
	})
	require.NoError(t, baselineErr)
	return baselineTk
}

// TestBaselineAgrees checks that the baseline encodes the benchmark's texts
// as the package (and, for the fixtures, Hugging Face) does, so that the
// benchmarks below time the same work.
func TestBaselineAgrees(t *testing.T) {
	bt := loadBaseline(t)
	tk := load(t, "llama3")
	has16 := func(s string) bool {
		for _, r := range s {
			if unicode.Is(unicode16Letters, r) || unicode.Is(unicode16Numbers, r) {
				return true
			}
		}
		return false
	}
	check := func(name, text string) {
		t.Helper()
		want, err := tk.Encode(text, false)
		require.NoError(t, err)
		assert.Equal(t, want, bt.encode(text), "%s: %q", name, text)
	}
	for _, fx := range fixtures(t) {
		if fx.Tokenizer != "llama3" || has16(fx.Text) {
			continue // Go's regexp classes are Unicode 15.0; see baselineSplit
		}
		assert.Equal(t, fx.IDs, bt.encode(fx.Text), "fixture %q", fx.Text)
	}
	data, err := os.ReadFile(filepath.Join(dataDir(t), "texts.json"))
	require.NoError(t, err)
	var texts []string
	require.NoError(t, json.Unmarshal(data, &texts))
	one := strings.Join(texts, "\n")
	require.False(t, has16(one), "the benchmark text needs Unicode 16.0 classes the baseline lacks")
	check("mixed text twice", one+one) // covers the seam between the benchmark's repeats
	check("a    b", "a    b")
	check("spaces before digits", "x   123 \u00a0\u00a0's\t\tz  ")
	if testing.Short() {
		return
	}
	check("1k word", strings.Repeat("abcdefghij", 100))
}

// BenchmarkBaselineEncode is BenchmarkEncode's Llama 3 case for the baseline.
func BenchmarkBaselineEncode(b *testing.B) {
	b.Run("llama3", func(b *testing.B) {
		bt := loadBaseline(b)
		text := mixedText(b)
		b.SetBytes(int64(len(text)))
		b.ResetTimer()
		for b.Loop() {
			bt.encode(text)
		}
	})
}

// BenchmarkBaselineEncodeWord is BenchmarkEncodeWord's Llama 3 case for the
// baseline, whose merge loop is quadratic in the word's length.
func BenchmarkBaselineEncodeWord(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		word := strings.Repeat("abcdefghij", n/10)
		b.Run("llama3/"+map[int]string{1000: "1k", 10000: "10k"}[n], func(b *testing.B) {
			bt := loadBaseline(b)
			b.SetBytes(int64(len(word)))
			for b.Loop() {
				bt.encode(word)
			}
		})
	}
}
