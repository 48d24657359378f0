// Package steptest holds what the serving step's tests share: pools
// poisoned outside the sequences' blocks, contexts filled from the prefill
// kind run alone, and the unbatched model's reference for one sequence.
// Only tests import it.
package steptest

import (
	"context"
	"maps"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/require"
)

// NaNPools are g's pools (its states) filled with NaN: a slot a step
// reads without its sequence's table naming it below the sequence's
// length poisons what it computes.
func NaNPools(g *ir.Graph) map[string]*ir.Tensor {
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

// PrefillCaches are the KV caches the prefill kind of model leaves after
// ids alone, by state name, [1, kv heads, len(ids), head size].
func PrefillCaches(t testing.TB, model string, cfg *corpus.Config, dt ir.DType, weights map[string]*ir.Tensor, ids []int64) map[string]*ir.Tensor {
	t.Helper()
	g, err := corpus.BuildConfig(model+":prefill", cfg, "prefill", corpus.Options{Seq: len(ids), DType: dt})
	require.NoError(t, err)
	feeds := withIDs(t, weights, ids)
	for _, v := range g.States() {
		n := g.Node(v)
		feeds[n.Name] = ir.NewTensor(n.DType, n.Shape)
	}
	r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
	require.NoError(t, err)
	return r.States
}

// FillPools copies positions 0..ctx-1 of a sequence's caches (as
// PrefillCaches returns them) into the pools at the slots its block table
// row gives.
func FillPools(t testing.TB, l step.Layout, pools, caches map[string]*ir.Tensor, row []int32, ctx int) {
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

// Alone is the unbatched model's reference for one sequence: the model
// kind of model over ids, its logits [1, len(ids), vocab], their
// magnitudes and the logits' allowance.
func Alone(t testing.TB, model string, cfg *corpus.Config, dt ir.DType, weights map[string]*ir.Tensor, ids []int64) (logits, mag *ir.Tensor, tol float64) {
	t.Helper()
	g, err := corpus.BuildConfig(model+":model", cfg, "model", corpus.Options{Seq: len(ids), DType: dt})
	require.NoError(t, err)
	r, err := ir.Eval(context.Background(), g, withIDs(t, weights, ids), ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	o := g.Outputs[0]
	return r.Outputs[o.Name], r.Magnitudes[o.Name], g.Allowance(o.Value, ir.PathEps(g), 1024)
}

func withIDs(t testing.TB, weights map[string]*ir.Tensor, ids []int64) map[string]*ir.Tensor {
	feeds := maps.Clone(weights)
	in, err := ir.TensorOfInts(ir.I64, ir.Shape{1, ir.Dim(len(ids))}, ids...)
	require.NoError(t, err)
	feeds["input_ids"] = in
	return feeds
}

// NextToken compares row of a step's logits [rows, vocab] with the last
// position of Alone's for ids, each logit within the allowance, and
// returns the reference's greedy token; the step's must be the same
// unless the reference's top two are closer than the allowance (a near
// tie, then tie is 1).
func NextToken(t testing.TB, model string, cfg *corpus.Config, dt ir.DType, weights map[string]*ir.Tensor, ids []int64, logits *ir.Tensor, row int, what string) (token int64, tie int) {
	t.Helper()
	want, mag, tol := Alone(t, model, cfg, dt, weights, ids)
	V, last := cfg.VocabSize, len(ids)-1
	ref, top, second := -1, math.Inf(-1), math.Inf(-1)
	mine, best := -1, math.Inf(-1)
	for j := range V {
		w, m, g := want.At(int64(last*V+j)), mag.At(int64(last*V+j)), logits.At(int64(row*V+j))
		require.LessOrEqual(t, math.Abs(g-w), tol*m, "%s: logit %d: got %v, want %v (allowance %.3g of magnitude %.3g)", what, j, g, w, tol, m)
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
		return int64(ref), 1
	}
	require.Equal(t, ref, mine, "%s: the step's greedy token", what)
	return int64(ref), 0
}
