package corpus

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepTestOptions are a small step: 24 tokens of up to 6 sequences of up
// to 32 positions, blocks of 4 in a pool of 64.
func stepTestOptions(dt ir.DType) Options {
	return Options{DType: dt, Seq: 32, Step: StepOptions{MaxTokens: 24, MaxSeqs: 6, BlockSize: 4, KVBlocks: 64}}
}

// stepFixture is a step graph of one tiny model with its weights, and a
// cache of the unbatched references it is compared with.
type stepFixture struct {
	name    string
	cfg     *Config
	opt     Options
	layout  step.Layout
	g       *ir.Graph
	weights map[string]*ir.Tensor
}

func newStepFixture(t *testing.T, model string, opt Options) *stepFixture {
	t.Helper()
	cfg, err := EmbeddedConfig(model)
	require.NoError(t, err)
	g, err := BuildConfig(model+":step", cfg, "step", opt)
	require.NoError(t, err)
	l, err := StepLayout(cfg, opt)
	require.NoError(t, err)
	read, err := step.LayoutOf(g)
	require.NoError(t, err)
	require.Equal(t, l, *read, "the layout read from the graph is the one it was built with")
	w, err := RandomWeights(g, 7)
	require.NoError(t, err)
	return &stepFixture{name: model, cfg: cfg, opt: opt, layout: l, g: g, weights: w}
}

// alone is the reference for one sequence run alone: the model kind over
// its ids, every position's logits [1, len, vocab] and their magnitudes,
// plus the allowance of its logits.
func (f *stepFixture) alone(t *testing.T, ids []int64) (logits, mag *ir.Tensor, tol float64) {
	t.Helper()
	opt := f.opt
	opt.Seq = len(ids)
	g, err := BuildConfig(f.name+":model", f.cfg, "model", opt)
	require.NoError(t, err)
	feeds := f.feedsWith(nil)
	in, err := ir.TensorOfInts(ir.I64, ir.Shape{1, ir.Dim(len(ids))}, ids...)
	require.NoError(t, err)
	feeds["input_ids"] = in
	r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	o := g.Outputs[0]
	return r.Outputs[o.Name], r.Magnitudes[o.Name], g.Allowance(o.Value, ir.PathEps(g), 1024)
}

// cachedKV is the keys and values a sequence's first ctx tokens leave in
// layer caches, from the prefill kind run alone: by state name,
// [1, kv heads, cache, head size] with positions 0..ctx-1 filled.
func (f *stepFixture) cachedKV(t *testing.T, ids []int64) map[string]*ir.Tensor {
	t.Helper()
	opt := f.opt
	opt.Seq, opt.Cache = len(ids), len(ids)
	g, err := BuildConfig(f.name+":prefill", f.cfg, "prefill", opt)
	require.NoError(t, err)
	feeds := f.feedsWith(nil)
	in, err := ir.TensorOfInts(ir.I64, ir.Shape{1, ir.Dim(len(ids))}, ids...)
	require.NoError(t, err)
	feeds["input_ids"] = in
	for _, v := range g.States() {
		n := g.Node(v)
		feeds[n.Name] = ir.NewTensor(n.DType, n.Shape)
	}
	r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
	require.NoError(t, err)
	return r.States
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

// nanPools are every layer's pools filled with NaN: a slot the step reads
// without its table naming it below the sequence's length poisons the
// logits.
func (f *stepFixture) nanPools() map[string]*ir.Tensor {
	out := map[string]*ir.Tensor{}
	for _, v := range f.g.States() {
		n := f.g.Node(v)
		p := ir.NewTensor(n.DType, n.Shape)
		for i := range p.Len() {
			p.Set(i, math.NaN())
		}
		out[n.Name] = p
	}
	return out
}

// fillContext copies positions 0..ctx-1 of a sequence's cached keys and
// values (the prefill's caches) into the pools at the slots its block
// table row gives.
func (f *stepFixture) fillContext(pools, caches map[string]*ir.Tensor, row []int32, ctx int) {
	l := f.layout
	H, D := l.KVHeads, l.HeadDim
	for name, pool := range pools {
		c := caches[name]
		capacity := int(c.Shape[2])
		for j := range ctx {
			slot := int(row[j/l.BlockSize])*l.BlockSize + j%l.BlockSize
			for h := range H {
				for d := range D {
					pool.Set(int64((slot*H+h)*D+d), c.At(int64((h*capacity+j)*D+d)))
				}
			}
		}
	}
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
// compared where the reference's margin exceeds the allowance.
func TestStepMatchesEachSequenceAlone(t *testing.T) {
	trials := 6
	if testing.Short() {
		trials = 2
	}
	for _, model := range []string{"tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-gpt2"} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			t.Run(fmt.Sprintf("%s/%s", model, dt), func(t *testing.T) {
				t.Parallel()
				f := newStepFixture(t, model, stepTestOptions(dt))
				rng := rand.New(rand.NewPCG(11, uint64(len(model))+uint64(dt)))
				compared, ties := 0, 0
				for trial := range trials {
					shapes := f.layout.DrawShapes(rng, 5, f.opt.Seq)
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
					pools := f.nanPools()
					seqIDs := make([][]int64, len(shapes))
					for s, sh := range shapes {
						ids := make([]int64, sh.Context+sh.Tokens)
						for i := range ids {
							ids[i] = int64(rng.IntN(f.cfg.VocabSize))
						}
						seqIDs[s] = ids
						copy(b.IDs[b.QueryStarts[s]:], ids[sh.Context:])
						if sh.Context > 0 {
							f.fillContext(pools, f.cachedKV(t, ids[:sh.Context]), b.BlockTable[s], sh.Context)
						}
					}
					feeds, err := f.layout.Feeds(b)
					require.NoError(t, err)
					r, err := ir.Eval(context.Background(), f.g, f.feedsWith(mergeFeeds(feeds, pools)), ir.EvalOptions{})
					require.NoError(t, err)
					got := r.Outputs["logits"]
					V := f.cfg.VocabSize
					for s, ids := range seqIDs {
						want, mag, tol := f.alone(t, ids)
						L := len(ids)
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
				t.Logf("%s %s: %d sequences compared, %d near ties left to the allowance", model, dt, compared, ties)
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
