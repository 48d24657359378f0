package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/tunedb"
)

// Compiling a model through the command line costs tens of seconds under
// the race detector, most of it the search; the tests that only need a
// compiled folder share one, compiled once per test binary (setupShared,
// from TestMain) and copied into each test's own temporary folder.

// sharedRoot holds what the tests share: the default tuning database and
// the compiled folders. TestMain makes it and removes it.
var sharedRoot string

// setupShared makes sharedRoot and points the default tuning database
// there, so that no test reads or writes the user's and tests that do not
// set $LUMSEARCH_TUNEDB themselves may run in parallel; it returns what
// removes it.
func setupShared() (func(), error) {
	dir, err := os.MkdirTemp("", "lumsearch-cmd-test-")
	if err != nil {
		return nil, err
	}
	sharedRoot = dir
	if err := os.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl")); err != nil {
		return nil, err
	}
	// The decode step's model: the tiny Llama with one layer, as a user
	// brings a config file.
	cfg, err := os.ReadFile(filepath.Join("..", "..", "corpus", "configs", "tiny-llama.json"))
	if err != nil {
		return nil, err
	}
	const layers = `"num_hidden_layers": 2,`
	if !bytes.Contains(cfg, []byte(layers)) {
		return nil, fmt.Errorf("tiny-llama.json: no %s", layers)
	}
	path := filepath.Join(dir, "tiny-llama-1", "config.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, bytes.Replace(cfg, []byte(layers), []byte(`"num_hidden_layers": 1,`), 1), 0o644); err != nil {
		return nil, err
	}
	decodeModel = path + ":decode"
	return func() { _ = os.RemoveAll(dir) }, nil
}

// compiledFolder is what one compile command wrote and printed.
type compiledFolder struct {
	dir    string // the folder, which no test modifies
	stdout string
	err    error
}

var (
	decodeOnce sync.Once
	decode     compiledFolder
)

// decodeModel is the decode step the tests share (setupShared writes its
// config): the tiny Llama's with one layer, whose compile takes a sixth of
// the two-layer corpus model's under the race detector (package cuda's
// tests compile, emulate and verify tiny-llama:decode's programs; the long
// test command's TestOptimizeEndToEnd optimizes a two-layer decode step).
var decodeModel string

// decodeArgs compile the decode step the tests share: a step with KV
// caches (states), at a length no tile divides, unverified (TestVerifyDir
// verifies the folder it wrote).
func decodeArgs() []string {
	return []string{"compile", decodeModel, "--seq", "6", "--verify=false"}
}

// compiledDecode returns a copy of the folder decodeArgs write, in a
// temporary folder of t's, and what the command printed.
func compiledDecode(t *testing.T) (dir, stdout string) {
	t.Helper()
	decodeOnce.Do(func() {
		out := filepath.Join(sharedRoot, "decode", "out")
		var so, se bytes.Buffer
		if code := run(context.Background(), append(decodeArgs(), "-o", out), &so, &se); code != exitOK {
			decode.err = fmt.Errorf("%v: exit %d: %s", decodeArgs(), code, se.String())
			return
		}
		decode = compiledFolder{dir: out, stdout: so.String()}
	})
	require.NoError(t, decode.err)
	dir = filepath.Join(t.TempDir(), "out")
	require.NoError(t, os.CopyFS(dir, os.DirFS(decode.dir)))
	return dir, decode.stdout
}
