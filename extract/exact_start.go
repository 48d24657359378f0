package extract

import (
	"container/heap"
	"math"
)

// bottomUp is a tree-cost extraction over the model's alive nodes with the
// given per-node weights: classes are settled cheapest first, Dijkstra
// style (Knuth's generalization to "superior" functions: a node's value is
// its weight plus its children's values), and a node only counts once all
// its child classes are settled. A class therefore only ever chooses a
// node whose children were settled before it, so the choices are acyclic
// by construction, whatever the weights. Every class the model reaches
// gets a choice, so the result is a valid solution of the Problem.
//
// With the real costs as weights it is the start exact extraction improves
// on; with the nodes of a cyclic integer solution weighted zero it repairs
// that solution into a nearby acyclic one.
func (m *exactModel) bottomUp(weight func(n int32) float64) *Solution {
	return m.bottomUpAgg(weight, false)
}

// bottomUpAgg is bottomUp with a choice of how a node's value combines its
// children's: their sum (tree cost), or with chain set, their maximum (the
// heaviest chain below, the aggregate of pathBound). The chain variant
// ignores what branches cost side by side, which suits graphs whose cost
// lies along one long chain of layers, and gives a different start.
func (m *exactModel) bottomUpAgg(weight func(n int32) float64, chain bool) *Solution {
	p := m.p
	sol := NewSolution(p)
	parents, missing := m.readers()
	value := make([]float64, p.NumClasses())
	for c := range value {
		value[c] = math.Inf(1)
	}
	var q exactHeap
	for i := range p.Nodes {
		if m.alive[i] && missing[i] == 0 {
			m.offer(&q, sol, value, int32(i), weight(int32(i)))
		}
	}
	settled := make([]bool, p.NumClasses())
	for q.Len() > 0 {
		it := heap.Pop(&q).(exactItem)
		if settled[it.class] || it.value > value[it.class] {
			continue
		}
		settled[it.class] = true
		for _, pi := range parents[it.class] {
			missing[pi]--
			if missing[pi] > 0 {
				continue
			}
			v := 0.0
			for _, k := range p.Nodes[pi].Children {
				if chain {
					v = math.Max(v, value[k])
				} else {
					v += value[k]
				}
			}
			v += weight(pi)
			if pc := p.Nodes[pi].Class; !settled[pc] {
				m.offer(&q, sol, value, pi, v)
			}
		}
	}
	return sol
}

// offer makes node n the choice of its class if value v beats the class's
// best so far.
func (m *exactModel) offer(q *exactHeap, sol *Solution, value []float64, n int32, v float64) {
	c := m.p.Nodes[n].Class
	if v < value[c] || sol.Choice[c] < 0 {
		value[c] = v
		sol.Choice[c] = n
		heap.Push(q, exactItem{class: c, value: v})
	}
}

type exactItem struct {
	class int32
	value float64
}

// exactHeap orders classes by value, then by index so that ties settle the
// same way on every run.
type exactHeap []exactItem

func (h exactHeap) Len() int { return len(h) }
func (h exactHeap) Less(i, j int) bool {
	if h[i].value != h[j].value {
		return h[i].value < h[j].value
	}
	return h[i].class < h[j].class
}
func (h exactHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *exactHeap) Push(x any)   { *h = append(*h, x.(exactItem)) }
func (h *exactHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// exactPrune clears the choices of classes the solution does not need, so that
// solutions compare and print by what they compute.
func exactPrune(p *Problem, s *Solution) *Solution {
	order, err := s.Needed(p)
	if err != nil {
		return s
	}
	out := NewSolution(p)
	for _, c := range order {
		out.Choice[c] = s.Choice[c]
	}
	return out
}
