// Package lower owns the step from an extracted program to a kernel
// program: the buffers a run reads and writes (inputs, weights, state,
// constants and weights prepared at load time, intermediates, outputs),
// the launches in order with each kernel's body made to read whole buffers
// (the views its arguments are reached through folded into it), state
// updates written into the state buffers in place where that is safe (a
// KV cache's new rows, through a Window), the load-time preparation, and
// the memory plan that packs intermediates into one arena by liveness.
//
// It imports ir, egraph, extract and rules; code generation (package cuda)
// prints what it builds.
package lower

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
//
// An output is either written whole (its shape is the buffer's) or through
// a window: the body computes a slice of the buffer, the elements at
// Window.Offset onward along Window.Axis, and the launch writes those
// elements alone, in place, leaving the rest of the buffer as it was. That
// is how a KV cache's new rows go straight into its State buffer. The
// window belongs to the body, in the output's name (Window.OutputName), not
// to the launch, so that a body alone says where its kernel writes: the
// printer, the verifier and the cost model see bodies only, and launches
// with equal bodies (which share one printed kernel) write equal windows.
// Launch.Window and OutputWindow read it.
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

// Window places a launch's output inside a larger buffer: the body's
// output is the slice of a buffer of shape Shape that starts at Offset
// along Axis (0 <= Axis < len(Shape)) and runs for the output's own extent
// there; on every other axis the output has the buffer's extent.
type Window struct {
	Axis   int
	Offset int64
	Shape  ir.Shape
}

// OutputName is the name a body gives its output j when the output is
// written through w: "out0 into [1,8,4096,128] at 4095 along axis 2".
func (w Window) OutputName(j int) string {
	return fmt.Sprintf("out%d into %s at %d along axis %d", j, w.Shape, w.Offset, w.Axis)
}

// Offsets lists where the elements of an output of shape rows written
// through w land: for each element, in row-major order, its row-major
// index in the buffer. (A check that runs a kernel alone gives it a buffer
// of w.Shape and reads the output's elements back from there.)
func (w Window) Offsets(rows ir.Shape) []int64 {
	out := make([]int64, rows.NumElements())
	st, ix := w.Shape.Strides(), make([]int64, len(rows))
	for e := range out {
		at := w.Offset * st[w.Axis]
		for d := range ix {
			at += ix[d] * st[d]
		}
		out[e] = at
		for d := len(ix) - 1; d >= 0; d-- {
			if ix[d]++; ix[d] < int64(rows[d]) {
				break
			}
			ix[d] = 0
		}
	}
	return out
}

// Window reports whether the launch writes output j through a window, and
// where; a malformed window is an error (see OutputWindow).
func (l *Launch) Window(j int) (Window, bool, error) {
	return OutputWindow(l.Body, j)
}

// OutputWindow reads the window of body's output j from the output's name
// (Window.OutputName). ok is false for an output written whole. A name
// that announces a window (" into ") but does not parse, or a window that
// does not fit the output (rank, extents, offset, or the j it names), is
// an error.
func OutputWindow(body *ir.Graph, j int) (w Window, ok bool, err error) {
	if j < 0 || j >= len(body.Outputs) {
		return Window{}, false, fmt.Errorf("body %s has no output %d", body.Name, j)
	}
	o := body.Outputs[j]
	if !strings.Contains(o.Name, " into ") {
		return Window{}, false, nil
	}
	fail := func(format string, args ...any) (Window, bool, error) {
		return Window{}, false, fmt.Errorf("body %s: output %q: %s", body.Name, o.Name, fmt.Sprintf(format, args...))
	}
	var at int
	var shape string
	if _, err := fmt.Sscanf(o.Name, "out%d into %s at %d along axis %d", &at, &shape, &w.Offset, &w.Axis); err != nil {
		return fail("not a window: %v", err)
	}
	dims, open := strings.CutPrefix(shape, "[")
	dims, closed := strings.CutSuffix(dims, "]")
	if !open || !closed {
		return fail("the buffer's shape %s is not [d0,d1,...]", shape)
	}
	if dims != "" {
		for _, d := range strings.Split(dims, ",") {
			n, err := strconv.ParseInt(d, 10, 64)
			if err != nil {
				return fail("the buffer's shape %s: %v", shape, err)
			}
			w.Shape = append(w.Shape, ir.Dim(n))
		}
	}
	if w.OutputName(at) != o.Name {
		return fail("not a window as Window.OutputName writes it")
	}
	if at != j {
		return fail("names output %d", at)
	}
	out := body.Node(o.Value).Shape
	if w.Axis < 0 || w.Axis >= len(w.Shape) || len(out) != len(w.Shape) {
		return fail("axis %d of %v for a %v output", w.Axis, w.Shape, out)
	}
	for d := range out {
		if d != w.Axis && out[d] != w.Shape[d] {
			return fail("a %v output does not fit the buffer's %v", out, w.Shape)
		}
	}
	if w.Offset < 0 || w.Offset+int64(out[w.Axis]) > int64(w.Shape[w.Axis]) {
		return fail("%d rows at %d do not fit the buffer's %d", out[w.Axis], w.Offset, w.Shape[w.Axis])
	}
	return w, true, nil
}

// Program is a lowered program: buffers, the launches that prepare
// weights at load time, and the launches of one run.
type Program struct {
	Name    string
	Buffers []*Buffer
	Prep    []*Launch
	Run     []*Launch
	// Outputs maps each graph output to its buffer; Updates each state
	// buffer to the buffer holding its new content at the end of a run:
	// the state buffer itself when a launch writes the new rows into it
	// in place (through a Window), else a buffer that the run's last
	// launches copy back.
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
	if inPlace {
		b.updateInPlace()
		b.pairUpdates()
	}
	b.fuseRowProducers()
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

// updateInPlace makes the launch computing a state's new content write the
// new rows alone, straight into the state buffer, where that is safe:
//
//   - the new content is a Temp that one launch writes, its only output;
//   - the launch's body outputs slice_update(state, rows), possibly
//     through casts that change nothing, with the state buffer read whole
//     there and nowhere else (the rows do not depend on the old content);
//   - the rows are elementwise work (views, moves and elementwise ops,
//     the form whose printer writes through windows);
//   - no later launch reads the state buffer, whose old content the write
//     destroys; launches before it read the old content as before.
//
// The launch's body then computes the rows only, written through a Window
// at the slice_update's offset; the launches after it that read the new
// content read the state buffer instead, and the Temp is dropped. Any
// other update keeps the copy at the end of the run (copyStates).
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

// pairUpdates merges two launches that each write a state's new rows in
// place (updateInPlace) into one launch writing both, when both are
// elementwise work over rows of one shape and one of them can move to the
// other: it reads nothing written in between, and nothing in between
// reads or writes what it writes. A decode step's key and value
// cache rows come from the same projection and need one launch, not two.
func (b *builder) pairUpdates() {
	run := b.prog.Run
	gone := make([]bool, len(run))
	for i, a := range run {
		if gone[i] || !rowWrite(a) {
			continue
		}
		for j := i + 1; j < len(run); j++ {
			if gone[j] || !rowWrite(run[j]) {
				continue
			}
			// The pair runs where the later launch moves up to, or else
			// where the earlier one moves down to.
			at, drop := i, j
			if !independent(run[j], run[i+1:j], gone[i+1:j]) {
				if !independent(a, run[i+1:j], gone[i+1:j]) {
					continue
				}
				at, drop = j, i
			}
			if m, ok := mergeRowWrites(a, run[j]); ok {
				run[at], gone[drop] = m, true
				break
			}
		}
	}
	b.prog.Run = withoutGone(run, gone)
}

// withoutGone is run without the launches gone marks, in order (run's
// storage reused).
func withoutGone(run []*Launch, gone []bool) []*Launch {
	kept := run[:0]
	for i, l := range run {
		if !gone[i] {
			kept = append(kept, l)
		}
	}
	return kept
}

// argBinder builds a merged launch's inputs: one per argument buffer,
// however many of the merged bodies read it.
type argBinder struct {
	nb   *ir.Builder
	args []int
	at   map[int]ir.Value
}

func newArgBinder(name string) *argBinder {
	return &argBinder{nb: ir.NewBuilder(name), at: map[int]ir.Value{}}
}

// input is the merged body's input for buffer buf read as n (a new one
// when buf is read at another shape or dtype).
func (ab *argBinder) input(buf int, n *ir.Node) ir.Value {
	if v, ok := ab.at[buf]; ok && ab.nb.Shape(v).Equal(n.Shape) && ab.nb.DType(v) == n.DType {
		return v
	}
	v := ab.nb.Input(fmt.Sprintf("$%d", len(ab.args)), n.DType, n.Shape...)
	ab.at[buf] = v
	ab.args = append(ab.args, buf)
	return v
}

// rowWrite reports whether l is elementwise work writing one output
// through a window: a state's new rows written in place.
func rowWrite(l *Launch) bool {
	if len(l.Outs) != 1 || len(l.Body.Outputs) != 1 || l.Form.Kind != "elementwise" {
		return false
	}
	_, ok, err := OutputWindow(l.Body, 0)
	return ok && err == nil
}

// independent reports whether launch c may trade places with the
// launches between (those not gone): it reads nothing they write, and
// they neither read nor write what it writes.
func independent(c *Launch, between []*Launch, gone []bool) bool {
	for k, l := range between {
		if gone[k] {
			continue
		}
		for _, o := range l.Outs {
			if slices.Contains(c.Args, o) || slices.Contains(c.Outs, o) {
				return false
			}
		}
		for _, o := range c.Outs {
			if slices.Contains(l.Args, o) {
				return false
			}
		}
	}
	return true
}

// mergeRowWrites returns the launch doing the work of launches a and c
// (a first), each of which writes one output through a window, as one
// elementwise launch with two windowed outputs; false when they do not
// qualify (see pairUpdates) or the merged body is not Legal.
func mergeRowWrites(a, c *Launch) (*Launch, bool) {
	if !rowWrite(a) || !rowWrite(c) {
		return nil, false
	}
	if a.Outs[0] == c.Outs[0] || slices.Contains(c.Args, a.Outs[0]) || slices.Contains(a.Args, c.Outs[0]) {
		return nil, false
	}
	if !a.Body.Node(a.Body.Outputs[0].Value).Shape.Equal(c.Body.Node(c.Body.Outputs[0].Value).Shape) {
		return nil, false
	}
	ab := newArgBinder(a.Body.Name)
	for j, l := range []*Launch{a, c} {
		ins := l.Body.Inputs()
		vals := make([]ir.Value, len(ins))
		for k, in := range ins {
			vals[k] = ab.input(l.Args[k], l.Body.Node(in))
		}
		w, _, _ := OutputWindow(l.Body, 0)
		ab.nb.Output(w.OutputName(j), ab.nb.Inline(l.Body, vals)[0])
	}
	body, err := ab.nb.Build()
	if err != nil || !rules.Legal(body) {
		return nil, false
	}
	return &Launch{Name: a.Name, Body: body, Form: rules.FormOf(body), Args: ab.args, Outs: []int{a.Outs[0], c.Outs[0]}, Class: a.Class}, true
}

// fuseRowProducers merges an elementwise launch into a later fused row
// launch that reads what it writes (its producer, itself fused) or reads
// all it reads (a sibling), when the elementwise launch can move down to
// the row launch (nothing in between reads what it writes or writes what
// it reads): one row launch then computes the value and its row
// statistics, and still writes the value when other launches read it. A
// decode step's residual sum (split-K partials of a projection plus the
// residual) and the next norm's statistics of it meet so at the seam of
// two layers, where the search, which sees a pair of layers, had to
// materialize the sum. Two kernels of one op each are left alone: the
// naive program stays one op per launch.
func (b *builder) fuseRowProducers() {
	run := b.prog.Run
	gone := make([]bool, len(run))
	drop := map[int]bool{}
	for j, c := range run {
		if c.Form.Kind != "row" {
			continue
		}
		cOps := rules.NaiveKernels(c.Body) // its ops that compute
		for i := j - 1; i >= max(0, j-rowProducerReach); i-- {
			a := run[i]
			if gone[i] || len(a.Outs) != 1 || a.Form.Kind != "elementwise" {
				continue
			}
			x := a.Outs[0]
			producer := slices.Contains(c.Args, x)
			sibling := !producer && !slices.ContainsFunc(a.Args, func(in int) bool { return !slices.Contains(c.Args, in) })
			if !producer && !sibling || !independent(a, run[i+1:j], gone[i+1:j]) {
				continue
			}
			if _, windowed, err := OutputWindow(a.Body, 0); windowed || err != nil || cOps < 2 && rules.NaiveKernels(a.Body) < 2 {
				continue
			}
			keep := b.prog.Buffers[x].Kind != Temp
			for k, l := range run {
				keep = keep || k != i && k != j && !gone[k] && slices.Contains(l.Args, x)
			}
			m, ok := mergeProducer(a, c, x, keep)
			if !ok {
				continue
			}
			run[j], gone[i] = m, true
			if !keep {
				drop[x] = true
			}
			break
		}
	}
	b.prog.Run = withoutGone(run, gone)
	b.dropBuffers(drop)
}

// rowProducerReach is how many launches back fuseRowProducers looks for
// an elementwise launch to merge.
const rowProducerReach = 8

// mergeProducer returns the row launch doing the work of elementwise
// launch a, whose one output is buffer x, and of row launch c, which reads
// x: a's body inlined where c reads x, writing c's outputs and, when keep,
// x after them. False when the merged body is not a Legal row kernel.
func mergeProducer(a, c *Launch, x int, keep bool) (*Launch, bool) {
	ab := newArgBinder(c.Body.Name)
	nb := ab.nb
	aIns := a.Body.Inputs()
	aVals := make([]ir.Value, len(aIns))
	for k, in := range aIns {
		aVals[k] = ab.input(a.Args[k], a.Body.Node(in))
	}
	xv := nb.Inline(a.Body, aVals)[0]
	cIns := c.Body.Inputs()
	cVals := make([]ir.Value, len(cIns))
	for k, in := range cIns {
		n := c.Body.Node(in)
		if c.Args[k] != x {
			cVals[k] = ab.input(c.Args[k], n)
			continue
		}
		if !nb.Shape(xv).Equal(n.Shape) || nb.DType(xv) != n.DType {
			return nil, false
		}
		cVals[k] = xv
	}
	outs := append([]int(nil), c.Outs...)
	for j, v := range nb.Inline(c.Body, cVals) {
		nb.Output(c.Body.Outputs[j].Name, v)
	}
	if keep {
		nb.Output(fmt.Sprintf("out%d", len(c.Outs)), xv)
		outs = append(outs, x)
	}
	body, err := nb.Build()
	if err != nil || !rules.Legal(body) {
		return nil, false
	}
	form := rules.FormOf(body)
	if form.Kind != "row" {
		return nil, false
	}
	return &Launch{Name: c.Name, Body: body, Form: form, Args: ab.args, Outs: outs, Class: c.Class}, true
}

// rowsBody rewrites the body of launch l, whose output is
// slice_update(state, rows) with the state buffer dst read whole, to
// compute rows alone, written into dst through a window at the update's
// offset. It returns the body and its arguments (dst no longer among
// them), or false when l's body is not of that shape, the rows read the
// state, or they are not elementwise work.
func rowsBody(l *Launch, dst int) (*ir.Graph, []int, bool) {
	body := l.Body
	k := slices.Index(l.Args, dst)
	if k < 0 || len(body.Outputs) != 1 {
		return nil, nil, false
	}
	ins := body.Inputs()
	state := ins[k]
	su := body.Node(noopCasts(body, body.Outputs[0].Value))
	if su.Op != ir.OpSliceUpdate || noopCasts(body, su.Inputs[0]) != state {
		return nil, nil, false
	}
	rows := su.Inputs[1]
	need := make([]bool, len(body.Nodes))
	need[rows] = true
	for i := rows; i >= 0; i-- {
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
	for i, n := range body.Nodes[:rows+1] {
		if !need[i] {
			continue
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
	w := Window{Axis: ax, Offset: su.Offset, Shape: su.Shape.Clone()}
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

// Value computes a Constant buffer's content from its leaf (a const or
// iota node), as the loader does on the host.
func (b *Buffer) Value(ctx context.Context) (*ir.Tensor, error) {
	if b.Kind != Constant || b.Leaf == nil {
		return nil, fmt.Errorf("%s %s has no constant leaf", b.Kind, b.Name)
	}
	g := &ir.Graph{Name: "constant", Nodes: []*ir.Node{b.Leaf}, Outputs: []ir.Output{{Name: "out", Value: 0}}}
	res, err := ir.Eval(ctx, g, nil, ir.EvalOptions{})
	if err != nil {
		return nil, fmt.Errorf("constant %s: %w", b.Name, err)
	}
	return res.Outputs["out"], nil
}
