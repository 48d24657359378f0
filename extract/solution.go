package extract

import (
	"fmt"
	"math"
)

// Solution chooses a node for every class a program needs: Choice[c] is a
// node index, or -1 for a class left out.
type Solution struct {
	Choice []int32
}

// NewSolution is a solution with nothing chosen.
func NewSolution(p *Problem) *Solution {
	s := &Solution{Choice: make([]int32, p.NumClasses())}
	for i := range s.Choice {
		s.Choice[i] = -1
	}
	return s
}

// Needed returns the classes reachable from the roots through chosen
// nodes, in an order where every class comes after the classes its chosen
// node reads (a topological order), or an error when a needed class has
// no choice or the choices form a cycle. Check and DAGCost build on it.
func (s *Solution) Needed(p *Problem) ([]int32, error) {
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, p.NumClasses())
	var order []int32
	type frame struct {
		c    int32
		next int
	}
	for _, r := range p.Roots {
		if state[r] == done {
			continue
		}
		stack := []frame{{r, 0}}
		state[r] = open
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			ch := s.Choice[f.c]
			if ch < 0 || int(ch) >= len(p.Nodes) || p.Nodes[ch].Class != f.c {
				return nil, fmt.Errorf("extract: class %s is needed but has no valid choice", p.ClassNames[f.c])
			}
			kids := p.Nodes[ch].Children
			if f.next == len(kids) {
				state[f.c] = done
				order = append(order, f.c)
				stack = stack[:len(stack)-1]
				continue
			}
			k := kids[f.next]
			f.next++
			switch state[k] {
			case open:
				return nil, fmt.Errorf("extract: the choices form a cycle through class %s", p.ClassNames[k])
			case unseen:
				state[k] = open
				stack = append(stack, frame{k, 0})
			}
		}
	}
	return order, nil
}

// Check verifies a solution: every root chosen, every chosen node's
// children chosen, no cycle. An algorithm whose result fails it has a bug.
func (s *Solution) Check(p *Problem) error {
	if len(s.Choice) != p.NumClasses() {
		return fmt.Errorf("extract: solution for %d classes, problem has %d", len(s.Choice), p.NumClasses())
	}
	_, err := s.Needed(p)
	return err
}

// DAGCost is the cost of the program: each needed class's chosen node
// counted once, however many nodes read it.
func (s *Solution) DAGCost(p *Problem) (float64, error) {
	order, err := s.Needed(p)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, c := range order {
		sum += p.Nodes[s.Choice[c]].Cost
	}
	return sum, nil
}

// TreeCost is the cost of the program written as a tree: a class read
// twice is paid twice. Roots are summed. It is +Inf only for a solution
// that fails Check.
func (s *Solution) TreeCost(p *Problem) (float64, error) {
	order, err := s.Needed(p)
	if err != nil {
		return math.Inf(1), err
	}
	tc := make([]float64, p.NumClasses())
	for _, c := range order {
		n := p.Nodes[s.Choice[c]]
		v := n.Cost
		for _, k := range n.Children {
			v += tc[k]
		}
		tc[c] = v
	}
	sum := 0.0
	for _, r := range p.Roots {
		sum += tc[r]
	}
	return sum, nil
}
