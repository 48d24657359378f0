package gpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadFakeStep loads tiny-llama's serving step (12 tokens of 8 sequences
// at most) on the fake driver, its kernels printed with the cost model's
// row buckets, prepared; the fake logs kernel names and graphs.
func loadFakeStep(t *testing.T) (*fakecuda.Driver, *Context, *Program, *lower.Program) {
	f, _, c := openFake(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 12, MaxSeqs: 8, BlockSize: 4, KVBlocks: 24}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(dev, cost.Defaults(dev))
	ks, err := cuda.PrintProgramWith(lp, m.Ranked)
	require.NoError(t, err)
	require.NoError(t, cuda.PrintBuckets(lp, ks, m.Ranked))
	p, err := LoadProgram(c, lp, ks, []byte("//ptx"))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		assert.Zero(t, f.Graphs(), "graphs left after Close")
	})
	weights, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	require.NoError(t, p.Prepare(context.Background(), weights))
	f.Set("names", 1)
	f.Set("graph_log", 1)
	return f, c, p, lp
}

// stepFeeds arranges a batch of the given sequences and pads it.
func stepFeeds(t *testing.T, l *step.Layout, rng *rand.Rand, shapes []step.SeqShape) map[string]*ir.Tensor {
	b, err := l.Arrange(rng, shapes)
	require.NoError(t, err)
	feeds, err := l.Feeds(b)
	require.NoError(t, err)
	return feeds
}

// graphNodes is the fake's lines of a graph's launches as they run T
// tokens of S sequences: every launch with the kernel and grid
// plan.Launch.For gives it there.
func graphNodes(p *Program, T, S int64) string {
	var b strings.Builder
	for _, l := range p.plan.Run {
		k, g, bl := l.For(T, S)
		fmt.Fprintf(&b, "  launch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=s kernel=%s\n", g[0], g[1], g[2], bl[0], bl[1], bl[2], k)
	}
	return b.String()
}

// TestStepGraphsPerBucket: with graphs on, a step's inputs go up and the
// graph of its bucket (the row buckets' tops over its T and S) replays its
// launches, every one with the kernel and grid of the bucket's top; the
// first step of a bucket captures its graph, later ones (and a run given
// the default stream, which goes on the graphs' stream) reuse it, a step
// of another bucket captures another. CaptureBuckets captures the
// buckets left (those a step can fall in), and UseGraphs(nil) destroys
// the graphs and goes back to plain launches.
func TestStepGraphsPerBucket(t *testing.T) {
	f, c, p, lp := loadFakeStep(t)
	differ := false
	for _, l := range p.plan.Run {
		k1, _, _ := l.For(1, 1)
		k12, _, _ := l.For(12, 8)
		differ = differ || k1 != k12
	}
	require.True(t, differ, "some launch runs another kernel at 1 token than at 12: the graphs' kernels are checked")
	stream, err := c.NewStream(false)
	require.NoError(t, err)
	defer func() { require.NoError(t, stream.Destroy()) }()
	require.NoError(t, p.UseGraphs(stream))

	rng := rand.New(rand.NewPCG(7, 7))
	steps := []struct {
		name         string
		shapes       []step.SeqShape
		nilStream    bool
		hiT, hiS     int64
		captured     bool
		wantCaptured int
	}{
		{"one decode", []step.SeqShape{{Context: 3, Tokens: 1}}, false, 1, 1, true, 1},
		{"another decode", []step.SeqShape{{Context: 5, Tokens: 1}}, false, 1, 1, false, 1},
		{"5 tokens of 3", []step.SeqShape{{Context: 2, Tokens: 1}, {Context: 0, Tokens: 3}, {Context: 4, Tokens: 1}}, false, 8, 4, true, 2},
		{"7 tokens of 4", []step.SeqShape{{Context: 1, Tokens: 1}, {Context: 0, Tokens: 2}, {Context: 3, Tokens: 2}, {Context: 0, Tokens: 2}}, false, 8, 4, false, 2},
		{"12 tokens of 8", []step.SeqShape{{Context: 2, Tokens: 1}, {Context: 0, Tokens: 3}, {Context: 5, Tokens: 1}, {Context: 1, Tokens: 2},
			{Context: 7, Tokens: 1}, {Context: 0, Tokens: 1}, {Context: 9, Tokens: 1}, {Context: 3, Tokens: 2}}, false, 12, 8, true, 3},
		{"6 tokens of 3 on the default stream", []step.SeqShape{{Context: 0, Tokens: 4}, {Context: 2, Tokens: 1}, {Context: 6, Tokens: 1}}, true, 8, 4, false, 3},
	}
	for i, s := range steps {
		feeds := stepFeeds(t, lp.Step, rng, s.shapes)
		run := stream
		if s.nilStream {
			run = nil
		}
		f.Set("reset", 1)
		_, err := p.RunOnDevice(feeds, run)
		require.NoError(t, err, s.name)
		log := f.Log()
		want := ""
		if s.captured {
			want = fmt.Sprintf("capture %d kernels\n", len(lp.Run))
		}
		want += fmt.Sprintf("graph launch %d kernels stream=s\n", len(lp.Run)) + graphNodes(p, s.hiT, s.hiS)
		assert.Equal(t, want, log, "%s: inputs uploaded, then its bucket's graph", s.name)
		st := p.Graphs()
		assert.Equal(t, GraphStats{Captured: s.wantCaptured, Replays: i + 1}, st, s.name)
		assert.Equal(t, int32(s.wantCaptured), f.Graphs(), "%s: one executable graph a bucket, the captured graphs destroyed", s.name)
	}

	f.Set("reset", 1)
	require.NoError(t, p.CaptureBuckets())
	// Tokens' tops 1, 2, 4, 8, 12 and sequences' 1, 2, 4, 8: a bucket of
	// sequences from lo holds steps of at least lo tokens.
	feasible := 1 + 2 + 3 + 4 + 4
	assert.Equal(t, feasible, p.Graphs().Captured)
	assert.Equal(t, int32(feasible), f.Graphs())
	assert.Equal(t, feasible-3, strings.Count(f.Log(), "capture "), "the buckets captured before are not captured again")
	assert.NotContains(t, f.Log(), "graph launch", "capturing runs nothing")

	require.NoError(t, p.UseGraphs(nil))
	assert.Zero(t, f.Graphs())
	assert.Equal(t, GraphStats{}, p.Graphs())
	f.Set("reset", 1)
	_, err = p.RunOnDevice(stepFeeds(t, lp.Step, rng, steps[0].shapes), nil)
	require.NoError(t, err)
	assert.Equal(t, len(lp.Run), strings.Count(launchLines(f.Log()), "stream=0"), "graphs off: plain launches on the default stream")
	assert.NotContains(t, f.Log(), "graph launch")
}

// TestStepGraphFallback: a bucket whose capture fails runs its launches
// one by one (as at its own T and S, the answer plain launches give), the
// failure reported in the stats and not tried again for that bucket; the
// failed capture leaves no graph behind.
func TestStepGraphFallback(t *testing.T) {
	f, c, p, lp := loadFakeStep(t)
	stream, err := c.NewStream(false)
	require.NoError(t, err)
	defer func() { require.NoError(t, stream.Destroy()) }()
	require.NoError(t, p.UseGraphs(stream))
	f.Set("fail_capture", 1)
	rng := rand.New(rand.NewPCG(8, 8))
	shapes := []step.SeqShape{{Context: 2, Tokens: 1}, {Context: 0, Tokens: 2}}
	for range 2 {
		f.Set("reset", 1)
		_, err := p.RunOnDevice(stepFeeds(t, lp.Step, rng, shapes), stream)
		require.NoError(t, err)
		log := f.Log()
		assert.NotContains(t, log, "graph launch")
		var want strings.Builder
		for _, l := range p.plan.Run {
			k, g, bl := l.For(3, 2)
			fmt.Fprintf(&want, "launch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=s kernel=%s\n", g[0], g[1], g[2], bl[0], bl[1], bl[2], k)
		}
		assert.Equal(t, want.String(), launchLines(log), "plain launches at the step's own T and S")
	}
	st := p.Graphs()
	assert.Equal(t, 0, st.Captured)
	assert.Equal(t, 2, st.Plain)
	require.Error(t, st.Err)
	assert.Equal(t, 1, strings.Count(st.Err.Error(), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"), "a failed bucket is not captured again: %v", st.Err)
	assert.Contains(t, st.Err.Error(), "the graph of up to 4 tokens of 2 sequences")
	assert.Zero(t, f.Graphs())

	// Another bucket captures once capture works again.
	f.Set("fail_capture", 0)
	_, err = p.RunOnDevice(stepFeeds(t, lp.Step, rng, []step.SeqShape{{Context: 1, Tokens: 1}}), stream)
	require.NoError(t, err)
	assert.Equal(t, 1, p.Graphs().Captured)
	assert.Error(t, p.CaptureBuckets(), "the failed bucket's error again")
}

// TestUseGraphsRefuses: a program that is not a serving step keeps its
// plain launches, and UseGraphs says why; CaptureBuckets needs graphs on.
func TestUseGraphsRefuses(t *testing.T) {
	_, c, p, _ := loadFakeProgram(t)
	stream, err := c.NewStream(false)
	require.NoError(t, err)
	defer func() { require.NoError(t, stream.Destroy()) }()
	assert.ErrorContains(t, p.UseGraphs(stream), "not a serving step")
	assert.ErrorContains(t, p.CaptureBuckets(), "graphs are off")
	assert.NoError(t, p.UseGraphs(nil))
}
