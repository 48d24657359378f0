package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyTokenizers are small tokenizer.json files in the GPT-2 shape (ByteLevel
// with use_regex, with and without add_prefix_space) and the Llama 2 shape
// (Prepend and Replace normalizers, byte fallback), each with added tokens
// carrying every flag, so that testdata/tiny_cases.json (Hugging Face's
// encodings of them, written by testdata/tiny_cases.js) needs no shared data.
func tinyTokenizers(t testing.TB) map[string][]byte {
	t.Helper()
	// Added tokens beyond the model's vocabulary; the flags are what the
	// cases exercise, each token under a name that says its flag.
	added := func(first int, names ...string) []any {
		var out []any
		for i, n := range names {
			tok := map[string]any{"id": first + i, "content": n, "special": false,
				"lstrip": false, "rstrip": false, "single_word": false, "normalized": false}
			for _, flag := range []string{"lstrip", "rstrip", "single_word", "normalized"} {
				if strings.Contains(n, strings.ReplaceAll(flag, "_", "")[:2]) {
					tok[flag] = true
				}
			}
			out = append(out, tok)
		}
		return out
	}
	// Names: "ls" lstrip, "rs" rstrip, "si" single_word, "no" normalized.
	// "\t" is a token inside the whitespace rstrip absorbs.
	names := []string{"<|end|>", "<ls>", "<rs>", "<lsrs>", "si", "<si>", "no", "<no>", "nolsrs", "lsno", "\t"}

	out := map[string][]byte{}
	vocab := map[string]int{}
	for _, r := range byteEncoder {
		vocab[string(r)] = len(vocab)
	}
	merges := []string{"Ġ t", "h e", "Ġt he", "Ġ w", "o r", "l d", "Ġw or", "Ġwor ld", "' s", "Ġ 1", "1 2"}
	for _, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = len(vocab)
	}
	for _, prefix := range []bool{false, true} {
		f := map[string]any{
			"version":        "1.0",
			"added_tokens":   added(len(vocab), names...),
			"normalizer":     nil,
			"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": true, "use_regex": true},
			"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
			"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
		}
		name := "gpt2"
		if prefix {
			name = "gpt2_prefix"
		}
		data, err := json.Marshal(f)
		require.NoError(t, err)
		out[name] = data
	}

	vocab = map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := 0; b < 256; b++ {
		vocab["<0x"+strings.ToUpper(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15]))+">"] = len(vocab)
	}
	for _, c := range []string{"▁", "a", "b", "<", ">"} {
		vocab[c] = len(vocab)
	}
	merges = []string{"▁ a", "a b", "▁a b"}
	for _, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = len(vocab)
	}
	special := func(id int, s string) map[string]any {
		return map[string]any{"id": id, "content": s, "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false}
	}
	f := map[string]any{
		"version":      "1.0",
		"added_tokens": append([]any{special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}, added(len(vocab), names...)...),
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer":  nil,
		"post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true},
	}
	data, err := json.Marshal(f)
	require.NoError(t, err)
	out["llama2"] = data
	return out
}

// TestWriteTinyTokenizers writes the tiny tokenizers for
// testdata/tiny_cases.js when LUMSEARCH_WRITE_TINY names a folder.
func TestWriteTinyTokenizers(t *testing.T) {
	dir := os.Getenv("LUMSEARCH_WRITE_TINY")
	if dir == "" {
		t.Skip("set LUMSEARCH_WRITE_TINY to a folder to write the tiny tokenizers")
	}
	for name, data := range tinyTokenizers(t) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), data, 0o644))
	}
}

// TestTinyCases compares with Hugging Face's encodings of the tiny
// tokenizers: GPT-2's split and add_prefix_space, and the added-token flags
// lstrip, rstrip, single_word and normalized, on texts where each matters.
func TestTinyCases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "tiny_cases.json"))
	require.NoError(t, err)
	var cases []struct {
		Tokenizer string `json:"tokenizer"`
		Text      string `json:"text"`
		IDs       []int  `json:"ids"`
	}
	require.NoError(t, json.Unmarshal(data, &cases))
	require.NotEmpty(t, cases)
	toks := map[string]*Tokenizer{}
	for name, data := range tinyTokenizers(t) {
		tk, err := Parse(data)
		require.NoError(t, err, name)
		toks[name] = tk
	}
	for _, c := range cases {
		tk := toks[c.Tokenizer]
		require.NotNil(t, tk, c.Tokenizer)
		ids, err := tk.Encode(c.Text, false)
		require.NoError(t, err)
		assert.Equal(t, c.IDs, ids, "%s %q", c.Tokenizer, c.Text)
	}
}

// TestAddedSplitKeepsText: cutting at added tokens changes no text but the
// whitespace that lstrip and rstrip absorb (or, after a token inside what an
// rstrip absorbed, repeat), on random texts of token fragments, words and
// spaces.
func TestAddedSplitKeepsText(t *testing.T) {
	tk, err := Parse(tinyTokenizers(t)["gpt2"])
	require.NoError(t, err)
	parts := []string{"<ls>", "<rs>", "<lsrs>", "si", "<si>", "no", "nolsrs", "<|end|>", "<", ">", "s", "i", "x", " ", "  ", "\t", "\n", "\u3000", "_", "é"}
	rng := rand.New(rand.NewSource(1))
	noSpace := func(s string) string { return strings.Join(strings.Fields(s), "") }
	for range 2000 {
		var b strings.Builder
		for range rng.Intn(12) {
			b.WriteString(parts[rng.Intn(len(parts))])
		}
		text := b.String()
		var joined strings.Builder
		for _, seg := range tk.added.raw.split(text, nil) {
			joined.WriteString(seg.text)
			if seg.id < 0 {
				require.NotEmpty(t, seg.text, "%q", text)
			}
		}
		require.Equal(t, noSpace(text), noSpace(joined.String()), "%q", text)
	}
}
