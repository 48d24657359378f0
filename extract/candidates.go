package extract

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Candidates returns up to k good extractions that differ from each other
// in at least one chosen node of a needed class, best DAG cost first (ties
// in the order they were found). Each passes Check.
//
// The heuristic: the greedy DAG solution and the tree-optimal solution are
// candidates, and so is every solution one switch away from either, where
// a switch gives one needed class another of its nodes and leaves every
// other class with its choice from the same run (both runs choose a node
// for every class they can compute, so classes the new node brings in are
// already decided). A switch that would close a cycle is skipped. These
// neighbors are what a search would try first: each is the runner-up of a
// decision the heuristics made, priced with everything else held fixed.
// Fewer than k come back when there are fewer distinct ones.
func Candidates(ctx context.Context, p *Problem, k int) ([]*Solution, error) {
	if k <= 0 {
		return nil, nil
	}
	if err := checkRoots(p); err != nil {
		return nil, err
	}
	l := newRevLinks(p)
	greedy, err := greedyChoices(ctx, p, l)
	if err != nil {
		return nil, err
	}
	_, tree, err := treeFixpoint(ctx, p, l)
	if err != nil {
		return nil, err
	}
	for _, r := range p.Roots {
		if greedy[r] < 0 || tree[r] < 0 {
			return nil, fmt.Errorf("extract: root class %s cannot be computed: every node needs a class only reachable through a cycle", p.ClassNames[r])
		}
	}

	// A candidate is a base run's choices with at most one class switched.
	type cand struct {
		base   []int32
		class  int32 // -1 for the base itself
		node   int32
		cost   float64
		serial int
	}
	var pool []cand
	for _, base := range [][]int32{greedy, tree} {
		w := newDAGWalker(p, base)
		pool = append(pool, cand{base, -1, -1, w.rootsCost(), len(pool)})
		order, err := (&Solution{Choice: base}).Needed(p)
		if err != nil {
			return nil, fmt.Errorf("extract: bug: Candidates: %w", err)
		}
		for i, c := range order {
			if i&63 == 63 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			was := base[c]
			for _, m := range p.ClassNodes[c] {
				if m == was || w.price(m, infCost) == infCost {
					continue // the base choice, or a switch that closes a cycle
				}
				base[c] = m
				pool = append(pool, cand{base, c, m, w.rootsCost(), len(pool)})
				base[c] = was
			}
		}
	}
	slices.SortFunc(pool, func(a, b cand) int {
		if a.cost != b.cost {
			if a.cost < b.cost {
				return -1
			}
			return 1
		}
		return a.serial - b.serial
	})

	var out []*Solution
	seen := map[string]bool{}
	choice := make([]int32, p.NumClasses())
	var key []byte
	for _, cd := range pool {
		if len(out) == k {
			break
		}
		copy(choice, cd.base)
		if cd.class >= 0 {
			choice[cd.class] = cd.node
		}
		s, err := checkedSolution(p, "Candidates", choice)
		if err != nil {
			return nil, err
		}
		key = key[:0]
		for c, n := range s.Choice {
			if n >= 0 {
				key = binary.AppendUvarint(key, uint64(c))
				key = binary.AppendUvarint(key, uint64(n))
			}
		}
		if seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		out = append(out, s)
	}
	return out, nil
}

// rootsCost is the DAG cost of the classes the roots reach through the
// walker's choices, each counted once. The choices must be acyclic.
func (w *dagWalker) rootsCost() float64 {
	w.stamp++
	if w.stamp == 0 {
		clear(w.mark)
		w.stamp = 1
	}
	sum := 0.0
	stack := append(w.stack[:0], w.p.Roots...)
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w.mark[c] == w.stamp {
			continue
		}
		w.mark[c] = w.stamp
		nd := &w.p.Nodes[w.choice[c]]
		sum += nd.Cost
		stack = append(stack, nd.Children...)
	}
	w.stack = stack
	return sum
}

// Random returns a random valid extraction, the same one for the same
// seed and problem, for fuzzing what consumes extractions.
//
// It replays the executability fixpoint in a random order: of the nodes
// whose children all have a choice, it picks one uniformly at random, and
// if its class has no choice yet, the class takes it. A class's choice
// thus only reads classes decided before it, so the choices cannot form a
// cycle, and no walk has to backtrack out of a dead end; and every acyclic
// extraction has a chance of coming out, since its nodes may be picked in
// its own bottom-up order.
func Random(p *Problem, seed uint64) (*Solution, error) {
	if err := checkRoots(p); err != nil {
		return nil, err
	}
	l := newRevLinks(p)
	rng := rand.New(rand.NewPCG(seed, 0x6c756d7365617263)) // "lumsearc"
	choice := make([]int32, p.NumClasses())
	for c := range choice {
		choice[c] = -1
	}
	missing := make([]int32, len(p.Nodes))
	copy(missing, l.distinct)
	var ready []int32
	for n := range p.Nodes {
		if missing[n] == 0 {
			ready = append(ready, int32(n))
		}
	}
	for len(ready) > 0 {
		i := rng.IntN(len(ready))
		n := ready[i]
		ready[i] = ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		c := p.Nodes[n].Class
		if choice[c] >= 0 {
			continue
		}
		choice[c] = n
		for _, e := range l.parentsOf(c) {
			missing[e]--
			if missing[e] == 0 {
				ready = append(ready, e)
			}
		}
	}
	for _, r := range p.Roots {
		if choice[r] < 0 {
			return nil, fmt.Errorf("extract: root class %s cannot be computed: every node needs a class only reachable through a cycle", p.ClassNames[r])
		}
	}
	return checkedSolution(p, "Random", choice)
}
