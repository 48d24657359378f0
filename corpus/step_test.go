package corpus_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/steptest"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepTestOptions are a small step: 24 tokens of up to 8 sequences of up
// to 32 positions, blocks of 4 in a pool of 80.
func stepTestOptions(dt ir.DType) corpus.Options {
	return corpus.Options{DType: dt, Seq: 32, Step: corpus.StepOptions{MaxTokens: 24, MaxSeqs: 8, BlockSize: 4, KVBlocks: 80}}
}

// stepFixture is a step graph of one tiny model with its weights, and a
// cache of the unbatched references it is compared with.
type stepFixture struct {
	name    string
	cfg     *corpus.Config
	opt     corpus.Options
	layout  step.Layout
	g       *ir.Graph
	weights map[string]*ir.Tensor
}

func newStepFixture(t *testing.T, model string, opt corpus.Options) *stepFixture {
	t.Helper()
	cfg, err := corpus.EmbeddedConfig(model)
	require.NoError(t, err)
	g, err := corpus.BuildConfig(model+":step", cfg, "step", opt)
	require.NoError(t, err)
	l, err := corpus.StepLayout(cfg, opt)
	require.NoError(t, err)
	read, err := step.LayoutOf(g)
	require.NoError(t, err)
	require.Equal(t, l, *read, "the layout read from the graph is the one it was built with")
	w, err := corpus.RandomWeights(g, 7)
	require.NoError(t, err)
	return &stepFixture{name: model, cfg: cfg, opt: opt, layout: l, g: g, weights: w}
}

func (f *stepFixture) feedsWith(extra map[string]*ir.Tensor) map[string]*ir.Tensor {
	out := make(map[string]*ir.Tensor, len(f.weights)+len(extra))
	for k, v := range f.weights {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// TestStepMatchesEachSequenceAlone is the step's property: over random
// mixes of sequences (1 to 6; each a prompt chunk of random length after
// a random context, or one decode token; block tables drawn from a
// shuffled pool; sometimes a padding sequence whose keys are not kept),
// each sequence's logits from the step's reference equal those of the
// same sequence alone through the unbatched model's reference (the model
// kind over its whole prefix), in f32 and bf16, within the model's
// allowance. The pools hold the contexts' keys and values, computed by
// the prefill kind alone, and NaN everywhere else. The greedy token is
// compared where the reference's margin exceeds the allowance. A model
// with sliding windows (tiny-mistral; tiny-gpt-oss, whose sliding and full
// layers alternate and whose attention has sinks) has sequences longer
// than its window.
func TestStepMatchesEachSequenceAlone(t *testing.T) {
	trials := 6
	if testing.Short() {
		trials = 2
	}
	for _, model := range []string{"tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-gpt2", "tiny-mixtral", "tiny-qwen3-moe", "tiny-gpt-oss"} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			t.Run(fmt.Sprintf("%s/%s", model, dt), func(t *testing.T) {
				t.Parallel()
				f := newStepFixture(t, model, stepTestOptions(dt))
				rng := rand.New(rand.NewPCG(11, uint64(len(model))+uint64(dt)))
				compared, ties, beyond := 0, 0, 0
				window := f.layout.Window
				for _, w := range f.layout.LayerWindows {
					window = max(window, w)
				}
				for trial := range trials {
					// 1 to 7 sequences, and a padding one on odd
					// trials: S from 1 to 8.
					shapes := f.layout.DrawShapes(rng, 7, f.opt.Seq)
					if trial%2 == 1 && len(shapes) < f.layout.MaxSeqs {
						used := 0
						for _, s := range shapes {
							used += s.Tokens
						}
						if used < f.layout.MaxTokens {
							shapes = append(shapes, step.SeqShape{Tokens: 1 + rng.IntN(min(2, f.layout.MaxTokens-used)), Padding: true})
						}
					}
					b, err := f.layout.Arrange(rng, shapes)
					require.NoError(t, err)
					pools := steptest.NaNPools(f.g)
					seqIDs := make([][]int64, len(shapes))
					for s, sh := range shapes {
						ids := make([]int64, sh.Context+sh.Tokens)
						for i := range ids {
							ids[i] = int64(rng.IntN(f.cfg.VocabSize))
						}
						seqIDs[s] = ids
						copy(b.IDs[b.QueryStarts[s]:], ids[sh.Context:])
						if sh.Context > 0 {
							steptest.FillPools(t, f.layout, pools, steptest.PrefillCaches(t, f.name, f.cfg, f.opt.DType, f.weights, ids[:sh.Context]), b.BlockTable[s], sh.Context)
						}
					}
					feeds, err := f.layout.Feeds(b)
					require.NoError(t, err)
					r, err := ir.Eval(context.Background(), f.g, f.feedsWith(mergeFeeds(feeds, pools)), ir.EvalOptions{})
					require.NoError(t, err)
					got := r.Outputs["logits"]
					V := f.cfg.VocabSize
					for s, ids := range seqIDs {
						want, mag, tol := steptest.Alone(t, f.name, f.cfg, f.opt.DType, f.weights, ids)
						L := len(ids)
						if window > 0 && L > window {
							beyond++
						}
						what := fmt.Sprintf("trial %d, sequence %d (context %d, %d tokens, padding %v)", trial, s, shapes[s].Context, shapes[s].Tokens, shapes[s].Padding)
						gr, wr, mr := row(got, s, V), row(want, L-1, V), row(mag, L-1, V)
						mm, err := ir.CompareWithin(gr, wr, mr, tol)
						require.NoError(t, err)
						require.Nil(t, mm, "%s: logits differ from the sequence alone: %v", what, mm)
						ref, top, second := argmax(wr)
						if top-second <= tol*mr.At(ref) {
							ties++
							continue
						}
						mine, _, _ := argmax(gr)
						assert.Equal(t, ref, mine, "%s: greedy token", what)
						compared++
					}
					// The new keys are in the pools at their slots, and
					// a padding token's are not.
					for s, sh := range shapes {
						for t0 := b.QueryStarts[s]; t0 < b.QueryStarts[s+1]; t0++ {
							slot := b.SlotMapping[t0]
							if sh.Padding {
								assert.Equal(t, int32(step.Padding), slot)
								continue
							}
							assert.False(t, math.IsNaN(r.States[step.KeyPool(0)].At(int64(slot)*int64(f.layout.KVHeads*f.layout.HeadDim))), "%s: slot %d of token %d not written", seqName(trial, s), slot, t0)
						}
					}
				}
				t.Logf("%s %s: %d sequences compared, %d near ties left to the allowance, %d longer than the window", model, dt, compared, ties, beyond)
				if window > 0 {
					assert.Positive(t, beyond, "some sequences outgrow the window")
				}
			})
		}
	}
}

func seqName(trial, s int) string { return fmt.Sprintf("trial %d, sequence %d", trial, s) }

func mergeFeeds(ms ...map[string]*ir.Tensor) map[string]*ir.Tensor {
	out := map[string]*ir.Tensor{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// row copies row r of a [.., vocab] tensor.
func row(x *ir.Tensor, r, vocab int) *ir.Tensor {
	out := ir.NewTensor(x.DType, ir.Shape{ir.Dim(vocab)})
	for j := range vocab {
		out.Set(int64(j), x.At(int64(r*vocab+j)))
	}
	return out
}

// argmax is the index of the largest element and the two largest values.
func argmax(x *ir.Tensor) (best int64, top, second float64) {
	top, second = math.Inf(-1), math.Inf(-1)
	for j := range x.Len() {
		switch v := x.At(j); {
		case v > top:
			best, top, second = j, v, top
		case v > second:
			second = v
		}
	}
	return best, top, second
}
