package egraph

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// StopReason says why a run ended.
type StopReason uint8

// The reasons a run ends.
const (
	NotStopped StopReason = iota
	// Saturated: an iteration changed nothing and the scheduler agreed.
	Saturated
	// IterationLimit: the runner did Runner.IterLimit iterations.
	IterationLimit
	// NodeLimit: the e-graph grew past Runner.NodeLimit e-nodes.
	NodeLimit
	// TimeLimit: the run took longer than Runner.TimeLimit.
	TimeLimit
	// Canceled: the context was canceled or passed its deadline.
	Canceled
	// HookStopped: a hook returned ErrStop.
	HookStopped
	// Failed: a rule or hook failed; Run returns the error.
	Failed
)

// String says why the run ended, in words.
func (s StopReason) String() string {
	switch s {
	case NotStopped:
		return "not stopped"
	case Saturated:
		return "saturated"
	case IterationLimit:
		return "iteration limit"
	case NodeLimit:
		return "e-node limit"
	case TimeLimit:
		return "time limit"
	case Canceled:
		return "canceled"
	case HookStopped:
		return "stopped by hook"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("StopReason(%d)", uint8(s))
}

// ErrStop is returned by a hook to end the run without an error.
var ErrStop = errors.New("stop requested by hook")

// Hook runs after every iteration's rebuild, with that iteration's report.
// Returning ErrStop ends the run; any other error fails it.
type Hook[D any] func(g *EGraph[D], it *Iteration) error

// Runner saturates an e-graph with rules under limits. The zero value uses
// egg's defaults: 30 iterations, 10,000 e-nodes, 5 seconds, and the backoff
// scheduler.
type Runner[D any] struct {
	IterLimit int
	NodeLimit int
	TimeLimit time.Duration
	Scheduler Scheduler
	Hooks     []Hook[D]
	// Workers searches rules in parallel on this many goroutines. Results
	// are merged in rule order, so the outcome does not depend on it.
	Workers int
	// FullMatching turns off incremental matching. By default a rule that
	// has no conditions and no Go applier, once it has applied all its
	// matches, is afterwards given only the matches that bind a node of a
	// class changed since: the others would rebuild what is there and union
	// what is already one class. The resulting e-graph is the same either
	// way up to the numbering of ids (re-applying an old match between
	// rebuilds can add a node that the rebuild finds congruent to an old
	// one); the work and the reported match counts differ.
	FullMatching bool
}

// RuleIteration is one rule's share of an iteration.
type RuleIteration struct {
	Name string
	// Matches found (a banned rule's search stops at its limit plus one).
	// Under incremental matching these are the new matches only.
	Matches int
	// Applied counts the unions the rule made that merged two classes.
	Applied int
	// Banned is true when the scheduler kept the rule from running or
	// banned it on this iteration's matches.
	Banned bool
	// NewNodes is how many e-nodes applying the rule added (before the
	// rebuild merged any).
	NewNodes int
	// Search and Apply are the time the rule took in each phase.
	Search, Apply time.Duration
}

// Iteration reports one iteration of a run.
type Iteration struct {
	Index int
	// Nodes and Classes are the e-graph's size after the rebuild.
	Nodes, Classes int
	Rules          []RuleIteration
	// Congruences is the number of unions rebuilding made.
	Congruences int
	Search      time.Duration
	Apply       time.Duration
	Rebuild     time.Duration
}

// Report is the outcome of a run.
type Report struct {
	Iterations []Iteration
	Stop       StopReason
	Time       time.Duration
}

// Run saturates g with rules until a limit, saturation, a hook or ctx stops
// it. It returns an error only when a rule or hook fails; the e-graph is
// rebuilt and consistent on every return.
func (r *Runner[D]) Run(ctx context.Context, g *EGraph[D], rules []*Rewrite[D]) (*Report, error) {
	start := time.Now()
	iterLimit, nodeLimit, timeLimit := r.IterLimit, r.NodeLimit, r.TimeLimit
	if iterLimit <= 0 {
		iterLimit = 30
	}
	if nodeLimit <= 0 {
		nodeLimit = 10_000
	}
	if timeLimit <= 0 {
		timeLimit = 5 * time.Second
	}
	sched := r.Scheduler
	if sched == nil {
		sched = NewBackoffScheduler()
	}
	sched.Start(len(rules))
	runCtx, cancel := context.WithDeadline(ctx, start.Add(timeLimit))
	defer cancel()
	rep := &Report{}
	stopped := func() StopReason {
		if ctx.Err() != nil {
			return Canceled
		}
		if runCtx.Err() != nil {
			return TimeLimit
		}
		return NotStopped
	}
	finish := func(s StopReason, err error) (*Report, error) {
		g.Rebuild()
		rep.Stop = s
		rep.Time = time.Since(start)
		return rep, err
	}
	g.Rebuild()
	descs := make([]uint32, len(rules))
	for i, rw := range rules {
		descs[i] = g.prov.describe(rw.name, rw.search.Vars())
	}
	sets := make([]*matchSet, len(rules))
	// appliedAt[i] is the stamp at which rule i last searched and applied
	// every match, or -1.
	appliedAt := make([]int64, len(rules))
	for i := range appliedAt {
		appliedAt[i] = -1
	}
	for iter := 0; ; iter++ {
		switch {
		case iter >= iterLimit:
			return finish(IterationLimit, nil)
		case g.NumNodes() > nodeLimit:
			return finish(NodeLimit, nil)
		}
		if s := stopped(); s != NotStopped {
			return finish(s, nil)
		}
		// A hook may have changed the e-graph; matching needs it rebuilt.
		g.Rebuild()
		it := Iteration{Index: iter, Rules: make([]RuleIteration, len(rules))}
		t0 := time.Now()
		stamp := g.stamp
		r.search(runCtx, g, rules, sched, iter, sets, appliedAt)
		it.Search = time.Since(t0)
		if s := stopped(); s != NotStopped {
			rep.Iterations = append(rep.Iterations, it)
			return finish(s, nil)
		}

		t0 = time.Now()
		nodes0, classes0 := g.NumNodes(), g.NumClasses()
		changed := false
		stop := NotStopped
		for i, rw := range rules {
			ri := &it.Rules[i]
			ri.Name = rw.name
			ms := sets[i]
			if ms.skipped {
				ri.Banned = true
				continue
			}
			ri.Matches = ms.len()
			if !sched.Searched(iter, i, ms.len()) {
				ri.Banned = true
				continue
			}
			ri.Search = ms.took
			t1, n1 := time.Now(), g.NumNodes()
			applied, complete, err := rw.applyAll(g, ms, descs[i], nodeLimit)
			ri.Applied, ri.Apply, ri.NewNodes = applied, time.Since(t1), g.NumNodes()-n1
			if err != nil {
				rep.Iterations = append(rep.Iterations, it)
				return finish(Failed, err)
			}
			if !complete {
				stop = NodeLimit
			}
			if complete && !ms.interrupted {
				appliedAt[i] = int64(stamp)
			}
			if ri.Applied > 0 {
				changed = true
			}
			if stop != NotStopped {
				break
			}
			if s := stopped(); s != NotStopped {
				stop = s
				break
			}
		}
		it.Apply = time.Since(t0)

		t0 = time.Now()
		it.Congruences = g.Rebuild()
		it.Rebuild = time.Since(t0)
		it.Nodes, it.Classes = g.NumNodes(), g.NumClasses()
		changed = changed || it.Congruences > 0 || it.Nodes != nodes0 || it.Classes != classes0
		rep.Iterations = append(rep.Iterations, it)
		for _, h := range r.Hooks {
			if err := h(g, &rep.Iterations[len(rep.Iterations)-1]); err != nil {
				if errors.Is(err, ErrStop) {
					return finish(HookStopped, nil)
				}
				return finish(Failed, fmt.Errorf("hook after iteration %d: %w", iter, err))
			}
		}
		if stop != NotStopped {
			return finish(stop, nil)
		}
		// Whatever a hook added has not been matched yet.
		changed = changed || !g.clean
		if !changed && sched.CanStop(iter) {
			return finish(Saturated, nil)
		}
	}
}

// search fills sets[i] with rule i's matches, or marks it skipped when the
// scheduler skips the rule. With Workers > 1 rules are searched concurrently; each writes
// only its own slot, and the e-graph is only read.
func (r *Runner[D]) search(ctx context.Context, g *EGraph[D], rules []*Rewrite[D], sched Scheduler, iter int, sets []*matchSet, appliedAt []int64) {
	run := make([]bool, len(rules))
	for i := range rules {
		// Match buffers are kept from one iteration to the next: growing
		// them afresh every iteration was most of a run's allocation.
		if sets[i] == nil {
			sets[i] = &matchSet{nroots: rules[i].search.NumRoots(), nvars: len(rules[i].search.Vars()), npvars: len(rules[i].search.PayloadVars())}
		}
		var limit int
		run[i], limit = sched.Limit(iter, i)
		if limit > 0 {
			limit++
		}
		ms := sets[i]
		ms.reset()
		ms.limit, ms.ctx, ms.interrupted, ms.skipped = limit, ctx, false, !run[i]
		rw := rules[i]
		ms.incremental = !r.FullMatching && rw.fn == nil && len(rw.conds) == 0 && appliedAt[i] >= 0
		if ms.incremental {
			ms.since = uint32(appliedAt[i])
		}
	}
	one := func(i int) {
		if run[i] {
			t := time.Now()
			rules[i].search.program().search(&g.Graph, sets[i])
			sets[i].took = time.Since(t)
		}
	}
	if r.Workers <= 1 {
		for i := range rules {
			one(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range r.Workers {
		wg.Go(func() {
			for i := range next {
				one(i)
			}
		})
	}
	for i := range rules {
		next <- i
	}
	close(next)
	wg.Wait()
}
