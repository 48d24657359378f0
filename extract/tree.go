package extract

import (
	"context"
	"fmt"
)

// Tree finds the extraction of least tree cost, where a class read twice is
// paid twice: the tree cost of a node is its own cost plus its children's
// class tree costs, repeats counted, and a class costs its cheapest node.
// It returns the chosen nodes of the classes the roots need and the sum of
// the roots' tree costs, which is optimal. With negative costs the least
// tree cost can be unbounded (a cycle of negative cost reachable from a
// root): that is an error naming the roots (treeNegative).
//
// The least fixed point of those equations is found in the manner of
// Dijkstra's algorithm (Knuth's generalization to superior functions): a
// class is settled when it is the cheapest unsettled class on offer, and a
// node is priced only once all its children are settled. Costs are not
// negative, so a settled class can never get cheaper, and one pass reaches
// the fixed point in O(E log V) rather than the repeated sweeps of a
// Bellman-Ford relaxation.
//
// Settling also makes the choices acyclic even where the e-graph has
// zero-cost cycles (tensat's Split nodes cost 0): a class only ever
// chooses a node whose children were settled before it, so the choices
// follow the settling order. Among nodes of equal cost on offer before
// their class settles, the lowest node index wins, so results are
// deterministic; a node of equal cost whose children settle only after
// its class is never chosen, as it may read that class.
func Tree(ctx context.Context, p *Problem) (*Solution, float64, error) {
	if err := checkRoots(p); err != nil {
		return nil, 0, err
	}
	var tc []float64
	var choice []int32
	var err error
	if p.hasNegative() {
		tc, choice, err = treeNegative(ctx, p)
		if err == nil {
			err = unboundedError(p, tc)
		}
	} else {
		tc, choice, err = treeFixpoint(ctx, p, newRevLinks(p))
	}
	if err != nil {
		return nil, 0, err
	}
	total := 0.0
	for _, r := range p.Roots {
		if choice[r] < 0 {
			return nil, 0, fmt.Errorf("extract: root class %s cannot be computed: every node needs a class only reachable through a cycle", p.ClassNames[r])
		}
		total += tc[r]
	}
	s, err := checkedSolution(p, "Tree", choice)
	if err != nil {
		return nil, 0, err
	}
	// The fixpoint sums in the order TreeCost does, so the two agree to
	// the bit; a difference would mean the choices are not the argmin.
	if got, err := s.TreeCost(p); err != nil || got != total {
		return nil, 0, fmt.Errorf("extract: bug: Tree found cost %v but its solution costs %v (%v)", total, got, err)
	}
	return s, total, nil
}

// treeFixpoint returns every class's tree cost (+Inf where it cannot be
// computed) and its argmin node (-1 there). The choices of all classes,
// needed or not, are acyclic.
func treeFixpoint(ctx context.Context, p *Problem, l *revLinks) ([]float64, []int32, error) {
	nc := p.NumClasses()
	tc := make([]float64, nc)
	choice := make([]int32, nc)
	for c := range tc {
		tc[c] = infCost
		choice[c] = -1
	}
	settled := make([]bool, nc)
	missing := make([]int32, len(p.Nodes))
	copy(missing, l.distinct)
	var h costHeap
	// offer prices node n, whose children are all settled, for its class.
	offer := func(n int32) {
		nd := &p.Nodes[n]
		if settled[nd.Class] {
			return
		}
		v := nd.Cost
		for _, k := range nd.Children {
			v += tc[k]
		}
		c := nd.Class
		if v < tc[c] || (v == tc[c] && n < choice[c]) {
			if v < tc[c] {
				h.push(heapItem{v, c})
			}
			tc[c] = v
			choice[c] = n
		}
	}
	for n := range p.Nodes {
		if missing[n] == 0 {
			offer(int32(n))
		}
	}
	for pops := 0; len(h) > 0; pops++ {
		if pops&4095 == 4095 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
		}
		it := h.pop()
		c := it.id
		if settled[c] || it.cost != tc[c] {
			continue // a stale entry: the class got cheaper or was settled
		}
		settled[c] = true
		for _, n := range l.parentsOf(c) {
			missing[n]--
			if missing[n] == 0 {
				offer(n)
			}
		}
	}
	return tc, choice, ctx.Err()
}
