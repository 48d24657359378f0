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

// Unpad reads a batch back from the program's padded inputs, by name, as
// a caller hands them to a compiled program (lumsearch run's inputs file,
// the host library's buffers): S from seqs, T from query_start[S], each
// sequence's table row cut to the blocks its length uses. Entries past T
// and S must be what Feeds writes there, or at least harmless: ids within
// the vocabulary, slot -1 (a slot would be written), query starts equal
// to T (the logits of a sequence past S are gathered at its start, less
// one). The batch itself is then checked by Check.
func (l Layout) Unpad(in map[string]*ir.Tensor) (*Batch, error) {
	want := map[string]ir.Shape{
		InputIDs: {ir.Dim(l.MaxTokens)}, Positions: {ir.Dim(l.MaxTokens)}, SlotMapping: {ir.Dim(l.MaxTokens)},
		QueryStarts: {ir.Dim(l.MaxSeqs + 1)}, SeqLens: {ir.Dim(l.MaxSeqs)},
		BlockTable: {ir.Dim(l.MaxSeqs), ir.Dim(l.BlocksPerSeq)}, SeqsSymbol: {},
	}
	for _, name := range []string{InputIDs, Positions, QueryStarts, SeqLens, BlockTable, SlotMapping, SeqsSymbol} {
		x, ok := in[name]
		switch {
		case !ok:
			return nil, bad(name, -1, "missing: a step program takes %s", name)
		case !x.DType.IsInt():
			return nil, bad(name, -1, "is %s; want integers", x.DType)
		case !x.Shape.Equal(want[name]):
			return nil, bad(name, -1, "has shape %v; the program was compiled for %v", x.Shape, want[name])
		}
	}
	S := in[SeqsSymbol].Int(0)
	if S < 1 || S > int64(l.MaxSeqs) {
		return nil, bad(SeqsSymbol, -1, "%d sequences; the program runs 1..%d", S, l.MaxSeqs)
	}
	starts := in[QueryStarts]
	T := starts.Int(S)
	if T < 1 || T > int64(l.MaxTokens) {
		return nil, bad(QueryStarts, int(S), "query_start[S] = %d tokens; the program runs 1..%d", T, l.MaxTokens)
	}
	for s := S + 1; s <= int64(l.MaxSeqs); s++ {
		if v := starts.Int(s); v != T {
			return nil, bad(QueryStarts, int(s), "%d past the %d sequences present; padding repeats T = %d", v, S, T)
		}
	}
	ids, slots := in[InputIDs], in[SlotMapping]
	for t := T; t < int64(l.MaxTokens); t++ {
		if v := ids.Int(t); v < 0 || v >= int64(l.Vocab) {
			return nil, bad(InputIDs, int(t), "padding token id %d is outside the vocabulary 0..%d", v, l.Vocab-1)
		}
		if v := slots.Int(t); v != Padding {
			return nil, bad(SlotMapping, int(t), "slot %d past the %d tokens present; padding is -1 (nothing written)", v, T)
		}
	}
	b := &Batch{}
	for t := range T {
		b.IDs = append(b.IDs, ids.Int(t))
		b.Positions = append(b.Positions, clamp32(in[Positions].Int(t)))
		b.SlotMapping = append(b.SlotMapping, clamp32(slots.Int(t)))
	}
	for s := range S + 1 {
		b.QueryStarts = append(b.QueryStarts, clamp32(starts.Int(s)))
	}
	for s := range S {
		L := in[SeqLens].Int(s)
		b.SeqLens = append(b.SeqLens, clamp32(L))
		used := min(max(0, (L+int64(l.BlockSize)-1)/int64(l.BlockSize)), int64(l.BlocksPerSeq))
		row := make([]int32, used)
		for j := range row {
			row[j] = clamp32(in[BlockTable].Int(s*int64(l.BlocksPerSeq) + int64(j)))
		}
		b.BlockTable = append(b.BlockTable, row)
	}
	return b, l.Check(b)
}

// clamp32 narrows an input's integer to int32, mapping values out of its
// range to its ends so that Check refuses them as out of range rather
// than seeing them wrapped.
func clamp32(v int64) int32 {
	return int32(min(max(v, -1<<31), 1<<31-1))
}

// Logits names a step program's output: the logits of each sequence's last
// token [max seqs, vocab], or with AllLogits of every token [max tokens,
// vocab].
const Logits = "logits"

// Present trims a step's outputs to the rows of b: the logits of its S
// sequences (of its T tokens with AllLogits). The rows past them belong to
// no sequence; the program leaves whatever it leaves there. Outputs
// without those rows are an error naming them.
func (l Layout) Present(outputs map[string]*ir.Tensor, b *Batch) (map[string]*ir.Tensor, error) {
	n, max := b.Seqs(), l.MaxSeqs
	if l.AllLogits {
		n, max = b.Tokens(), l.MaxTokens
	}
	out := make(map[string]*ir.Tensor, len(outputs))
	for name, t := range outputs {
		if name != Logits {
			out[name] = t
			continue
		}
		if len(t.Shape) == 0 || int(t.Shape[0]) != max {
			return nil, fmt.Errorf("step output %s has shape %v; the program was compiled for %d rows", name, t.Shape, max)
		}
		shape := t.Shape.Clone()
		shape[0] = ir.Dim(n)
		rows := ir.NewTensor(t.DType, shape)
		for i := range rows.Len() {
			rows.Set(i, t.At(i))
		}
		out[name] = rows
	}
	return out, nil
}
