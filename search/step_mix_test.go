package search

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
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
	cases := []struct {
		model string
		dt    ir.DType
	}{{"tiny-llama", ir.F32}, {"tiny-llama", ir.BF16}, {"tiny-mistral", ir.F32}, {"tiny-gpt2", ir.BF16}}
	trials := 3
	if raceEnabled || testing.Short() {
		cases, trials = cases[:2], 2
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.model, c.dt), func(t *testing.T) {
			ctx := context.Background()
			opt := corpus.Options{Seq: 24, DType: c.dt, Step: corpus.StepOptions{MaxTokens: 12, MaxSeqs: 5, BlockSize: 4, KVBlocks: 40}}
			f := compileFolder(t, c.model+":step", opt)
			pl, err := readPlan(f.dir)
			require.NoError(t, err)
			l := *pl.Step
			cfg, err := corpus.EmbeddedConfig(c.model)
			require.NoError(t, err)
			weights, err := corpus.RandomWeights(f.g, 1)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(17, uint64(c.dt)))
			compared, ties := 0, 0
			for trial := range trials {
				shapes := l.DrawShapes(rng, 4, opt.Seq)
				used := 0
				for _, s := range shapes {
					used += s.Tokens
				}
				if trial%2 == 0 && used < l.MaxTokens && len(shapes) < l.MaxSeqs {
					shapes = append(shapes, step.SeqShape{Tokens: 1, Padding: true})
				}
				b, err := l.Arrange(rng, shapes)
				require.NoError(t, err)
				pools := nanPools(f.g)
				seqIDs := make([][]int64, len(shapes))
				for s, sh := range shapes {
					ids := make([]int64, sh.Context+sh.Tokens)
					for i := range ids {
						ids[i] = int64(rng.IntN(cfg.VocabSize))
					}
					seqIDs[s] = ids
					copy(b.IDs[b.QueryStarts[s]:], ids[sh.Context:])
					if sh.Context > 0 {
						fillPools(t, l, pools, prefillCaches(t, c.model, cfg, opt, weights, ids[:sh.Context]), b.BlockTable[s], sh.Context)
					}
				}
				feeds, err := l.Feeds(b)
				require.NoError(t, err)
				maps.Copy(feeds, pools)
				got := f.run(t, ctx, feeds)
				for s, ids := range seqIDs {
					want, mag, tol := aloneLogits(t, c.model, cfg, opt.DType, weights, ids)
					last, V := len(ids)-1, cfg.VocabSize
					what := fmt.Sprintf("trial %d, sequence %d (%+v)", trial, s, shapes[s])
					ref, top, second := -1, math.Inf(-1), math.Inf(-1)
					mine, best := -1, math.Inf(-1)
					for j := range V {
						w, m, g := want.At(int64(last*V+j)), mag.At(int64(last*V+j)), got["logits"].At(int64(s*V+j))
						require.LessOrEqual(t, math.Abs(g-w), tol*m, "%s: logit %d: got %v, want %v (allowance %.3g of %.3g)", what, j, g, w, tol, m)
						if w > top {
							ref, top, second = j, w, top
						} else if w > second {
							second = w
						}
						if g > best {
							mine, best = j, g
						}
					}
					if top-second <= tol*mag.At(int64(last*V+ref)) {
						ties++
						continue
					}
					require.Equal(t, ref, mine, "%s: greedy token", what)
					compared++
				}
			}
			t.Logf("%s %s: %d sequences compared, %d near ties left to the allowance", c.model, c.dt, compared, ties)
		})
	}
}

// aloneLogits is the unbatched model's reference for one sequence: the
// model kind over its ids, logits [1, len, vocab], their magnitudes and
// allowance.
func aloneLogits(t *testing.T, model string, cfg *corpus.Config, dt ir.DType, weights map[string]*ir.Tensor, ids []int64) (*ir.Tensor, *ir.Tensor, float64) {
	t.Helper()
	g, err := corpus.BuildConfig(model+":model", cfg, "model", corpus.Options{Seq: len(ids), DType: dt})
	require.NoError(t, err)
	feeds := maps.Clone(weights)
	in, err := ir.TensorOfInts(ir.I64, ir.Shape{1, ir.Dim(len(ids))}, ids...)
	require.NoError(t, err)
	feeds["input_ids"] = in
	r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	o := g.Outputs[0]
	return r.Outputs[o.Name], r.Magnitudes[o.Name], g.Allowance(o.Value, ir.PathEps(g), 1024)
}

// prefillCaches are the caches the prefill kind leaves after ids alone,
// by state name [1, kv heads, len, head].
func prefillCaches(t *testing.T, model string, cfg *corpus.Config, opt corpus.Options, weights map[string]*ir.Tensor, ids []int64) map[string]*ir.Tensor {
	t.Helper()
	g, err := corpus.BuildConfig(model+":prefill", cfg, "prefill", corpus.Options{Seq: len(ids), DType: opt.DType})
	require.NoError(t, err)
	feeds := maps.Clone(weights)
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

// nanPools are g's pools filled with NaN.
func nanPools(g *ir.Graph) map[string]*ir.Tensor {
	out := map[string]*ir.Tensor{}
	for _, v := range g.States() {
		n := g.Node(v)
		p := ir.NewTensor(n.DType, n.Shape)
		for i := range p.Len() {
			p.Set(i, math.NaN())
		}
		out[n.Name] = p
	}
	return out
}

// fillPools copies positions 0..ctx-1 of caches into the pools at the
// slots a block table row gives.
func fillPools(t *testing.T, l step.Layout, pools, caches map[string]*ir.Tensor, row []int32, ctx int) {
	t.Helper()
	H, D := l.KVHeads, l.HeadDim
	for name, pool := range pools {
		c := caches[name]
		require.NotNil(t, c, "the prefill has no cache %s", name)
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
