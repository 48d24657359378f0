package search

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/step"
)

// StepRunner runs the program of a compiled serving-step folder one batch
// at a time under the CPU emulation, the code kernels.cu holds, keeping
// its KV pools between runs as the device keeps them: what a server runs
// when there is no GPU, labelled as such. A run that fails leaves the
// pools as they were.
type StepRunner struct {
	dir    string
	fp     *folderProgram
	model  *Model
	layout step.Layout
	// fixed holds the weights and constants every run reads, encoded
	// once.
	fixed cuda.Encoded
	// mu guards states: runs are one at a time, as on one stream.
	mu     sync.Mutex
	states map[string]*ir.Tensor
}

// OpenStep opens a compiled folder of the step kind for running: the folder
// is checked as run checks it (its files' digests, every kernel what its
// body prints), the model is rebuilt from the plan's provenance for its
// weights (a corpus model's are the seeded random weights verify uses),
// and the pools start zeroed, as lum_create leaves them. A folder that is
// not a step is a KindInput error.
func OpenStep(ctx context.Context, dir string) (*StepRunner, error) {
	sf, err := loadStep(ctx, dir)
	if err != nil {
		return nil, err
	}
	fixed, err := cuda.EncodeFixed(ctx, sf.fp.lp, sf.fixed)
	if err != nil {
		sf.model.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	r := &StepRunner{dir: dir, fp: sf.fp, model: sf.model, layout: *sf.fp.pl.Step, fixed: fixed, states: map[string]*ir.Tensor{}}
	g := sf.model.Graph
	for _, v := range g.States() {
		n := g.Node(v)
		r.states[n.Name] = ir.NewTensor(n.DType, n.Shape)
	}
	return r, ctx.Err()
}

// stepFolder is a step folder read for running: its program, the model
// rebuilt from its plan, and the weights and constants every run reads.
type stepFolder struct {
	fp    *folderProgram
	model *Model
	fixed map[string]*ir.Tensor
}

// loadStep reads and checks a step folder as OpenStep describes; the
// caller closes the model.
func loadStep(ctx context.Context, dir string) (*stepFolder, error) {
	fp, md, err := openFolder(dir, func(pl *plan.Plan) error {
		if pl.Step == nil {
			return withKind(KindInput, fmt.Errorf("the folder holds %s, not a serving step: compile MODEL:step", pl.Model))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	sf := &stepFolder{fp: fp, model: md, fixed: map[string]*ir.Tensor{}}
	g := md.Graph
	weights, err := modelWeights(md)
	if err != nil {
		md.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	for _, v := range g.Weights() {
		n := g.Node(v)
		if weights[n.Name] == nil {
			md.Close()
			return nil, withKind(KindInput, fmt.Errorf("open %s: no value for weight %s", dir, n.Name))
		}
		sf.fixed[n.Name] = weights[n.Name]
	}
	maps.Copy(sf.fixed, fp.consts)
	return sf, ctx.Err()
}

// modelFolder is the folder of the Hugging Face model a plan's model
// names (PATH/config.json:KIND), or "" for a corpus model.
func modelFolder(model string) string {
	i := strings.LastIndex(model, ".json:")
	if i < 0 {
		return ""
	}
	return filepath.Dir(model[:i+len(".json")])
}

// Layout is what the step was compiled for.
func (r *StepRunner) Layout() step.Layout { return r.layout }

// Model is the model the folder was compiled from, as plan.json names it
// (a Hugging Face folder's is PATH/config.json:step).
func (r *StepRunner) Model() string { return r.fp.model }

// ModelFolder is the folder of the Hugging Face model the step was
// compiled from (where its tokenizer.json and generation_config.json
// are), or "" for a corpus model.
func (r *StepRunner) ModelFolder() string { return modelFolder(r.fp.model) }

// Device says where the runs happen, for labels.
func (r *StepRunner) Device() string { return "CPU emulation" }

// Run runs one batch and returns the logits of its rows present ([S,
// vocab], [T, vocab] with AllLogits). The batch is checked before
// anything runs; the pools change only when the run succeeds.
func (r *StepRunner) Run(ctx context.Context, b *step.Batch) (*ir.Tensor, error) {
	feeds, err := r.layout.Feeds(b)
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("step %s: %w", r.dir, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	maps.Copy(feeds, r.states)
	outs, states, err := cuda.EmulateProgramEncoded(ctx, r.fp.lp, r.fp.ks, feeds, r.fixed, emu.Options{})
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", r.dir, err)
	}
	if outs, err = r.layout.Present(outs, b); err != nil {
		return nil, fmt.Errorf("step %s: %w", r.dir, err)
	}
	logits := outs[step.Logits]
	if logits == nil {
		return nil, fmt.Errorf("step %s: the program has no %s output", r.dir, step.Logits)
	}
	for name := range states {
		if _, ok := r.states[name]; !ok {
			return nil, fmt.Errorf("step %s: the run updated %s, which is not one of the program's states", r.dir, name)
		}
	}
	maps.Copy(r.states, states)
	return logits, nil
}

// Close releases the model.
func (r *StepRunner) Close() error {
	r.model.Close()
	return nil
}
