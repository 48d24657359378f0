package ir

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
)

// pointEval is one demand-driven evaluation.
type pointEval struct {
	ctx       context.Context
	g         *Graph
	feeds     map[string]*Tensor
	magnitude bool
	stats     *pointStats
	// need holds, per node, the elements wanted of it: appended to by its
	// readers, then sorted and deduplicated when the backward pass reaches
	// it. Leaves need no list: they are read in place.
	need [][]int64
	// inPlace marks the leaves, and the views of leaves (a transposed
	// weight, a broadcast constant), which are read where they are: they
	// need no list and hold nothing.
	inPlace []bool
	used    []bool // an in-place node is read
	store   []*pointStore
	work    int64 // elements and multiply-adds since ctx was last checked
}

func newPointEval(ctx context.Context, g *Graph, feeds map[string]*Tensor, magnitude bool, stats *pointStats) *pointEval {
	pe := &pointEval{
		ctx: ctx, g: g, feeds: feeds, magnitude: magnitude, stats: stats,
		need: make([][]int64, len(g.Nodes)), inPlace: make([]bool, len(g.Nodes)),
		used: make([]bool, len(g.Nodes)), store: make([]*pointStore, len(g.Nodes)),
	}
	for i, n := range g.Nodes {
		switch n.Op.Class() {
		case ClassLeaf:
			pe.inPlace[i] = true
		case ClassView:
			pe.inPlace[i] = pe.inPlace[n.Inputs[0]]
		}
	}
	return pe
}

// add records that elements js of v are needed.
func (pe *pointEval) add(v Value, js []int64) {
	if len(js) == 0 {
		return
	}
	if pe.inPlace[v] {
		pe.used[v] = true
		return
	}
	pe.need[v] = append(pe.need[v], js...)
}

// add1 records that element j of v is needed.
func (pe *pointEval) add1(v Value, j int64) {
	if pe.inPlace[v] {
		pe.used[v] = true
		return
	}
	pe.need[v] = append(pe.need[v], j)
}

// tick counts work and checks ctx every so often, so that long loops stop
// soon after a cancellation without paying for a check per element.
func (pe *pointEval) tick(n int64) error {
	pe.work += n
	if pe.work < 1<<20 {
		return nil
	}
	pe.work = 0
	return pe.ctx.Err()
}

// run computes the elements add asked for, and keeps the stores of the
// nodes marked in keep. Its errors name the node, not the graph: the
// public functions, which word their errors differently, add that.
func (pe *pointEval) run(keep []bool) error {
	g := pe.g
	// Backwards: every reader of a node comes after it, so when the pass
	// reaches a node, all that is wanted of it is known.
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if len(pe.need[i]) == 0 {
			continue
		}
		if err := pe.ctx.Err(); err != nil {
			return err
		}
		pe.need[i] = sortUnique(pe.need[i])
		if err := pe.demand(Value(i)); err != nil {
			return fmt.Errorf("node %%%d (%s): %w", i, g.Nodes[i].Op, err)
		}
	}
	// An in-place view reads its input in place.
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if pe.inPlace[i] && pe.used[i] && g.Nodes[i].Op.Class() == ClassView {
			pe.used[g.Nodes[i].Inputs[0]] = true
		}
	}
	// Forwards: compute what is needed, and drop each node's elements
	// after their last reader.
	lastUse := make([]int, len(g.Nodes))
	for i, n := range g.Nodes {
		if len(pe.need[i]) > 0 || (pe.inPlace[i] && pe.used[i]) {
			for _, in := range n.Inputs {
				lastUse[in] = i
			}
		}
	}
	for i, n := range g.Nodes {
		if err := pe.ctx.Err(); err != nil {
			return err
		}
		var err error
		switch {
		case n.Op.Class() == ClassLeaf:
			pe.store[i], err = pe.leaf(n)
		case pe.inPlace[i]:
			if !pe.used[i] {
				continue
			}
			pe.store[i] = pe.view(n)
		case len(pe.need[i]) > 0:
			pe.store[i], err = pe.compute(n, pe.need[i])
			pe.stats.elements += int64(len(pe.need[i]))
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("node %%%d (%s): %w", i, n.Op, err)
		}
		for _, in := range n.Inputs {
			if s := pe.store[in]; s != nil && s.missing >= 0 {
				return fmt.Errorf("node %%%d (%s): internal error: element %d of %%%d was not computed", i, n.Op, s.missing, in)
			}
		}
		pe.need[i] = nil // the store holds the list now
		for _, in := range n.Inputs {
			if lastUse[in] == i && !keep[in] {
				pe.store[in] = nil
			}
		}
	}
	return nil
}

// sortUnique sorts js and drops repeats, in place.
func sortUnique(js []int64) []int64 {
	slices.Sort(js)
	return slices.Compact(js)
}

// unflattenInto writes the multi-index of element flat of shape into idx.
func unflattenInto(flat int64, shape Shape, idx []int64) {
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = flat % int64(shape[d])
			flat /= int64(shape[d])
		}
	}
}

func (pe *pointEval) inputTypes(n *Node) []ValueType {
	ins := make([]ValueType, len(n.Inputs))
	for k, x := range n.Inputs {
		ins[k] = ValueType{pe.g.Nodes[x].Shape, pe.g.Nodes[x].DType}
	}
	return ins
}

// parallel runs one(p) for p in [0, count), each costing about cost
// multiply-adds, spread over the processors when the total is large. The
// results do not depend on the split: each p writes only its own element.
func (pe *pointEval) parallel(count, cost int, one func(p int)) error {
	const chunk = 1 << 16 // multiply-adds between ctx checks
	per := max(1, chunk/max(cost, 1))
	workers := min(runtime.GOMAXPROCS(0), (count+per-1)/per)
	if workers <= 1 {
		for p := range count {
			one(p)
			if (p+1)%per == 0 {
				if err := pe.ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				lo := next
				next += per
				mu.Unlock()
				if lo >= count || pe.ctx.Err() != nil {
					return
				}
				for p := lo; p < min(lo+per, count); p++ {
					one(p)
				}
			}
		})
	}
	wg.Wait()
	return pe.ctx.Err()
}
