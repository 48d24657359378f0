package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestNaiveProgramAgrees: rules stats, compile and optimize report one
// naive program for a model: the same kernels per run and the same
// predicted time (search.NaiveProgram's), whatever limits the search had.
func TestNaiveProgramAgrees(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	naiveLine := regexp.MustCompile(`the naive program: (\d+) kernels, ([0-9.e+-]+ (?:s|ms|µs))`)
	for _, model := range []string{"tiny-llama:layer", "tiny-gpt2:block", "tiny-qwen2:decode"} {
		t.Run(model, func(t *testing.T) {
			r := runArgs(t, "rules", "stats", model, "--seq", "4", "--ablate=false")
			require.Equal(t, exitOK, r.code, r.stderr)
			stats := naiveLine.FindStringSubmatch(r.stdout)
			require.NotNil(t, stats, r.stdout)

			r = runArgs(t, "compile", model, "--seq", "4", "--verify=false", "-o", filepath.Join(t.TempDir(), "c"))
			require.Equal(t, exitOK, r.code, r.stderr)
			compiled := naiveLine.FindStringSubmatch(r.stdout)
			require.NotNil(t, compiled, r.stdout)

			r = runArgs(t, "optimize", model, "--seq", "4", "--budget", "0", "--iter-limit", "2", "--measure", "none", "--verify=false", "--json", "-o", filepath.Join(t.TempDir(), "o"))
			require.Equal(t, exitOK, r.code, r.stderr)
			sum := resultOf(t, r.stdout)

			assert.Equal(t, stats[1:], compiled[1:], "rules stats and compile")
			assert.Equal(t, stats[1], strconv.Itoa(sum.NaiveLaunches), "rules stats and optimize: kernels per run")
			assert.Equal(t, stats[2], search.Seconds(sum.Naive), "rules stats and optimize: time per run")

			m, err := search.LoadModel(model, search.ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
			require.NoError(t, err)
			n, err := search.NaiveProgram(t.Context(), m.Graph, search.Pricing{})
			require.NoError(t, err)
			assert.Equal(t, sum.NaiveLaunches, n.Launches)
			assert.Equal(t, sum.Naive, n.Seconds)
		})
	}
}
