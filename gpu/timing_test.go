package gpu

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadFakeProgram loads the naive program of a small corpus graph on the
// fake driver, prepared and run once, and returns it with its launches
// per run.
func loadFakeProgram(t *testing.T) (*fakecuda.Driver, *Context, *Program, int) {
	f, _, c := openFake(t)
	g, err := corpus.Build("tiny-llama:mlp", corpus.Options{Seq: 4})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	p, err := LoadProgram(c, lp, ks, []byte("//ptx"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	_, err = p.Time(TimeOptions{})
	assert.ErrorContains(t, err, "not prepared")
	_, err = p.Capture(nil)
	assert.ErrorContains(t, err, "the default stream cannot be captured")

	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	require.NoError(t, p.Prepare(context.Background(), feeds))
	_, err = p.Run(feeds, nil)
	require.NoError(t, err)
	require.Greater(t, len(lp.Run), 1)
	f.Set("reset", 1)
	return f, c, p, len(lp.Run)
}

// TestCaptureAndTime: a run is captured as one graph of all its launches
// (nothing launched while capturing), replayed twice to warm up, then
// every timed replay comes after an L2 flush (a memset of twice the fake
// device's 1 MiB L2) between its two event records. The fake's events are
// 1.5 ms apart, so the times are steady and the loop stops at the rule's
// minimum.
func TestCaptureAndTime(t *testing.T) {
	f, _, p, n := loadFakeProgram(t)
	for _, least := range []int{5, 7} {
		f.Set("reset", 1)
		res, err := p.Time(TimeOptions{Rule: timing.Rule{Min: least}})
		require.NoError(t, err)
		assert.True(t, res.Graph)
		assert.Len(t, res.Samples, least, "steady times stop at the minimum")
		assert.InDelta(t, 1.5e-3, res.Median, 1e-9)
		assert.Zero(t, res.IQR)
		graph := fmt.Sprintf("graph launch %d kernels stream=s\n", n)
		timed := "memset 2097152\nrecord stream=s\n" + graph + "record stream=s\n"
		assert.Equal(t, strings.Repeat(graph, 2)+strings.Repeat(timed, least), f.Log())
	}

	// Without graphs the run's launches are issued one by one.
	f.Set("reset", 1)
	res, err := p.Time(TimeOptions{Warmup: 1, Rule: timing.Rule{Min: 3}, NoGraph: true})
	require.NoError(t, err)
	assert.False(t, res.Graph)
	assert.Len(t, res.Samples, 3)
	log := f.Log()
	assert.Equal(t, 4*n, strings.Count(log, "launch grid="), "one warm-up and three timed runs")
	assert.NotContains(t, log, "graph launch")
	assert.Equal(t, 3, strings.Count(log, "memset"))
}

// TestTimeLaunches: each timed run is one flush, then every launch
// followed by its own event record; the result has a timing per launch.
func TestTimeLaunches(t *testing.T) {
	f, _, p, n := loadFakeProgram(t)
	res, err := p.TimeLaunches(TimeOptions{Warmup: 1, Rule: timing.Rule{Min: 4}})
	require.NoError(t, err)
	require.Len(t, res, n)
	for i, r := range res {
		assert.Len(t, r.Samples, 4, "launch %d", i)
		assert.InDelta(t, 1.5e-3, r.Median, 1e-9, "launch %d", i)
		assert.False(t, r.Graph)
	}
	lines := strings.Split(strings.TrimSuffix(f.Log(), "\n"), "\n")
	require.Len(t, lines, n+4*(2+2*n), "warm-up launches, then per run: flush, record, and a launch and a record each")
	for _, l := range lines[:n] {
		assert.True(t, strings.HasPrefix(l, "launch grid="), l)
	}
	for r := range 4 {
		run := lines[n+r*(2+2*n):][:2+2*n]
		assert.Equal(t, []string{"memset 2097152", "record stream=s"}, run[:2])
		for i := range n {
			assert.True(t, strings.HasPrefix(run[2+2*i], "launch grid="), run[2+2*i])
			assert.True(t, strings.HasSuffix(run[2+2*i], "stream=s"), run[2+2*i])
			assert.Equal(t, "record stream=s", run[3+2*i])
		}
	}
}
