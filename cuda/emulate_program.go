package cuda

import (
	"context"
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// Emulation is a lowered program's printed kernels laid out for the CPU
// emulation: the intermediates placed in one arena buffer (buffer 0) at
// their planned offsets as on the device, every other lowered buffer in a
// buffer of its own holding its value, and the launches (preparation,
// then one run) with their arguments bound to those places.
type Emulation struct {
	Source   string
	Kernels  []emu.Kernel
	Buffers  []emu.Buffer
	Launches []emu.Launch
	// Prep is how many of Launches are the preparation's.
	Prep int

	prog  *lower.Program
	where []emu.Arg // by lowered buffer ID
}

// NewEmulation lays out a lowered program's printed kernels (PrintProgram's,
// in its order) for the emulation. feeds holds the inputs, weights and
// states by name; constants are computed on the host, as the loader does
// (those of a buffer without a graph leaf, a program read back from a
// plan, are taken from feeds). A launch that writes an output through a
// window (lower.Launch.Window: a state's new rows written in place) gets
// the whole buffer, which its kernel writes at the window's elements
// alone; the window must fit the buffer.
func NewEmulation(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor) (*Emulation, error) {
	return newEmulation(ctx, prog, kernels, feeds, nil)
}

// Encoded holds a program's weights and constants encoded once, by
// buffer name, for many emulated runs of it (a serving step's): the runs
// then encode only their inputs and states.
type Encoded map[string][]byte

// EncodeFixed encodes prog's weights (from feeds) and constants (computed,
// or from feeds for a buffer without a graph leaf), as NewEmulation would
// on every run.
func EncodeFixed(ctx context.Context, prog *lower.Program, feeds map[string]*ir.Tensor) (Encoded, error) {
	enc := Encoded{}
	for _, b := range prog.Buffers {
		if b.Kind != lower.Weight && b.Kind != lower.Constant {
			continue
		}
		data, err := encodeBuffer(ctx, prog, b, feeds)
		if err != nil {
			return nil, err
		}
		// Padded here, at its exact capacity, so that no run appends to
		// (and so writes into) the shared bytes.
		size := int(max(b.Bytes, 1))
		if len(data) < size {
			data = append(data[:len(data):len(data)], make([]byte, size-len(data))...)
		}
		enc[b.Name] = data[:len(data):len(data)]
	}
	return enc, nil
}

// encodeBuffer is the bytes of an input, weight, state or constant
// buffer: a tensor's own storage where that is its encoding (TensorBytes:
// no copy of a serving step's weights, most of the host's memory). The
// bytes may alias the tensor: callers only read them, and pad them into
// a copy.
func encodeBuffer(ctx context.Context, prog *lower.Program, b *lower.Buffer, feeds map[string]*ir.Tensor) ([]byte, error) {
	switch b.Kind {
	case lower.Input, lower.Weight, lower.State:
		t, ok := feeds[b.Name]
		if !ok {
			return nil, fmt.Errorf("emulate %s: no value for %s %s", prog.Name, b.Kind, b.Name)
		}
		return TensorBytes(t), nil
	case lower.Constant:
		t, ok := feeds[b.Name]
		if b.Leaf != nil || !ok {
			var err error
			if t, err = b.Value(ctx); err != nil {
				return nil, fmt.Errorf("emulate %s: %w", prog.Name, err)
			}
		}
		return EncodeTensor(t), nil
	}
	return nil, nil
}

func newEmulation(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor, enc Encoded) (*Emulation, error) {
	launches := append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...)
	if len(launches) != len(kernels) {
		return nil, fmt.Errorf("emulate %s: %d kernels for %d launches", prog.Name, len(kernels), len(launches))
	}
	for _, s := range prog.Symbols {
		// As lum_set_input refuses it: past its range a kernel would
		// write a cache row outside the cache.
		if t, ok := feeds[s.Name]; ok && t.Len() == 1 {
			if v := t.Int(0); v < s.Lo || v > s.Hi {
				return nil, fmt.Errorf("emulate %s: %s=%d is outside the range the program was compiled for, %d..%d", prog.Name, s.Name, v, s.Lo, s.Hi)
			}
		}
	}
	e := &Emulation{Source: Source(kernels), Prep: len(prog.Prep), prog: prog, where: make([]emu.Arg, len(prog.Buffers))}
	e.Buffers = []emu.Buffer{{Bytes: int(max(prog.ArenaBytes, 16))}}
	for _, b := range prog.Buffers {
		if b.Kind == lower.Temp {
			e.where[b.ID] = emu.Arg{Buffer: 0, Offset: int(b.Offset)}
			continue
		}
		data, cached := enc[b.Name]
		if !cached || (b.Kind != lower.Weight && b.Kind != lower.Constant) {
			var err error
			if data, err = encodeBuffer(ctx, prog, b, feeds); err != nil {
				return nil, err
			}
		}
		e.where[b.ID] = emu.Arg{Buffer: len(e.Buffers)}
		size := int(max(b.Bytes, 1)) // an empty tensor still gets a buffer to point at
		if data != nil && len(data) < size {
			data = append(data[:len(data):len(data)], make([]byte, size-len(data))...)
		}
		e.Buffers = append(e.Buffers, emu.Buffer{Bytes: size, Data: data})
	}
	for _, k := range WithBuckets(kernels) {
		ek := emu.Kernel{Name: k.Name}
		for _, p := range k.Params {
			ek.Params = append(ek.Params, emu.Param{Name: p.Name, Type: p.Type})
		}
		e.Kernels = append(e.Kernels, ek)
	}
	for i, k := range kernels {
		if err := checkWindows(prog, launches[i]); err != nil {
			return nil, fmt.Errorf("emulate %s: %w", prog.Name, err)
		}
		if err := checkPagedMetadata(prog, launches[i], feeds); err != nil {
			return nil, fmt.Errorf("emulate %s: %w", prog.Name, err)
		}
		grid := k.Grid
		if launches[i].Rows != nil {
			T, err := RowsPresent(prog, launches[i], feeds)
			if err != nil {
				return nil, fmt.Errorf("emulate %s: %w", prog.Name, err)
			}
			k = k.ForRows(T)
			grid = k.Rows.Of(k.Grid, T)
		}
		l := emu.Launch{Kernel: k.Name, Grid: grid, Block: k.Block}
		for _, id := range launches[i].Params() {
			l.Args = append(l.Args, e.where[id])
		}
		e.Launches = append(e.Launches, l)
	}
	return e, nil
}

// Run runs launches (some of e.Launches) under the emulation on e's
// buffers and returns every buffer's content after them.
func (e *Emulation) Run(ctx context.Context, launches []emu.Launch, opt emu.Options) ([][]byte, error) {
	got, err := emu.Run(ctx, e.Source, e.Kernels, e.Buffers, launches, opt)
	if err != nil {
		return nil, fmt.Errorf("emulate %s: %w", e.prog.Name, err)
	}
	return got, nil
}

// EmulateProgram runs a lowered program's printed kernels (PrintProgram's,
// in its order: preparation, then one run) under the CPU emulation laid
// out as NewEmulation lays them out, and returns the outputs and the
// states' new contents.
func EmulateProgram(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor, opt emu.Options) (outputs, states map[string]*ir.Tensor, err error) {
	return EmulateProgramEncoded(ctx, prog, kernels, feeds, nil, opt)
}

// EmulateProgramEncoded is EmulateProgram with the weights and constants
// encoded beforehand (EncodeFixed); feeds need not hold those.
func EmulateProgramEncoded(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor, enc Encoded, opt emu.Options) (outputs, states map[string]*ir.Tensor, err error) {
	e, err := newEmulation(ctx, prog, kernels, feeds, enc)
	if err != nil {
		return nil, nil, err
	}
	if opt.Discard == nil {
		// Only the outputs and the updated states are read back: the
		// weights' bytes (gigabytes at real shapes) need not return.
		keep := map[int]bool{}
		for _, id := range prog.Outputs {
			keep[e.where[id].Buffer] = true
		}
		for _, b := range prog.Buffers {
			if _, ok := prog.Updates[b.Name]; ok && b.Kind == lower.State {
				keep[e.where[b.ID].Buffer] = true
			}
		}
		for i := range e.Buffers {
			if !keep[i] {
				opt.Discard = append(opt.Discard, i)
			}
		}
	}
	got, err := e.Run(ctx, e.Launches, opt)
	if err != nil {
		return nil, nil, err
	}
	read := func(id int) (*ir.Tensor, error) {
		b := prog.Buffers[id]
		a := e.where[id]
		return DecodeTensor(ir.ValueType{Shape: b.Shape, DType: b.DType}, got[a.Buffer][a.Offset:a.Offset+int(b.Bytes)])
	}
	outputs, states = map[string]*ir.Tensor{}, map[string]*ir.Tensor{}
	for name, id := range prog.Outputs {
		if outputs[name], err = read(id); err != nil {
			return nil, nil, err
		}
	}
	for _, b := range prog.Buffers {
		if _, ok := prog.Updates[b.Name]; ok && b.Kind == lower.State {
			if states[b.Name], err = read(b.ID); err != nil {
				return nil, nil, err
			}
		}
	}
	return outputs, states, nil
}

// checkWindows checks that launch l's windowed outputs fit their buffers:
// each window has its buffer's shape, and the output the buffer's dtype.
func checkWindows(prog *lower.Program, l *lower.Launch) error {
	for j, o := range l.Outs {
		w, ok, err := l.Window(j)
		if err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
		if !ok {
			continue
		}
		b := prog.Buffers[o]
		if !b.Shape.Equal(w.Shape) || b.DType != l.Body.Node(l.Body.Outputs[j].Value).DType {
			return fmt.Errorf("launch %s writes output %d through a window into %v, but its buffer is %s %s%v", l.Name, j, w.Shape, b.Kind, b.DType, b.Shape)
		}
	}
	return nil
}

// checkPagedMetadata refuses, before anything runs, a paged attention
// launch whose metadata (block table, lengths, query starts, sequence
// count) the caller gave and the op has no meaning on (ir.PagedTokens):
// the kernel trusts it, and a block id past the pool would read, or a
// scatter by the same table write, outside the pool. Metadata the program
// computes itself is the program's and is not checked here.
func checkPagedMetadata(prog *lower.Program, l *lower.Launch, feeds map[string]*ir.Tensor) error {
	p, err := cost.Paged(l.Body)
	if err != nil {
		return nil // not a paged attention launch
	}
	n := l.Body.Node(p.Node)
	ins := make([]ir.ValueType, len(n.Inputs))
	for k, v := range n.Inputs {
		ins[k] = ir.ValueType{Shape: l.Body.Node(v).Shape, DType: l.Body.Node(v).DType}
	}
	meta := make([]*ir.Tensor, len(n.Inputs))
	for k := 5; k < len(n.Inputs); k++ {
		arg := slices.Index(l.Body.Inputs(), n.Inputs[k])
		if arg < 0 || arg >= len(l.Args) {
			return fmt.Errorf("launch %s: paged attention's operand %d is no argument of the launch", l.Name, k)
		}
		b := prog.Buffers[l.Args[arg]]
		t, ok := feeds[b.Name]
		if !ok || (b.Kind != lower.Input && b.Kind != lower.State && b.Kind != lower.Weight) {
			return nil // computed by the program
		}
		if t.Len() != ins[k].Shape.NumElements() {
			return fmt.Errorf("launch %s: paged attention metadata %s has %d elements, not %d", l.Name, b.Name, t.Len(), ins[k].Shape.NumElements())
		}
		meta[k] = t
	}
	if _, err := ir.PagedTokens(n, ins, func(k int, j int64) int64 { return meta[k].Int(j) }); err != nil {
		return fmt.Errorf("launch %s: paged attention metadata: %w", l.Name, err)
	}
	return nil
}

// EmulateRunUntil runs a lowered program's preparation and its run's
// launches up to and including run launch last under the emulation, and
// returns the content of buffer id then: an intermediate a later launch
// may overwrite in the arena (a route's choices, which verification
// compares at near ties).
func EmulateRunUntil(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor, last, id int, opt emu.Options) (*ir.Tensor, error) {
	if last < 0 || last >= len(prog.Run) || id < 0 || id >= len(prog.Buffers) {
		return nil, fmt.Errorf("emulate %s: launch %d of %d, buffer %d of %d", prog.Name, last, len(prog.Run), id, len(prog.Buffers))
	}
	e, err := newEmulation(ctx, prog, kernels, feeds, nil)
	if err != nil {
		return nil, err
	}
	want := e.where[id].Buffer
	opt.Discard = nil
	for i := range e.Buffers {
		if i != want {
			opt.Discard = append(opt.Discard, i)
		}
	}
	got, err := e.Run(ctx, e.Launches[:e.Prep+last+1], opt)
	if err != nil {
		return nil, err
	}
	b, a := prog.Buffers[id], e.where[id]
	return DecodeTensor(ir.ValueType{Shape: b.Shape, DType: b.DType}, got[a.Buffer][a.Offset:a.Offset+int(b.Bytes)])
}
