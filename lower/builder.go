package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
)

// value is what a class amounts to at run time: a buffer read through a
// chain of views (innermost first).
type value struct {
	buf   int
	views []view
}

type view struct {
	op    ir.Op
	attrs ir.Attrs
}

// builder holds the state of one lowering.
type builder struct {
	eg    *egraph.EGraph[rules.Data]
	prog  *Program
	vals  map[egraph.ClassID]value
	tuple map[egraph.ClassID][]int // a multi-output launch's buffers
	named map[string]int           // leaves by name
}

// FromExtraction lowers the program that solution sol of problem p chooses
// in e-graph eg for graph g (whose values are the classes AddGraph gave).
// A chosen node that is neither a kernel, a view, a projection nor a leaf
// is an error naming it: such a node does not execute.
//
// A state's new rows are written into its buffer in place when that is
// safe (updateInPlace); otherwise the run's last launches copy the new
// content into the state buffer.
func FromExtraction(eg *egraph.EGraph[rules.Data], g *ir.Graph, classes []egraph.ClassID, p *extract.Problem, sol *extract.Solution) (*Program, error) {
	return fromExtraction(eg, g, classes, p, sol, true)
}

// fromExtraction is FromExtraction; without inPlace every state update is
// a copy at the end of the run (what tests compare in-place updates with).
func fromExtraction(eg *egraph.EGraph[rules.Data], g *ir.Graph, classes []egraph.ClassID, p *extract.Problem, sol *extract.Solution, inPlace bool) (*Program, error) {
	order, err := sol.Needed(p)
	if err != nil {
		return nil, fmt.Errorf("lower %s: %w", g.Name, err)
	}
	layout, err := step.LayoutOf(g)
	if err != nil {
		return nil, fmt.Errorf("lower %s: %w", g.Name, err)
	}
	b := &builder{eg: eg, prog: &Program{Name: g.Name, Outputs: map[string]int{}, Updates: map[string]int{}, Symbols: slices.Clone(g.Symbols), Step: layout},
		vals: map[egraph.ClassID]value{}, tuple: map[egraph.ClassID][]int{}, named: map[string]int{}}
	for _, pc := range order {
		c := p.ClassIDs[pc]
		if err := b.class(c, eg.Node(p.NodeIDs[sol.Choice[pc]])); err != nil {
			return nil, fmt.Errorf("lower %s: %w", g.Name, err)
		}
	}
	for _, r := range rules.GraphRoots(g, classes) {
		v, ok := b.vals[eg.Find(r.Class)]
		if !ok {
			return nil, fmt.Errorf("lower %s: root %s was not computed", g.Name, r.Name)
		}
		if r.IsUpdate {
			st, ok := b.vals[eg.Find(r.State)]
			if !ok || len(st.views) > 0 || b.prog.Buffers[st.buf].Kind != State {
				return nil, fmt.Errorf("lower %s: a state update's buffer is no state", g.Name)
			}
			name := b.prog.Buffers[st.buf].Name
			b.prog.Updates[name] = b.materialize(v, name, Temp)
			continue
		}
		b.prog.Outputs[r.Name] = b.output(v, r.Name)
	}
	if inPlace {
		b.updateInPlace()
		b.pairUpdates()
	}
	b.mergeSiblingMatmuls()
	b.mergeEpilogues()
	b.fuseRowProducers()
	b.copyStates()
	b.scaleRows()
	b.plan()
	return b.prog, nil
}

func (b *builder) newBuffer(kind BufferKind, name string, shape ir.Shape, dt ir.DType) int {
	id := len(b.prog.Buffers)
	if name == "" {
		name = fmt.Sprintf("t%d", id)
	}
	b.prog.Buffers = append(b.prog.Buffers, &Buffer{ID: id, Kind: kind, Name: name, Shape: shape.Clone(), DType: dt,
		Bytes: shape.NumElements() * int64(dt.Size())})
	return id
}

// class lowers the chosen node n of class c.
func (b *builder) class(c egraph.ClassID, n egraph.Node) error {
	d := b.eg.Data(c)
	switch n.Op {
	case rules.KernelSymbol:
		return b.kernel(c, n, d)
	case rules.ProjSymbol:
		bufs, ok := b.tuple[b.eg.Find(n.Children[0])]
		if !ok || int(n.Payload) >= len(bufs) {
			return fmt.Errorf("class %d: proj %d of a class that is no multi-output launch", c, n.Payload)
		}
		b.vals[c] = value{buf: bufs[n.Payload]}
		return nil
	}
	op, ok := rules.OpOf(n.Op)
	if !ok {
		return fmt.Errorf("class %d: %s is not a tensor op", c, n.Op)
	}
	attrs, _ := rules.Attrs(n.Payload)
	switch {
	case op == ir.OpInput || op == ir.OpWeight || op == ir.OpState:
		kind := map[ir.Op]BufferKind{ir.OpInput: Input, ir.OpWeight: Weight, ir.OpState: State}[op]
		id, ok := b.named[attrs.Name]
		if !ok {
			id = b.newBuffer(kind, attrs.Name, d.Shape, d.DType)
			b.named[attrs.Name] = id
		}
		b.vals[c] = value{buf: id}
	case op.Class() == ir.ClassLeaf:
		id := b.newBuffer(Constant, "", d.Shape, d.DType)
		b.prog.Buffers[id].Leaf = &ir.Node{Op: op, Attrs: attrs, Shape: d.Shape.Clone(), DType: d.DType}
		b.vals[c] = value{buf: id}
	case op.Class() == ir.ClassView:
		in, ok := b.vals[b.eg.Find(n.Children[0])]
		if !ok {
			return fmt.Errorf("class %d: %s reads class %d before it is lowered", c, op, n.Children[0])
		}
		b.vals[c] = value{buf: in.buf, views: append(slices.Clone(in.views), view{op, attrs})}
	default:
		return fmt.Errorf("class %d: the extraction chose a bare %s, which no kernel computes", c, op)
	}
	return nil
}

// kernel adds the launch of kernel node n computing class c.
func (b *builder) kernel(c egraph.ClassID, n egraph.Node, d rules.Data) error {
	body, ok := rules.Spec(n.Payload)
	if !ok {
		return fmt.Errorf("class %d: kernel with an unknown body", c)
	}
	args := make([]value, len(n.Children))
	for i, k := range n.Children {
		v, ok := b.vals[b.eg.Find(k)]
		if !ok {
			return fmt.Errorf("class %d: kernel reads class %d before it is lowered", c, k)
		}
		args[i] = v
	}
	folded, bufs, err := b.fold(body, args)
	if err != nil {
		return fmt.Errorf("class %d: %w", c, err)
	}
	kind := Temp
	if d.WeightOnly {
		kind = Prepared
	}
	l := &Launch{Body: folded, Form: rules.FormOf(folded), Args: bufs, Class: c}
	for _, o := range folded.Outputs {
		on := folded.Node(o.Value)
		l.Outs = append(l.Outs, b.newBuffer(kind, "", on.Shape, on.DType))
	}
	if kind == Prepared {
		l.Name = fmt.Sprintf("prep%d", len(b.prog.Prep))
		b.prog.Prep = append(b.prog.Prep, l)
	} else {
		l.Name = fmt.Sprintf("k%d", len(b.prog.Run))
		b.prog.Run = append(b.prog.Run, l)
	}
	if len(l.Outs) > 1 {
		b.tuple[c] = l.Outs
	} else {
		b.vals[c] = value{buf: l.Outs[0]}
	}
	return nil
}

// fold rewrites a kernel body to read whole buffers: each argument's views
// become ops of the body, over one input per distinct buffer.
func (b *builder) fold(body *ir.Graph, args []value) (*ir.Graph, []int, error) {
	nb := ir.NewBuilder(body.Name)
	var bufs []int
	bufIn := map[int]ir.Value{}
	ins := make([]ir.Value, len(args))
	for i, a := range args {
		in, ok := bufIn[a.buf]
		if !ok {
			buf := b.prog.Buffers[a.buf]
			in = nb.Input(fmt.Sprintf("$%d", len(bufs)), buf.DType, buf.Shape...)
			bufIn[a.buf] = in
			bufs = append(bufs, a.buf)
		}
		for _, v := range a.views {
			in = nb.Apply(v.op, v.attrs, in)
		}
		ins[i] = in
	}
	outs := nb.Inline(body, ins)
	for i, o := range outs {
		nb.Output(fmt.Sprintf("out%d", i), o)
	}
	g, err := nb.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("fold the arguments' views into the kernel: %w", err)
	}
	return g, bufs, nil
}

// materialize returns a buffer holding v: v's own when it has no views,
// else a copy launch's.
func (b *builder) materialize(v value, name string, kind BufferKind) int {
	if len(v.views) == 0 {
		return v.buf
	}
	return b.copyLaunch(v, name, kind)
}

// copyLaunch adds a launch that writes v (a buffer through views) to a new
// buffer.
func (b *builder) copyLaunch(v value, name string, kind BufferKind) int {
	nb := ir.NewBuilder("copy")
	src := b.prog.Buffers[v.buf]
	x := nb.Input("$0", src.DType, src.Shape...)
	for _, w := range v.views {
		x = nb.Apply(w.op, w.attrs, x)
	}
	if len(v.views) == 0 {
		// An elementwise copy of the buffer itself.
		x = nb.Apply(ir.OpCast, ir.Attrs{DType: src.DType}, x)
	}
	nb.Output("out0", x)
	body, _ := nb.Build() // the views were valid in the e-graph
	on := body.Node(body.Outputs[0].Value)
	out := b.newBuffer(kind, name, on.Shape, on.DType)
	l := &Launch{Name: fmt.Sprintf("k%d", len(b.prog.Run)), Body: body, Form: rules.FormOf(body), Args: []int{v.buf}, Outs: []int{out}}
	b.prog.Run = append(b.prog.Run, l)
	return out
}

// output gives graph output name a buffer of its own: the run's Temp
// result it is becomes an Output, anything else (a leaf, a prepared
// weight, a view, a buffer already serving another output) is copied.
func (b *builder) output(v value, name string) int {
	if len(v.views) == 0 {
		buf := b.prog.Buffers[v.buf]
		if buf.Kind == Temp {
			buf.Kind, buf.Name = Output, name
			return v.buf
		}
	}
	return b.copyLaunch(v, name, Output)
}

// dropBuffers removes the buffers in drop, which no launch reads or writes
// any more, and renumbers the rest (a buffer named after its id, t<ID>, is
// renamed with it).
func (b *builder) dropBuffers(drop map[int]bool) {
	if len(drop) == 0 {
		return
	}
	id := make([]int, len(b.prog.Buffers))
	var kept []*Buffer
	for _, buf := range b.prog.Buffers {
		if drop[buf.ID] {
			id[buf.ID] = -1
			continue
		}
		id[buf.ID] = len(kept)
		if buf.Kind != Input && buf.Kind != Weight && buf.Kind != State && buf.Kind != Output && buf.Name == fmt.Sprintf("t%d", buf.ID) {
			buf.Name = fmt.Sprintf("t%d", len(kept))
		}
		buf.ID = len(kept)
		kept = append(kept, buf)
	}
	b.prog.Buffers = kept
	for _, l := range slices.Concat(b.prog.Prep, b.prog.Run) {
		for i, a := range l.Args {
			l.Args[i] = id[a]
		}
		for i, o := range l.Outs {
			l.Outs[i] = id[o]
		}
	}
	for _, m := range []map[string]int{b.prog.Outputs, b.prog.Updates, b.named} {
		for name, v := range m {
			m[name] = id[v]
		}
	}
}
