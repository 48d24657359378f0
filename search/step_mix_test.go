package search

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/steptest"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/require"
)

// TestCompiledStepMatchesEachSequenceAlone is the step's property on the
// compiled program, under the CPU emulation (RunFolder on the folder's
// kernels.cu): over random mixes of sequences (prompt chunks after random
// contexts, decode tokens, a padding sequence whose keys are not kept;
// block tables drawn from a shuffled pool), each sequence's logits equal
// those of the same sequence alone through the float64 reference of the
// unbatched model, in f32 and bf16 within the model's allowance. The
// pools hold each context's keys and values (the prefill kind's, alone)
// in its blocks and NaN everywhere else, so a read outside a sequence's
// blocks poisons its logits. The greedy token is compared where the
// reference's margin exceeds the allowance.
func TestCompiledStepMatchesEachSequenceAlone(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	withoutNVRTC(t)
	cases := []struct {
		model string
		dt    ir.DType
	}{{"tiny-llama", ir.F32}, {"tiny-llama", ir.BF16}, {"tiny-mistral", ir.F32}, {"tiny-gpt2", ir.BF16}}
	trials := 3
	if raceEnabled || testing.Short() {
		// 20 s a case under the race detector; the generation test
		// compiles an f32 step.
		cases, trials = cases[1:2], 2
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.model, c.dt), func(t *testing.T) {
			opt := corpus.Options{Seq: 24, DType: c.dt, Step: corpus.StepOptions{MaxTokens: 14, MaxSeqs: 8, BlockSize: 4, KVBlocks: 56}}
			f := compileFolder(t, c.model+":step", opt)
			pl, err := readPlan(f.dir)
			require.NoError(t, err)
			l := *pl.Step
			cfg, err := corpus.EmbeddedConfig(c.model)
			require.NoError(t, err)
			weights, err := corpus.RandomWeights(f.g, 1)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(17, uint64(c.dt)))
			compared, ties, _ := stepTrials(t, f, l, c.model, cfg, c.dt, weights, rng, trials, 7, opt.Seq)
			t.Logf("%s %s: %d sequences compared, %d near ties left to the allowance", c.model, c.dt, compared, ties)
		})
	}
}

// stepTrials runs trials random mixes of up to most sequences (and a
// padding one on even trials) through the compiled step f of model, each
// sequence's context in the pools and the rest NaN, and compares each
// sequence's logits with those of the same sequence alone through the
// float64 reference of the unbatched model (steptest.NextToken). It
// returns the sequences compared, the near ties left to the allowance, and
// each sequence's length.
func stepTrials(t *testing.T, f *generationFolder, l step.Layout, model string, cfg *corpus.Config, dt ir.DType, weights map[string]*ir.Tensor, rng *rand.Rand, trials, most, seq int) (compared, ties int, lens []int) {
	t.Helper()
	for trial := range trials {
		shapes := l.DrawShapes(rng, most, seq)
		used := 0
		for _, s := range shapes {
			used += s.Tokens
		}
		if trial%2 == 0 && used < l.MaxTokens && len(shapes) < l.MaxSeqs {
			shapes = append(shapes, step.SeqShape{Tokens: 1, Padding: true})
		}
		b, err := l.Arrange(rng, shapes)
		require.NoError(t, err)
		pools := steptest.NaNPools(f.g)
		seqIDs := make([][]int64, len(shapes))
		for s, sh := range shapes {
			ids := make([]int64, sh.Context+sh.Tokens)
			for i := range ids {
				ids[i] = int64(rng.IntN(cfg.VocabSize))
			}
			seqIDs[s] = ids
			copy(b.IDs[b.QueryStarts[s]:], ids[sh.Context:])
			if sh.Context > 0 {
				steptest.FillPools(t, l, pools, steptest.PrefillCaches(t, model, cfg, dt, weights, ids[:sh.Context]), b.BlockTable[s], sh.Context)
			}
		}
		feeds, err := l.Feeds(b)
		require.NoError(t, err)
		maps.Copy(feeds, pools)
		got := f.run(t, context.Background(), feeds)
		for s, ids := range seqIDs {
			lens = append(lens, len(ids))
			_, tie := steptest.NextToken(t, model, cfg, dt, weights, ids, got["logits"], s, fmt.Sprintf("trial %d, sequence %d (%+v)", trial, s, shapes[s]))
			ties += tie
			compared += 1 - tie
		}
	}
	return compared, ties, lens
}
