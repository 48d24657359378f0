package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

// randomText draws n runes from a mix that exercises the split regex:
// ASCII, whitespace runs with newlines, digits of several scripts,
// apostrophes, CJK, combining marks (so NFC matters) and emoji.
func randomText(rng *rand.Rand, n int) string {
	pools := []string{
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
		"     \t\n\r\n  \u00a0\u3000",
		"0123456789٠١٢३४",
		"'sSdDlLtT.,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`",
		"日本語中文한국어ßæøåéèêëñçü",
		"\u0301\u0308\u0327e\u0301",
		"😀🎉👍🏽🇫🇷\u200d❤️",
		"ſƒΩЖж\u2028\u0085",
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		p := []rune(pools[rng.Intn(len(pools))])
		if rng.Intn(50) == 0 { // now and then any valid rune at all
			r := rune(rng.Intn(0x30000))
			if utf8.ValidRune(r) {
				b.WriteRune(r)
				continue
			}
		}
		b.WriteRune(p[rng.Intn(len(p))])
	}
	return b.String()
}

// expectedRoundTrip is what decode(encode(text)) gives back: the text up to
// the tokenizer's normalizer.
func expectedRoundTrip(name, text string) string {
	if name == "qwen3" {
		return norm.NFC.String(text)
	}
	return text
}

// TestRoundTrip checks decode(encode(x)) == x (up to NFC for qwen3) on
// random Unicode text and long runs of one character class.
func TestRoundTrip(t *testing.T) {
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			rng := rand.New(rand.NewSource(1))
			texts := []string{
				strings.Repeat("a", 5000), strings.Repeat(" ", 3000), strings.Repeat("\n", 100),
				strings.Repeat("9", 1001), strings.Repeat("😀", 500), strings.Repeat("日本", 700),
				strings.Repeat("'s", 300), strings.Repeat(" \n", 200) + "x",
			}
			for i := 0; i < 300; i++ {
				texts = append(texts, randomText(rng, rng.Intn(80)))
			}
			for _, text := range texts {
				if name == "llama2" && strings.ContainsAny(text, "<") {
					continue // each stretch between added tokens gets its own ▁
				}
				ids, err := tk.Encode(text, false)
				require.NoError(t, err)
				got, err := tk.Decode(ids, false)
				require.NoError(t, err)
				require.Equal(t, expectedRoundTrip(name, text), got, "round trip of %q", text)
			}
		})
	}
}

// TestStreamDecoder checks that feeding ids one at a time never returns half
// a character and that the pieces concatenate to Decode, for encoded text
// and for random ids (which cut characters anywhere).
func TestStreamDecoder(t *testing.T) {
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			rng := rand.New(rand.NewSource(2))
			var seqs [][]int
			for i := 0; i < 100; i++ {
				ids, err := tk.Encode(randomText(rng, rng.Intn(60)), i%2 == 0)
				require.NoError(t, err)
				seqs = append(seqs, ids)
				random := make([]int, rng.Intn(30))
				for j := range random {
					random[j] = rng.Intn(tk.VocabSize())
				}
				seqs = append(seqs, random)
			}
			for _, ids := range seqs {
				for _, skip := range []bool{false, true} {
					want, err := tk.Decode(ids, skip)
					require.NoError(t, err)
					s := tk.NewStreamDecoder(skip)
					var got strings.Builder
					for k, id := range ids {
						piece, err := s.Add(id)
						require.NoError(t, err)
						require.True(t, utf8.ValidString(piece), "piece %q after id %d", piece, k)
						got.WriteString(piece)
						// What has come out so far is a prefix of the whole.
						require.True(t, strings.HasPrefix(want, got.String()), "prefix after %d of %v", k, ids)
					}
					got.WriteString(s.Flush())
					require.Equal(t, want, got.String(), "stream of %v", ids)
				}
			}
		})
	}
}

// TestStreamHoldsPartialCharacter shows the hold-back: an emoji's four
// byte tokens come out as one piece with the last.
func TestStreamHoldsPartialCharacter(t *testing.T) {
	tk := load(t, "llama2")
	ids, err := tk.Encode("😀x", false)
	require.NoError(t, err)
	s := tk.NewStreamDecoder(false)
	var pieces []string
	for _, id := range ids {
		p, err := s.Add(id)
		require.NoError(t, err)
		pieces = append(pieces, p)
	}
	pieces = append(pieces, s.Flush())
	assert.Equal(t, "😀x", strings.Join(pieces, ""))
	for _, p := range pieces {
		assert.True(t, utf8.ValidString(p))
	}
}

func TestSpecialTokens(t *testing.T) {
	cases := []struct {
		name     string
		bos, eos SpecialToken
	}{
		{"llama3", SpecialToken{"<|begin_of_text|>", 128000}, SpecialToken{"<|end_of_text|>", 128001}},
		{"qwen3", SpecialToken{"", -1}, SpecialToken{"<|im_end|>", 151645}},
		{"llama2", SpecialToken{"<s>", 1}, SpecialToken{"</s>", 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := load(t, c.name)
			assert.Equal(t, SpecialTokens{BOS: c.bos, EOS: c.eos}, tk.Special)
			if c.eos.ID >= 0 {
				assert.True(t, tk.IsSpecial(c.eos.ID))
				id, ok := tk.TokenID(c.eos.Token)
				assert.True(t, ok)
				assert.Equal(t, c.eos.ID, id)
				// skipSpecial leaves it out of the text.
				text, err := tk.Decode([]int{c.eos.ID}, true)
				require.NoError(t, err)
				assert.Empty(t, text)
			}
		})
	}
}

func TestDecodeRejectsUnknownID(t *testing.T) {
	tk := load(t, "llama3")
	for _, id := range []int{-1, tk.VocabSize()} {
		_, err := tk.Decode([]int{id}, false)
		assert.ErrorContains(t, err, "outside the vocabulary")
	}
}

// TestLongWordIsNotQuadratic guards the heap-based merge: a 100,000-byte
// word without spaces must encode quickly (the naive loop takes minutes).
func TestLongWordIsNotQuadratic(t *testing.T) {
	for _, name := range tokenizerNames {
		tk := load(t, name)
		word := strings.Repeat("abcdefghij", 10000)
		ids, err := tk.Encode(word, false)
		require.NoError(t, err)
		got, err := tk.Decode(ids, false)
		require.NoError(t, err)
		assert.Equal(t, word, got, name)
	}
}
