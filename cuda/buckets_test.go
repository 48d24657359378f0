package cuda

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/step"
)

// TestRowBuckets prints a fused serving step with the cost model's
// schedules and its row buckets, and checks that each bucket keeps the
// schedule the cost model ranks best over its rows (or shares a higher
// bucket's kernel no more than ShareTolerance slower), that the
// projections keep a matrix-vector kernel for few rows and another for
// many, and that ForRows picks by the rows present. The program, each
// launch running its bucket's kernel, then computes the reference's
// logits and pools under the emulation on batches of 1 token, a few, and
// the maximum, the rows past T poisoned.
func TestRowBuckets(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, KVBlocks: 24}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	lp := lowerStep(t, g, true)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(dev, cost.Defaults(dev))
	ks, err := PrintProgramWith(lp, m.Ranked)
	require.NoError(t, err)
	require.NoError(t, PrintBuckets(lp, ks, m.Ranked))

	launches := append(append(lp.Prep[:0:0], lp.Prep...), lp.Run...)
	bucketed, gemvAndTiles := 0, 0
	for i, k := range ks {
		l := launches[i]
		if len(k.Buckets) == 0 {
			continue
		}
		bucketed++
		require.NotNil(t, l.Rows, k.Name)
		assert.Equal(t, RowBuckets(l.Rows.Max), func() (hs []int64) {
			for _, b := range k.Buckets {
				hs = append(hs, b.Hi)
			}
			return hs
		}(), k.Name)
		assert.Same(t, k, k.Buckets[len(k.Buckets)-1].Kernel, "%s: its own kernel serves the top bucket", k.Name)
		kinds := map[bool]bool{}
		for _, b := range k.Buckets {
			body := l.Body
			if b.Hi < l.Rows.Max {
				body, err = l.BodyAtRows(b.Hi)
				require.NoError(t, err)
			}
			ranked, err := m.Ranked(body)
			require.NoError(t, err)
			best := ranked[0]
			kept := b.Kernel.Schedule.String()
			if kept != best.Schedule.String() {
				assert.LessOrEqual(t, b.Estimate.Seconds, best.Seconds*(1+ShareTolerance)*(1+1e-9),
					"%s at %d rows keeps %s, not the best %s (%.3g s) nor within the tolerance (%.3g s)", k.Name, b.Hi, kept, best.Schedule, best.Seconds, b.Estimate.Seconds)
			}
			if b.Kernel != k {
				require.NotNil(t, b.Kernel.Body, b.Kernel.Name)
				assert.GreaterOrEqual(t, b.Kernel.count.Max, b.Hi, "%s computes the bucket's rows", b.Kernel.Name)
			}
			assert.Same(t, b.Kernel, k.ForRows(b.Hi), "%s at %d rows", k.Name, b.Hi)
			if lo := b.Hi/2 + 1; lo <= b.Hi {
				assert.Same(t, b.Kernel, k.ForRows(lo), "%s at %d rows", k.Name, lo)
			}
			if l.Form.String() == "matmul" {
				kinds[b.Kernel.Schedule.GEMV] = true
			}
		}
		if kinds[true] && kinds[false] {
			gemvAndTiles++
		}
	}
	assert.Greater(t, bucketed, len(lp.Run)/2, "most launches follow the rows")
	assert.Positive(t, gemvAndTiles, "a projection keeps a matrix-vector kernel for few rows and tiles for many")
	assert.Greater(t, len(WithBuckets(ks)), len(Distinct(ks)), "the buckets print kernels of their own")

	l := *lp.Step
	for _, tokens := range []int{1, 3, l.MaxTokens} {
		t.Run(fmt.Sprintf("tokens=%d", tokens), func(t *testing.T) {
			feeds, b := stepBatch(t, g, l, tokens, uint64(tokens))
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			e, err := NewEmulation(context.Background(), lp, ks, feeds)
			require.NoError(t, err)
			for i, k := range ks {
				if launches[i].Rows != nil {
					n := int64(tokens)
					if launches[i].Rows.Seqs {
						n = int64(b.Seqs())
					}
					assert.Equal(t, k.ForRows(n).Name, e.Launches[i].Kernel, "launch %s runs its bucket's kernel", launches[i].Name)
				}
			}
			outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{Shuffle: true, Seed: 5})
			require.NoError(t, err)
			assertStepMatches(t, l, b, want, outs, states)
		})
	}
}

// stepBatch is a batch of tokens tokens over up to the layout's most
// sequences (shared evenly, each after a random context), ids drawn, with
// the graph's feeds around it.
func stepBatch(t *testing.T, g *ir.Graph, l step.Layout, tokens int, seed uint64) (map[string]*ir.Tensor, *step.Batch) {
	t.Helper()
	feeds, err := ir.RandomFeeds(g, seed, ir.Typical)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 9))
	var shapes []step.SeqShape
	left := tokens
	for s := 0; s < l.MaxSeqs && left > 0; s++ {
		n := max(1, left/(l.MaxSeqs-s))
		if s == l.MaxSeqs-1 {
			n = left
		}
		shapes = append(shapes, step.SeqShape{Tokens: n, Context: rng.IntN(l.MaxLen() - n + 1)})
		left -= n
	}
	b, err := l.Arrange(rng, shapes)
	require.NoError(t, err)
	require.Equal(t, tokens, b.Tokens())
	for i := range b.IDs {
		b.IDs[i] = int64(rng.IntN(l.Vocab))
	}
	meta, err := l.Feeds(b)
	require.NoError(t, err)
	maps.Copy(feeds, meta)
	return feeds, b
}

// assertStepMatches compares a step's emulated logits, of the sequences
// present, and its pools' new contents (when states is not nil) with the
// reference's.
func assertStepMatches(t *testing.T, l step.Layout, b *step.Batch, want *ir.Result, outs, states map[string]*ir.Tensor) {
	t.Helper()
	outs, err := l.Present(outs, b)
	require.NoError(t, err)
	w, err := l.Present(want.Outputs, b)
	require.NoError(t, err)
	mag, err := l.Present(want.Magnitudes, b)
	require.NoError(t, err)
	mm, err := ir.Compare(outs[step.Logits], w[step.Logits], mag[step.Logits], 256)
	require.NoError(t, err)
	assert.Nil(t, mm, "logits: %v", mm)
	if states == nil {
		return
	}
	for name, w := range want.States {
		mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 256)
		require.NoError(t, err)
		assert.Nil(t, mm, "%s: %v", name, mm)
	}
}

// TestBucketGridsWriteOnlyTheRowsPresent replays a step's launches as
// the CUDA graph of its bucket does (each row-wise launch with the kernel
// and grid of the bucket's top, more rows than present) under the
// emulation, for steps inside their buckets, naive and fused: no launch
// writes its outputs' rows past those present (each launch's rows past T,
// or S, are as before it), and the logits and pools are the reference's.
func TestBucketGridsWriteOnlyTheRowsPresent(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, KVBlocks: 24}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(dev, cost.Defaults(dev))
	for _, fused := range []bool{false, true} {
		lp := lowerStep(t, g, fused)
		ks, err := PrintProgramWith(lp, m.Ranked)
		require.NoError(t, err)
		require.NoError(t, PrintBuckets(lp, ks, m.Ranked))
		launches := append(append(lp.Prep[:0:0], lp.Prep...), lp.Run...)
		l := *lp.Step
		top := func(n int64, max int) int64 {
			for _, hi := range RowBuckets(int64(max)) {
				if n <= hi {
					return hi
				}
			}
			return int64(max)
		}
		// One step inside its bucket a program (the naive one's buckets
		// share fewer kernels).
		tokens := 3
		if fused {
			tokens = 5
		}
		{
			t.Run(fmt.Sprintf("fused=%t/tokens=%d", fused, tokens), func(t *testing.T) {
				feeds, b := stepBatch(t, g, l, tokens, uint64(tokens))
				T, S := int64(b.Tokens()), int64(b.Seqs())
				hiT, hiS := top(T, l.MaxTokens), top(S, l.MaxSeqs)
				require.Greater(t, hiT, T, "a step inside its bucket")
				e, err := NewEmulation(context.Background(), lp, ks, feeds)
				require.NoError(t, err)
				for i, ln := range launches {
					if ln.Rows == nil {
						continue
					}
					n := hiT
					if ln.Rows.Seqs {
						n = hiS
					}
					k := ks[i].ForRows(n)
					e.Launches[i].Kernel, e.Launches[i].Grid, e.Launches[i].Block = k.Name, k.Rows.Of(k.Grid, n), k.Block
				}
				eo := emu.Options{Seed: 3}
				prev, err := e.Run(context.Background(), nil, eo)
				require.NoError(t, err)
				checked := 0
				for i, ln := range launches {
					cur, err := e.Run(context.Background(), e.Launches[:i+1], eo)
					require.NoError(t, err)
					if ln.Rows != nil {
						present := T
						if ln.Rows.Seqs {
							present = S
						}
						for j, id := range ln.Outs {
							if _, windowed, _ := ln.Window(j); windowed {
								continue
							}
							buf := lp.Buffers[id]
							perRow, ok := lower.Leading(buf.Shape, ln.Rows.Max)
							if !ok {
								continue
							}
							rowBytes := int(perRow) * buf.DType.Size()
							at := e.where[id]
							from, to := at.Offset+int(present)*rowBytes, at.Offset+int(buf.Bytes)
							assert.Equal(t, prev[at.Buffer][from:to], cur[at.Buffer][from:to], "%s (%s) writes %s's rows past the %d present", ln.Name, e.Launches[i].Kernel, buf.Name, present)
							checked++
						}
					}
					prev = cur
				}
				assert.Positive(t, checked)
				want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
				require.NoError(t, err)
				outs := map[string]*ir.Tensor{}
				for name, id := range lp.Outputs {
					a, bf := e.where[id], lp.Buffers[id]
					outs[name], err = DecodeTensor(ir.ValueType{Shape: bf.Shape, DType: bf.DType}, prev[a.Buffer][a.Offset:a.Offset+int(bf.Bytes)])
					require.NoError(t, err)
				}
				assertStepMatches(t, l, b, want, outs, nil)
			})
		}
	}
}

// TestDropUnfit: a bucket whose own kernel does not fit the device as
// compiled gives its buckets (those sharing that kernel) the next
// bucket's kernel; the launch's own kernel and fitting ones stay.
func TestDropUnfit(t *testing.T) {
	top := &Kernel{Name: "k0"}
	r2 := &Kernel{Name: "k0_r2", Body: &ir.Graph{}}
	r8 := &Kernel{Name: "k0_r8", Body: &ir.Graph{}}
	est := func(s float64) cost.Estimate { return cost.Estimate{Seconds: s} }
	top.Buckets = []RowBucket{{1, r2, est(1)}, {2, r2, est(1)}, {4, r8, est(2)}, {8, r8, est(2)}, {16, top, est(3)}}
	dropped := DropUnfit([]*Kernel{top, top}, func(k *Kernel) error {
		if k == r8 {
			return fmt.Errorf("too many registers")
		}
		return nil
	})
	assert.Equal(t, []string{"k0_r8 (too many registers)"}, dropped)
	var got []string
	for _, b := range top.Buckets {
		got = append(got, fmt.Sprintf("%d:%s:%g", b.Hi, b.Kernel.Name, b.Estimate.Seconds))
	}
	assert.Equal(t, []string{"1:k0_r2:1", "2:k0_r2:1", "4:k0:3", "8:k0:3", "16:k0:3"}, got)
	assert.Empty(t, DropUnfit([]*Kernel{top}, func(*Kernel) error { return nil }))
}
