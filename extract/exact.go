package extract

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"time"
)

// ExactOptions configures Exact.
type ExactOptions struct {
	// Timeout bounds the whole search; 0 means no limit beyond ctx.
	Timeout time.Duration
	// Start is an incumbent to start from, such as a greedy solution; it
	// must pass Check. With nil, Exact computes a bottom-up start itself.
	// Either way the result is never worse than the start.
	Start *Solution
}

// ExactResult is the outcome of Exact.
type ExactResult struct {
	// Solution is the best solution found. It always passes Check (so it
	// has no cycle) and chooses nothing for classes it does not need.
	Solution *Solution
	// Cost is its DAG cost.
	Cost float64
	// LowerBound is a proven lower bound on the optimal DAG cost, the
	// largest of: the classes every solution needs, each at its cheapest
	// node; the heaviest chain of reads every solution must contain; and
	// the integer program's relaxations (each one solved, or CBC's best
	// possible when a run was stopped). It is never above Cost.
	LowerBound float64
	// Optimal says Cost equals LowerBound within 1e-9 relative: the
	// solution is proven optimal (up to the solver's tolerances).
	Optimal bool
}

// exactTol is the relative gap under which a solution counts as proven
// optimal.
const exactTol = 1e-9

// Exact finds a solution of least DAG cost, proves it optimal, and when
// stopped early (Timeout, or ctx cancelled or past its deadline) returns
// the best solution found with a lower bound instead. Stopping early is not
// an error: the result says Optimal false and how far from proven it is.
//
// Method: the problem is first shrunk (nodes reading their own class,
// nodes dominated by a node of their class that costs no more and reads a
// subset of its classes, and classes the roots cannot reach are dropped).
// Two bottom-up starts (children's values summed, as for tree cost, or
// maximized, along the heaviest chain) and the Start are compared against
// two bounds that need no solver (see LowerBound); when they meet, that
// start is optimal and no solver runs, which settles every egg e-graph of
// extraction-gym but a few and the cyclic vgg. Otherwise the shrunk
// problem is an integer program solved by the CBC solver (a separate
// process; see cbcModel): binary node choices, class rows, child rows, and
// rows against the 2-cycles known in advance. Longer cycles are cut
// lazily: when the solver's solution has a cycle, rows forbidding its class
// cycles are added and the program solved again, from the best acyclic
// solution so far; a cyclic solution is also repaired into an acyclic
// incumbent. Each program admits every acyclic solution, so its optimum
// bounds the true optimum from below, and the first acyclic optimum is
// optimal.
//
// An error means the problem could not be attempted: a negative cost (the
// reductions and bounds assume none), a Start that fails Check, or CBC
// missing (ErrNoCBC) or failing when it is needed.
func Exact(ctx context.Context, p *Problem, opt ExactOptions) (*ExactResult, error) {
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	for i := range p.Nodes {
		if p.Nodes[i].Cost < 0 {
			// Its reductions, bounds and integer program assume that a
			// class more never lowers the cost.
			return nil, fmt.Errorf("extract: exact extraction takes non-negative costs; node %d of class %s costs %v (tree and greedy-dag take negative costs)", i, p.ClassNames[p.Nodes[i].Class], p.Nodes[i].Cost)
		}
	}
	m := newExactModel(p)
	st := &exactState{p: p, lb: math.Inf(-1)}
	// The caller's start goes first so that it is what comes back when
	// nothing strictly better turns up.
	if opt.Start != nil {
		if err := opt.Start.Check(p); err != nil {
			return nil, fmt.Errorf("extract: exact start: %w", err)
		}
		st.offer(opt.Start)
	}
	cost := func(n int32) float64 { return p.Nodes[n].Cost }
	st.offer(m.bottomUpAgg(cost, false))
	st.offer(m.bottomUpAgg(cost, true))
	if st.best == nil {
		// bottomUp chooses for every class the model reaches, and the
		// roots are computable, so this is a bug.
		return nil, fmt.Errorf("extract: exact: no starting solution")
	}
	st.raise(m.lowerBound())
	st.raise(m.pathBound())
	if st.done() || ctx.Err() != nil {
		return st.result(), nil
	}
	bin, err := exec.LookPath(cbcName)
	if err != nil {
		return nil, ErrNoCBC
	}
	dir, err := os.MkdirTemp("", "lumsearch-exact-")
	if err != nil {
		return nil, fmt.Errorf("extract: exact: %w", err)
	}
	defer os.RemoveAll(dir)
	cm := newCBCModel(m)
	for !st.done() {
		limit := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			// Leave CBC a margin to stop and write its solution before
			// ctx kills it; a kill loses the run's solution.
			left := time.Until(dl)
			limit = left - max(left/10, 100*time.Millisecond)
			if limit < 50*time.Millisecond {
				break
			}
		}
		res, err := cm.runCBC(ctx, bin, dir, st.best, limit)
		if err != nil {
			return nil, err
		}
		if res.bound > math.Inf(-1) {
			st.raise(res.bound)
		}
		if res.chosen == nil {
			break // out of time before an integer solution, or CBC crashed
		}
		s := NewSolution(p)
		for _, n := range res.chosen {
			s.Choice[p.Nodes[n].Class] = n
		}
		cycles := exactCycles(p, s)
		if len(cycles) == 0 {
			st.offer(s)
			if res.optimal {
				// Optimal for a relaxation and feasible: optimal.
				cost, _ := s.DAGCost(p)
				st.raise(cost)
				break
			}
		} else {
			if res.optimal {
				// The relaxation's optimum counts the nodes it chose,
				// needed or not; all are paid for in its objective.
				sum := 0.0
				for _, n := range res.chosen {
					sum += p.Nodes[n].Cost
				}
				st.raise(sum)
			}
			added := 0
			for _, cyc := range cycles {
				if cm.addCut(cyc) {
					added++
				}
			}
			if added == 0 {
				// CBC returned a cycle its rows forbid, which only
				// numerical trouble can do; solving again would loop.
				break
			}
			chosen := make([]bool, len(p.Nodes))
			for _, n := range res.chosen {
				chosen[n] = true
			}
			st.offer(m.bottomUp(func(n int32) float64 {
				if chosen[n] {
					return 0
				}
				return p.Nodes[n].Cost
			}))
		}
		if !res.optimal {
			break // CBC stopped on its time limit
		}
	}
	return st.result(), nil
}

// exactState is the incumbent and the bound.
type exactState struct {
	p    *Problem
	best *Solution
	cost float64
	lb   float64
}

// offer takes s as the incumbent if it is valid and cheaper.
func (st *exactState) offer(s *Solution) {
	cost, err := s.DAGCost(st.p)
	if err != nil {
		return
	}
	if st.best == nil || cost < st.cost {
		st.best, st.cost = exactPrune(st.p, s), cost
	}
}

func (st *exactState) raise(lb float64) { st.lb = math.Max(st.lb, lb) }

func (st *exactState) done() bool {
	return st.best != nil && st.lb >= st.cost-exactTol*math.Abs(st.cost)
}

func (st *exactState) result() *ExactResult {
	lb := math.Min(st.lb, st.cost) // a bound within tolerance above is the cost
	return &ExactResult{Solution: st.best, Cost: st.cost, LowerBound: lb, Optimal: st.done()}
}

// exactCycles returns cycles of classes in the choices reachable from the
// roots, each as the classes in reading order, from the back edges of one
// depth-first search: every cyclic solution yields at least one, and often
// several independent ones, which saves solver runs.
func exactCycles(p *Problem, s *Solution) [][]int32 {
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, p.NumClasses())
	pos := make([]int, p.NumClasses())
	var cycles [][]int32
	type frame struct {
		c    int32
		next int
	}
	var stack []frame
	for _, r := range p.Roots {
		if state[r] != unseen {
			continue
		}
		state[r] = open
		pos[r] = 0
		stack = append(stack[:0], frame{r, 0})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			ch := s.Choice[f.c]
			var kids []int32
			if ch >= 0 {
				kids = p.Nodes[ch].Children
			}
			if f.next == len(kids) {
				state[f.c] = done
				stack = stack[:len(stack)-1]
				continue
			}
			k := kids[f.next]
			f.next++
			switch state[k] {
			case open:
				cyc := make([]int32, 0, len(stack)-pos[k])
				for _, g := range stack[pos[k]:] {
					cyc = append(cyc, g.c)
				}
				cycles = append(cycles, cyc)
			case unseen:
				state[k] = open
				pos[k] = len(stack)
				stack = append(stack, frame{k, 0})
			}
		}
	}
	return cycles
}
