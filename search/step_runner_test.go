package search

import (
	"context"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
)

// TestStepRunnerKeepsItsPools: a step folder opened for serving runs
// batch after batch with its pools kept between runs, its weights encoded
// once; each run gives what the emulation of the whole program gives on
// the same inputs, weights and pools; a refused batch changes nothing;
// a folder that is not a step is refused.
func TestStepRunnerKeepsItsPools(t *testing.T) {
	skipLong(t) // cuda's TestEmulateCorpusPrograms checks the encoded weights under -short
	ctx := context.Background()
	dir := t.TempDir()
	m, err := LoadModel("tiny-llama:step", ModelOptions{Build: corpus.Options{MaxSeq: 32, Step: corpus.StepOptions{MaxTokens: 12, MaxSeqs: 4, BlockSize: 4, KVBlocks: 24}}})
	require.NoError(t, err)
	defer m.Close()
	res, err := Compile(ctx, m, Options{NoVerify: true, TuneDB: filepath.Join(dir, "tunedb.jsonl")})
	require.NoError(t, err)
	out := filepath.Join(dir, "out")
	require.NoError(t, res.Write(ctx, out))

	r, err := OpenStep(ctx, out)
	require.NoError(t, err)
	defer r.Close()
	l := r.Layout()
	sf, err := loadStep(ctx, out)
	require.NoError(t, err)
	defer sf.model.Close()
	pools := map[string]*ir.Tensor{}
	for _, v := range sf.model.Graph.States() {
		n := sf.model.Graph.Node(v)
		pools[n.Name] = ir.NewTensor(n.DType, n.Shape)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	b, err := l.Arrange(rng, []step.SeqShape{{Context: 0, Tokens: 5}, {Context: 0, Tokens: 3}})
	require.NoError(t, err)
	for i := range b.IDs {
		b.IDs[i] = int64(rng.IntN(l.Vocab))
	}
	next := &step.Batch{IDs: []int64{7, 9}, Positions: []int32{5, 3}, QueryStarts: []int32{0, 1, 2}, SeqLens: []int32{6, 4}, BlockTable: b.BlockTable}
	bs := int32(l.BlockSize)
	next.SlotMapping = []int32{b.BlockTable[0][5/bs]*bs + 5%bs, b.BlockTable[1][3/bs]*bs + 3%bs}
	for _, batch := range []*step.Batch{b, next} {
		feeds, err := l.Feeds(batch)
		require.NoError(t, err)
		maps.Copy(feeds, sf.fixed)
		maps.Copy(feeds, pools)
		want, states, err := cuda.EmulateProgram(ctx, sf.fp.lp, sf.fp.ks, feeds, emu.Options{})
		require.NoError(t, err)
		want, err = l.Present(want, batch)
		require.NoError(t, err)
		maps.Copy(pools, states)

		bad := *batch
		bad.SlotMapping = append([]int32{int32(l.Slots())}, batch.SlotMapping[1:]...)
		_, err = r.Run(ctx, &bad)
		require.ErrorContains(t, err, "slot_mapping")
		got, err := r.Run(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, want[step.Logits].Float64s(), got.Float64s())
	}

	_, err = OpenStep(ctx, t.TempDir())
	require.Error(t, err)
}
