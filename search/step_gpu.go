package search

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
)

// StepGPU runs the program of a compiled serving-step folder on device 0,
// one batch at a time, its KV pools kept on the device between runs and
// its logits left there for a kernel beside the step (the sampler) to
// read.
type StepGPU struct {
	dir    string
	model  *Model
	name   string
	layout step.Layout
	ctx    *gpu.Context
	prog   *gpu.Program
	mu     sync.Mutex
}

// OpenStepGPU opens a compiled folder of the step kind on device 0: the
// folder is checked as OpenStep checks it, its module (the CUBIN the host
// library embeds, or its PTX when the device is another architecture) is
// loaded, the weights and constants uploaded and the pools zeroed. Without
// a GPU it returns an error wrapping gpu.ErrNoDevice (or the driver's
// absence).
func OpenStepGPU(ctx context.Context, dir string) (_ *StepGPU, err error) {
	sf, err := loadStep(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sf.model.Close()
		}
	}()
	pl := sf.fp.pl
	library, err := os.ReadFile(filepath.Join(dir, LibraryFile))
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("open %s: %w", dir, err))
	}
	ptx, cubin, err := cuda.EmbeddedModule(string(library))
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("open %s: %s: %w", dir, LibraryFile, err))
	}
	d, err := gpu.Open()
	if err != nil {
		return nil, fmt.Errorf("open %s on a GPU: %w", dir, err)
	}
	dev, err := d.Device(0)
	if err != nil {
		return nil, fmt.Errorf("open %s on a GPU: %w", dir, err)
	}
	image := cubin
	if dev.Arch() != pl.Arch || len(cubin) == 0 {
		image = []byte(ptx) // the driver compiles PTX for its device
	}
	if len(image) == 0 {
		return nil, withKind(KindInput, fmt.Errorf("open %s: %s embeds no kernels (it was compiled without NVRTC)", dir, LibraryFile))
	}
	c, err := dev.PrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("open %s on a GPU: %w", dir, err)
	}
	s := &StepGPU{dir: dir, model: sf.model, name: sf.fp.model, layout: *pl.Step, ctx: c}
	if s.prog, err = gpu.LoadPlan(c, pl.Model, pl, image); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", dir, err), c.Release())
	}
	if err := s.prog.Prepare(ctx, sf.fixed); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", dir, err), s.prog.Close(), c.Release())
	}
	if err := s.prog.ZeroStates(); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", dir, err), s.prog.Close(), c.Release())
	}
	return s, nil
}

// Layout is what the step was compiled for.
func (s *StepGPU) Layout() step.Layout { return s.layout }

// Model is the model as plan.json names it.
func (s *StepGPU) Model() string { return s.name }

// ModelFolder is the folder of the Hugging Face model the step was
// compiled from, or "" for a corpus model.
func (s *StepGPU) ModelFolder() string { return modelFolder(s.name) }

// Context is the device context the step runs in, for kernels beside it.
func (s *StepGPU) Context() *gpu.Context { return s.ctx }

// Device names the GPU.
func (s *StepGPU) Device() string { return s.ctx.Device().Name }

// Run runs one batch on the device and leaves its logits there: it
// returns their buffer and type ([max seqs, vocab], or [max tokens,
// vocab] with AllLogits; the rows of the batch are the first S, or T). The
// batch is checked before anything is uploaded; a refused batch changes
// no pool slot. The caller reads the logits before the next Run.
func (s *StepGPU) Run(ctx context.Context, b *step.Batch) (*gpu.Buffer, ir.ValueType, error) {
	feeds, err := s.layout.Feeds(b)
	if err != nil {
		return nil, ir.ValueType{}, withKind(KindInput, fmt.Errorf("step %s: %w", s.dir, err))
	}
	if err := ctx.Err(); err != nil {
		return nil, ir.ValueType{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.prog.RunOnDevice(feeds, nil); err != nil {
		return nil, ir.ValueType{}, fmt.Errorf("step %s: %w", s.dir, err)
	}
	buf, vt, err := s.prog.Output(step.Logits)
	if err != nil {
		return nil, ir.ValueType{}, fmt.Errorf("step %s: %w", s.dir, err)
	}
	return buf, vt, nil
}

// Close frees the program and releases the context.
func (s *StepGPU) Close() error {
	err := errors.Join(s.prog.Close(), s.ctx.Release())
	s.model.Close()
	return err
}
