package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// copyStates appends the launches that write each state's new content
// into the state buffer, after everything that may read the old one.
func (b *builder) copyStates() {
	names := make([]string, 0, len(b.prog.Updates))
	for name := range b.prog.Updates {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		src := b.prog.Updates[name]
		dst, ok := b.named[name]
		if !ok || dst == src {
			continue
		}
		buf := b.prog.Buffers[src]
		nb := ir.NewBuilder("copy")
		x := nb.Input("$0", buf.DType, buf.Shape...)
		nb.Output("out0", nb.Apply(ir.OpCast, ir.Attrs{DType: buf.DType}, x))
		body, _ := nb.Build()
		b.prog.Run = append(b.prog.Run, &Launch{Name: fmt.Sprintf("k%d", len(b.prog.Run)), Body: body, Form: rules.FormOf(body), Args: []int{src}, Outs: []int{dst}})
	}
}

// updateInPlace makes the launch computing a state's new content write the
// new rows alone, straight into the state buffer, where that is safe:
//
//   - the new content is a Temp that one launch writes, its only output;
//   - the launch's body outputs slice_update(state, rows), or
//     scatter(state, rows, slots) with the slots an input of the body,
//     possibly through casts that change nothing, with the state buffer
//     read whole there and nowhere else (the rows do not depend on the
//     old content);
//   - the rows are elementwise work (views, moves and elementwise ops,
//     the form whose printer writes through windows);
//   - no later launch reads the state buffer, whose old content the write
//     destroys; launches before it read the old content as before.
//
// The launch's body then computes the rows only, written through a Window
// at the slice_update's offset or the scatter's slots; the launches after
// it that read the new content read the state buffer instead, and the
// Temp is dropped. Any other update keeps the copy at the end of the run
// (copyStates).
func (b *builder) updateInPlace() {
	names := make([]string, 0, len(b.prog.Updates))
	for name := range b.prog.Updates {
		names = append(names, name)
	}
	slices.Sort(names)
	drop := map[int]bool{}
	for _, name := range names {
		src := b.prog.Updates[name]
		dst, ok := b.named[name]
		if !ok || dst == src || b.prog.Buffers[src].Kind != Temp {
			continue
		}
		writer := -1
		for i, l := range b.prog.Run {
			if slices.Contains(l.Outs, src) {
				if writer >= 0 {
					writer = -1
					break
				}
				writer = i
			}
		}
		if writer < 0 || len(b.prog.Run[writer].Outs) != 1 {
			continue
		}
		readsOld := false
		for _, l := range b.prog.Run[writer+1:] {
			readsOld = readsOld || slices.Contains(l.Args, dst)
		}
		if readsOld {
			continue
		}
		l := b.prog.Run[writer]
		body, args, ok := rowsBody(l, dst)
		if !ok {
			continue
		}
		l.Body, l.Args, l.Outs, l.Form = body, args, []int{dst}, rules.FormOf(body)
		for _, later := range b.prog.Run[writer+1:] {
			for i, a := range later.Args {
				if a == src {
					later.Args[i] = dst
				}
			}
		}
		b.prog.Updates[name] = dst
		drop[src] = true
	}
	b.dropBuffers(drop)
}

// rowsBody rewrites the body of launch l, whose output is
// slice_update(state, rows) or scatter(state, rows, slots) with the state
// buffer dst read whole, to compute rows alone, written into dst through
// a window at the update's offset, or at the slots (a Slots window: each
// slice at its own slot, -1 skipped). It returns the body and its
// arguments (dst no longer among them), or false when l's body is not of
// that shape, the rows or slots read the state, the slots are not one of
// the body's inputs, or the rows are not elementwise work.
func rowsBody(l *Launch, dst int) (*ir.Graph, []int, bool) {
	body := l.Body
	k := slices.Index(l.Args, dst)
	if k < 0 || len(body.Outputs) != 1 {
		return nil, nil, false
	}
	ins := body.Inputs()
	state := ins[k]
	su := body.Node(noopCasts(body, body.Outputs[0].Value))
	if su.Op != ir.OpSliceUpdate && su.Op != ir.OpScatter || noopCasts(body, su.Inputs[0]) != state {
		return nil, nil, false
	}
	rows := su.Inputs[1]
	need := make([]bool, len(body.Nodes))
	need[rows] = true
	pos, runtime := su.DynamicOffset()
	slots := su.Op == ir.OpScatter
	if slots {
		pos, runtime = su.Inputs[2], true
	}
	if runtime {
		// The position (or the slots) is read by the kernel, not
		// computed by it: it must be one of the body's inputs.
		if body.Node(pos).Op != ir.OpInput {
			return nil, nil, false
		}
		need[pos] = true
	}
	last := max(rows, pos)
	for i := last; i >= 0; i-- {
		if need[i] {
			for _, in := range body.Node(i).Inputs {
				need[in] = true
			}
		}
	}
	if need[state] {
		return nil, nil, false
	}
	nb := ir.NewBuilder(body.Name)
	vals := make([]ir.Value, len(body.Nodes))
	var args []int
	at := -1 // the runtime position's input in the new body
	for i, n := range body.Nodes[:last+1] {
		if !need[i] {
			continue
		}
		if runtime && ir.Value(i) == pos {
			at = len(args)
		}
		if !rowsOp(body, n) {
			return nil, nil, false
		}
		if n.Op == ir.OpInput {
			vals[i] = nb.Input(fmt.Sprintf("$%d", len(args)), n.DType, n.Shape...)
			args = append(args, l.Args[slices.Index(ins, ir.Value(i))])
			continue
		}
		kids := make([]ir.Value, len(n.Inputs))
		for j, in := range n.Inputs {
			kids[j] = vals[in]
		}
		vals[i] = nb.Apply(n.Op, n.Attrs, kids...)
	}
	ax := su.Axis
	if ax < 0 {
		ax += len(su.Shape)
	}
	w := Window{Axis: ax, Offset: su.Offset, Shape: su.Shape.Clone(), Runtime: runtime && !slots, Slots: slots, Pos: at}
	if slots {
		w.Offset = 0
	}
	nb.Output(w.OutputName(0), vals[rows])
	g, err := nb.Build()
	if err != nil {
		return nil, nil, false
	}
	return g, args, true
}

// noopCasts follows v through casts to the dtype it already has.
func noopCasts(body *ir.Graph, v ir.Value) ir.Value {
	for n := body.Node(v); n.Op == ir.OpCast && body.Node(n.Inputs[0]).DType == n.DType; n = body.Node(v) {
		v = n.Inputs[0]
	}
	return v
}

// rowsOp reports whether a node may compute the rows of an in-place
// update: the ops of the elementwise form (views, moves, elementwise ops
// and leaves of at most one value), which the printer writes through a
// window.
func rowsOp(body *ir.Graph, n *ir.Node) bool {
	switch n.Op.Class() {
	case ir.ClassLeaf:
		return n.Op != ir.OpConst || len(n.Data) <= 1
	case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView, ir.ClassMove:
		return true
	case ir.ClassReduce:
		// A short sum across rows (split-K's partials summed as they
		// are read): each element loops over the summed axis.
		in := body.Node(n.Inputs[0]).Shape
		return n.Op == ir.OpSum && n.Axis >= 0 && n.Axis < len(in)-1 && in[n.Axis] <= rules.MaxCrossSum
	}
	return false
}
