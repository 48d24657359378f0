package step

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testLayout = Layout{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, Blocks: 12, BlocksPerSeq: 3, KVHeads: 2, HeadDim: 8, Layers: 1, Vocab: 50}

// goodBatch is three sequences: a chunk of 3 after 2 cached positions,
// one decode token after 5, and a first chunk of 2.
func goodBatch() *Batch {
	return &Batch{
		IDs:         []int64{1, 2, 3, 4, 5, 6},
		Positions:   []int32{2, 3, 4, 5, 0, 1},
		QueryStarts: []int32{0, 3, 4, 6},
		SeqLens:     []int32{5, 6, 2},
		BlockTable:  [][]int32{{7, 2}, {0, 9}, {4}},
		SlotMapping: []int32{30, 31, 8, 37, 16, 17},
	}
}

func TestCheckAcceptsAGoodBatch(t *testing.T) {
	require.NoError(t, testLayout.Check(goodBatch()))
}

// TestCheckRefuses lists every refusal with the input and element it
// names: each case breaks one thing of a good batch.
func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(b *Batch)
		input string
		index int
		msg   string
	}{
		{"no tokens", func(b *Batch) { *b = Batch{QueryStarts: []int32{0}} }, TokensSymbol, -1, "0 tokens"},
		{"too many tokens", func(b *Batch) {
			for len(b.IDs) <= 16 {
				b.IDs = append(b.IDs, 1)
			}
		}, TokensSymbol, -1, "17 tokens"},
		{"too many sequences", func(b *Batch) { b.SeqLens = append(b.SeqLens, 1, 1) }, SeqsSymbol, -1, "5 sequences"},
		{"short positions", func(b *Batch) { b.Positions = b.Positions[:5] }, Positions, -1, "5 entries for 6 tokens"},
		{"short slots", func(b *Batch) { b.SlotMapping = b.SlotMapping[:5] }, SlotMapping, -1, "5 entries"},
		{"starts count", func(b *Batch) { b.QueryStarts = b.QueryStarts[:3] }, QueryStarts, -1, "want S+1 = 4"},
		{"table rows", func(b *Batch) { b.BlockTable = b.BlockTable[:2] }, BlockTable, -1, "2 rows for 3 sequences"},
		{"id past vocab", func(b *Batch) { b.IDs[3] = 50 }, InputIDs, 3, "outside the vocabulary"},
		{"negative id", func(b *Batch) { b.IDs[0] = -1 }, InputIDs, 0, "outside the vocabulary"},
		{"first start", func(b *Batch) { b.QueryStarts[0] = 1 }, QueryStarts, 0, "starts at token 0"},
		{"decreasing starts", func(b *Batch) { b.QueryStarts[2] = 2 }, QueryStarts, 2, "never decrease"},
		{"starts end before T", func(b *Batch) { b.QueryStarts[3] = 5 }, QueryStarts, 3, "must be T = 6"},
		{"length below tokens", func(b *Batch) { b.SeqLens[0] = 2 }, SeqLens, 0, "shorter than the sequence's 3 tokens"},
		{"length past table", func(b *Batch) { b.SeqLens[2] = 5 }, SeqLens, 2, "longer than its block table row holds"},
		{"row too wide", func(b *Batch) { b.BlockTable[2] = []int32{4, 5, 6, 8} }, BlockTable, 2, "holds 3 a sequence"},
		{"block past pool", func(b *Batch) { b.BlockTable[1][0] = 12 }, BlockTable, 1, "outside the pool's blocks 0..11"},
		{"negative block", func(b *Batch) { b.BlockTable[0][1] = -1 }, BlockTable, 0, "outside the pool"},
		{"position off by one", func(b *Batch) { b.Positions[3] = 4 }, Positions, 3, "sits at position 5"},
		{"slot past pool", func(b *Batch) { b.SlotMapping[4] = 48 }, SlotMapping, 4, "outside the pool's slots 0..47"},
		{"slot below -1", func(b *Batch) { b.SlotMapping[4] = -2 }, SlotMapping, 4, "outside the pool"},
		{"slot twice", func(b *Batch) {
			// Sequence 2 shares sequence 0's block and writes the
			// positions sequence 0 writes.
			b.SeqLens[2], b.BlockTable[2] = 4, []int32{7}
			b.Positions[4], b.Positions[5] = 2, 3
			b.SlotMapping[4], b.SlotMapping[5] = 30, 31
		}, SlotMapping, 4, "slot 30 is written twice in the step (tokens 0 and 4)"},
		{"slot off the table", func(b *Batch) { b.SlotMapping[1] = 32 }, SlotMapping, 1, "puts position 3 at slot 31"},
		{"writes another's context", func(b *Batch) {
			// Sequence 2 shares sequence 1's first block and writes
			// into it: sequence 1 reads those slots as its context.
			b.BlockTable[2][0] = 0
			b.SlotMapping[4], b.SlotMapping[5] = 0, 1
		}, SlotMapping, 4, "reads it as its cached position 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := goodBatch()
			c.edit(b)
			err := testLayout.Check(b)
			require.Error(t, err)
			var me *MetadataError
			require.True(t, errors.As(err, &me), "%v", err)
			assert.Equal(t, c.input, me.Input, "%v", err)
			assert.Equal(t, c.index, me.Index, "%v", err)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
}

// TestPaddingTokensWriteNothing: a token with slot -1 is accepted
// whatever its table says, and its slot is never checked against others.
func TestPaddingTokensWriteNothing(t *testing.T) {
	b := goodBatch()
	b.SlotMapping[4], b.SlotMapping[5] = Padding, Padding
	require.NoError(t, testLayout.Check(b))
}

// TestFeedsPad checks the padded inputs: entries past T and S are the
// documented padding, and those within are the batch's.
func TestFeedsPad(t *testing.T) {
	b := goodBatch()
	f, err := testLayout.Feeds(b)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, f[InputIDs].Int64s())
	assert.Equal(t, []int64{30, 31, 8, 37, 16, 17, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}, f[SlotMapping].Int64s())
	assert.Equal(t, []int64{0, 3, 4, 6, 6}, f[QueryStarts].Int64s())
	assert.Equal(t, []int64{5, 6, 2, 0}, f[SeqLens].Int64s())
	assert.Equal(t, []int64{7, 2, 0, 0, 9, 0, 4, 0, 0, 0, 0, 0}, f[BlockTable].Int64s())
	assert.NotContains(t, f, TokensSymbol, "T is query_start[S]")
	assert.Equal(t, []int64{3}, f[SeqsSymbol].Int64s())
	b.Positions[0] = 0
	_, err = testLayout.Feeds(b)
	require.Error(t, err, "Feeds checks first")
}

// TestArrangeDrawsAcceptedBatches: every drawn and arranged batch passes
// Check, its tables use distinct blocks, and its shapes are kept.
func TestArrangeDrawsAcceptedBatches(t *testing.T) {
	l := Layout{MaxTokens: 24, MaxSeqs: 6, BlockSize: 4, Blocks: 64, BlocksPerSeq: 8, KVHeads: 1, HeadDim: 4, Layers: 1, Vocab: 10}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		shapes := l.DrawShapes(rng, 6, 32)
		require.NotEmpty(t, shapes)
		b, err := l.Arrange(rng, shapes)
		require.NoError(t, err)
		assert.Equal(t, len(shapes), b.Seqs())
		var blocks []int32
		for s, sh := range shapes {
			assert.Equal(t, int32(sh.Context+sh.Tokens), b.SeqLens[s])
			assert.Equal(t, int32(sh.Tokens), b.QueryStarts[s+1]-b.QueryStarts[s])
			blocks = append(blocks, b.BlockTable[s]...)
		}
		slices.Sort(blocks)
		assert.Equal(t, len(blocks), len(slices.Compact(blocks)), "blocks shared between sequences")
	}
}

// FuzzCheck: Check never panics, whatever the batch, and Feeds accepts
// exactly what Check accepts.
func FuzzCheck(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{255, 0, 17, 3, 3, 3, 200, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int32 {
			if len(data) == 0 {
				return 0
			}
			v := int32(int8(data[0]))
			data = data[1:]
			return v
		}
		b := &Batch{}
		T, S := int(next()&31), int(next()&7)
		for range T {
			b.IDs = append(b.IDs, int64(next()))
			b.Positions = append(b.Positions, next())
			b.SlotMapping = append(b.SlotMapping, next())
		}
		for range S + 1 {
			b.QueryStarts = append(b.QueryStarts, next())
		}
		for range S {
			b.SeqLens = append(b.SeqLens, next())
			row := make([]int32, int(next()&3))
			for j := range row {
				row[j] = next()
			}
			b.BlockTable = append(b.BlockTable, row)
		}
		errCheck := testLayout.Check(b)
		_, errFeeds := testLayout.Feeds(b)
		assert.Equal(t, errCheck == nil, errFeeds == nil)
	})
}

// TestUnpadReadsBackWhatFeedsWrote: Unpad of Feeds is the batch (rows cut
// to their blocks), and the padding region is checked.
func TestUnpadReadsBackWhatFeedsWrote(t *testing.T) {
	b := goodBatch()
	f, err := testLayout.Feeds(b)
	require.NoError(t, err)
	got, err := testLayout.Unpad(f)
	require.NoError(t, err)
	assert.Equal(t, b, got)

	cases := []struct {
		name  string
		edit  func(f map[string]*ir.Tensor)
		input string
		msg   string
	}{
		{"missing", func(f map[string]*ir.Tensor) { delete(f, SeqLens) }, SeqLens, "missing"},
		{"float", func(f map[string]*ir.Tensor) { f[SeqLens] = ir.NewTensor(ir.F32, ir.Shape{4}) }, SeqLens, "want integers"},
		{"shape", func(f map[string]*ir.Tensor) { f[InputIDs] = ir.NewTensor(ir.I64, ir.Shape{15}) }, InputIDs, "compiled for [16]"},
		{"seqs", func(f map[string]*ir.Tensor) { f[SeqsSymbol].SetInt(0, 5) }, SeqsSymbol, "5 sequences"},
		{"padded start", func(f map[string]*ir.Tensor) { f[QueryStarts].SetInt(4, 7) }, QueryStarts, "padding repeats T = 6"},
		{"padded slot", func(f map[string]*ir.Tensor) { f[SlotMapping].SetInt(9, 3) }, SlotMapping, "padding is -1"},
		{"padded id", func(f map[string]*ir.Tensor) { f[InputIDs].SetInt(9, 99) }, InputIDs, "outside the vocabulary"},
		{"huge slot", func(f map[string]*ir.Tensor) {
			x := mustInts(t, ir.I64, 16, -1)
			x.SetInt(0, 1<<40)
			f[SlotMapping] = x
		}, SlotMapping, "outside the pool"},
		{"checked batch", func(f map[string]*ir.Tensor) { f[Positions].SetInt(0, 1) }, Positions, "sits at position 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := testLayout.Feeds(goodBatch())
			require.NoError(t, err)
			c.edit(f)
			_, err = testLayout.Unpad(f)
			var me *MetadataError
			require.True(t, errors.As(err, &me), "%v", err)
			assert.Equal(t, c.input, me.Input, "%v", err)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
}

// mustInts is an integer tensor of n elements, all v.
func mustInts(t *testing.T, dt ir.DType, n int, v int64) *ir.Tensor {
	xs := make([]int64, n)
	for i := range xs {
		xs[i] = v
	}
	x, err := ir.TensorOfInts(dt, ir.Shape{ir.Dim(n)}, xs...)
	require.NoError(t, err)
	return x
}

// TestPointsCoverTheExtents: the verification points are accepted
// batches at the extents their names promise, for layouts of every shape
// (a pool too small for every context shrinks the contexts).
func TestPointsCoverTheExtents(t *testing.T) {
	for _, l := range []Layout{
		testLayout,
		{MaxTokens: 24, MaxSeqs: 6, BlockSize: 4, Blocks: 64, BlocksPerSeq: 8, Vocab: 10},
		{MaxTokens: 64, MaxSeqs: 2, BlockSize: 16, Blocks: 5, BlocksPerSeq: 2, Vocab: 3},
		{MaxTokens: 1, MaxSeqs: 1, BlockSize: 1, Blocks: 1, BlocksPerSeq: 1, Vocab: 2},
	} {
		pts, err := l.Points(rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err, "%+v", l)
		require.Len(t, pts, 5)
		byName := map[string]*Batch{}
		for _, p := range pts {
			require.NoError(t, l.Check(p.Batch), "%s of %+v", p, l)
			byName[p.Name] = p.Batch
		}
		assert.Equal(t, 1, byName["one decode"].Tokens())
		assert.Equal(t, 1, byName["one decode"].Seqs())
		assert.Equal(t, min(l.MaxSeqs, l.MaxTokens), byName["all decodes"].Seqs())
		assert.Equal(t, byName["all decodes"].Seqs(), byName["all decodes"].Tokens())
		assert.Equal(t, min(l.MaxTokens, l.MaxLen()), byName["one long chunk"].Tokens())
		assert.Equal(t, l.MaxSeqs, byName["maxima"].Seqs())
		assert.Equal(t, min(l.MaxTokens, l.MaxSeqs*l.MaxLen()), byName["maxima"].Tokens())
	}
}

// TestEdgePointsCoverTheBuckets: the edge points are batches the layout
// accepts at each row bucket's top and one past the bucket below (every
// T a layout can hold), each over min(T, max seqs) sequences.
func TestEdgePointsCoverTheBuckets(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want []int
	}{
		{Layout{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, Blocks: 64, BlocksPerSeq: 8, Vocab: 10}, []int{1, 2, 3, 4, 5, 8, 9, 16}},
		{Layout{MaxTokens: 24, MaxSeqs: 6, BlockSize: 4, Blocks: 64, BlocksPerSeq: 8, Vocab: 10}, []int{1, 2, 3, 4, 5, 8, 9, 16, 17, 24}},
		// Two sequences of at most 32 positions hold at most 64 tokens.
		{Layout{MaxTokens: 128, MaxSeqs: 2, BlockSize: 16, Blocks: 5, BlocksPerSeq: 2, Vocab: 3}, []int{1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64}},
		{Layout{MaxTokens: 1, MaxSeqs: 1, BlockSize: 1, Blocks: 1, BlocksPerSeq: 1, Vocab: 2}, []int{1}},
	} {
		pts, err := tc.l.EdgePoints(rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err, "%+v", tc.l)
		var got []int
		for _, p := range pts {
			require.NoError(t, tc.l.Check(p.Batch), "%s of %+v", p, tc.l)
			assert.Equal(t, min(p.Batch.Tokens(), tc.l.MaxSeqs), p.Batch.Seqs(), p.String())
			got = append(got, p.Batch.Tokens())
		}
		assert.Equal(t, tc.want, got, "%+v", tc.l)
	}
}

// TestPresentKeepsTheRowsOfTheBatch: a step's logits trimmed to the
// sequences present (the tokens with all logits), other outputs kept, a
// logits output of the wrong extent refused.
func TestPresentKeepsTheRowsOfTheBatch(t *testing.T) {
	b := goodBatch()
	for _, all := range []bool{false, true} {
		l := testLayout
		l.AllLogits = all
		rows, want := l.MaxSeqs, b.Seqs()
		if all {
			rows, want = l.MaxTokens, b.Tokens()
		}
		logits := ir.NewTensor(ir.F32, ir.Shape{ir.Dim(rows), 3})
		for i := range logits.Len() {
			logits.Set(i, float64(i))
		}
		other := ir.NewTensor(ir.F32, ir.Shape{2})
		got, err := l.Present(map[string]*ir.Tensor{Logits: logits, "other": other}, b)
		require.NoError(t, err)
		assert.Same(t, other, got["other"])
		require.Equal(t, ir.Shape{ir.Dim(want), 3}, got[Logits].Shape)
		for i := range got[Logits].Len() {
			assert.Equal(t, float64(i), got[Logits].At(i))
		}
		_, err = l.Present(map[string]*ir.Tensor{Logits: ir.NewTensor(ir.F32, ir.Shape{ir.Dim(rows + 1), 3})}, b)
		assert.ErrorContains(t, err, "compiled for")
	}
}
