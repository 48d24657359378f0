package extract

import (
	"fmt"
	"math"
)

// revLinks are the reverse edges that the bottom-up algorithms walk: for
// each class, the nodes that read it, each once however often it reads it;
// and for each node, how many distinct classes it reads. They are kept in flat
// arrays (a compressed sparse row layout) because the algorithms touch them
// once per relaxation and the largest files have tens of thousands of edges.
type revLinks struct {
	start    []int32 // parents of class c are parents[start[c]:start[c+1]]
	parents  []int32
	distinct []int32 // node -> number of distinct child classes
}

// newRevLinks builds the reverse edges of p.
func newRevLinks(p *Problem) *revLinks {
	nc := p.NumClasses()
	l := &revLinks{start: make([]int32, nc+1), distinct: make([]int32, len(p.Nodes))}
	// mark[c] == i+1 while node i is being scanned, to count each child
	// class once without allocating a set per node.
	mark := make([]int32, nc)
	for i := range p.Nodes {
		for _, ch := range p.Nodes[i].Children {
			if mark[ch] != int32(i+1) {
				mark[ch] = int32(i + 1)
				l.distinct[i]++
				l.start[ch+1]++
			}
		}
	}
	for c := 0; c < nc; c++ {
		l.start[c+1] += l.start[c]
	}
	l.parents = make([]int32, l.start[nc])
	fill := make([]int32, nc)
	copy(fill, l.start[:nc])
	clear(mark)
	for i := range p.Nodes {
		for _, ch := range p.Nodes[i].Children {
			if mark[ch] != int32(i+1) {
				mark[ch] = int32(i + 1)
				l.parents[fill[ch]] = int32(i)
				fill[ch]++
			}
		}
	}
	return l
}

// parentsOf lists the nodes that read class c, in increasing order.
func (l *revLinks) parentsOf(c int32) []int32 { return l.parents[l.start[c]:l.start[c+1]] }

// pruneChoices keeps the choices of the classes the roots need, so that two
// solutions that compute the same program have equal Choice slices. It
// fails when a needed class has no choice or the choices form a cycle.
func pruneChoices(p *Problem, choice []int32) (*Solution, error) {
	full := &Solution{Choice: choice}
	order, err := full.Needed(p)
	if err != nil {
		return nil, err
	}
	s := NewSolution(p)
	for _, c := range order {
		s.Choice[c] = choice[c]
	}
	return s, nil
}

// checkedSolution prunes an algorithm's choices to the needed classes and
// checks them. Every exported algorithm returns through it, so that a
// result that fails Check is reported as a bug rather than handed out.
func checkedSolution(p *Problem, algo string, choice []int32) (*Solution, error) {
	s, err := pruneChoices(p, choice)
	if err == nil {
		err = s.Check(p)
	}
	if err != nil {
		return nil, fmt.Errorf("extract: bug: %s produced an invalid solution: %w", algo, err)
	}
	return s, nil
}

// checkRoots reports a root class with no executable node. NewProblem
// refuses such roots; a Problem built by hand may still have them.
func checkRoots(p *Problem) error {
	for _, r := range p.Roots {
		if r < 0 || int(r) >= p.NumClasses() {
			return fmt.Errorf("extract: root %d is not a class of the problem", r)
		}
		if len(p.ClassNodes[r]) == 0 {
			return fmt.Errorf("extract: root class %s cannot be computed: it has no executable node", p.ClassNames[r])
		}
	}
	return nil
}

// infCost is +Inf, the cost of what cannot be computed.
var infCost = math.Inf(1)

// costHeap is a binary min-heap of (cost, id) items ordered by cost, then
// id, so that pops are deterministic among equal costs. It is written out
// rather than built on container/heap to avoid an interface call per
// comparison in the algorithms' inner loops.
type costHeap []heapItem

type heapItem struct {
	cost float64
	id   int32
}

func (a heapItem) less(b heapItem) bool {
	return a.cost < b.cost || (a.cost == b.cost && a.id < b.id)
}

func (h *costHeap) push(it heapItem) {
	*h = append(*h, it)
	s := *h
	i := len(s) - 1
	for i > 0 {
		j := (i - 1) / 2
		if !s[i].less(s[j]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}

func (h *costHeap) pop() heapItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
