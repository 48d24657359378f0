package step

import (
	"fmt"
	"math/rand/v2"
)

// SeqShape is one sequence of a batch to arrange: the positions already
// in the pool and the tokens it brings to the step.
type SeqShape struct {
	Context, Tokens int
	// Padding marks a sequence whose tokens keep no key or value (slot
	// -1), as a caller padding T up to a bucket would add.
	Padding bool
}

// Arrange lays sequences out as a batch the layout's program accepts:
// tokens in sequence order, positions after each context, every sequence
// given its own blocks drawn from a shuffled pool (so that tables are
// scattered across the pool as an allocator leaves them), and each token's
// slot from its table. Token ids are left 0 for the caller to fill. It
// fails when the pool, the table or the step cannot hold the sequences.
func (l Layout) Arrange(rng *rand.Rand, seqs []SeqShape) (*Batch, error) {
	free := rng.Perm(l.Blocks)
	b := &Batch{QueryStarts: []int32{0}}
	for s, sh := range seqs {
		if sh.Context < 0 || sh.Tokens < 0 {
			return nil, fmt.Errorf("sequence %d: context %d and tokens %d; want neither negative", s, sh.Context, sh.Tokens)
		}
		L := sh.Context + sh.Tokens
		need := (L + l.BlockSize - 1) / l.BlockSize
		if need > len(free) {
			return nil, fmt.Errorf("sequence %d needs %d blocks; %d are left of the pool's %d", s, need, len(free), l.Blocks)
		}
		row := make([]int32, need)
		for j := range row {
			row[j] = int32(free[j])
		}
		free = free[need:]
		b.BlockTable = append(b.BlockTable, row)
		b.SeqLens = append(b.SeqLens, int32(L))
		for p := sh.Context; p < L; p++ {
			slot := int32(Padding)
			if !sh.Padding {
				slot = row[p/l.BlockSize]*int32(l.BlockSize) + int32(p%l.BlockSize)
			}
			b.IDs = append(b.IDs, 0)
			b.Positions = append(b.Positions, int32(p))
			b.SlotMapping = append(b.SlotMapping, slot)
		}
		b.QueryStarts = append(b.QueryStarts, int32(len(b.IDs)))
	}
	return b, l.Check(b)
}

// DrawShapes draws the sequences of a random step: 1..seqs sequences
// (at most the layout's), each one decode token after a context of
// 1..maxLen-1 positions or a prompt chunk of any length after a context
// of any length, within the layout's tokens and maxLen positions a
// sequence.
func (l Layout) DrawShapes(rng *rand.Rand, seqs, maxLen int) []SeqShape {
	S := 1 + rng.IntN(max(1, min(seqs, l.MaxSeqs, l.MaxTokens)))
	maxLen = min(maxLen, l.MaxLen())
	budget := l.MaxTokens
	out := make([]SeqShape, 0, S)
	for s := range S {
		left := budget - (S - 1 - s) // keep a token for each sequence after this one
		var sh SeqShape
		if rng.IntN(2) == 0 || maxLen < 2 {
			sh = SeqShape{Context: rng.IntN(maxLen), Tokens: 1}
		} else {
			n := 1 + rng.IntN(min(left, maxLen))
			sh = SeqShape{Context: rng.IntN(maxLen - n + 1), Tokens: n}
		}
		budget -= sh.Tokens
		out = append(out, sh)
	}
	return out
}
