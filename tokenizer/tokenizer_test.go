package tokenizer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
)

var tokenizerNames = []string{"llama3", "qwen3", "llama2"}

// dataDir is shared/data/tokenizers, or a skip (a failure under
// LUMSEARCH_REQUIRE_DATA=1) when the shared data is absent.
func dataDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(shareddata.Dir(t), "tokenizers")
	if _, err := os.Stat(filepath.Join(dir, "fixtures.jsonl")); err != nil {
		// The shared data may predate the tokenizer files.
		if os.Getenv(shareddata.RequireEnv) == "1" {
			t.Fatalf("tokenizer data: %v; failing because %s=1", err, shareddata.RequireEnv)
		}
		t.Skipf("tokenizer data: %v; skipping (set %s=1 to fail instead)", err, shareddata.RequireEnv)
	}
	return dir
}

var (
	loadMu sync.Mutex
	loaded = map[string]*Tokenizer{}
)

// load loads a reference tokenizer once per test binary: the files are large.
func load(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := dataDir(t)
	loadMu.Lock()
	defer loadMu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk
	}
	tk, err := Load(filepath.Join(dir, name))
	require.NoError(t, err)
	loaded[name] = tk
	return tk
}

type fixture struct {
	Tokenizer      string   `json:"tokenizer"`
	Text           string   `json:"text"`
	IDs            []int    `json:"ids"`
	IDsWithSpecial []int    `json:"ids_with_special"`
	Tokens         []string `json:"tokens"`
	Decoded        string   `json:"decoded"`
}

func fixtures(t testing.TB) []fixture {
	t.Helper()
	f, err := os.Open(filepath.Join(dataDir(t), "fixtures.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var out []fixture
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var fx fixture
		require.NoError(t, json.Unmarshal(sc.Bytes(), &fx))
		out = append(out, fx)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestFixtures checks every reference encoding made by Hugging Face's own
// tokenizers library.
func TestFixtures(t *testing.T) {
	counts := map[string]int{}
	for i, fx := range fixtures(t) {
		tk := load(t, fx.Tokenizer)
		ok := t.Run(fmt.Sprintf("%s/%d", fx.Tokenizer, i), func(t *testing.T) {
			ids, toks, err := tk.EncodeTokens(fx.Text, false)
			require.NoError(t, err)
			assert.Equal(t, fx.IDs, ids, "ids of %q", fx.Text)
			assert.Equal(t, fx.Tokens, toks, "tokens of %q", fx.Text)
			withSpecial, err := tk.Encode(fx.Text, true)
			require.NoError(t, err)
			assert.Equal(t, fx.IDsWithSpecial, withSpecial, "ids with special of %q", fx.Text)
			dec, err := tk.Decode(fx.IDs, false)
			require.NoError(t, err)
			assert.Equal(t, fx.Decoded, dec, "decode of %q", fx.Text)
		})
		if ok {
			counts[fx.Tokenizer]++
		}
	}
	t.Logf("fixtures passed: %v", counts)
}
