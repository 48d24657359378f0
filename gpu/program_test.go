package gpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProgramOnFakeDriver loads a lowered decode step on the fake driver,
// prepares it and runs it: every launch goes out in order with its grid,
// block and first buffer's address (the arena's planned offset for an
// intermediate), inputs and states arrive byte for byte, and the outputs
// come back with their shapes. The fake runs no kernel, so the numbers are
// checked on a GPU (issue 8's check script), not here.
func TestProgramOnFakeDriver(t *testing.T) {
	f, _, c := openFake(t)
	f.Set("nparams", 1)
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 5, Past: 2})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	p, err := LoadProgram(c, lp, ks, []byte("//ptx"))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	_, err = p.Run(feeds, nil)
	require.ErrorContains(t, err, "not prepared")
	require.NoError(t, p.Prepare(context.Background(), feeds))
	for _, s := range g.States() {
		name := g.Node(s).Name
		require.NoError(t, p.SetState(name, feeds[name]))
		got, err := p.State(name)
		require.NoError(t, err)
		assert.Equal(t, feeds[name].Float64s(), got.Float64s(), "state %s round trip", name)
	}
	f.Set("reset", 1)
	outs, err := p.Run(feeds, nil)
	require.NoError(t, err)
	var want strings.Builder
	for i, l := range lp.Run {
		k := ks[len(lp.Prep)+i]
		first := l.Args
		if len(first) == 0 {
			first = l.Outs
		}
		fmt.Fprintf(&want, "launch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=0 %x\n",
			k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0], k.Block[1], k.Block[2], p.Pointer(first[0]))
	}
	assert.Equal(t, want.String(), f.Log())
	for name, id := range lp.Outputs {
		require.Contains(t, outs, name)
		assert.True(t, lp.Buffers[id].Shape.Equal(outs[name].Shape), "output %s", name)
	}
	delete(feeds, g.Node(g.Inputs()[0]).Name)
	_, err = p.Run(feeds, nil)
	assert.ErrorContains(t, err, "no input")
}

// TestStepRunRefusesBadMetadata: a serving step's Run checks its metadata
// as a batch before anything goes to the device: a bad batch launches
// nothing and leaves the pools as they were; a good one launches every
// kernel once, the same launches at 1 and at 8 sequences.
func TestStepRunRefusesBadMetadata(t *testing.T) {
	f, _, c := openFake(t)
	f.Set("nparams", 1)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 12, MaxSeqs: 8, BlockSize: 4, KVBlocks: 24}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	require.NotNil(t, lp.Step)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	p, err := LoadProgram(c, lp, ks, []byte("//ptx"))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	weights, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	require.NoError(t, p.Prepare(context.Background(), weights))
	pool := step.KeyPool(0)
	require.NoError(t, p.SetState(pool, weights[pool]))

	rng := rand.New(rand.NewPCG(1, 1))
	launches := map[int]string{}
	eight := []step.SeqShape{{Context: 2, Tokens: 1}, {Context: 0, Tokens: 3}, {Context: 5, Tokens: 1}, {Context: 1, Tokens: 2},
		{Context: 7, Tokens: 1}, {Context: 0, Tokens: 1}, {Context: 9, Tokens: 1}, {Context: 3, Tokens: 2}}
	for _, shapes := range [][]step.SeqShape{{{Context: 3, Tokens: 1}}, eight} {
		b, err := lp.Step.Arrange(rng, shapes)
		require.NoError(t, err)
		good, err := lp.Step.Feeds(b)
		require.NoError(t, err)

		bad, err := lp.Step.Feeds(b)
		require.NoError(t, err)
		bad[step.SlotMapping].SetInt(0, int64(lp.Step.Slots())) // outside the pool
		f.Set("reset", 1)
		_, err = p.Run(bad, nil)
		require.ErrorContains(t, err, "step metadata: slot_mapping[0]")
		assert.Empty(t, f.Log(), "a refused step touches the device")
		got, err := p.State(pool)
		require.NoError(t, err)
		assert.Equal(t, weights[pool].Float64s(), got.Float64s(), "a refused step changed the pool")

		f.Set("reset", 1)
		_, err = p.Run(good, nil)
		require.NoError(t, err)
		launches[len(shapes)] = launchLines(f.Log())
	}
	grids := regexp.MustCompile(`grid=\S+ `)
	assert.Equal(t, grids.ReplaceAllString(launches[1], ""), grids.ReplaceAllString(launches[8], ""),
		"the step at 8 sequences makes the launches it makes at 1, but for the grids")
	assert.Equal(t, len(lp.Run), strings.Count(launches[8], "\n"), "one launch per kernel, none per sequence")
	// The grids follow T and S: 1 token of 1 sequence, then 12 of 8
	// (the maxima).
	for T, log := range map[int64]string{1: launches[1], 12: launches[8]} {
		var want []string
		for _, l := range p.plan.Run {
			g := l.GridFor(T, min(T, 8))
			want = append(want, fmt.Sprintf("grid=%d,%d,%d ", g[0], g[1], g[2]))
		}
		assert.Equal(t, want, grids.FindAllString(log, -1), "the grids of a step of %d tokens", T)
	}
	assert.NotEqual(t, launches[1], launches[8], "a step of one token launches fewer blocks")
}

// launchLines keeps the launch lines of a fake driver's log.
func launchLines(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "launch ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
