package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/report"
	"github.com/lumsearch/lumsearch/rules"
)

// Stage is one stage of saturation: a name and the rule sets it runs
// (rules.Sets names). Each stage saturates the model afresh with its
// sets; later stages hold more rules.
type Stage struct {
	Name string
	Sets []string
	// Rewrites, when set, are the stage's rewrites in place of its sets'
	// (a rule selection's: sets left out or added, a user's rule files;
	// Sets then only names them).
	Rewrites []*egraph.Rewrite[rules.Data]
}

// DefaultStages are the stages optimize runs: the fusions of the lowering
// and region rules first, which give a good program fast, then every rule
// set.
func DefaultStages() []Stage {
	return []Stage{
		{Name: "fusion", Sets: []string{"lower", "fuse"}},
		{Name: "all", Sets: rules.Sets()},
	}
}

// Candidate is a program the search extracted at the end of a stage, or
// one it was given to start from (Config.Initial: a previous run's plan).
type Candidate struct {
	Stage string
	// Program is the extraction; nil for a given program.
	Program *rules.Program
	// Cost is the predicted seconds per run: Program.Cost, or what
	// Config.Price says.
	Cost float64
	// Prepared is what Config.Price built to price it (the lowered,
	// printed program), for Finalize to go on from; a given program
	// comes with it.
	Prepared any
	// Final is what Config.Finalize built for it (lowered, printed,
	// compiled, verified); nil until then.
	Final any
	// Verified is Finalize's one-line account of the verification.
	Verified string
	// Rejected is why finalizing it failed (nil: it did not, or it was
	// not tried); a rejected candidate is not tried again.
	Rejected error
	// Insurance marks the program finalized first, before any stage's,
	// so that an interruption always finds a verified program: the
	// naive program, or a previous run's plan. Finalize may take the
	// fast road for it (no re-ranking of schedules), and it never
	// displaces an equally priced stage program.
	Insurance bool
}

// Config says how to search.
type Config struct {
	// Stages of saturation (nil: DefaultStages).
	Stages []Stage
	// Sat are the saturation limits and the extraction's pricing; its
	// TimeLimit is replaced by what is left of the budget.
	Sat rules.SaturateOptions
	// Budget bounds the whole run, output included (0: none).
	Budget time.Duration
	// Reserve is the part of the budget kept for writing the output (0:
	// max(1 s, 2% of the budget)).
	Reserve time.Duration
	// Finalize lowers, prints, compiles and verifies a candidate, setting
	// its Final and Verified; an error makes the candidate unusable (the
	// search reports it and keeps the previous one). Required.
	Finalize func(ctx context.Context, c *Candidate) error
	// Price, when set, prices a stage's candidate as it will run (say,
	// lowered and printed in its best schedules), setting its Cost and
	// Prepared, so that extracted and given programs compare alike.
	Price func(ctx context.Context, c *Candidate) error
	// Initial are programs to start from (a previous run's plan, kept by
	// the tuning database): the search's result is never predicted
	// slower than the best of them that verifies. Their Cost must be set
	// as Price sets it.
	Initial []*Candidate
	// Measure, when set, measures the final program's kernels (on a GPU
	// or under the emulation) after the stages and may re-extract: it
	// returns the candidate to finalize instead (or c itself).
	Measure func(ctx context.Context, c *Candidate) (*Candidate, error)
	// Rounds bounds the measure-and-extract-again rounds (0: 1).
	Rounds int
	// Events receives progress (may be nil). It is called from the
	// search's goroutines one at a time.
	Events func(Event)
	// Dump, when set, is a folder that receives the e-graph and the
	// chosen program after every stage.
	Dump string
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
}

// Event is one progress event.
type Event struct {
	// Kind is "phase" (a phase starts), "step" (a saturation iteration
	// ended), "candidate" (a stage extracted a program), "verified" (a
	// candidate was finalized), "rejected" (finalizing it failed),
	// "note" or "done".
	Kind  string `json:"event"`
	Phase string `json:"phase,omitempty"`
	Stage string `json:"stage,omitempty"`
	// Elapsed and Remaining are seconds since the start and left of the
	// budget (Remaining is absent without a budget).
	Elapsed   float64  `json:"elapsed_s"`
	Remaining *float64 `json:"remaining_s,omitempty"`
	// Nodes and Classes are the e-graph's size; Best the best predicted
	// seconds per run so far; Verified the best verified one.
	Nodes    int     `json:"nodes,omitempty"`
	Classes  int     `json:"classes,omitempty"`
	Best     float64 `json:"best_s,omitempty"`
	Verified float64 `json:"verified_s,omitempty"`
	Message  string  `json:"message,omitempty"`
	// Line is, for a note that a phase logged, the line as the command
	// line prints it (indented); it is not part of the JSON form.
	Line string `json:"-"`
}

// Outcome is what the optimize loop (Run) found.
type Outcome struct {
	// Best is the best finalized (verified) candidate.
	Best *Candidate
	// Naive is the naive program (one kernel per op).
	Naive *rules.Program
	// Candidates are the stages' programs, in order.
	Candidates []*Candidate
	// Steps are the search's progress points for the report.
	Steps []report.Step
	// EndedBy says what ended the search: "work limits" (every stage ran
	// to its limits or saturated), "budget" or "interrupted".
	EndedBy string
	// Elapsed is the search's wall time.
	Elapsed time.Duration
	// Notes are sentences for the report: rejected candidates, skipped
	// phases.
	Notes []string
}

// ErrNothingVerified is returned when the budget or an interruption
// ended the search before any program was verified.
var ErrNothingVerified = errors.New("no program was verified")

// searcher is one run's state.
type searcher struct {
	cfg    Config
	g      *ir.Graph
	start  time.Time
	end    time.Time // zero without a budget
	mu     sync.Mutex
	res    *Outcome
	best   float64 // best predicted cost so far
	emitMu sync.Mutex
	// naive is the naive program as a candidate, priced.
	naive *Candidate
}

// Run searches g's program under cfg. ctx's cancellation (Ctrl-C) ends the
// search like the budget does: the best verified program so far is the
// result. The returned error is ErrNothingVerified (wrapped) when no
// program was verified in time, or what a phase failed with.
func Run(ctx context.Context, g *ir.Graph, cfg Config) (*Outcome, error) {
	if cfg.Finalize == nil {
		return nil, errors.New("search: no Finalize")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stages == nil {
		cfg.Stages = DefaultStages()
	}
	s := &searcher{cfg: cfg, g: g, start: cfg.Now(), res: &Outcome{}}
	searchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Budget > 0 {
		reserve := cfg.Reserve
		if reserve <= 0 {
			reserve = max(time.Second, cfg.Budget/50)
		}
		s.end = s.start.Add(cfg.Budget)
		var cancelDeadline context.CancelFunc
		searchCtx, cancelDeadline = context.WithDeadline(searchCtx, s.end.Add(-reserve))
		defer cancelDeadline()
	}
	err := s.run(searchCtx)
	s.res.Elapsed = cfg.Now().Sub(s.start)
	interrupted := ctx.Err() != nil
	switch {
	case interrupted:
		s.res.EndedBy = "interrupted"
	case searchCtx.Err() != nil:
		s.res.EndedBy = "budget"
	default:
		s.res.EndedBy = s.workLimits()
	}
	if err != nil && searchCtx.Err() == nil {
		return s.res, err
	}
	if s.res.Best == nil {
		elapsed := s.res.Elapsed.Round(time.Millisecond)
		switch {
		case interrupted:
			return s.res, fmt.Errorf("search %s: %w: interrupted after %v, before the first program (the naive one, or the previous run's plan) was verified; nothing was written", g.Name, ErrNothingVerified, elapsed)
		case searchCtx.Err() != nil:
			return s.res, fmt.Errorf("search %s: %w: the budget (%v) ended the search after %v, before the first program was verified; give a larger --budget", g.Name, ErrNothingVerified, cfg.Budget, elapsed)
		case err != nil:
			return s.res, fmt.Errorf("search %s: %w before any program was verified (%v)", g.Name, ErrNothingVerified, err)
		}
		return s.res, fmt.Errorf("search %s: %w: every program was rejected (see the notes above)", g.Name, ErrNothingVerified)
	}
	s.emit(Event{Kind: "done", Best: s.best, Verified: s.res.Best.Cost, Message: "ended by " + s.res.EndedBy})
	return s.res, nil
}

// run does the phases: the naive program, the stages (each better
// program finalized in the background when there is a budget), the
// measurement, and the final finalization.
func (s *searcher) run(ctx context.Context) error {
	sat := s.cfg.Sat
	s.emit(Event{Kind: "phase", Phase: "naive"})
	// The naive program is the same whatever limits the stages have
	// (rules stats and compile build it without them).
	nsat := sat
	nsat.IterLimit, nsat.NodeLimit = 0, 0
	naive, err := rules.NaiveProgram(ctx, s.g, s.withTime(nsat, "naive"))
	if err != nil {
		return err
	}
	s.res.Naive = naive
	s.note(report.Step{Phase: "naive", Stage: "naive", Nodes: naive.EGraph.NumNodes(), Classes: naive.EGraph.NumClasses()})

	// With a budget, programs are finalized in the background while the
	// stages saturate: first the insurance (a previous run's plan, else
	// the naive program), on the fast road, so that the budget or an
	// interruption always finds a verified program early; then each
	// better stage program, a newer one replacing a queued older one,
	// and abandoning the finalization of an older one in progress once
	// some program is verified.
	bg := &background{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if s.cfg.Budget > 0 {
		bg.start(ctx)
	}
	defer bg.stop()

	var last *Candidate
	for _, c := range s.cfg.Initial {
		s.mu.Lock()
		s.res.Candidates = append(s.res.Candidates, c)
		if last == nil || c.Cost < last.Cost {
			last = c
			s.best = c.Cost
		}
		s.mu.Unlock()
		s.emit(Event{Kind: "candidate", Stage: c.Stage, Best: s.best, Message: "given"})
	}
	s.naive = &Candidate{Stage: "naive", Program: naive, Cost: naive.Cost}
	if s.cfg.Price != nil {
		if err := s.cfg.Price(ctx, s.naive); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("naive program: %w", err)
		}
	}
	if bg.running() {
		insurance := s.naive
		if last != nil {
			insurance = last
		}
		insurance.Insurance = true
		bg.submit(insurance)
	}
	for _, st := range s.cfg.Stages {
		if ctx.Err() != nil {
			break
		}
		s.emit(Event{Kind: "phase", Phase: "saturate", Stage: st.Name})
		rws := st.Rewrites
		for _, name := range st.Sets {
			if st.Rewrites != nil {
				break
			}
			r, err := rules.SetRewrites(name)
			if err != nil {
				return fmt.Errorf("stage %s: %w", st.Name, err)
			}
			rws = append(rws, r...)
		}
		prog, err := rules.SaturateModel(ctx, s.g, rws, s.withTime(sat, st.Name))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("stage %s: %w", st.Name, err)
		}
		if ctx.Err() != nil {
			// A stage cut short extracted from a partial e-graph;
			// its program is still a correct one.
			s.notef("stage %s was cut short; its program comes from the e-graph as it stood", st.Name)
		}
		c := &Candidate{Stage: st.Name, Program: prog, Cost: prog.Cost}
		if s.cfg.Price != nil {
			if err := s.cfg.Price(ctx, c); err != nil {
				if ctx.Err() != nil {
					break
				}
				return fmt.Errorf("stage %s: %w", st.Name, err)
			}
		}
		s.stageSteps(st.Name, prog, c.Cost)
		s.mu.Lock()
		s.res.Candidates = append(s.res.Candidates, c)
		// A stage's program wins a tie with a given one: it is what this
		// run's options make, so equal runs write equal outputs.
		better := last == nil || c.Cost < last.Cost || (c.Cost == last.Cost && last.Program == nil)
		if better {
			last = c
			s.best = c.Cost
		}
		s.mu.Unlock()
		s.emit(Event{Kind: "candidate", Stage: st.Name, Nodes: prog.EGraph.NumNodes(), Classes: prog.EGraph.NumClasses(), Best: s.best,
			Message: fmt.Sprintf("%d kernels per run, %d at load", prog.Kernels, prog.Prep)})
		if err := s.dump(st.Name, prog); err != nil {
			return err
		}
		if better && bg.running() && ctx.Err() == nil {
			bg.submit(c)
		}
	}
	if last == nil {
		return nil
	}
	if s.cfg.Measure != nil {
		// Measuring feeds measured times into what Finalize prices
		// schedules with: the background finalization ends first.
		bg.stop()
	}
	// Measure, feed the measurements back, and measure the new program,
	// while the program changes, rounds remain and the budget lasts.
	for round := 0; s.cfg.Measure != nil && round < max(s.cfg.Rounds, 1) && ctx.Err() == nil; round++ {
		s.emit(Event{Kind: "phase", Phase: "measure", Message: fmt.Sprintf("round %d", round+1)})
		m, err := s.cfg.Measure(ctx, last)
		if err != nil {
			if ctx.Err() == nil {
				s.notef("measuring failed: %v", err)
			}
			break
		}
		if m == nil || m == last {
			break
		}
		if s.cfg.Price != nil && m.Program != nil && m.Prepared == nil {
			if err := s.cfg.Price(ctx, m); err != nil {
				s.notef("pricing the measured program failed: %v", err)
				break
			}
		}
		s.mu.Lock()
		s.res.Candidates = append(s.res.Candidates, m)
		s.best = min(s.best, m.Cost)
		s.mu.Unlock()
		s.emit(Event{Kind: "candidate", Stage: m.Stage, Best: s.best, Message: "extracted again with the measured times"})
		last = m
	}
	// The final program: finalized here unless the background worker
	// has it or had it.
	bg.stop()
	if last.Final == nil && last.Rejected == nil && ctx.Err() == nil {
		s.finalize(ctx, last)
	}
	if s.res.Best != nil || ctx.Err() != nil {
		return nil
	}
	// The final program was rejected: fall back on the others, cheapest
	// first, the naive program last.
	rest := slices.Clone(s.res.Candidates)
	slices.SortStableFunc(rest, func(a, b *Candidate) int { return cmp.Compare(a.Cost, b.Cost) })
	rest = append(rest, s.naive)
	for _, c := range rest {
		if c.Final != nil || c.Rejected != nil || ctx.Err() != nil {
			continue
		}
		if s.finalize(ctx, c); s.res.Best != nil {
			break
		}
	}
	return nil
}

// withTime gives saturation what is left of the budget as its time limit,
// so that the runner's own clock never ends it before the context does
// (without a budget: an hour, which work limits reach long before).
func (s *searcher) withTime(sat rules.SaturateOptions, stage string) rules.SaturateOptions {
	sat.Progress = func(it *egraph.Iteration) {
		s.emit(Event{Kind: "step", Stage: stage, Nodes: it.Nodes, Classes: it.Classes, Best: s.bestSoFar()})
	}
	sat.TimeLimit = time.Hour
	if !s.end.IsZero() {
		sat.TimeLimit = max(time.Millisecond, s.end.Sub(s.cfg.Now()))
	}
	return sat
}

// finalize finalizes c and makes it the best verified candidate when it
// is cheaper than the current one.
func (s *searcher) finalize(ctx context.Context, c *Candidate) {
	s.emit(Event{Kind: "phase", Phase: "finalize", Stage: c.Stage})
	if err := s.cfg.Finalize(ctx, c); err != nil {
		if ctx.Err() != nil {
			if why := context.Cause(ctx); why != ctx.Err() {
				s.notef("finalizing the %s program was abandoned: %v", c.Stage, why)
			} else {
				s.notef("finalizing the %s program was cut short by the %s", c.Stage, endedText(ctx))
			}
			return
		}
		c.Rejected = err
		s.notef("the %s program was rejected: %v", c.Stage, err)
		s.emit(Event{Kind: "rejected", Stage: c.Stage, Message: err.Error()})
		return
	}
	s.mu.Lock()
	// Equal costs: the later program wins, but an insurance never
	// displaces a stage's program, so that the result does not hang on
	// which finished first.
	if b := s.res.Best; b == nil || c.Cost < b.Cost || (c.Cost == b.Cost && (!c.Insurance || b.Insurance)) {
		s.res.Best = c
	}
	verified := s.res.Best.Cost
	s.mu.Unlock()
	s.emit(Event{Kind: "verified", Stage: c.Stage, Best: s.bestSoFar(), Verified: verified, Message: c.Verified})
}

// stageSteps records a stage's saturation iterations (the repeated
// block's pair search first, when there was one) and its extraction.
func (s *searcher) stageSteps(stage string, prog *rules.Program, cost float64) {
	var reports []*egraph.Report
	if prog.Block != nil && prog.Block.Pair != nil {
		reports = append(reports, prog.Block.Pair.Report)
	}
	reports = append(reports, prog.Report)
	for _, r := range reports {
		if r == nil {
			continue
		}
		for _, it := range r.Iterations {
			s.note(report.Step{Phase: "saturate", Stage: stage, Nodes: it.Nodes, Classes: it.Classes})
		}
	}
	s.note(report.Step{Phase: "extract", Stage: stage, Nodes: prog.EGraph.NumNodes(), Classes: prog.EGraph.NumClasses(), Best: cost})
}

// bestSoFar is the best predicted cost so far, read under the lock (the
// saturation's progress calls come from its goroutines).
func (s *searcher) bestSoFar() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.best
}

// note appends a step, numbering it and carrying the best cost forward.
func (s *searcher) note(st report.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Index = len(s.res.Steps)
	if st.Best == 0 && len(s.res.Steps) > 0 {
		st.Best = s.res.Steps[len(s.res.Steps)-1].Best
	}
	if prev := len(s.res.Steps); prev > 0 && st.Best > 0 && s.res.Steps[prev-1].Best > 0 {
		st.Best = min(st.Best, s.res.Steps[prev-1].Best)
	}
	if s.cfg.Budget > 0 {
		// A wall-clock figure: only a run the clock can end records it.
		st.At = s.cfg.Now().Sub(s.start)
	}
	s.res.Steps = append(s.res.Steps, st)
}

func (s *searcher) notef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.res.Notes = append(s.res.Notes, msg)
	s.mu.Unlock()
	s.emit(Event{Kind: "note", Message: msg})
}

// emit stamps an event with the clock and passes it on.
func (s *searcher) emit(e Event) {
	if s.cfg.Events == nil {
		return
	}
	now := s.cfg.Now()
	e.Elapsed = now.Sub(s.start).Seconds()
	if !s.end.IsZero() {
		r := max(0, s.end.Sub(now).Seconds())
		e.Remaining = &r
	}
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.cfg.Events(e)
}

// dump writes a stage's e-graph (egraph-serialize JSON) and its chosen
// program (each kernel's form and body) to the dump folder.
func (s *searcher) dump(stage string, prog *rules.Program) error {
	if s.cfg.Dump == "" {
		return nil
	}
	if err := os.MkdirAll(s.cfg.Dump, 0o755); err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	base := filepath.Join(s.cfg.Dump, fmt.Sprintf("%02d-%s", len(s.res.Candidates), stage))
	f, err := os.Create(base + ".egraph.json")
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	ser := egraph.ToSerialized(&prog.EGraph.Graph, rules.RootClasses(prog.Roots), egraph.SerializeOptions{})
	werr := ser.Write(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("dump %s: %w", f.Name(), err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s after stage %s: %d kernels per run, %d at load, %.6g s per run predicted\n", s.g.Name, stage, prog.Kernels, prog.Prep, prog.Cost)
	for i, k := range prog.List {
		when := "run"
		if k.Prep {
			when = "load"
		}
		fmt.Fprintf(&b, "\n## kernel %d (%s, %s, class %d)\n%s", i, k.Form, when, k.Class, k.Body.String())
	}
	if err := os.WriteFile(base+".program.txt", []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	return nil
}
