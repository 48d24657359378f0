package step

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// Feeds checks a batch and returns the step program's inputs, padded to
// the layout's maxima: tokens past T are id 0 at position 0 with slot -1,
// query starts past S repeat T, lengths past S are 0 and table rows past
// a row's blocks are 0. The program reads no padded entry as data: a
// token past T belongs to no sequence present, and a table entry past a
// sequence's length is never looked up.
func (l Layout) Feeds(b *Batch) (map[string]*ir.Tensor, error) {
	if err := l.Check(b); err != nil {
		return nil, err
	}
	T, S := b.Tokens(), b.Seqs()
	ids := make([]int64, l.MaxTokens)
	copy(ids, b.IDs)
	pos := make([]int64, l.MaxTokens)
	slots := make([]int64, l.MaxTokens)
	for t := range slots {
		slots[t] = Padding
	}
	for t := range T {
		pos[t], slots[t] = int64(b.Positions[t]), int64(b.SlotMapping[t])
	}
	starts := make([]int64, l.MaxSeqs+1)
	for s := range starts {
		starts[s] = int64(T)
		if s <= S {
			starts[s] = int64(b.QueryStarts[s])
		}
	}
	lens := make([]int64, l.MaxSeqs)
	table := make([]int64, l.MaxSeqs*l.BlocksPerSeq)
	for s := range S {
		lens[s] = int64(b.SeqLens[s])
		for j, blk := range b.BlockTable[s] {
			table[s*l.BlocksPerSeq+j] = int64(blk)
		}
	}
	out := map[string]*ir.Tensor{}
	add := func(name string, dt ir.DType, shape ir.Shape, vals []int64) error {
		t, err := ir.TensorOfInts(dt, shape, vals...)
		if err != nil {
			return fmt.Errorf("step input %s: %w", name, err)
		}
		out[name] = t
		return nil
	}
	mt, ms := ir.Dim(l.MaxTokens), ir.Dim(l.MaxSeqs)
	for _, in := range []struct {
		name  string
		dt    ir.DType
		shape ir.Shape
		vals  []int64
	}{
		{InputIDs, ir.I64, ir.Shape{mt}, ids},
		{Positions, ir.I32, ir.Shape{mt}, pos},
		{QueryStarts, ir.I32, ir.Shape{ms + 1}, starts},
		{SeqLens, ir.I32, ir.Shape{ms}, lens},
		{BlockTable, ir.I32, ir.Shape{ms, ir.Dim(l.BlocksPerSeq)}, table},
		{SlotMapping, ir.I32, ir.Shape{mt}, slots},
		{SeqsSymbol, ir.I32, ir.Shape{}, []int64{int64(S)}},
	} {
		if err := add(in.name, in.dt, in.shape, in.vals); err != nil {
			return nil, err
		}
	}
	return out, nil
}
