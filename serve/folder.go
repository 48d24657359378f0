package serve

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// FolderEngine runs a compiled step folder under the CPU emulation, the
// code its kernels.cu holds, and draws each sequence's token with the
// sampling kernel under the same emulation: what serves a tiny model
// without a GPU. Its Device says so.
type FolderEngine struct {
	runner *search.StepRunner
}

// OpenFolder opens a compiled folder of the step kind (see
// search.OpenStep: a folder that is not a step is refused).
func OpenFolder(ctx context.Context, dir string) (*FolderEngine, error) {
	r, err := search.OpenStep(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &FolderEngine{runner: r}, nil
}

// Layout is what the folder's step was compiled for.
func (e *FolderEngine) Layout() step.Layout { return e.runner.Layout() }

// Device says the step runs under the CPU emulation.
func (e *FolderEngine) Device() string { return e.runner.Device() }

// ModelFolder is the Hugging Face folder the step was compiled from ("" for
// a corpus model): where its tokenizer and generation config are.
func (e *FolderEngine) ModelFolder() string { return e.runner.ModelFolder() }

// Model is the model as plan.json names it.
func (e *FolderEngine) Model() string { return e.runner.Model() }

// Step runs the batch and the sampling kernel over its logits.
func (e *FolderEngine) Step(ctx context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	if err := checkDraws(b, draws); err != nil {
		return nil, err
	}
	logits, err := e.runner.Run(ctx, b)
	if err != nil {
		return nil, err
	}
	l := e.runner.Layout()
	vocab := l.Vocab
	// A program with every token's logits gives T rows: a sequence's
	// next token is drawn from its last token's row.
	rows := make([]int, len(draws))
	for s := range rows {
		rows[s] = s
		if l.AllLogits {
			rows[s] = int(b.QueryStarts[s+1]) - 1
		}
	}
	if n := int(logits.Len()) / max(vocab, 1); int(logits.Len()) != n*vocab || (len(rows) > 0 && rows[len(rows)-1] >= n) {
		return nil, fmt.Errorf("step: logits %v for %d sequences of a vocabulary of %d", logits.Shape, len(draws), vocab)
	}
	var flat []float32
	if logits.F32 != nil && !l.AllLogits {
		flat = logits.F32[:len(rows)*vocab] // the rows are the sequences', in order
	} else {
		flat = make([]float32, len(rows)*vocab)
		for s, r := range rows {
			for v := range vocab {
				flat[s*vocab+v] = float32(logits.At(int64(r*vocab + v)))
			}
		}
	}
	params := make([]sample.Params, len(draws))
	index := make([]uint64, len(draws))
	for s, d := range draws {
		params[s], index[s] = d.Params, d.Index
	}
	res, err := sample.Run(ctx, flat, vocab, params, index, emu.Options{})
	if err != nil {
		return nil, fmt.Errorf("step: sampling: %w", err)
	}
	out := make([]Token, len(res))
	for s, r := range res {
		out[s] = Token{ID: int64(r.Token), Logprob: float64(r.Logprob)}
	}
	return out, nil
}

// Close releases the folder's model.
func (e *FolderEngine) Close() error { return e.runner.Close() }
