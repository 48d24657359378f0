package lower

import (
	"context"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// Execute runs a lowered program in the reference interpreter, launch by
// launch, as a device would: load-time preparation once, then one run.
// feeds holds the inputs, weights and states by name. Temp buffers live in
// a simulated arena at their planned offsets, so that a plan that lets two
// live buffers overlap fails here, naming them, instead of giving a wrong
// answer. An output written through a window (Launch.Window) lands in
// its buffer's slice, the rest of the buffer kept. It returns the outputs
// and the states' new contents; the feeds are not modified.
func Execute(ctx context.Context, prog *Program, feeds map[string]*ir.Tensor) (outputs, states map[string]*ir.Tensor, err error) {
	vals := make([]*ir.Tensor, len(prog.Buffers))
	// The arena: which Temp buffer last wrote each placed range.
	type tenant struct {
		buf    int
		lo, hi int64
	}
	var arena []tenant
	clobbered := map[int]int{} // buffer -> the buffer that overwrote it
	for _, buf := range prog.Buffers {
		switch buf.Kind {
		case Input, Weight, State:
			t, ok := feeds[buf.Name]
			if !ok {
				return nil, nil, fmt.Errorf("execute %s: no value for %s %s", prog.Name, buf.Kind, buf.Name)
			}
			vals[buf.ID] = t
		case Constant:
			t, err := buf.Value(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("execute %s: %w", prog.Name, err)
			}
			vals[buf.ID] = t
		}
	}
	run := func(l *Launch) error {
		args := make([]*ir.Tensor, len(l.Args))
		for i, a := range l.Args {
			if by, ok := clobbered[a]; ok {
				return fmt.Errorf("launch %s reads %s after %s overwrote it in the arena", l.Name, prog.Buffers[a].Name, prog.Buffers[by].Name)
			}
			if vals[a] == nil {
				return fmt.Errorf("launch %s reads %s before anything wrote it", l.Name, prog.Buffers[a].Name)
			}
			args[i] = vals[a]
		}
		outs, err := ir.EvalKernel(ctx, l.Body, args...)
		if err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
		if l.Rows != nil {
			if err := poisonPastRows(l, vals, outs); err != nil {
				return fmt.Errorf("launch %s: %w", l.Name, err)
			}
		}
		for i, o := range l.Outs {
			buf := prog.Buffers[o]
			w, windowed, err := l.Window(i)
			if err != nil {
				return fmt.Errorf("launch %s: %w", l.Name, err)
			}
			if windowed {
				if by, ok := clobbered[o]; ok {
					return fmt.Errorf("launch %s writes into %s after %s overwrote it in the arena", l.Name, buf.Name, prog.Buffers[by].Name)
				}
				if vals[o] == nil {
					return fmt.Errorf("launch %s writes into %s before anything wrote it", l.Name, buf.Name)
				}
				var at *ir.Tensor
				if w.Runtime || w.Slots {
					at = args[w.Pos]
				}
				if vals[o], err = writeWindow(ctx, vals[o], outs[i], w, at); err != nil {
					return fmt.Errorf("launch %s writes into %s: %w", l.Name, buf.Name, err)
				}
				continue // the buffer keeps its place in the arena
			}
			vals[o] = outs[i]
			if buf.Kind != Temp {
				continue
			}
			lo, hi := buf.Offset, buf.Offset+buf.Bytes
			kept := arena[:0]
			for _, t := range arena {
				if t.buf != o && t.lo < hi && lo < t.hi {
					clobbered[t.buf] = o
					continue
				}
				kept = append(kept, t)
			}
			arena = append(kept, tenant{o, lo, hi})
			delete(clobbered, o)
		}
		return nil
	}
	for _, l := range prog.Prep {
		if err := run(l); err != nil {
			return nil, nil, fmt.Errorf("execute %s: %w", prog.Name, err)
		}
	}
	for _, l := range prog.Run {
		if err := run(l); err != nil {
			return nil, nil, fmt.Errorf("execute %s: %w", prog.Name, err)
		}
	}
	outputs, states = map[string]*ir.Tensor{}, map[string]*ir.Tensor{}
	for name, id := range prog.Outputs {
		outputs[name] = vals[id]
	}
	for _, buf := range prog.Buffers {
		if _, updated := prog.Updates[buf.Name]; updated && buf.Kind == State {
			states[buf.Name] = vals[buf.ID]
		}
	}
	return outputs, states, nil
}

// writeWindow returns a copy of buf with part written into its window w,
// at the values of the window's input (nil for a static window): a slice
// update at w.Start, or for a Slots window a scatter by the slots (whose
// meaning, -1 skipped and a slot outside the buffer an error, is the
// reference's).
func writeWindow(ctx context.Context, buf, part *ir.Tensor, w Window, at *ir.Tensor) (*ir.Tensor, error) {
	if !buf.Shape.Equal(w.Shape) || buf.DType != part.DType {
		return nil, fmt.Errorf("a %s window into %v holds a %s%v buffer", part.DType, w.Shape, buf.DType, buf.Shape)
	}
	nb := ir.NewBuilder("window")
	x := nb.Input("buf", buf.DType, buf.Shape...)
	y := nb.Input("part", part.DType, part.Shape...)
	feeds := map[string]*ir.Tensor{"buf": buf, "part": part}
	switch {
	case w.Slots:
		feeds["slots"] = at
		nb.Output("out", nb.Scatter(x, y, nb.Input("slots", at.DType, at.Shape...), w.Axis))
	case w.Runtime:
		nb.Output("out", nb.Apply(ir.OpSliceUpdate, ir.Attrs{Axis: w.Axis, Offset: w.Start(at.Int(0))}, x, y))
	default:
		nb.Output("out", nb.Apply(ir.OpSliceUpdate, ir.Attrs{Axis: w.Axis, Offset: w.Offset}, x, y))
	}
	g, err := nb.Build()
	if err != nil {
		return nil, err
	}
	res, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{})
	if err != nil {
		return nil, err
	}
	return res.Outputs["out"], nil
}

// poisonPastRows stands for a launch with Rows not computing the rows past
// those present (T tokens or S sequences): those rows of its outputs become NaN (an integer
// output's the dtype's lowest value), so that a reader that needs them
// (a reduction over the tokens, an index) is seen to read garbage.
func poisonPastRows(l *Launch, vals []*ir.Tensor, outs []*ir.Tensor) error {
	T, err := l.Rows.Present(vals[l.Rows.Args[0]], vals[l.Rows.Args[1]])
	if err != nil {
		return err
	}
	a := l.Rows.Axis
	for j, o := range outs {
		if a < 0 || a >= len(o.Shape) || int64(o.Shape[a]) != l.Rows.Max {
			return fmt.Errorf("an output of shape %v has no %d rows on axis %d", o.Shape, l.Rows.Max, a)
		}
		// A fresh tensor: an output may be one of the arguments.
		p := ir.NewTensor(o.DType, o.Shape)
		inner := int64(1) // elements a row holds within one index of the axes before
		for _, d := range o.Shape[a+1:] {
			inner *= int64(d)
		}
		for i := range o.Len() {
			kept := i/inner%l.Rows.Max < T
			switch {
			case !o.DType.IsInt() && kept:
				p.Set(i, o.At(i))
			case o.DType.IsFloat():
				p.Set(i, math.NaN())
			case kept:
				p.SetInt(i, o.Int(i))
			case o.DType.IsInt():
				p.SetInt(i, -o.DType.MaxInt()-1)
			}
		}
		outs[j] = p
	}
	return nil
}
