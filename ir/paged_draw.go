package ir

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Paged attention's metadata (block table, lengths, query starts, the
// sequence count) means something only as a whole: independent draws of
// each leaf are almost never valid (starts that decrease, lengths shorter
// than a sequence's tokens, blocks past the pool), and the op has no
// meaning on them. Random feeds draw it as a scheduler would have left it.

// PagedDraw is one drawn set of paged attention metadata for a step of
// Tokens tokens over a pool of Slots slots, Block to a block, and a block
// table of Seqs rows and Blocks columns.
type PagedDraw struct {
	Tokens, Slots, Block int64
	Seqs, Blocks         int64
	Table                []int64 // [Seqs, Blocks], -1 where no position needs a block
	Lens                 []int64 // [Seqs]
	Starts               []int64 // [Seqs + 1]
	Present              int64   // sequences present
}

// DrawPaged draws valid metadata for paged attention: a random number of
// sequences present (at least one when the table has a row), each a
// decode token, a chunk of its prompt, or (rarely) no token at all, some
// tokens past the last sequence sometimes left to no sequence; cached
// contexts of random lengths, 0 and whole blocks among them; the blocks a
// context needs taken from a shuffled pool without repeats while the
// pool lasts (at random past that); table entries no cached position
// needs are -1, so that a kernel reading one reads outside the pool.
func DrawPaged(rng *rand.Rand, tokens, slots, block, seqs, blocks int64) (*PagedDraw, error) {
	if block <= 0 || slots < block || slots%block != 0 || seqs < 0 || blocks < 0 || tokens < 0 {
		return nil, fmt.Errorf("paged metadata for %d tokens, %d slots of blocks of %d, a table of %d by %d: no valid draw", tokens, slots, block, seqs, blocks)
	}
	d := &PagedDraw{Tokens: tokens, Slots: slots, Block: block, Seqs: seqs, Blocks: blocks}
	d.Table = make([]int64, seqs*blocks)
	for i := range d.Table {
		d.Table[i] = -1
	}
	d.Lens = make([]int64, seqs)
	d.Starts = make([]int64, seqs+1)
	if seqs == 0 {
		return d, nil
	}
	d.Present = 1 + rng.Int64N(seqs)
	capacity := blocks * block // the most positions a sequence holds
	// Tokens a sequence takes: a decode token, a chunk, or none; those
	// left over belong to no sequence.
	left := tokens
	if tokens > 1 && rng.IntN(4) == 0 {
		left = tokens - 1 - rng.Int64N(tokens/2) // a tail of tokens of no sequence
	}
	pool := rng.Perm(int(slots / block))
	next := 0
	for s := range d.Present {
		var q int64
		switch r := rng.IntN(8); {
		case left == 0 || r == 0:
			q = 0
		case r < 4:
			q = 1
		case s == d.Present-1:
			q = left // the last takes what is left
		default:
			q = 1 + rng.Int64N(left)
		}
		q = min(q, left, capacity)
		left -= q
		d.Starts[s+1] = d.Starts[s] + q
		var ctx int64
		if room := capacity - q; room > 0 {
			switch rng.IntN(4) {
			case 0: // no cached context
			case 1: // whole blocks
				ctx = block * rng.Int64N(room/block+1)
			default:
				ctx = rng.Int64N(room + 1)
			}
		}
		d.Lens[s] = ctx + q
		for j := int64(0); j*block < ctx; j++ {
			b := int64(rng.IntN(len(pool)))
			if next < len(pool) {
				b, next = int64(pool[next]), next+1
			}
			d.Table[int64(s)*blocks+j] = b
		}
	}
	for s := d.Present; s < seqs; s++ {
		d.Starts[s+1] = d.Starts[s]
	}
	return d, nil
}

// pagedFeeds replaces, for every paged attention of g whose metadata
// operands (table, lengths, starts, count) are all leaves drawn here and
// none with a range a caller stated, their independent draws in out with
// one valid draw (DrawPaged), seeded by seed and the node. Metadata that
// an earlier paged attention's draw wrote (the layers of a model share
// it) is kept.
func pagedFeeds(g *Graph, seed uint64, out map[string]*Tensor, stated map[string]Range) error {
	done := map[string]bool{}
	for i, n := range g.Nodes {
		if n.Op != OpPagedAttention || len(n.Inputs) < 9 {
			continue
		}
		meta := []*Node{g.Nodes[n.Inputs[5]], g.Nodes[n.Inputs[6]], g.Nodes[n.Inputs[7]], g.Nodes[n.Inputs[8]]}
		ours := true
		for _, m := range meta {
			_, drawn := out[m.Name]
			_, fixed := stated[m.Name]
			ours = ours && drawn && !fixed && !done[m.Name] && slices.Contains([]Op{OpInput, OpWeight, OpState}, m.Op)
		}
		if !ours {
			continue
		}
		q, pool, table := g.Nodes[n.Inputs[0]].Shape, g.Nodes[n.Inputs[3]].Shape, meta[0].Shape
		rng := rand.New(rand.NewPCG(seed, 0x9a6ed^uint64(i)))
		d, err := DrawPaged(rng, int64(q[0]), int64(pool[0]), n.Block, int64(table[0]), int64(table[1]))
		if err != nil {
			return fmt.Errorf("paged attention %q: %w", n.Name, err)
		}
		for k, vals := range [][]int64{d.Table, d.Lens, d.Starts, {d.Present}} {
			t, err := TensorOfInts(meta[k].DType, meta[k].Shape, vals...)
			if err != nil {
				return fmt.Errorf("paged attention %q: metadata %q: %w", n.Name, meta[k].Name, err)
			}
			out[meta[k].Name] = t
			done[meta[k].Name] = true
		}
	}
	return nil
}
