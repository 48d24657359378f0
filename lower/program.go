// Package lower owns the step from an extracted program to a kernel
// program: the buffers a run reads and writes (inputs, weights, state,
// constants and weights prepared at load time, intermediates, outputs),
// the launches in order with each kernel's body made to read whole buffers
// (the views its arguments are reached through folded into it), the
// load-time preparation, and the memory plan that packs intermediates into
// one arena by liveness.
//
// It imports ir, egraph, extract and rules; code generation (package cuda)
// prints what it builds.
package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// BufferKind says where a buffer's content comes from and how long it
// lives.
type BufferKind uint8

// The buffer kinds.
const (
	Input    BufferKind = iota // given for each run
	Weight                     // given at load
	State                      // kept across runs (a KV cache), read and written in place
	Constant                   // a constant or iota of the graph, computed at load
	Prepared                   // computed at load by a preparation launch from weights and constants
	Temp                       // an intermediate of one run, in the arena
	Output                     // a result of a run
)

var kindNames = [...]string{Input: "input", Weight: "weight", State: "state", Constant: "constant", Prepared: "prepared", Temp: "temp", Output: "output"}

func (k BufferKind) String() string { return kindNames[k] }

// Buffer is one tensor in device memory.
type Buffer struct {
	ID    int
	Kind  BufferKind
	Name  string // the leaf's or output's name; t<ID> for the others
	Shape ir.Shape
	DType ir.DType
	Bytes int64
	// Offset is a Temp buffer's place in the arena.
	Offset int64
	// Leaf is a Constant buffer's graph leaf (a const or iota node).
	Leaf *ir.Node
}

// Launch is one kernel launch. Its Body reads whole buffers: input i of the
// body is buffer Args[i], output j is written to buffer Outs[j].
type Launch struct {
	Name string
	Body *ir.Graph
	Form rules.Form
	Args []int
	Outs []int
	// Class is the e-class the launch computes (for comments and
	// reports); copies made for outputs have none.
	Class egraph.ClassID
}

// Program is a lowered program: buffers, the launches that prepare
// weights at load time, and the launches of one run.
type Program struct {
	Name    string
	Buffers []*Buffer
	Prep    []*Launch
	Run     []*Launch
	// Outputs maps each graph output to its buffer; Updates each state
	// buffer to the buffer holding its new content at the end of a run
	// (copied back by the run's last launches).
	Outputs map[string]int
	Updates map[string]int
	// ArenaBytes is the arena the memory plan needs for the Temp
	// buffers; TempBytes what they would take without reuse.
	ArenaBytes, TempBytes int64
}

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
func FromExtraction(eg *egraph.EGraph[rules.Data], g *ir.Graph, classes []egraph.ClassID, p *extract.Problem, sol *extract.Solution) (*Program, error) {
	order, err := sol.Needed(p)
	if err != nil {
		return nil, fmt.Errorf("lower %s: %w", g.Name, err)
	}
	b := &builder{eg: eg, prog: &Program{Name: g.Name, Outputs: map[string]int{}, Updates: map[string]int{}},
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
	b.copyStates()
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
