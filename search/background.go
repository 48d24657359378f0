package search

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
)

// background finalizes candidates one at a time while the stages
// saturate. A submitted candidate replaces a queued one; it abandons the
// finalization in progress when that one is of a costlier candidate and
// some program is verified already (the insurance is never abandoned
// before it is done, since it is what an interruption writes).
type background struct {
	s    *searcher
	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	on   bool

	mu       sync.Mutex
	pending  *Candidate
	current  *Candidate
	abandon  context.CancelCauseFunc
	stopOnce sync.Once
}

// start starts the worker.
func (b *background) start(ctx context.Context) {
	b.on = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			b.mu.Lock()
			c := b.pending
			if ctx.Err() != nil {
				// The search is over: what is queued stays queued
				// (the caller's fallback sees it unfinalized).
				c = nil
			}
			b.pending = nil
			var cctx context.Context
			if c != nil {
				cctx, b.abandon = context.WithCancelCause(ctx)
				b.current = c
			}
			b.mu.Unlock()
			if c != nil {
				b.s.finalize(cctx, c)
				b.mu.Lock()
				b.abandon(nil)
				b.current, b.abandon = nil, nil
				b.mu.Unlock()
				continue
			}
			select {
			case <-b.wake:
			case <-b.done:
				return
			}
		}
	}()
}

// running says whether the worker was started and not stopped.
func (b *background) running() bool { return b.on }

// submit queues c, replacing a queued candidate, and abandons a costlier
// one in progress once a program is verified.
func (b *background) submit(c *Candidate) {
	b.mu.Lock()
	b.pending = c
	if cur := b.current; cur != nil && c.Cost < cur.Cost && b.s.verified() {
		b.abandon(fmt.Errorf("the %s program (%s per run predicted) supersedes it", c.Stage, Seconds(c.Cost)))
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// stop ends the worker after the finalization in progress and waits for
// it; a queued candidate is left for the caller. It may be called more
// than once.
func (b *background) stop() {
	if !b.on {
		return
	}
	b.stopOnce.Do(func() {
		close(b.done)
		b.wg.Wait()
		b.on = false
	})
}

// verified says whether some program is verified.
func (s *searcher) verified() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res.Best != nil
}

// endedText names what ended ctx: the budget's deadline or an
// interruption.
func endedText(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "budget"
	}
	return "interruption"
}

// workLimits says, for a search that neither the budget nor an
// interruption ended, what did: each stage's saturation stopped at a
// work limit (named with its value and whether it was the default) or
// because no rule applied any more.
func (s *searcher) workLimits() string {
	sat := s.cfg.Sat
	limit := func(stop egraph.StopReason) string {
		switch stop {
		case egraph.IterationLimit:
			if sat.IterLimit > 0 {
				return fmt.Sprintf("the iteration limit (%d iterations, --iter-limit)", sat.IterLimit)
			}
			return "the iteration limit (30 iterations, the default; --iter-limit)"
		case egraph.NodeLimit:
			if sat.NodeLimit > 0 {
				return fmt.Sprintf("the e-node limit (%d e-nodes, --node-limit)", sat.NodeLimit)
			}
			return "the e-node limit (200000 e-nodes, the default; --node-limit)"
		case egraph.Saturated:
			return "saturation"
		}
		return stop.String()
	}
	var parts []string
	saturated := true
	for _, c := range s.res.Candidates {
		prog := c.Program
		if prog == nil || prog.Report == nil || c.Insurance {
			continue
		}
		stops := []egraph.StopReason{prog.Report.Stop}
		if prog.Block != nil && prog.Block.Pair != nil && prog.Block.Pair.Report != nil {
			stops = append([]egraph.StopReason{prog.Block.Pair.Report.Stop}, stops...)
		}
		for _, st := range stops {
			if st != egraph.Saturated {
				saturated = false
			}
			parts = append(parts, fmt.Sprintf("stage %s: %s", c.Stage, limit(st)))
		}
	}
	switch {
	case len(parts) == 0:
		return "work limits"
	case saturated:
		return "saturation (every stage ran out of rewrites)"
	}
	return "work limits (" + strings.Join(dedupe(parts), "; ") + ")"
}

// dedupe drops repeated strings, keeping the first of each.
func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
