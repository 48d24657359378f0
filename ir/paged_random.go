package ir

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// pagedFeeds draws the metadata of the paged ops of g jointly, since no
// per-leaf range says what it must satisfy: for every paged attention
// whose block table, lengths, query starts and sequence count are input
// leaves, a batch of sequences (query starts from 0, lengths that hold
// their tokens, each sequence's blocks distinct and drawn from a shuffled
// pool, table entries past a sequence's blocks -1 so that a kernel
// reading them faults); and for every scatter whose index is an input
// leaf, the slots of that batch's tokens (some -1) when its extents match
// a drawn batch, else distinct random slots (some -1). The result replaces
// those leaves' independent draws.
func pagedFeeds(g *Graph, seed uint64, ranges map[string]Range) (map[string]*Tensor, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9a6ed))
	out := map[string]*Tensor{}
	type batch struct {
		tokens, slots int64
		slotOf        []int64 // per token: its slot, -1 for none
	}
	var drawn []batch
	leaf := func(v Value) (*Node, bool) {
		n := g.Node(v)
		return n, n.Op == OpInput
	}
	for _, n := range g.Nodes {
		if n.Op != OpPagedAttention {
			continue
		}
		tab, ok1 := leaf(n.Inputs[5])
		lens, ok2 := leaf(n.Inputs[6])
		starts, ok3 := leaf(n.Inputs[7])
		seqs, ok4 := leaf(n.Inputs[8])
		if !ok1 || !ok2 || !ok3 || !ok4 {
			continue
		}
		if _, done := out[tab.Name]; done {
			continue // a later layer reading the same metadata
		}
		T := int64(g.Node(n.Inputs[0]).Shape[0])
		P := int64(g.Node(n.Inputs[3]).Shape[0])
		S, M := int64(tab.Shape[0]), int64(tab.Shape[1])
		lo, hi := int64(0), S
		if r, ok := ranges[seqs.Name]; ok {
			lo, hi = max(lo, int64(r.Lo)), min(hi, int64(r.Hi))
		}
		if lo > hi {
			return nil, fmt.Errorf("paged attention: sequence count %q ranges %d..%d over %d table rows", seqs.Name, lo, hi, S)
		}
		m := drawPagedBatch(rng, T, S, M, n.Block, P, lo+rng.Int64N(hi-lo+1))
		for _, t := range []struct {
			n    *Node
			vals []int64
		}{{tab, m.table}, {lens, m.lens}, {starts, m.starts}, {seqs, []int64{m.seqs}}} {
			x, err := TensorOfInts(t.n.DType, t.n.Shape, t.vals...)
			if err != nil {
				return nil, fmt.Errorf("paged attention metadata %q: %w", t.n.Name, err)
			}
			out[t.n.Name] = x
		}
		drawn = append(drawn, batch{tokens: T, slots: P, slotOf: m.slotOf})
	}
	for _, n := range g.Nodes {
		if n.Op != OpScatter {
			continue
		}
		idx, ok := leaf(n.Inputs[2])
		if !ok {
			continue
		}
		if _, done := out[idx.Name]; done {
			continue
		}
		ax, _ := normAxis(n.Axis, len(n.Shape))
		rows, extent := int64(idx.Shape[0]), int64(n.Shape[ax])
		var vals []int64
		for _, b := range drawn {
			if b.tokens == rows && b.slots == extent {
				vals = b.slotOf
				break
			}
		}
		if vals == nil {
			perm := rng.Perm(int(extent))
			vals = make([]int64, rows)
			for i := range vals {
				vals[i] = -1
				if i < len(perm) && rng.IntN(8) != 0 {
					vals[i] = int64(perm[i])
				}
			}
		}
		x, err := TensorOfInts(idx.DType, idx.Shape, vals...)
		if err != nil {
			return nil, fmt.Errorf("scatter index %q: %w", idx.Name, err)
		}
		out[idx.Name] = x
	}
	return out, nil
}

// pagedBatch is one drawn batch's metadata, flat.
type pagedBatch struct {
	table, lens, starts []int64
	seqs                int64
	slotOf              []int64
}

// drawPagedBatch draws seqs sequences over T tokens (some tokens past the
// last sequence sometimes), each with a context that its table row and
// the pool's free blocks can hold.
func drawPagedBatch(rng *rand.Rand, T, S, M, block, P, seqs int64) pagedBatch {
	b := pagedBatch{table: make([]int64, S*M), lens: make([]int64, S), starts: make([]int64, S+1), seqs: seqs, slotOf: make([]int64, T)}
	for i := range b.table {
		b.table[i] = -1
	}
	for i := range b.slotOf {
		b.slotOf[i] = -1
	}
	used := T
	if rng.IntN(3) == 0 {
		used -= rng.Int64N(T/4 + 1)
	}
	// Cut points split the used tokens among the sequences.
	cuts := make([]int64, seqs+1)
	cuts[seqs] = used
	for s := int64(1); s < seqs; s++ {
		cuts[s] = rng.Int64N(used + 1)
	}
	slices.Sort(cuts[1:seqs])
	free := rng.Perm(int(P / block))
	next := int64(0)
	for s := range seqs {
		q := min(cuts[s+1]-cuts[s], M*block, int64(len(free))*block)
		ctx := rng.Int64N(M*block - q + 1)
		for (ctx+q+block-1)/block > int64(len(free)) {
			ctx /= 2
		}
		L := ctx + q
		nb := (L + block - 1) / block
		for j := range nb {
			b.table[s*M+j] = int64(free[j])
		}
		free = free[nb:]
		b.lens[s] = L
		b.starts[s] = next
		for t := range q {
			pos := ctx + t
			if rng.IntN(8) != 0 {
				b.slotOf[next+t] = b.table[s*M+pos/block]*block + pos%block
			}
		}
		next += q
	}
	for s := seqs; s <= S; s++ {
		b.starts[s] = next
	}
	return b
}
