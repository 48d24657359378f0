package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
)

// tokenizerDir is a reference tokenizer of the shared data (a skip, or a
// failure under LUMSEARCH_REQUIRE_DATA=1, without it).
func tokenizerDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(shareddata.Dir(t), "tokenizers", name)
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv(shareddata.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return dir
}

func TestTokenizeText(t *testing.T) {
	llama2 := tokenizerDir(t, "llama2")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{llama2, "Hello, world!"}, "ids:    22557 28725 1526 28808\ntokens: \"▁Hello\" \",\" \"▁world\" \"!\"\ncount:  4\n"},
		{"add special", []string{llama2, "Hello", "--add-special"}, "ids:    1 22557\ntokens: \"<s>\" \"▁Hello\"\ncount:  2\n"},
		{"json", []string{"--json", filepath.Join(llama2, "tokenizer.json"), "Hello"}, `{"ids":[22557],"tokens":["▁Hello"]}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, append([]string{"tokenize"}, tt.args...)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, tt.want, r.stdout)
		})
	}
}

func TestTokenizeJSONLines(t *testing.T) {
	qwen3 := tokenizerDir(t, "qwen3")
	saved := tokenizeStdin
	defer func() { tokenizeStdin = saved }()
	tokenizeStdin = strings.NewReader("\"Hello\"\n\n\"<|im_start|>hi\"\n")
	r := runArgs(t, "tokenize", qwen3, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, `{"ids":[9707],"tokens":["Hello"]}`+"\n"+`{"ids":[151644,6023],"tokens":["<|im_start|>","hi"]}`+"\n", r.stdout)

	// A bad line is refused whatever the tokenizer: Llama 2's loads in a
	// fraction of Qwen 3's time (151,000 tokens and their merges).
	tokenizeStdin = strings.NewReader("\"ok\"\nnot json\n")
	r = runArgs(t, "tokenize", tokenizerDir(t, "llama2"), "--json")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "stdin line 2: want a JSON string")
}

func TestTokenizeErrors(t *testing.T) {
	r := runArgs(t, "tokenize")
	assert.Equal(t, exitUsage, r.code)
	r = runArgs(t, "tokenize", t.TempDir())
	assert.Equal(t, exitUsage, r.code, "no TEXT without --json")
	assert.Contains(t, r.stderr, "missing TEXT")
	r = runArgs(t, "tokenize", t.TempDir(), "x")
	assert.Equal(t, exitInput, r.code)
	assert.Contains(t, r.stderr, "tokenizer.json")
	bad := writeFile(t, "tokenizer.json", `{"model":{"type":"Unigram"}}`)
	r = runArgs(t, "tokenize", bad, "x")
	assert.Equal(t, exitInput, r.code)
	assert.Contains(t, r.stderr, `model type "Unigram" is not supported`)
}
