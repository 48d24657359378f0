package extract

import (
	"context"
	"fmt"
)

// GreedyDAG finds a good extraction for DAG cost, where each needed class
// is paid once however many nodes read it, in the style of
// extraction-gym's "faster greedy DAG" extractor, and returns the cheaper
// of its result and that extractor's own (FasterGreedyDAG), so that it is
// never worse. It returns the chosen nodes of the classes the roots need
// and their DAG cost. The result is a heuristic, not an optimum (Exact
// is).
//
// Each class keeps its best node so far and the DAG cost of that choice:
// the node's own cost plus, once each, the cost of every class its choice
// reaches through the current choices. A node is priced when all its
// children have a choice, and again whenever one of them changes; a class
// takes a node that beats its current cost. This repeats until nothing
// changes.
//
// extraction-gym keeps, per class, the set of classes its choice needs,
// merged from the children's sets. Here the set is not stored: it is
// walked afresh through the current choices when a node is priced. That
// prices a node against what its children choose now rather than when
// their sets were built, needs no memory per class, and lets the walk stop
// as soon as the running sum reaches the class's current cost (on the
// tensat bert file, three pricings in five end there). The walk also
// refuses a node whose children
// reach its own class, so the choices never form a cycle, zero-cost cycles
// included.
func GreedyDAG(ctx context.Context, p *Problem) (*Solution, float64, error) {
	return GreedyDAGNamed(ctx, p, FasterGreedyOptions{})
}

// GreedyDAGNamed is GreedyDAG with the file's names for FasterGreedyDAG's
// tie-breaks, so that its half reproduces extraction-gym's results.
func GreedyDAGNamed(ctx context.Context, p *Problem, opt FasterGreedyOptions) (*Solution, float64, error) {
	if err := checkRoots(p); err != nil {
		return nil, 0, err
	}
	choice, err := greedyChoices(ctx, p, newRevLinks(p))
	if err != nil {
		return nil, 0, err
	}
	for _, r := range p.Roots {
		if choice[r] < 0 {
			return nil, 0, fmt.Errorf("extract: root class %s cannot be computed: every node needs a class only reachable through a cycle", p.ClassNames[r])
		}
	}
	s, err := checkedSolution(p, "GreedyDAG", choice)
	if err != nil {
		return nil, 0, err
	}
	cost, err := s.DAGCost(p)
	if err != nil {
		return nil, 0, fmt.Errorf("extract: bug: GreedyDAG: %w", err)
	}
	// extraction-gym's own algorithm is sometimes better (it prices a node
	// against its children's sets as they were built): never worse than
	// it. Its choices can be cyclic, then it has no cost to offer.
	if fs, fcost, err := FasterGreedyDAG(ctx, p, opt); err == nil && fcost < cost {
		return fs, fcost, nil
	} else if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	return s, cost, nil
}

// dagWalker prices a node for DAG cost by walking the current choices
// below it.
type dagWalker struct {
	p      *Problem
	choice []int32
	// mark[c] == stamp when class c was counted in the current walk; a new
	// stamp starts a walk without clearing the array.
	mark  []uint32
	stamp uint32
	stack []int32
	// unbounded walks on past the bound: with negative costs a running
	// sum over the bound can still come back under it.
	unbounded bool
}

func newDAGWalker(p *Problem, choice []int32) *dagWalker {
	return &dagWalker{p: p, choice: choice, mark: make([]uint32, p.NumClasses()), unbounded: p.hasNegative()}
}

// price returns the DAG cost of choosing node n for its class: n's own cost
// plus, once each, the costs of the chosen nodes of the classes reachable
// from n's children. It returns +Inf when that reaches n's own class (the
// choice would close a cycle) or when the sum reaches bound (as soon as
// it does, unless negative costs can bring it back).
func (w *dagWalker) price(n int32, bound float64) float64 {
	w.stamp++
	if w.stamp == 0 { // wrapped: old marks could collide with new stamps
		clear(w.mark)
		w.stamp = 1
	}
	nd := &w.p.Nodes[n]
	self := nd.Class
	sum := nd.Cost
	final := bound
	if w.unbounded {
		bound = infCost
	}
	if sum >= bound {
		return infCost
	}
	stack := append(w.stack[:0], nd.Children...)
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w.mark[c] == w.stamp {
			continue
		}
		if c == self {
			w.stack = stack
			return infCost
		}
		w.mark[c] = w.stamp
		ch := &w.p.Nodes[w.choice[c]]
		sum += ch.Cost
		if sum >= bound {
			w.stack = stack
			return infCost
		}
		stack = append(stack, ch.Children...)
	}
	w.stack = stack
	if sum >= final {
		return infCost
	}
	return sum
}

// GreedyFrom completes a partial solution greedily: the classes partial
// chooses keep their nodes, and GreedyDAG's relaxation runs over the
// others only. A model's repeated blocks, chosen once for all (their
// pair's extraction, replayed), leave the greedy pass the few classes
// outside them instead of every class of every block. The result is
// pruned to the needed classes and checked; a root left without a choice,
// or preset choices that form a cycle, is an error.
func GreedyFrom(ctx context.Context, p *Problem, partial *Solution) (*Solution, float64, error) {
	if err := checkRoots(p); err != nil {
		return nil, 0, err
	}
	if len(partial.Choice) != p.NumClasses() {
		return nil, 0, fmt.Errorf("extract: greedy from a solution for %d classes, problem has %d", len(partial.Choice), p.NumClasses())
	}
	for c, n := range partial.Choice {
		if n >= 0 && (int(n) >= len(p.Nodes) || p.Nodes[n].Class != int32(c)) {
			return nil, 0, fmt.Errorf("extract: greedy from a solution whose class %s chooses a node of another class", p.ClassNames[c])
		}
	}
	choice, err := greedyChoicesFrom(ctx, p, newRevLinks(p), partial.Choice)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range p.Roots {
		if choice[r] < 0 {
			return nil, 0, fmt.Errorf("extract: root class %s cannot be computed", p.ClassNames[r])
		}
	}
	s, err := pruneChoices(p, choice)
	if err != nil {
		return nil, 0, fmt.Errorf("extract: greedy from a partial solution: %w", err)
	}
	cost, err := s.DAGCost(p)
	if err != nil {
		return nil, 0, fmt.Errorf("extract: greedy from a partial solution: %w", err)
	}
	return s, cost, nil
}

// greedyChoices runs the greedy relaxation to its fixed point and returns
// a choice for every class it could compute (-1 elsewhere). The choices
// are acyclic at every step.
func greedyChoices(ctx context.Context, p *Problem, l *revLinks) ([]int32, error) {
	return greedyChoicesFrom(ctx, p, l, nil)
}

// greedyChoicesFrom is greedyChoices with the classes preset chooses
// (when not nil) fixed: a fixed class takes its preset node, unpriced,
// once every class that node reads has a choice (so that every walk finds
// choices all the way down), and no other node.
func greedyChoicesFrom(ctx context.Context, p *Problem, l *revLinks, preset []int32) ([]int32, error) {
	nc := p.NumClasses()
	choice := make([]int32, nc)
	total := make([]float64, nc)
	for c := range choice {
		choice[c] = -1
		total[c] = infCost
	}
	w := newDAGWalker(p, choice)
	missing := make([]int32, len(p.Nodes))
	copy(missing, l.distinct)
	// only[c] is class c's preset node, or -1.
	only := make([]int32, nc)
	for c := range only {
		only[c] = -1
		if c < len(preset) {
			only[c] = preset[c]
		}
	}
	allowed := func(n int32) bool {
		o := only[p.Nodes[n].Class]
		return o < 0 || o == n
	}
	queued := make([]bool, len(p.Nodes))
	// Nodes wait in a min-heap on their own cost, as in extraction-gym:
	// cheap nodes settle first, so the sums that later walks stop at are
	// low early on.
	var q costHeap
	push := func(n int32) {
		if !queued[n] {
			queued[n] = true
			q.push(heapItem{p.Nodes[n].Cost, n})
		}
	}
	for n := range p.Nodes {
		if missing[n] == 0 && allowed(int32(n)) {
			push(int32(n))
		}
	}
	for pops := 0; len(q) > 0; pops++ {
		if pops&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		n := q.pop().id
		queued[n] = false
		c := p.Nodes[n].Class
		var v float64
		if only[c] >= 0 {
			if choice[c] >= 0 {
				continue
			}
		} else if v = w.price(n, total[c]); v >= total[c] {
			continue
		}
		first := choice[c] < 0
		choice[c] = n
		total[c] = v
		for _, e := range l.parentsOf(c) {
			if first {
				missing[e]--
			}
			if missing[e] == 0 && allowed(e) {
				push(e)
			}
		}
	}
	return choice, ctx.Err()
}
