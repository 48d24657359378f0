package serve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// drawLayout draws a small step layout, sometimes with a pool too small
// for its sequences so that preemption happens.
func drawLayout(rng *rand.Rand) step.Layout {
	bs := 1 + rng.IntN(8)
	perSeq := 2 + rng.IntN(8)
	seqs := 1 + rng.IntN(12)
	tokens := seqs + rng.IntN(40)
	return step.Layout{MaxTokens: tokens, MaxSeqs: seqs, BlockSize: bs, Blocks: perSeq + rng.IntN(3*perSeq), BlocksPerSeq: perSeq,
		KVHeads: 1, HeadDim: 1, Layers: 1, Vocab: 50}
}

// TestSchedulerProperties runs the scheduler over random arrivals, lengths
// and cancellations against the simulated step, which fails on a slot
// that does not hold the position read: no request is lost or finished
// twice, no block is held twice, every request finishes, no step exceeds
// the token budget or the step's sequences, and preempted sequences come
// back.
func TestSchedulerProperties(t *testing.T) {
	preempted := 0
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			l := drawLayout(rng)
			budget := 0
			if rng.IntN(2) == 0 {
				budget = 1 + rng.IntN(l.MaxTokens)
			}
			s, err := NewScheduler(l, budget, 0)
			require.NoError(t, err)
			if budget == 0 {
				budget = l.MaxTokens
			}
			eng, err := NewSimulatedEngine(l, 0)
			require.NoError(t, err)
			n := 5 + rng.IntN(40)
			type want struct{ out int }
			wants := map[*Sequence]want{}
			finished := map[*Sequence]int{}
			next := 0
			var id uint64
			for step := 0; ; step++ {
				require.Less(t, step, 100000, "the scheduler made no progress")
				// Arrivals, a few at a time.
				for k := rng.IntN(4); k > 0 && next < n; k-- {
					prompt := 1 + rng.IntN(s.MaxLen()-1)
					out := 1 + rng.IntN(s.MaxLen()-prompt)
					id++
					q := &Sequence{ID: id, Prompt: prompt, MaxLen: prompt + out}
					for range prompt {
						q.Tokens = append(q.Tokens, int64(rng.IntN(l.Vocab)))
					}
					require.NoError(t, s.Add(q))
					wants[q] = want{out: out}
					next++
				}
				// Cancellations.
				if rng.IntN(20) == 0 {
					for q := range wants {
						if finished[q] == 0 {
							require.NoError(t, s.Remove(q))
							finished[q]++
							break
						}
					}
				}
				p, err := s.Schedule()
				require.NoError(t, err)
				if p == nil {
					if next == n {
						break
					}
					continue
				}
				require.LessOrEqual(t, p.Batch.Tokens(), budget)
				require.LessOrEqual(t, p.Batch.Seqs(), l.MaxSeqs)
				require.NoError(t, l.Check(p.Batch))
				held := map[int32]uint64{}
				for _, q := range s.running {
					for _, blk := range q.blocks {
						other, dup := held[blk]
						require.False(t, dup, "block %d held by sequences %d and %d", blk, other, q.ID)
						held[blk] = q.ID
					}
				}
				require.Equal(t, s.Blocks().Used(), len(held))
				draws := make([]Draw, p.Batch.Seqs())
				for i := range draws {
					draws[i] = Draw{Params: sample.Params{TopP: 1}}
				}
				toks, err := eng.Step(context.Background(), p.Batch, draws)
				require.NoError(t, err)
				s.Commit(p)
				for i, c := range p.Chunks {
					q := c.Seq
					require.Zero(t, finished[q], "sequence %d scheduled after it finished", q.ID)
					if !c.Sampled {
						continue
					}
					q.Tokens = append(q.Tokens, toks[i].ID)
					if q.Generated() == wants[q].out {
						require.NoError(t, s.Remove(q))
						finished[q]++
					}
				}
				preempted += len(p.Preempted)
			}
			require.Len(t, finished, n, "every request finishes")
			for q, k := range finished {
				require.Equal(t, 1, k, "sequence %d finished %d times", q.ID, k)
			}
			require.Zero(t, s.Blocks().Used(), "blocks leaked")
			require.Zero(t, s.Waiting()+s.Running())
		})
	}
	require.Positive(t, preempted, "no seed preempted: the pools are too large to test preemption")
}

func TestBlockAllocator(t *testing.T) {
	a := NewBlockAllocator(4)
	got, err := a.Alloc(3)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2}, got)
	_, err = a.Alloc(2)
	require.ErrorContains(t, err, "1 of 4 are free")
	require.NoError(t, a.Retain(got[:1]))
	require.NoError(t, a.Release(got))
	require.Equal(t, 3, a.Free(), "block 0 still has a reference")
	require.ErrorContains(t, a.Release([]int32{1}), "block 1 is free")
	require.ErrorContains(t, a.Release([]int32{0, 0}), "released 2 times")
	require.Equal(t, int32(1), a.Refs(0), "a refused release changes nothing")
	require.ErrorContains(t, a.Release([]int32{9}), "outside the pool")
	require.NoError(t, a.Release([]int32{0}))
	require.Equal(t, 4, a.Free())
}

func TestStopper(t *testing.T) {
	for _, tc := range []struct {
		stops  []string
		pieces []string
		want   string
		hit    bool
	}{
		{nil, []string{"ab", "c"}, "abc", false},
		{[]string{"END"}, []string{"hello E", "N", "D more"}, "hello ", true},
		{[]string{"END"}, []string{"hello E", "N", "d"}, "hello ENd", false},
		{[]string{"\n\n", "###"}, []string{"a\n", "b##", "#"}, "a\nb", true},
		{[]string{"ab"}, []string{"xa", "a", "b"}, "xa", true},
		{[]string{"é!"}, []string{"caf", "é", "!"}, "caf", true},
	} {
		s := stopper{stops: tc.stops}
		got, hit := "", false
		for _, p := range tc.pieces {
			r, h := s.add(p, true)
			got += r
			if h {
				hit = true
				break
			}
		}
		if !hit {
			got += s.flush()
		}
		require.Equal(t, tc.want, got, "%q over %q", tc.stops, tc.pieces)
		require.Equal(t, tc.hit, hit)
	}
}
