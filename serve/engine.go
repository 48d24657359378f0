package serve

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// Engine runs a serving step and samples each sequence's next token beside
// it, on the device: only the token ids and their log-probabilities come
// back to the host.
type Engine interface {
	// Layout is what the step program was compiled for.
	Layout() step.Layout
	// Device names where the step runs, for labels ("CPU emulation").
	Device() string
	// Step runs one batch; draws holds, for each of its S sequences, how
	// to draw its next token. It returns one token a sequence. A step that
	// fails changes no pool slot.
	Step(ctx context.Context, b *step.Batch, draws []Draw) ([]Token, error)
}

// Draw says how to draw one sequence's next token: its sampling
// parameters and the index of the token among the request's generated
// ones, which (with the seed) fixes the random draw, so that a seeded
// request's tokens do not depend on its batchmates or on preemption.
type Draw struct {
	Params sample.Params
	Index  uint64
}

// Token is a drawn token and its log-probability under the distribution
// it was drawn from (the model's, after temperature).
type Token struct {
	ID      int64
	Logprob float64
	// Text is what the token added to the streamed text (the batcher
	// fills it): empty for a byte token whose character is not complete
	// yet, the whole character on the token that completes it.
	Text string
}

// checkDraws checks that a step's draws match its batch.
func checkDraws(b *step.Batch, draws []Draw) error {
	if len(draws) != b.Seqs() {
		return fmt.Errorf("step: %d draws for %d sequences", len(draws), b.Seqs())
	}
	for s, d := range draws {
		if err := d.Params.Validate(); err != nil {
			return fmt.Errorf("step: sequence %d's sampling: %w", s, err)
		}
	}
	return nil
}
