package extract

import (
	"context"
	"fmt"
	"slices"
)

// improveRounds bounds Improve's passes over the moves.
const improveRounds = 4

// Improve refines a solution by local search on its DAG cost. Greedy
// choices are made class by class, each as if it paid alone for what it
// reads, so they miss sharing that pays only when several classes move
// together. Improve tries two kinds of move: one class to another node,
// and adopting a class X, where every needed class that has a node reading
// X switches to it at once (the move that lets one multi-output kernel, or
// one materialized value, serve all its readers). It keeps a move only when
// the cost drops, so the result is never worse than s; it stops when a
// round keeps nothing, after a few rounds, or when ctx ends (returning the
// best so far with ctx's error).
func Improve(ctx context.Context, p *Problem, s *Solution) (*Solution, float64, error) {
	g, err := NewGreedy(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	return g.Improve(ctx, s)
}

// GreedyImproved is GreedyDAG followed by Improve, sharing the greedy
// pass that both need (on a model's e-graph it is most of the time).
func GreedyImproved(ctx context.Context, p *Problem) (*Solution, float64, error) {
	g, err := NewGreedy(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	return g.Improved(ctx)
}

// Greedy is a problem's greedy choices (GreedyDAG's fixed point), kept so
// that several solutions can be improved against them while the greedy
// pass, most of an extraction's time on a model's e-graph, runs once. Its
// methods only read it, so goroutines may share one.
type Greedy struct {
	p     *Problem
	links *revLinks
	base  []int32
}

// NewGreedy runs the greedy pass over p.
func NewGreedy(ctx context.Context, p *Problem) (*Greedy, error) {
	links := newRevLinks(p)
	base, err := greedyChoices(ctx, p, links)
	if err != nil {
		return nil, err
	}
	return &Greedy{p: p, links: links, base: base}, nil
}

// Improved is GreedyImproved: the greedy solution improved by Improve's
// local search.
func (g *Greedy) Improved(ctx context.Context) (*Solution, float64, error) {
	p := g.p
	if err := checkRoots(p); err != nil {
		return nil, 0, err
	}
	for _, r := range p.Roots {
		if g.base[r] < 0 {
			return nil, 0, fmt.Errorf("extract: root class %s cannot be computed: every node needs a class only reachable through a cycle", p.ClassNames[r])
		}
	}
	s, err := checkedSolution(p, "GreedyDAG", slices.Clone(g.base))
	if err != nil {
		return nil, 0, err
	}
	return improve(ctx, p, s, g.base, g.links)
}

// Improve is Improve on g's problem: s refined by local search, classes s
// leaves out taking the greedy choices.
func (g *Greedy) Improve(ctx context.Context, s *Solution) (*Solution, float64, error) {
	if err := s.Check(g.p); err != nil {
		return nil, 0, fmt.Errorf("extract: improve: %w", err)
	}
	return improve(ctx, g.p, s, g.base, g.links)
}

func improve(ctx context.Context, p *Problem, s *Solution, base []int32, links *revLinks) (*Solution, float64, error) {
	choice := make([]int32, len(s.Choice))
	for c := range choice {
		choice[c] = s.Choice[c]
		if choice[c] < 0 {
			choice[c] = base[c]
		}
	}
	cost := func() (float64, bool) {
		v, err := (&Solution{Choice: choice}).DAGCost(p)
		return v, err == nil
	}
	best, _ := cost()
	needed := func() map[int32]bool {
		order, _ := (&Solution{Choice: choice}).Needed(p)
		m := make(map[int32]bool, len(order))
		for _, c := range order {
			m[c] = true
		}
		return m
	}
	type change struct{ class, from int32 }
	var undo []change
	set := func(c, n int32) {
		undo = append(undo, change{c, choice[c]})
		choice[c] = n
	}
	// try keeps the changes made since mark when they lower the cost.
	try := func(mark int) bool {
		if len(undo) == mark {
			return false
		}
		if v, ok := cost(); ok && v < best*(1-1e-12) {
			best = v
			undo = undo[:mark]
			return true
		}
		for i := len(undo) - 1; i >= mark; i-- {
			choice[undo[i].class] = undo[i].from
		}
		undo = undo[:mark]
		return false
	}
	for range improveRounds {
		improved := false
		// Adopt each class by all its needed readers.
		for x := range int32(p.NumClasses()) {
			if err := ctx.Err(); err != nil {
				return finishImprove(p, choice, best, err)
			}
			need := needed()
			// Each needed reader takes its cheapest node reading x (a
			// free view rather than a copy kernel), or else its first.
			cheapest, first := map[int32]int32{}, map[int32]int32{}
			var readers []int32
			for _, n := range links.parentsOf(x) {
				c := p.Nodes[n].Class
				if !need[c] {
					continue
				}
				if old, ok := cheapest[c]; !ok {
					readers = append(readers, c)
					cheapest[c], first[c] = n, n
				} else if p.Nodes[n].Cost < p.Nodes[old].Cost {
					cheapest[c] = n
				}
			}
			for _, pick := range []map[int32]int32{cheapest, first} {
				mark := len(undo)
				for _, c := range readers {
					if choice[c] != pick[c] {
						set(c, pick[c])
					}
				}
				if try(mark) {
					improved = true
					break
				}
			}
		}
		// Move single classes, in program order.
		order, _ := (&Solution{Choice: choice}).Needed(p)
		for _, c := range order {
			for _, n := range p.ClassNodes[c] {
				if n == choice[c] {
					continue
				}
				mark := len(undo)
				set(c, n)
				improved = try(mark) || improved
			}
		}
		if !improved {
			break
		}
	}
	return finishImprove(p, choice, best, nil)
}

func finishImprove(p *Problem, choice []int32, cost float64, err error) (*Solution, float64, error) {
	s, cerr := checkedSolution(p, "Improve", choice)
	if cerr != nil {
		return nil, 0, cerr
	}
	return s, cost, err
}
