package search

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestNaiveProgramAgrees: rules stats, compile and optimize report one
// naive program for a model: the same kernels per run and the same
// predicted time (NaiveProgram's), whatever limits the search had.
func TestNaiveProgramAgrees(t *testing.T) {
	skipLong(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	naiveLine := regexp.MustCompile(`the naive program: (\d+) kernels, ([0-9.e+-]+ (?:s|ms|µs))`)
	build := corpus.Options{Seq: 4, Past: -1}
	for _, model := range []string{"tiny-llama:layer", "tiny-mistral:layer", "tiny-gpt2:attention"} {
		t.Run(model, func(t *testing.T) {
			ctx := t.Context()
			var stats bytes.Buffer
			require.NoError(t, RuleStats(ctx, model, build, RuleStatsOptions{}, &stats))
			fromStats := naiveLine.FindStringSubmatch(stats.String())
			require.NotNil(t, fromStats, stats.String())

			m, err := LoadModel(model, ModelOptions{Build: build})
			require.NoError(t, err)
			var lines bytes.Buffer
			_, err = Compile(ctx, m, Options{NoVerify: true, Events: NewPrinter(&lines, false).Event})
			require.NoError(t, err)
			fromCompile := naiveLine.FindStringSubmatch(lines.String())
			require.NotNil(t, fromCompile, lines.String())

			res, err := Optimize(ctx, m, Options{IterLimit: 2, NoVerify: true})
			require.NoError(t, err)
			sum := res.Report.Summary

			n, err := NaiveProgram(ctx, m.Graph, Pricing{})
			require.NoError(t, err)
			assert.Equal(t, fromStats[1:], fromCompile[1:], "rules stats and compile")
			assert.Equal(t, fromStats[1], strconv.Itoa(n.Launches), "rules stats: kernels per run")
			assert.Equal(t, fromStats[2], Seconds(n.Seconds), "rules stats: time per run")
			assert.Equal(t, n.Launches, sum.NaiveLaunches, "optimize: kernels per run")
			assert.Equal(t, n.Seconds, sum.Naive, "optimize: time per run")
		})
	}
}
