package extract

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// hasNegative says whether some node of p costs less than zero.
func (p *Problem) hasNegative() bool {
	for i := range p.Nodes {
		if p.Nodes[i].Cost < 0 {
			return true
		}
	}
	return false
}

// treeNegative is treeFixpoint for problems with negative costs, where a
// class settled early can still get cheaper, so Dijkstra's order does not
// hold. It relaxes every node in rounds (Bellman-Ford on the hypergraph):
// after round r each class costs its least tree of depth at most r. A
// finite optimum is a tree without a class repeated along a path (a
// repeat that lowers the cost can be repeated for ever), so it is reached
// within as many rounds as there are classes; a class still getting
// cheaper in the next round has no least cost, nor has any class with a
// node that reads it. Such classes are reported as -Inf. A class's choice
// is the node of its last improvement, whose children had improved for
// the last time before it: the choices are acyclic.
func treeNegative(ctx context.Context, p *Problem) ([]float64, []int32, error) {
	nc := p.NumClasses()
	tc := make([]float64, nc)
	choice := make([]int32, nc)
	for c := range tc {
		tc[c], choice[c] = infCost, -1
	}
	next := make([]float64, nc)
	nextChoice := make([]int32, nc)
	changed := make([]bool, nc)
	round := func() bool {
		copy(next, tc)
		copy(nextChoice, choice)
		any := false
		for n := range p.Nodes {
			nd := &p.Nodes[n]
			v := nd.Cost
			for _, k := range nd.Children {
				v += tc[k]
			}
			c := nd.Class
			if v < next[c] {
				next[c], nextChoice[c] = v, int32(n)
			}
		}
		for c := range tc {
			changed[c] = next[c] < tc[c]
			any = any || changed[c]
		}
		tc, next = next, tc
		choice, nextChoice = nextChoice, choice
		return any
	}
	for r := 0; r <= nc; r++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if !round() {
			return tc, choice, nil
		}
	}
	// Still improving after every class could have been used once on each
	// path: those classes, and every class above them, are unbounded.
	if !round() {
		return tc, choice, nil
	}
	unbounded := make([]bool, nc)
	var queue []int32
	for c := range changed {
		if changed[c] {
			unbounded[c] = true
			queue = append(queue, int32(c))
		}
	}
	l := newRevLinks(p)
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, n := range l.parentsOf(c) {
			if pc := p.Nodes[n].Class; !unbounded[pc] {
				unbounded[pc] = true
				queue = append(queue, pc)
			}
		}
	}
	for c := range tc {
		if unbounded[c] {
			tc[c] = math.Inf(-1)
		}
	}
	return tc, choice, nil
}

// unboundedError names the roots whose tree cost has no minimum.
func unboundedError(p *Problem, tc []float64) error {
	var roots []string
	for _, r := range p.Roots {
		if math.IsInf(tc[r], -1) {
			roots = append(roots, p.ClassNames[r])
		}
	}
	if len(roots) == 0 {
		return nil
	}
	return fmt.Errorf("extract: the tree cost of root class %s is unbounded below: a cycle of negative cost is reachable from it (a class whose term can contain itself at a lower cost), so no tree is cheapest", strings.Join(roots, ", "))
}
