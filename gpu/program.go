package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/step"
)

// Program is a compiled program loaded on a device: its kernels' module,
// one allocation for the arena of intermediates and one for every other
// buffer, ready to prepare once and run many times. It runs from a plan
// (plan.json) alone, so a compiled output folder needs no compiler.
type Program struct {
	ctx      *Context
	plan     *plan.Plan
	name     string
	types    []ir.ValueType // by buffer id
	module   *Module
	funcs    map[string]*Function
	arena    *Buffer
	bufs     []*Buffer // by buffer id; nil for temp buffers, which live in the arena
	prepared bool
	// lowered is the lowered program when the program was loaded from
	// one, which computes the constants; constants are their values.
	lowered   *lower.Program
	constants map[string]*ir.Tensor
	// tokens and seqs are a serving step's T and S, the last run's (the
	// maxima before any): the grids of its row-wise launches follow them.
	tokens, seqs int64
	// graphs, when on (UseGraphs), are a serving step's CUDA graphs
	// per row bucket.
	graphs *graphs
}

// LoadProgram loads a lowered program's kernels (PrintProgram's, compiled
// into image: a CUBIN or PTX) on the context's device and allocates its
// buffers. Prepare computes its constants, so it needs only the weights.
func LoadProgram(c *Context, prog *lower.Program, kernels []*cuda.Kernel, image []byte) (*Program, error) {
	pl, err := plan.Build(prog, kernels, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", prog.Name, err)
	}
	p, err := LoadPlan(c, prog.Name, pl, image)
	if err != nil {
		return nil, err
	}
	p.lowered = prog
	return p, nil
}

// LoadPlan loads a planned program (name is for messages) whose kernels
// are compiled into image, a CUBIN or PTX, on the context's device and
// allocates its buffers.
func LoadPlan(c *Context, name string, pl *plan.Plan, image []byte) (p *Program, err error) {
	if err := pl.Validate(); err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	p = &Program{ctx: c, plan: pl, name: name, funcs: map[string]*Function{}, bufs: make([]*Buffer, len(pl.Buffers))}
	if pl.Step != nil {
		p.tokens, p.seqs = int64(pl.Step.MaxTokens), int64(pl.Step.MaxSeqs)
	}
	for _, b := range pl.Buffers {
		vt, err := b.Type()
		if err != nil {
			return nil, fmt.Errorf("load %s: buffer %d: %w", name, b.ID, err)
		}
		p.types = append(p.types, vt)
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("load %s: %w", name, err), p.Close())
			p = nil
		}
	}()
	if p.module, err = c.LoadModule(image); err != nil {
		return nil, err
	}
	for _, k := range pl.Kernels() {
		if p.funcs[k], err = p.module.Function(k); err != nil {
			return nil, err
		}
	}
	if p.arena, err = c.Alloc(int(max(pl.ArenaBytes, 256))); err != nil {
		return nil, err
	}
	for _, b := range pl.Buffers {
		if b.Kind == temp {
			continue
		}
		if p.bufs[b.ID], err = c.Alloc(int(max(b.Bytes, 1))); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// The buffer kinds the runtime treats apart, by their plan names.
var (
	temp     = lower.Temp.String()
	input    = lower.Input.String()
	weight   = lower.Weight.String()
	constant = lower.Constant.String()
	prepared = lower.Prepared.String()
	state    = lower.State.String()
)

// Pointer is the device address of a lowered buffer: a Temp buffer's is in
// the arena at its planned offset.
func (p *Program) Pointer(id int) uint64 {
	if b := p.plan.Buffers[id]; b.Kind == temp {
		return p.arena.Ptr() + uint64(b.Offset)
	}
	return p.bufs[id].Ptr()
}

// Prepare uploads the weights and constants (by buffer name; the
// constants may be left out of tensors when the program was loaded by
// LoadProgram) and runs the preparation launches, once before the first
// run.
func (p *Program) Prepare(ctx context.Context, tensors map[string]*ir.Tensor) error {
	if err := p.computeConstants(ctx); err != nil {
		return fmt.Errorf("prepare %s: %w", p.name, err)
	}
	if err := p.uploadKinds(tensors, weight, constant); err != nil {
		return fmt.Errorf("prepare %s: %w", p.name, err)
	}
	if err := p.launch(p.plan.Prep, nil); err != nil {
		return fmt.Errorf("prepare %s: %w", p.name, err)
	}
	if err := p.ctx.Synchronize(); err != nil {
		return fmt.Errorf("prepare %s: %w", p.name, err)
	}
	p.prepared = true
	return nil
}

// LoadPrepared uploads prepared weights (lower.PrepareWeights's tensors:
// the weights a run reads and those the preparation launches compute)
// and the constants, in place of Prepare: no preparation launch runs.
func (p *Program) LoadPrepared(ctx context.Context, tensors map[string]*ir.Tensor) error {
	if err := p.computeConstants(ctx); err != nil {
		return fmt.Errorf("load prepared weights of %s: %w", p.name, err)
	}
	read := make([]bool, len(p.plan.Buffers))
	for _, l := range p.plan.Run {
		for _, a := range l.Args {
			read[a] = true
		}
	}
	for _, b := range p.plan.Buffers {
		if !read[b.ID] || (b.Kind != weight && b.Kind != prepared && b.Kind != constant) {
			continue
		}
		if err := p.uploadNamed(b, tensors); err != nil {
			return fmt.Errorf("load prepared weights of %s: %w", p.name, err)
		}
	}
	p.prepared = true
	return nil
}

// computeConstants evaluates the constants of a program loaded from a
// lowered program, once.
func (p *Program) computeConstants(ctx context.Context) error {
	if p.lowered == nil || p.constants != nil {
		return nil
	}
	consts, err := plan.Constants(ctx, p.lowered)
	p.constants = consts
	return err
}

// uploadKinds uploads every buffer of the given kinds from tensors.
func (p *Program) uploadKinds(tensors map[string]*ir.Tensor, kinds ...string) error {
	for _, b := range p.plan.Buffers {
		if slices.Contains(kinds, b.Kind) {
			if err := p.uploadNamed(b, tensors); err != nil {
				return err
			}
		}
	}
	return nil
}

// uploadNamed uploads buffer b's tensor, found by name among the
// constants computed at load (a constant) or in tensors.
func (p *Program) uploadNamed(b plan.Buffer, tensors map[string]*ir.Tensor) error {
	// A constant the program computed itself wins over a tensor of the
	// same name, which may be another program's constant.
	t, ok := p.constants[b.Name]
	if !ok || b.Kind != constant {
		t, ok = tensors[b.Name]
	}
	if !ok {
		return fmt.Errorf("no %s %s", b.Kind, b.Name)
	}
	return p.upload(b, t)
}

// SetState uploads a state's content (a KV cache), which runs then read
// and update in place.
func (p *Program) SetState(name string, t *ir.Tensor) error {
	for _, b := range p.plan.Buffers {
		if b.Kind == state && b.Name == name {
			return p.upload(b, t)
		}
	}
	return fmt.Errorf("%s has no state %s", p.name, name)
}

// ZeroStates zeroes every state on the device (a KV cache's start, as
// lum_create leaves it) without a host copy, which at real shapes would
// be gigabytes of zeros.
func (p *Program) ZeroStates() error {
	for _, b := range p.plan.Buffers {
		if b.Kind == state {
			if err := p.bufs[b.ID].Memset(0, p.bufs[b.ID].Size(), 0); err != nil {
				return fmt.Errorf("zero %s: %w", b.Name, err)
			}
		}
	}
	return nil
}

// Run uploads the inputs, launches the run on stream (nil: the default
// stream, or the graphs' stream with graphs on; see RunOnDevice), waits
// for it and returns the outputs by name.
func (p *Program) Run(inputs map[string]*ir.Tensor, stream *Stream) (map[string]*ir.Tensor, error) {
	batch, err := p.RunOnDevice(inputs, stream)
	if err != nil {
		return nil, err
	}
	out := map[string]*ir.Tensor{}
	for name, id := range p.plan.Outputs {
		t, err := p.download(id)
		if err != nil {
			return nil, fmt.Errorf("run %s: output %s: %w", p.name, name, err)
		}
		out[name] = t
	}
	if batch != nil {
		// The logits of the sequences present: the rows past them
		// belong to none.
		present, err := p.plan.Step.Present(out, batch)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", p.name, err)
		}
		return present, nil
	}
	return out, nil
}

// Output is an output's device buffer and type, for a kernel that reads it
// where the run left it (a serving step's sampler reads the logits).
func (p *Program) Output(name string) (*Buffer, ir.ValueType, error) {
	id, ok := p.plan.Outputs[name]
	if !ok || p.bufs[id] == nil {
		return nil, ir.ValueType{}, fmt.Errorf("%s has no output %s of its own buffer", p.name, name)
	}
	return p.bufs[id], p.types[id], nil
}

// RunOnDevice is Run without reading the outputs back: they stay in their
// buffers (see Output). For a serving step it returns the batch its
// inputs hold, checked. With graphs on ([Program.UseGraphs]) a serving
// step's inputs are uploaded, then the graph of its row bucket replays
// its launches (on the graphs' stream when stream is nil).
func (p *Program) RunOnDevice(inputs map[string]*ir.Tensor, stream *Stream) (*step.Batch, error) {
	if !p.prepared {
		return nil, fmt.Errorf("run %s: not prepared", p.name)
	}
	for _, s := range p.plan.Symbols {
		// A position past the range would write a KV cache out of bounds.
		if t := inputs[s.Name]; t != nil && t.Len() == 1 {
			if err := p.plan.CheckSymbol(s.Name, t.Int(0)); err != nil {
				return nil, fmt.Errorf("run %s: %w", p.name, err)
			}
		}
	}
	var batch *step.Batch
	if p.plan.Step != nil {
		// A serving step's metadata is checked as a batch before
		// anything is uploaded: bad metadata changes no cache slot.
		b, err := p.plan.Step.Unpad(inputs)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", p.name, err)
		}
		p.tokens, p.seqs = int64(b.Tokens()), int64(b.Seqs())
		batch = b
	}
	// Paged attention's kernels trust its metadata: a block past the
	// pool would be read out of bounds.
	if err := p.plan.CheckPaged(inputs); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.name, err)
	}
	if err := p.uploadKinds(inputs, input); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.name, err)
	}
	stream = p.runStream(stream)
	if err := p.launchStep(stream); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.name, err)
	}
	sync := p.ctx.Synchronize
	if stream != nil {
		sync = stream.Synchronize
	}
	if err := sync(); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.name, err)
	}
	return batch, nil
}

// State downloads a state's current content: after a run, its updated
// value (a run ends with the state written, in place or by a copy).
func (p *Program) State(name string) (*ir.Tensor, error) {
	for _, b := range p.plan.Buffers {
		if b.Kind == state && b.Name == name {
			return p.download(b.ID)
		}
	}
	return nil, fmt.Errorf("%s has no state %s", p.name, name)
}

// launchRun issues one run's launches on stream, reading the inputs and
// states already on the device and waiting for nothing.
func (p *Program) launchRun(stream *Stream) error {
	return p.launch(p.plan.Run, stream)
}

// launch issues launches in order, each kernel's arguments the device
// addresses of its buffers, as they run with the last run's T and S.
func (p *Program) launch(ls []plan.Launch, stream *Stream) error {
	return p.launchAt(ls, stream, p.tokens, p.seqs)
}

func (p *Program) upload(b plan.Buffer, t *ir.Tensor) error {
	vt := p.types[b.ID]
	if t.DType != vt.DType || !t.Shape.Equal(vt.Shape) {
		return fmt.Errorf("%s %s is %s%v, the program's is %s%v", b.Kind, b.Name, t.DType, t.Shape, vt.DType, vt.Shape)
	}
	return p.bufs[b.ID].Upload(cuda.TensorBytes(t)) // synchronous: the bytes may alias t
}

// download reads a buffer that is not in the arena (an output or a
// state) back as a tensor.
func (p *Program) download(id int) (*ir.Tensor, error) {
	b := p.plan.Buffers[id]
	if p.bufs[id] == nil {
		return nil, fmt.Errorf("%s %s lives in the arena and is not read back", b.Kind, b.Name)
	}
	data := make([]byte, b.Bytes)
	if err := p.bufs[id].Download(data); err != nil {
		return nil, err
	}
	return cuda.DecodeTensor(p.types[id], data)
}

// Close destroys the program's graphs, frees its device memory and
// unloads its module.
func (p *Program) Close() error {
	errs := []error{p.destroyGraphs()}
	for _, b := range p.bufs {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if p.arena != nil {
		errs = append(errs, p.arena.Free())
	}
	if p.module != nil {
		errs = append(errs, p.module.Unload())
	}
	return errors.Join(errs...)
}
