package step

import (
	"fmt"
)

// MetadataError is a batch the program refuses: which input and where.
type MetadataError struct {
	Input string // the input's name (one of the constants above)
	Index int    // the offending element (a token, a sequence), -1 for the whole input
	Msg   string
}

func (e *MetadataError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("step metadata: %s: %s", e.Input, e.Msg)
	}
	return fmt.Sprintf("step metadata: %s[%d]: %s", e.Input, e.Index, e.Msg)
}

func bad(input string, index int, format string, args ...any) error {
	return &MetadataError{Input: input, Index: index, Msg: fmt.Sprintf(format, args...)}
}

// Check refuses a batch the layout's program cannot run as stated. It
// checks, in this order: T and S within their ranges and every input's
// length; token ids within the vocabulary; query starts that begin at 0,
// never decrease and end at T; sequence lengths that hold their step
// tokens and fit their block table row and the layout; each token's
// position against its sequence's length; every block a sequence uses
// inside the pool; every slot -1 or inside the pool and the slot the
// block table gives the token's position; no slot written twice; and no slot
// written by the step that a sequence reads as cached context. It runs
// in time linear in T plus the blocks the sequences use.
func (l Layout) Check(b *Batch) error {
	T, S := b.Tokens(), b.Seqs()
	switch {
	case T < 1 || T > l.MaxTokens:
		return bad(TokensSymbol, -1, "%d tokens; the program runs 1..%d", T, l.MaxTokens)
	case S < 1 || S > l.MaxSeqs:
		return bad(SeqsSymbol, -1, "%d sequences; the program runs 1..%d", S, l.MaxSeqs)
	case len(b.Positions) != T:
		return bad(Positions, -1, "%d entries for %d tokens", len(b.Positions), T)
	case len(b.SlotMapping) != T:
		return bad(SlotMapping, -1, "%d entries for %d tokens", len(b.SlotMapping), T)
	case len(b.QueryStarts) != S+1:
		return bad(QueryStarts, -1, "%d entries for %d sequences; want S+1 = %d", len(b.QueryStarts), S, S+1)
	case len(b.BlockTable) != S:
		return bad(BlockTable, -1, "%d rows for %d sequences", len(b.BlockTable), S)
	}
	for t, id := range b.IDs {
		if id < 0 || id >= int64(l.Vocab) {
			return bad(InputIDs, t, "token id %d is outside the vocabulary 0..%d", id, l.Vocab-1)
		}
	}
	if b.QueryStarts[0] != 0 {
		return bad(QueryStarts, 0, "%d; the first sequence starts at token 0", b.QueryStarts[0])
	}
	for s := range S {
		if b.QueryStarts[s+1] < b.QueryStarts[s] {
			return bad(QueryStarts, s+1, "%d is below the previous start %d; query starts never decrease", b.QueryStarts[s+1], b.QueryStarts[s])
		}
	}
	if got := b.QueryStarts[S]; int(got) != T {
		return bad(QueryStarts, S, "%d; the last query start must be T = %d", got, T)
	}
	for s := range S {
		n := b.QueryStarts[s+1] - b.QueryStarts[s]
		L := b.SeqLens[s]
		row := b.BlockTable[s]
		switch {
		case L < n:
			return bad(SeqLens, s, "length %d is shorter than the sequence's %d tokens in the step", L, n)
		case len(row) > l.BlocksPerSeq:
			return bad(BlockTable, s, "%d blocks; the program's table holds %d a sequence", len(row), l.BlocksPerSeq)
		case int64(L) > int64(len(row))*int64(l.BlockSize):
			return bad(SeqLens, s, "length %d is longer than its block table row holds (%d blocks of %d)", L, len(row), l.BlockSize)
		}
		used := (int(L) + l.BlockSize - 1) / l.BlockSize
		for j, blk := range row[:used] {
			if blk < 0 || int(blk) >= l.Blocks {
				return bad(BlockTable, s, "block %d of the sequence is %d, outside the pool's blocks 0..%d", j, blk, l.Blocks-1)
			}
		}
		ctx := L - n
		for t := b.QueryStarts[s]; t < b.QueryStarts[s+1]; t++ {
			want := ctx + t - b.QueryStarts[s]
			if b.Positions[t] != want {
				return bad(Positions, int(t), "%d; sequence %d has length %d with %d tokens in the step, so this token sits at position %d", b.Positions[t], s, L, n, want)
			}
		}
	}
	return l.checkSlots(b)
}

// checkSlots checks the slot mapping against the pool and the block
// table, and that no written slot is another read's cached context.
func (l Layout) checkSlots(b *Batch) error {
	slots := int64(l.Slots())
	written := make(map[int32]int, len(b.SlotMapping))
	for s := range b.Seqs() {
		for t := b.QueryStarts[s]; t < b.QueryStarts[s+1]; t++ {
			slot := b.SlotMapping[t]
			if slot == Padding {
				continue
			}
			if slot < 0 || int64(slot) >= slots {
				return bad(SlotMapping, int(t), "slot %d is outside the pool's slots 0..%d (or -1 for a padding token)", slot, slots-1)
			}
			pos := b.Positions[t]
			want := b.BlockTable[s][int(pos)/l.BlockSize]*int32(l.BlockSize) + pos%int32(l.BlockSize)
			if slot != want {
				return bad(SlotMapping, int(t), "slot %d; sequence %d's block table puts position %d at slot %d", slot, s, pos, want)
			}
		}
	}
	// Only sequences that share a block write one slot twice.
	for s := range b.Seqs() {
		for t := b.QueryStarts[s]; t < b.QueryStarts[s+1]; t++ {
			slot := b.SlotMapping[t]
			if slot == Padding {
				continue
			}
			if first, twice := written[slot]; twice {
				return bad(SlotMapping, int(t), "slot %d is written twice in the step (tokens %d and %d)", slot, first, t)
			}
			written[slot] = int(t)
		}
	}
	if len(written) == 0 {
		return nil
	}
	// Which offsets of each block the step writes, so that each
	// sequence's context blocks are looked up once.
	byBlock := make(map[int32][]int32, len(written))
	for _, slot := range b.SlotMapping {
		if slot == Padding {
			continue
		}
		blk := slot / int32(l.BlockSize)
		byBlock[blk] = append(byBlock[blk], slot%int32(l.BlockSize))
	}
	for s := range b.Seqs() {
		ctx := int(b.SeqLens[s]) - int(b.QueryStarts[s+1]-b.QueryStarts[s])
		for j := 0; j*l.BlockSize < ctx; j++ {
			blk := b.BlockTable[s][j]
			for _, o := range byBlock[blk] {
				if pos := j*l.BlockSize + int(o); pos < ctx {
					slot := blk*int32(l.BlockSize) + o
					return bad(SlotMapping, written[slot], "slot %d is written by the step, but sequence %d reads it as its cached position %d", slot, s, pos)
				}
			}
		}
	}
	return nil
}
