package cuda

import (
	"math/rand/v2"
	"slices"

	"github.com/lumsearch/lumsearch/internal/mmap"
	"github.com/lumsearch/lumsearch/ir"
)

// floatPool keeps the float32 storage of a verification group's large
// inputs for the next groups' inputs: at a large model's real shapes they
// are gigabytes, and fresh memory costs a page fault per 4 KiB page
// touched, seconds per gigabyte on a virtual machine.
type floatPool struct {
	free [][]float32
}

// take returns n elements of storage, contents undefined: the smallest
// kept slice that holds them, or new memory.
func (p *floatPool) take(n int) []float32 {
	best := -1
	for i, s := range p.free {
		if cap(s) >= n && (best < 0 || cap(s) < cap(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		s := make([]float32, n)
		mmap.AdviseHugeFloat32(s)
		return s
	}
	s := p.free[best][:n]
	p.free = slices.Delete(p.free, best, best+1)
	return s
}

// give keeps s, which nothing reads any more, for later takes; small
// slices are left to the collector.
func (p *floatPool) give(s []float32) {
	if cap(s) >= 1<<20 {
		p.free = append(p.free, s[:cap(s)])
	}
}

// KernelInputs draws a kernel body's inputs: ir.RandomFeeds's typical
// values (floats of both signs and varied magnitude, positive where an op
// needs it, never all zeros), each within what it means in the body
// (ir.InputRanges: a 0/1 mask, a position within its iota's length), and
// gather indices over their whole valid range, negative ones (counting
// from the end, which the gather op allows) included.
func KernelInputs(body *ir.Graph, seed uint64) (map[string]*ir.Tensor, error) {
	return kernelInputs(body, seed, nil, nil)
}

// kernelInputs is KernelInputs, large float inputs drawn into storage from
// pool when it is not nil, and shared with the bodies drawn before with
// the same seed that draw them alike (ir.RandomFeedsShared) when shared
// is not nil.
func kernelInputs(body *ir.Graph, seed uint64, pool *floatPool, shared ir.LargeLeaves) (map[string]*ir.Tensor, error) {
	var take func(int) []float32
	if pool != nil {
		take = pool.take
	}
	feeds, err := ir.RandomFeedsShared(body, seed, ir.Typical, take, shared)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9a7e))
	for v, extent := range gatherIndexLeaves(body) {
		t := feeds[body.Node(v).Name]
		if t == nil || t.F32 != nil || extent <= 0 {
			continue
		}
		nonzero := false
		for i := range t.Len() {
			x := rng.Int64N(2*extent) - extent
			t.SetInt(i, x)
			nonzero = nonzero || x != 0
		}
		if t.Len() > 0 && !nonzero {
			t.SetInt(0, -1)
		}
	}
	return feeds, nil
}

// gatherIndexLeaves maps each input that reaches a gather's indices
// through views, casts and concatenations only to the smallest extent it
// indexes.
func gatherIndexLeaves(body *ir.Graph) map[ir.Value]int64 {
	out := map[ir.Value]int64{}
	var walk func(v ir.Value, extent int64, seen map[ir.Value]bool)
	walk = func(v ir.Value, extent int64, seen map[ir.Value]bool) {
		if seen[v] {
			return
		}
		seen[v] = true
		n := body.Node(v)
		switch {
		case n.Op == ir.OpInput:
			if e, ok := out[v]; !ok || extent < e {
				out[v] = extent
			}
		case n.Op == ir.OpPad:
			// Padding adds its constant, which need not be an index.
		case n.Op.Class() == ir.ClassView, n.Op == ir.OpCast, n.Op == ir.OpConcat:
			for _, in := range n.Inputs {
				walk(in, extent, seen)
			}
		}
	}
	for _, n := range body.Nodes {
		if n.Op != ir.OpGather {
			continue
		}
		data := body.Node(n.Inputs[0]).Shape
		ax := n.Axis
		if ax < 0 {
			ax += len(data)
		}
		if ax < 0 || ax >= len(data) {
			continue
		}
		walk(n.Inputs[1], int64(data[ax]), map[ir.Value]bool{})
	}
	return out
}
