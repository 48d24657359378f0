package extract

import (
	"container/heap"
	"math"
	"slices"
)

// exactModel is the part of a Problem that exact extraction searches: the
// nodes left by reductions that each keep at least one optimal solution,
// over the classes reachable from the roots through them. Every solution of
// the model is a solution of the Problem (it only drops nodes and classes),
// so solving the model exactly solves the Problem exactly. Shrinking it first matters because the
// integer program's size, not the e-graph's, decides the solver's time.
type exactModel struct {
	p *Problem
	// alive marks the nodes kept.
	alive []bool
	// kids are each node's distinct child classes, sorted (the DAG cost
	// does not care how often a child is read).
	kids [][]int32
	// classes are the reachable classes, in increasing order; nodes of a
	// reachable class that are alive are its candidates.
	classes []int32
}

// newExactModel applies the reductions that keep an optimal solution:
//
//   - a node that reads its own class can never be chosen, since choosing
//     it is a cycle;
//   - a node is dominated by another of its class that costs no more and
//     reads a subset of its child classes: swapping it for the other keeps
//     a solution valid (no new edges, so no new cycle), needs no class the
//     old one did not, and costs no more;
//   - what is left is run through the executability fixpoint again and
//     cut down to the classes reachable from the roots.
func newExactModel(p *Problem) *exactModel {
	m := &exactModel{p: p, alive: make([]bool, len(p.Nodes)), kids: make([][]int32, len(p.Nodes))}
	for i, n := range p.Nodes {
		k := slices.Clone(n.Children)
		slices.Sort(k)
		m.kids[i] = slices.Compact(k)
		_, self := slices.BinarySearch(m.kids[i], n.Class)
		m.alive[i] = !self
	}
	for c := range p.ClassNodes {
		m.dropDominated(int32(c))
	}
	m.fixpoint()
	m.reachable()
	return m
}

// dropDominated removes the nodes of class c that another alive node of c
// dominates. The relation "b dominates a" is cost(b) <= cost(a) and
// kids(b) ⊆ kids(a), with ties (equal cost and equal kids) broken by
// index; it is a strict partial order, so every removed node keeps a
// dominator that stays. The pairwise test is quadratic in the class's
// size, so classes above maxDominanceClass nodes are left whole: keeping
// a dominated node costs the solver time, never correctness.
func (m *exactModel) dropDominated(c int32) {
	nodes := m.p.ClassNodes[c]
	if len(nodes) < 2 || len(nodes) > maxDominanceClass {
		return
	}
	for _, a := range nodes {
		if !m.alive[a] {
			continue
		}
		for _, b := range nodes {
			if a == b || !m.alive[b] {
				continue
			}
			ca, cb := m.p.Nodes[a].Cost, m.p.Nodes[b].Cost
			if cb > ca || !exactSubset(m.kids[b], m.kids[a]) {
				continue
			}
			if cb == ca && len(m.kids[b]) == len(m.kids[a]) && b > a {
				continue // a ties with b and comes first: a stays
			}
			m.alive[a] = false
			break
		}
	}
}

// maxDominanceClass caps the class size dropDominated works on (4096² pair
// tests take a fraction of a second).
const maxDominanceClass = 4096

// exactSubset reports whether sorted s is a subset of sorted t.
func exactSubset(s, t []int32) bool {
	j := 0
	for _, x := range s {
		for j < len(t) && t[j] < x {
			j++
		}
		if j == len(t) || t[j] != x {
			return false
		}
		j++
	}
	return true
}

// fixpoint keeps only alive nodes all of whose children classes have an
// alive executable node. Dropping self-reading and dominated nodes never
// empties a computable class (a dominated node's dominator reads fewer
// classes; the node that first made a class computable never reads that
// class), but running it makes that a checked fact rather than an argument.
func (m *exactModel) fixpoint() {
	p := m.p
	parents, missing := m.readers()
	var ready []int32
	for i := range p.Nodes {
		if m.alive[i] && missing[i] == 0 {
			ready = append(ready, int32(i))
		}
	}
	computable := make([]bool, p.NumClasses())
	exec := make([]bool, len(p.Nodes))
	for len(ready) > 0 {
		i := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		exec[i] = true
		c := p.Nodes[i].Class
		if computable[c] {
			continue
		}
		computable[c] = true
		for _, pi := range parents[c] {
			missing[pi]--
			if missing[pi] == 0 {
				ready = append(ready, pi)
			}
		}
	}
	for i := range m.alive {
		m.alive[i] = m.alive[i] && exec[i]
	}
}

// reachable finds the classes reachable from the roots through alive nodes.
func (m *exactModel) reachable() {
	p := m.p
	reach := make([]bool, p.NumClasses())
	var stack []int32
	for _, r := range p.Roots {
		if !reach[r] {
			reach[r] = true
			stack = append(stack, r)
		}
	}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, n := range p.ClassNodes[c] {
			if !m.alive[n] {
				continue
			}
			for _, k := range m.kids[n] {
				if !reach[k] {
					reach[k] = true
					stack = append(stack, k)
				}
			}
		}
	}
	m.classes = m.classes[:0]
	for c, ok := range reach {
		if ok {
			m.classes = append(m.classes, int32(c))
		}
	}
	// Nodes of unreachable classes are of no use; marking them dead keeps
	// every later loop over alive nodes inside the model.
	for i, n := range p.Nodes {
		if !reach[n.Class] {
			m.alive[i] = false
		}
	}
}

// candidates are the alive nodes of class c.
func (m *exactModel) candidates(c int32) []int32 {
	var out []int32
	for _, n := range m.p.ClassNodes[c] {
		if m.alive[n] {
			out = append(out, n)
		}
	}
	return out
}

// lowerBound is a bound that needs no solver: the classes every solution
// needs (the roots, and any class that every candidate of a needed class
// reads) each cost at least their cheapest candidate. It is often tight on
// small e-graphs, where it proves the greedy start optimal at once.
func (m *exactModel) lowerBound() float64 {
	p := m.p
	need := make([]bool, p.NumClasses())
	var queue []int32
	for _, r := range p.Roots {
		if !need[r] {
			need[r] = true
			queue = append(queue, r)
		}
	}
	sum := 0.0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		var common []int32
		minCost := -1.0
		for i, n := range m.candidates(c) {
			if cst := p.Nodes[n].Cost; minCost < 0 || cst < minCost {
				minCost = cst
			}
			if i == 0 {
				common = slices.Clone(m.kids[n])
			} else {
				common = exactIntersect(common, m.kids[n])
			}
		}
		sum += minCost
		for _, k := range common {
			if !need[k] {
				need[k] = true
				queue = append(queue, k)
			}
		}
	}
	return sum
}

// exactIntersect keeps the elements of sorted s that are in sorted t.
func exactIntersect(s, t []int32) []int32 {
	out := s[:0]
	j := 0
	for _, x := range s {
		for j < len(t) && t[j] < x {
			j++
		}
		if j < len(t) && t[j] == x {
			out = append(out, x)
		}
	}
	return out
}

// pathBound is the longest-chain bound: L(c) = min over candidates n of
// cost(n) + max over n's child classes k of L(k), the least fixpoint, and
// the bound is the largest L of a root. In an acyclic solution a chain of
// reads from a class down to a leaf passes through distinct classes, each
// paid once, so the solution costs at least any chain's sum; L(c) is the
// least the heaviest chain below c can weigh. Unlike the LP relaxation,
// which lets classes on a cycle support each other for free, it respects
// acyclicity: a value is only ever built from classes settled before.
func (m *exactModel) pathBound() float64 {
	p := m.p
	parents, missing := m.readers()
	value := make([]float64, p.NumClasses())
	for c := range value {
		value[c] = math.Inf(1)
	}
	var q exactHeap
	push := func(n int32, v float64) {
		if c := p.Nodes[n].Class; v < value[c] {
			value[c] = v
			heap.Push(&q, exactItem{class: c, value: v})
		}
	}
	for i := range p.Nodes {
		if m.alive[i] && missing[i] == 0 {
			push(int32(i), p.Nodes[i].Cost)
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
			if missing[pi] > 0 || settled[p.Nodes[pi].Class] {
				continue
			}
			v := 0.0
			for _, k := range m.kids[pi] {
				v = math.Max(v, value[k])
			}
			push(pi, p.Nodes[pi].Cost+v)
		}
	}
	lb := 0.0
	for _, r := range p.Roots {
		lb = math.Max(lb, value[r])
	}
	return lb
}

// readers indexes the alive nodes by the classes they read, and counts each
// node's child classes: the state of every bottom-up pass over the model (a
// node becomes ready when its count reaches zero).
func (m *exactModel) readers() (parents [][]int32, missing []int) {
	parents = make([][]int32, m.p.NumClasses())
	missing = make([]int, len(m.p.Nodes))
	for i := range m.p.Nodes {
		if !m.alive[i] {
			continue
		}
		for _, k := range m.kids[i] {
			parents[k] = append(parents[k], int32(i))
		}
		missing[i] = len(m.kids[i])
	}
	return parents, missing
}
