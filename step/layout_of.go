package step

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// LayoutOf reads a step program's layout from its graph: the maxima from
// its metadata inputs' shapes, the block size and window (or, where they
// differ, each layer's window) from its paged attention ops, the pool from its state buffers, the vocabulary from its
// logits. A graph without paged attention, or without every input the
// step's contract names, is not a step: (nil, nil). One with them all
// that breaks the contract is an error.
func LayoutOf(g *ir.Graph) (*Layout, error) {
	var attn []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == ir.OpPagedAttention {
			attn = append(attn, n)
		}
	}
	if len(attn) == 0 {
		return nil, nil
	}
	// Paged attention alone (a kernel's body, a test's graph) is no
	// serving step: a step has every one of the contract's inputs.
	for _, name := range []string{InputIDs, Positions, QueryStarts, SeqLens, BlockTable, SlotMapping, SeqsSymbol} {
		if !slices.ContainsFunc(g.Inputs(), func(v ir.Value) bool { return g.Node(v).Name == name }) {
			return nil, nil
		}
	}
	input := func(name string) (*ir.Node, error) {
		for _, v := range g.Inputs() {
			if n := g.Node(v); n.Name == name {
				return n, nil
			}
		}
		return nil, fmt.Errorf("step graph %s has no input %q", g.Name, name)
	}
	shapes := map[string]int{InputIDs: 1, Positions: 1, QueryStarts: 1, SeqLens: 1, BlockTable: 2, SlotMapping: 1, SeqsSymbol: 0}
	for _, name := range []string{InputIDs, Positions, QueryStarts, SeqLens, BlockTable, SlotMapping, SeqsSymbol} {
		n, err := input(name)
		if err != nil {
			return nil, err
		}
		if !n.DType.IsInt() || len(n.Shape) != shapes[name] {
			return nil, fmt.Errorf("step graph %s: input %q is %s%v; want integers of rank %d", g.Name, name, n.DType, n.Shape, shapes[name])
		}
	}
	ids, _ := input(InputIDs)
	table, _ := input(BlockTable)
	first := attn[0]
	pool := g.Node(first.Inputs[3]).Shape
	l := &Layout{
		MaxTokens: int(ids.Shape[0]), MaxSeqs: int(table.Shape[0]), BlocksPerSeq: int(table.Shape[1]),
		BlockSize: int(first.Block), Window: int(first.Window),
		Blocks: int(int64(pool[0]) / first.Block), KVHeads: int(pool[1]), HeadDim: int(pool[2]), Layers: len(attn),
	}
	for _, n := range attn[1:] {
		if n.Block != first.Block || !g.Node(n.Inputs[3]).Shape.Equal(pool) {
			return nil, fmt.Errorf("step graph %s: its layers' paged attention disagree on the pool (block %d, %v against block %d, %v)",
				g.Name, n.Block, g.Node(n.Inputs[3]).Shape, first.Block, pool)
		}
		if n.Window != first.Window && l.LayerWindows == nil {
			// Layers of their own windows (gpt-oss's sliding and full
			// layers), in graph order: the layers'.
			l.Window = 0
			for _, a := range attn {
				l.LayerWindows = append(l.LayerWindows, int(a.Window))
			}
		}
	}
	for _, o := range g.Outputs {
		if o.Name == "logits" {
			s := g.Node(o.Value).Shape
			l.Vocab = int(s[len(s)-1])
			l.AllLogits = int(s[0]) == l.MaxTokens && l.MaxTokens != l.MaxSeqs
		}
	}
	if l.Vocab == 0 {
		return nil, fmt.Errorf("step graph %s has no logits output", g.Name)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("step graph %s: %w", g.Name, err)
	}
	for name, want := range map[string]ir.Shape{
		Positions: {ir.Dim(l.MaxTokens)}, SlotMapping: {ir.Dim(l.MaxTokens)}, QueryStarts: {ir.Dim(l.MaxSeqs + 1)}, SeqLens: {ir.Dim(l.MaxSeqs)},
	} {
		if n, _ := input(name); !n.Shape.Equal(want) {
			return nil, fmt.Errorf("step graph %s: input %q has shape %v; want %v", g.Name, name, n.Shape, want)
		}
	}
	return l, nil
}
