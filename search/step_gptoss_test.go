package search

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompiledGPTOSSStep compiles tiny-gpt-oss's step (attention sinks, a
// sliding layer of window 4 beside a full one, mixture-of-experts MLPs)
// through the whole pipeline and runs it under the CPU emulation
// (RunFolder on the folder's kernels.cu) on random mixes of sequences,
// most longer than the window: each sequence's logits equal those of the
// same sequence alone through the float64 reference of the unbatched
// model (its eager attention, a sink column concatenated to the scores
// and a mask a layer), within the model's allowance. The pools hold each
// context's keys and values in its blocks and NaN everywhere else. The
// plan's layout names each layer's window.
func TestCompiledGPTOSSStep(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	withoutNVRTC(t)
	const model = "tiny-gpt-oss"
	opt := corpus.Options{Seq: 24, DType: ir.F32, Step: corpus.StepOptions{MaxTokens: 14, MaxSeqs: 6, BlockSize: 4, KVBlocks: 48}}
	f := compileFolder(t, model+":step", opt)
	pl, err := readPlan(f.dir)
	require.NoError(t, err)
	l := *pl.Step
	assert.Equal(t, []int{4, 0}, l.LayerWindows, "the sliding layer's window and the full layer's none")
	src, err := os.ReadFile(filepath.Join(f.dir, KernelsFile))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(src), "L += expf(sk - M);"), "a paged attention kernel with sinks a layer")
	cfg, err := corpus.EmbeddedConfig(model)
	require.NoError(t, err)
	weights, err := corpus.RandomWeights(f.g, 1)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(23, 5))
	trials := 4
	if testing.Short() {
		trials = 2
	}
	compared, ties, lens := stepTrials(t, f, l, model, cfg, opt.DType, weights, rng, trials, 5, opt.Seq)
	beyond := 0
	for _, n := range lens {
		if n > 4 {
			beyond++
		}
	}
	t.Logf("%s: %d sequences compared, %d near ties left to the allowance, %d longer than the window", model, compared, ties, beyond)
	assert.Positive(t, beyond, "sequences longer than the window")
}

// TestStepFloorPerLayerWindows: gpt-oss-20b's step (sliding layers of
// window 128 beside full ones) floors its attention layer by layer: its
// floor against the same model with no window anywhere differs by the
// sliding layers' keys and cached pool rows beyond the window, exactly;
// and programFloor prices it at its layout.
func TestStepFloorPerLayerWindows(t *testing.T) {
	opt := corpus.Options{Seq: 2048, DType: ir.BF16, Step: corpus.StepOptions{MaxTokens: 256, MaxSeqs: 16, KVBlocks: 16 * 2048 / 16}}
	c, err := corpus.EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	g, err := corpus.BuildConfig("gpt-oss-20b:step", c, "step", opt)
	require.NoError(t, err)
	l, err := corpus.StepLayout(c, opt)
	require.NoError(t, err)
	read, err := step.LayoutOf(g)
	require.NoError(t, err)
	require.Equal(t, l, *read)
	require.Len(t, l.LayerWindows, c.NumHiddenLayers)
	sliding := 0
	for _, w := range l.LayerWindows {
		if w > 0 {
			sliding++
			require.Equal(t, c.SlidingWindow, w)
		}
	}
	require.Positive(t, sliding)
	require.Less(t, sliding, c.NumHiddenLayers)

	full, err := corpus.EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	full.SlidingWindow, full.LayerTypes = 0, nil
	fg, err := corpus.BuildConfig("gpt-oss-20b-full:step", full, "step", opt)
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	mixed := []step.SeqWork{{Tokens: 128, Context: 1024}}
	for range 15 {
		mixed = append(mixed, step.SeqWork{Tokens: 1, Context: 1500})
	}
	w, err := l.WorkloadOf(mixed)
	require.NoError(t, err)
	keys, cached := w.Within(c.SlidingWindow)
	require.Less(t, keys, w.Keys)
	require.Less(t, cached, w.Cached)
	win, nowin := StepFloor(g, dev, w), StepFloor(fg, dev, w)
	q := float64(c.NumAttentionHeads * c.HeadDim)
	row := float64(c.NumKeyValueHeads*c.HeadDim) * 2 // a pool's row in bf16
	assert.InDelta(t, float64(sliding)*4*q*(w.Keys-keys), nowin.FLOPs-win.FLOPs, 1, "the sliding layers' keys past the window")
	assert.InDelta(t, float64(sliding)*2*row*(w.Cached-cached), nowin.Bytes-win.Bytes, 1, "the sliding layers' cached rows past the window")

	f := programFloor(g, dev, map[string]int64{step.SeqsSymbol: 4})
	assert.Positive(t, f.Hardware)
	assert.Less(t, f.FLOPs, programFloor(fg, dev, map[string]int64{step.SeqsSymbol: 4}).FLOPs, "programFloor caps the sliding layers")
}
