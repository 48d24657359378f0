package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corpus eval's feeding flags: a stated range, saving the outputs and
// comparing with them on the same inputs; a malformed range or one that
// names no leaf is a usage error naming it, a missing file an input one.
func TestCorpusEvalFeeds(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")
	r := runArgs(t, "corpus", "eval", "tiny-llama:rmsnorm", "--seq", "4", "--seed", "5",
		"--input-range", "hidden_states=-0.5..0.5", "--save-outputs", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "saved:    "+out+" (1 outputs, 0 states)")

	r = runArgs(t, "corpus", "eval", "tiny-llama:rmsnorm", "--seq", "4", "--seed", "5",
		"--input-range", "hidden_states=-0.5..0.5", "--outputs", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "check:    the outputs match "+out)

	r = runArgs(t, "corpus", "eval", "tiny-llama:rmsnorm", "--seq", "4", "--seed", "6", "--outputs", out)
	assert.Equal(t, exitError, r.code, "other inputs, other outputs")
	assert.Contains(t, r.stderr, "output output differs from "+out)

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--input-range", "hidden_states=1..0"}, exitUsage, "hidden_states=1..0: LO is above HI"},
		{[]string{"--input-range", "hidden_states"}, exitUsage, `want NAME=LO..HI, got "hidden_states"`},
		{[]string{"--input-range", "attention_mask=0..1"}, exitUsage, `--input-range attention_mask=0..1: the graph tiny-llama:rmsnorm has no input, weight or state "attention_mask"`},
		{[]string{"--inputs", filepath.Join(dir, "none.safetensors")}, exitInput, "--inputs: open " + filepath.Join(dir, "none.safetensors")},
	} {
		t.Run(tt.want, func(t *testing.T) {
			r := runArgs(t, append([]string{"corpus", "eval", "tiny-llama:rmsnorm", "--seq", "4"}, tt.args...)...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

// Every command that draws inputs takes --input-range, and refuses a
// range that names no leaf of the model before any work, naming it.
func TestInputRangeFlag(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"compile", "tiny-llama:rmsnorm", "--seq", "4", "-o", filepath.Join(dir, "c"), "--input-range", "mask=0..1"},
		{"optimize", "tiny-llama:rmsnorm", "--seq", "4", "-o", filepath.Join(dir, "o"), "--measure", "none", "--input-range", "mask=0..1"},
		{"bench", "tiny-llama:rmsnorm", "--seq", "4", "--measure", "emulated", "--input-range", "mask=0..1"},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := runArgs(t, args...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, `--input-range mask=0..1: the graph tiny-llama:rmsnorm has no input, weight or state "mask"`)
		})
	}
	r := runArgs(t, "verify", dir, "--input-range", "mask=0..")
	assert.Equal(t, exitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "mask=0..: LO and HI must be numbers")
}
