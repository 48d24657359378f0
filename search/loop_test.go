package search

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// cfg bounds a test's saturation: the race detector makes the full one
// slow, and a few iterations already give the stages different programs.
func cfg(c Config) Config {
	c.Sat = rules.SaturateOptions{IterLimit: 4}
	return c
}

func tinyGraph(t *testing.T) *ir.Graph {
	t.Helper()
	g, err := corpus.Build("tiny-llama:layer", corpus.Options{Seq: 4, Past: -1})
	require.NoError(t, err)
	return g
}

// finalizer is a Finalize that records the stages it saw and rejects
// those reject names.
type finalizer struct {
	mu     sync.Mutex
	seen   []string
	reject map[string]bool
}

func (f *finalizer) finalize(_ context.Context, c *Candidate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, c.Stage)
	if f.reject[c.Stage] {
		return errors.New("numbers differ")
	}
	c.Final, c.Verified = c.Stage, "checked"
	return nil
}

func TestRunWorkLimits(t *testing.T) {
	f := &finalizer{}
	var events []Event
	res, err := Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: f.finalize, Events: func(e Event) { events = append(events, e) }}))
	require.NoError(t, err)
	assert.Equal(t, "work limits (stage fusion: saturation; stage all: the iteration limit (4 iterations, --iter-limit))", res.EndedBy,
		"the limit that ended each stage, named with its value")
	require.NotNil(t, res.Best)
	assert.Equal(t, "all", res.Best.Stage)
	assert.Equal(t, []string{"all"}, f.seen, "without a budget only the final program is finalized")
	require.NotNil(t, res.Naive)
	assert.Greater(t, res.Naive.Cost, res.Best.Cost)
	require.NotEmpty(t, res.Steps)
	for i, st := range res.Steps {
		assert.Equal(t, i, st.Index)
		assert.Zero(t, st.At, "no wall-clock figure without a budget")
	}
	assert.Equal(t, "done", events[len(events)-1].Kind)
	for _, e := range events {
		assert.Nil(t, e.Remaining, "no budget, nothing remaining")
	}
}

func TestRunFallsBackOnRejection(t *testing.T) {
	f := &finalizer{reject: map[string]bool{"all": true}}
	res, err := Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: f.finalize}))
	require.NoError(t, err)
	assert.Equal(t, "fusion", res.Best.Stage)
	assert.Equal(t, []string{"all", "fusion"}, f.seen, "the rejected program is not tried twice")
	require.NotEmpty(t, res.Notes)
	assert.Contains(t, strings.Join(res.Notes, "\n"), "the all program was rejected: numbers differ")

	f = &finalizer{reject: map[string]bool{"all": true, "fusion": true, "naive": true}}
	res, err = Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: f.finalize}))
	require.ErrorIs(t, err, ErrNothingVerified)
	assert.Nil(t, res.Best)
}

func TestRunMeasureRounds(t *testing.T) {
	f := &finalizer{}
	calls := 0
	measureFn := func(_ context.Context, c *Candidate) (*Candidate, error) {
		calls++
		if calls > 2 {
			return c, nil // nothing changed
		}
		return &Candidate{Stage: c.Stage + "+m", Cost: c.Cost * 0.9, Prepared: "measured"}, nil
	}
	res, err := Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: f.finalize, Measure: measureFn, Rounds: 5}))
	require.NoError(t, err)
	assert.Equal(t, 3, calls, "rounds end when the program stops changing")
	assert.Equal(t, "all+m+m", res.Best.Stage)

	calls = 0
	res, err = Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: f.finalize, Measure: measureFn, Rounds: 1}))
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	assert.Equal(t, "all+m", res.Best.Stage)
}

func TestRunInitialCandidates(t *testing.T) {
	g := tinyGraph(t)
	f := &finalizer{}
	res, err := Run(context.Background(), g, cfg(Config{Finalize: f.finalize}))
	require.NoError(t, err)
	best := res.Best.Cost

	// A given program cheaper than anything the stages find wins.
	given := &Candidate{Stage: "previous run", Cost: best / 2, Prepared: "plan"}
	res, err = Run(context.Background(), g, cfg(Config{Finalize: f.finalize, Initial: []*Candidate{given}}))
	require.NoError(t, err)
	assert.Same(t, given, res.Best)

	// A stage's program wins a tie.
	given = &Candidate{Stage: "previous run", Cost: best, Prepared: "plan"}
	res, err = Run(context.Background(), g, cfg(Config{Finalize: f.finalize, Initial: []*Candidate{given}}))
	require.NoError(t, err)
	assert.Equal(t, "all", res.Best.Stage)
}

// TestRunInterrupted cancels the run just after the first program was
// finalized in the background: that program, the naive one (the
// insurance, verified first), is the result.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	var mu sync.Mutex
	fin := func(ctx context.Context, c *Candidate) error {
		mu.Lock()
		defer mu.Unlock()
		if !first {
			<-ctx.Done()
			return ctx.Err()
		}
		first = false
		c.Final, c.Verified = c.Stage, "checked"
		cancel() // Ctrl-C just after the first verification
		return nil
	}
	res, err := Run(ctx, tinyGraph(t), cfg(Config{Finalize: fin, Budget: time.Hour}))
	require.NoError(t, err)
	assert.Equal(t, "interrupted", res.EndedBy)
	assert.Equal(t, "naive", res.Best.Stage)
	assert.True(t, res.Best.Insurance)
}

// TestRunInsuranceFirst: with a budget the first program finalized is
// the insurance, on the fast road: the naive program, or the given
// program when there is one; it is finalized to the end even when
// better programs come meanwhile, which wait for it.
func TestRunInsuranceFirst(t *testing.T) {
	g := tinyGraph(t)
	for _, given := range []bool{false, true} {
		var initial []*Candidate
		want := "naive"
		if given {
			initial = []*Candidate{{Stage: "previous run", Cost: 1, Prepared: "plan"}}
			want = "previous run"
		}
		var mu sync.Mutex
		var seen []string
		var insurance []bool
		fin := func(ctx context.Context, c *Candidate) error {
			mu.Lock()
			first := len(seen) == 0
			seen = append(seen, c.Stage)
			insurance = append(insurance, c.Insurance)
			mu.Unlock()
			if first {
				// Slow enough for every stage to submit its program.
				time.Sleep(200 * time.Millisecond)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			c.Final, c.Verified = c.Stage, "checked"
			return nil
		}
		res, err := Run(context.Background(), g, cfg(Config{Finalize: fin, Budget: time.Hour, Initial: initial}))
		require.NoError(t, err)
		require.NotEmpty(t, seen)
		assert.Equal(t, want, seen[0], "given=%v", given)
		assert.True(t, insurance[0])
		assert.NotContains(t, strings.Join(res.Notes, "\n"), "abandoned", "the insurance is never abandoned")
		assert.Equal(t, 1, strings.Count(strings.Join(seen, " "), want), "the insurance is finalized once: %v", seen)
	}
}

// TestRunAbandonsSuperseded: once a program is verified, the
// finalization of a program that a cheaper one supersedes is abandoned
// (its context canceled with the reason), and the cheaper one is
// finalized instead.
func TestRunAbandonsSuperseded(t *testing.T) {
	var mu sync.Mutex
	var abandoned []string
	fusionStarted := make(chan struct{})
	fin := func(ctx context.Context, c *Candidate) error {
		if c.Stage == "fusion" {
			close(fusionStarted)
			// Verification that would outlast the budget.
			select {
			case <-ctx.Done():
				mu.Lock()
				abandoned = append(abandoned, context.Cause(ctx).Error())
				mu.Unlock()
				return ctx.Err()
			case <-time.After(time.Minute):
			}
		}
		c.Final, c.Verified = c.Stage, "checked"
		return nil
	}
	// The all stage's program comes once the naive program is verified
	// and the fusion stage's is being finalized.
	stages := []Stage{{Name: "fusion", Sets: []string{"lower", "fuse"}}, {Name: "all", Sets: rules.Sets()}}
	price := func(_ context.Context, c *Candidate) error {
		if c.Stage == "all" {
			<-fusionStarted
		}
		return nil
	}
	res, err := Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: fin, Budget: time.Hour, Stages: stages, Price: price}))
	require.NoError(t, err)
	assert.Equal(t, "all", res.Best.Stage)
	require.Len(t, abandoned, 1)
	assert.Contains(t, abandoned[0], "the all program")
	assert.Contains(t, abandoned[0], "supersedes it")
	assert.Contains(t, strings.Join(res.Notes, "\n"), "finalizing the fusion program was abandoned: the all program")
}

// TestRunInsuranceNeverDisplacesATie: a stage program that costs what
// the insurance costs is the result, whichever was finalized last.
func TestRunInsuranceNeverDisplacesATie(t *testing.T) {
	g := tinyGraph(t)
	f := &finalizer{}
	res, err := Run(context.Background(), g, cfg(Config{Finalize: f.finalize}))
	require.NoError(t, err)
	given := &Candidate{Stage: "previous run", Cost: res.Best.Cost, Prepared: "plan"}
	// The insurance (the given program) finishes last.
	fin := func(ctx context.Context, c *Candidate) error {
		if c.Insurance {
			time.Sleep(300 * time.Millisecond)
		}
		c.Final, c.Verified = c.Stage, "checked"
		return nil
	}
	res, err = Run(context.Background(), g, cfg(Config{Finalize: fin, Budget: time.Hour, Initial: []*Candidate{given}}))
	require.NoError(t, err)
	assert.Equal(t, "all", res.Best.Stage)
}

// TestRunBudget gives a budget that ends before anything is verified.
func TestRunBudget(t *testing.T) {
	fin := func(ctx context.Context, c *Candidate) error {
		<-ctx.Done()
		return ctx.Err()
	}
	res, err := Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: fin, Budget: 300 * time.Millisecond, Reserve: 100 * time.Millisecond}))
	require.ErrorIs(t, err, ErrNothingVerified)
	assert.Equal(t, "budget", res.EndedBy)
	assert.Contains(t, err.Error(), "give a larger --budget")
}

// TestRunMessagesNameTheCause: an interruption before anything is
// verified says so, without advice about the budget; a finalization cut
// short by the budget is reported as that, never as a rejection.
func TestRunMessagesNameTheCause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fin := func(ctx context.Context, c *Candidate) error {
		cancel()
		<-ctx.Done()
		return fmt.Errorf("compile: NVRTC: %w", ctx.Err())
	}
	res, err := Run(ctx, tinyGraph(t), cfg(Config{Finalize: fin, Budget: time.Hour}))
	require.ErrorIs(t, err, ErrNothingVerified)
	assert.Equal(t, "interrupted", res.EndedBy)
	assert.Contains(t, err.Error(), "interrupted after")
	assert.NotContains(t, err.Error(), "--budget")
	for _, n := range res.Notes {
		assert.NotContains(t, n, "rejected", "an interruption is not a rejection")
	}

	slow := func(ctx context.Context, c *Candidate) error {
		<-ctx.Done()
		return fmt.Errorf("verify: %w", ctx.Err())
	}
	res, err = Run(context.Background(), tinyGraph(t), cfg(Config{Finalize: slow, Budget: 300 * time.Millisecond, Reserve: 100 * time.Millisecond}))
	require.ErrorIs(t, err, ErrNothingVerified)
	assert.Contains(t, err.Error(), "the budget (300ms) ended the search")
	assert.Contains(t, strings.Join(res.Notes, "\n"), "finalizing the naive program was cut short by the budget")
}
