package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// Program is a lowered program loaded on a device: its kernels' module,
// one allocation for the arena of intermediates and one for every other
// buffer, ready to prepare once and run many times.
type Program struct {
	ctx      *Context
	prog     *lower.Program
	kernels  []*cuda.Kernel // PrintProgram's: the preparation launches, then one run
	module   *Module
	funcs    map[string]*Function
	arena    *Buffer
	bufs     []*Buffer // by buffer id; nil for Temp buffers, which live in the arena
	prepared bool
}

// LoadProgram loads a lowered program's kernels (PrintProgram's, compiled
// into image: a CUBIN or PTX) on the context's device and allocates its
// buffers.
func LoadProgram(c *Context, prog *lower.Program, kernels []*cuda.Kernel, image []byte) (p *Program, err error) {
	if n := len(prog.Prep) + len(prog.Run); n != len(kernels) {
		return nil, fmt.Errorf("load %s: %d kernels for %d launches", prog.Name, len(kernels), n)
	}
	p = &Program{ctx: c, prog: prog, kernels: kernels, funcs: map[string]*Function{}, bufs: make([]*Buffer, len(prog.Buffers))}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("load %s: %w", prog.Name, err), p.Close())
			p = nil
		}
	}()
	if p.module, err = c.LoadModule(image); err != nil {
		return nil, err
	}
	for _, k := range cuda.Distinct(kernels) {
		if p.funcs[k.Name], err = p.module.Function(k.Name); err != nil {
			return nil, err
		}
	}
	if p.arena, err = c.Alloc(int(max(prog.ArenaBytes, 256))); err != nil {
		return nil, err
	}
	for _, b := range prog.Buffers {
		if b.Kind == lower.Temp {
			continue
		}
		if p.bufs[b.ID], err = c.Alloc(int(max(b.Bytes, 1))); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Pointer is the device address of a lowered buffer: a Temp buffer's is in
// the arena at its planned offset.
func (p *Program) Pointer(id int) uint64 {
	if b := p.prog.Buffers[id]; b.Kind == lower.Temp {
		return p.arena.Ptr() + uint64(b.Offset)
	}
	return p.bufs[id].Ptr()
}

// Prepare uploads the weights (by name) and the constants and runs the
// preparation launches, once before the first run.
func (p *Program) Prepare(ctx context.Context, weights map[string]*ir.Tensor) error {
	for _, b := range p.prog.Buffers {
		var t *ir.Tensor
		switch b.Kind {
		case lower.Weight:
			w, ok := weights[b.Name]
			if !ok {
				return fmt.Errorf("prepare %s: no weight %s", p.prog.Name, b.Name)
			}
			t = w
		case lower.Constant:
			c, err := b.Value(ctx)
			if err != nil {
				return fmt.Errorf("prepare %s: %w", p.prog.Name, err)
			}
			t = c
		default:
			continue
		}
		if err := p.upload(b, t); err != nil {
			return fmt.Errorf("prepare %s: %w", p.prog.Name, err)
		}
	}
	if err := p.launch(p.prog.Prep, p.kernels[:len(p.prog.Prep)], nil); err != nil {
		return fmt.Errorf("prepare %s: %w", p.prog.Name, err)
	}
	if err := p.ctx.Synchronize(); err != nil {
		return fmt.Errorf("prepare %s: %w", p.prog.Name, err)
	}
	p.prepared = true
	return nil
}

// SetState uploads a state's content (a KV cache), which runs then read
// and update in place.
func (p *Program) SetState(name string, t *ir.Tensor) error {
	for _, b := range p.prog.Buffers {
		if b.Kind == lower.State && b.Name == name {
			return p.upload(b, t)
		}
	}
	return fmt.Errorf("%s has no state %s", p.prog.Name, name)
}

// Run uploads the inputs, launches the run on stream (nil: the default
// stream), waits for it and returns the outputs by name.
func (p *Program) Run(inputs map[string]*ir.Tensor, stream *Stream) (map[string]*ir.Tensor, error) {
	if !p.prepared {
		return nil, fmt.Errorf("run %s: not prepared", p.prog.Name)
	}
	for _, b := range p.prog.Buffers {
		if b.Kind != lower.Input {
			continue
		}
		t, ok := inputs[b.Name]
		if !ok {
			return nil, fmt.Errorf("run %s: no input %s", p.prog.Name, b.Name)
		}
		if err := p.upload(b, t); err != nil {
			return nil, fmt.Errorf("run %s: %w", p.prog.Name, err)
		}
	}
	if err := p.launchRun(stream); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.prog.Name, err)
	}
	sync := p.ctx.Synchronize
	if stream != nil {
		sync = stream.Synchronize
	}
	if err := sync(); err != nil {
		return nil, fmt.Errorf("run %s: %w", p.prog.Name, err)
	}
	out := map[string]*ir.Tensor{}
	for name, id := range p.prog.Outputs {
		t, err := p.download(id)
		if err != nil {
			return nil, fmt.Errorf("run %s: output %s: %w", p.prog.Name, name, err)
		}
		out[name] = t
	}
	return out, nil
}

// State downloads a state's current content: after a run, its updated
// value (a run ends with the state written, in place or by a copy).
func (p *Program) State(name string) (*ir.Tensor, error) {
	for _, b := range p.prog.Buffers {
		if b.Kind == lower.State && b.Name == name {
			return p.download(b.ID)
		}
	}
	return nil, fmt.Errorf("%s has no state %s", p.prog.Name, name)
}

// launchRun issues one run's launches on stream, reading the inputs and
// states already on the device and waiting for nothing.
func (p *Program) launchRun(stream *Stream) error {
	return p.launch(p.prog.Run, p.kernels[len(p.prog.Prep):], stream)
}

// launch issues launches in order, each kernel's arguments the device
// addresses of its buffers.
func (p *Program) launch(ls []*lower.Launch, ks []*cuda.Kernel, stream *Stream) error {
	for i, l := range ls {
		k := ks[i]
		var args []any
		for _, id := range append(append([]int(nil), l.Args...), l.Outs...) {
			args = append(args, p.Pointer(id))
		}
		if err := p.funcs[k.Name].Launch(k.Grid, k.Block, 0, stream, args...); err != nil {
			return fmt.Errorf("launch %s (kernel %s): %w", l.Name, k.Name, err)
		}
	}
	return nil
}

func (p *Program) upload(b *lower.Buffer, t *ir.Tensor) error {
	if t.DType != b.DType || !t.Shape.Equal(b.Shape) {
		return fmt.Errorf("%s %s is %s%v, the program's is %s%v", b.Kind, b.Name, t.DType, t.Shape, b.DType, b.Shape)
	}
	return p.bufs[b.ID].Upload(cuda.EncodeTensor(t))
}

// download reads a buffer that is not in the arena (an output or a
// state) back as a tensor.
func (p *Program) download(id int) (*ir.Tensor, error) {
	b := p.prog.Buffers[id]
	if p.bufs[id] == nil {
		return nil, fmt.Errorf("%s %s lives in the arena and is not read back", b.Kind, b.Name)
	}
	data := make([]byte, b.Bytes)
	if err := p.bufs[id].Download(data); err != nil {
		return nil, err
	}
	return cuda.DecodeTensor(ir.ValueType{Shape: b.Shape, DType: b.DType}, data)
}

// Close frees the program's device memory and unloads its module.
func (p *Program) Close() error {
	var errs []error
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
