package search

import (
	"context"
	"errors"
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
	assert.Equal(t, "work limits", res.EndedBy)
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

// TestRunInterrupted cancels the run while the first program is being
// finalized in the background: that program, verified, is the result.
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
	assert.Equal(t, "fusion", res.Best.Stage)
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
