package search

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/steptest"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepRequest is one generation request of the serving loop in
// TestStepGeneratesAsEachSequenceAlone.
type stepRequest struct {
	ids      []int64 // prompt, then generated tokens
	prompt   int
	maxNew   int
	computed int     // positions whose keys and values are in the pool
	blocks   []int32 // its block table row
	admitted bool
	done     bool
}

// TestStepGeneratesAsEachSequenceAlone runs a small serving loop over one
// compiled step program (f32, under the CPU emulation through RunFolder):
// requests are admitted first come first served while the pool has
// blocks for them, prompts are split into chunks across steps beside
// other sequences' decodes, finished sequences' blocks go back to the
// free list and are reused by newcomers. Every sequence must produce the
// greedy tokens it produces alone through the float64 reference of the
// unbatched model; where that reference's top two logits are closer than
// the allowance, both take the reference's token and the step is counted.
func TestStepGeneratesAsEachSequenceAlone(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	withoutNVRTC(t)
	models := []string{"tiny-llama", "tiny-qwen2", "tiny-gpt2"}
	requests := 6
	if raceEnabled || testing.Short() {
		models, requests = []string{oneLayerLlamaConfig(t)}, 4
	}
	for _, name := range models {
		t.Run(filepath.Base(filepath.Dir(name))+"/"+filepath.Base(name), func(t *testing.T) {
			ctx := context.Background()
			opt := corpus.Options{Seq: 24, Step: corpus.StepOptions{MaxTokens: 10, MaxSeqs: 4, BlockSize: 4, KVBlocks: 8}}
			f := compileFolder(t, name+":step", opt)
			pl, err := readPlan(f.dir)
			require.NoError(t, err)
			require.NotNil(t, pl.Step, "plan.json records the step's layout")
			l := *pl.Step
			cfg, err := corpus.EmbeddedConfig(name)
			if filepath.IsAbs(name) {
				cfg, err = corpus.LoadConfig(name)
			}
			require.NoError(t, err)
			weights, err := corpus.RandomWeights(f.g, 1) // RunFolder's weights for a corpus model
			require.NoError(t, err)

			rng := rand.New(rand.NewPCG(5, 8))
			reqs := make([]*stepRequest, requests)
			for i := range reqs {
				r := &stepRequest{prompt: 3 + rng.IntN(8), maxNew: 3 + rng.IntN(4)}
				for range r.prompt {
					r.ids = append(r.ids, int64(rng.IntN(cfg.VocabSize)))
				}
				reqs[i] = r
			}
			free := make([]int32, l.Blocks)
			for i, b := range rng.Perm(l.Blocks) {
				free[i] = int32(b)
			}
			states := map[string]*ir.Tensor{}
			for _, v := range f.g.States() {
				n := f.g.Node(v)
				states[n.Name] = ir.NewTensor(n.DType, n.Shape)
			}
			refuseBadStep(t, f, l, states)
			steps, ties, reused, maxSeqs := 0, 0, 0, 0
			used := map[int32]bool{}
			for iter := 0; ; iter++ {
				require.Less(t, iter, 200, "the loop does not finish")
				// Admit in arrival order while the pool holds the whole
				// sequence (no preemption in this loop).
				reserved := 0
				for _, r := range reqs {
					if r.admitted && !r.done {
						reserved += (r.prompt+r.maxNew+l.BlockSize-1)/l.BlockSize - len(r.blocks)
					}
				}
				running := 0
				for _, r := range reqs {
					if r.admitted && !r.done {
						running++
					}
				}
				for _, r := range reqs {
					need := (r.prompt + r.maxNew + l.BlockSize - 1) / l.BlockSize
					if r.admitted || running == l.MaxSeqs || need > len(free)-reserved {
						continue
					}
					r.admitted = true
					reserved += need
					running++
				}
				// Decodes first, then prompt chunks of up to 4 tokens,
				// within the step's tokens.
				var batch []*stepRequest
				var shapes []step.SeqShape
				budget := l.MaxTokens
				for _, decode := range []bool{true, false} {
					for _, r := range reqs {
						pending := len(r.ids) - r.computed
						if !r.admitted || r.done || (pending == 1) != decode || budget == 0 {
							continue
						}
						n := min(pending, 4, budget)
						budget -= n
						batch = append(batch, r)
						shapes = append(shapes, step.SeqShape{Context: r.computed, Tokens: n})
					}
				}
				if len(batch) == 0 {
					break
				}
				maxSeqs = max(maxSeqs, len(batch))
				b := &step.Batch{QueryStarts: []int32{0}}
				for i, r := range batch {
					L := shapes[i].Context + shapes[i].Tokens
					for len(r.blocks)*l.BlockSize < L {
						blk := free[0]
						free = free[1:]
						if used[blk] {
							reused++
						}
						used[blk] = true
						r.blocks = append(r.blocks, blk)
					}
					for p := r.computed; p < L; p++ {
						b.IDs = append(b.IDs, r.ids[p])
						b.Positions = append(b.Positions, int32(p))
						b.SlotMapping = append(b.SlotMapping, r.blocks[p/l.BlockSize]*int32(l.BlockSize)+int32(p%l.BlockSize))
					}
					b.QueryStarts = append(b.QueryStarts, int32(len(b.IDs)))
					b.SeqLens = append(b.SeqLens, int32(L))
					b.BlockTable = append(b.BlockTable, r.blocks)
				}
				feeds, err := l.Feeds(b)
				require.NoError(t, err, "step %d", iter)
				maps.Copy(feeds, states)
				got := f.run(t, ctx, feeds)
				states = stateTensors(f.g, got)
				steps++
				for i, r := range batch {
					r.computed += shapes[i].Tokens
					if r.computed < len(r.ids) {
						continue // a prompt chunk that does not end the prompt
					}
					token, tie := steptest.NextToken(t, name, cfg, ir.F32, weights, r.ids, got["logits"], i, fmt.Sprintf("step %d, sequence %d", iter, i))
					ties += tie
					r.ids = append(r.ids, token)
					if len(r.ids)-r.prompt == r.maxNew {
						r.done = true
						free = append(free, r.blocks...)
						r.blocks = nil
					}
				}
			}
			for i, r := range reqs {
				assert.True(t, r.done, "request %d never finished", i)
			}
			assert.Positive(t, reused, "no freed block was reused: the pool is too large for the test")
			assert.Greater(t, maxSeqs, 1, "no step ran two sequences")
			t.Logf("%s: %d requests in %d steps (up to %d sequences a step), %d blocks reused, %d near-tie tokens took the reference's", name, len(reqs), steps, maxSeqs, reused, ties)
			f.unchanged(t)
		})
	}
}

// refuseBadStep runs the folder on a batch whose two tokens write one
// slot: RunFolder refuses it as bad input, naming the slot mapping, and
// writes no output file (no state comes back changed).
func refuseBadStep(t *testing.T, f *generationFolder, l step.Layout, states map[string]*ir.Tensor) {
	t.Helper()
	b, err := l.Arrange(rand.New(rand.NewPCG(1, 2)), []step.SeqShape{{Context: 0, Tokens: 2}})
	require.NoError(t, err)
	feeds, err := l.Feeds(b)
	require.NoError(t, err)
	feeds[step.SlotMapping].SetInt(1, feeds[step.SlotMapping].Int(0))
	maps.Copy(feeds, states)
	tmp := t.TempDir()
	in, out := filepath.Join(tmp, "in.safetensors"), filepath.Join(tmp, "out.safetensors")
	require.NoError(t, safetensors.WriteFile(in, feeds, nil))
	err = RunFolder(context.Background(), f.dir, RunOptions{Inputs: in, Output: out}, nil)
	require.ErrorContains(t, err, "step metadata: slot_mapping[1]")
	assert.Equal(t, KindInput, KindOf(err))
	assert.NoFileExists(t, out)
}
