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
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
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
	// Rows, when set, says the launch computes the tokens present alone
	// (a serving step's row-wise kernel): see Rows and Params.
	Rows *Rows
}

// Window places a launch's output inside a larger buffer: the body's
// output is the slice of a buffer of shape Shape that starts at Offset
// along Axis (0 <= Axis < len(Shape)) and runs for the output's own extent
// there; on every other axis the output has the buffer's extent.
//
// With Runtime set the window starts at Offset plus a runtime position:
// the value of the body's input Pos, an integer scalar (a decode step's
// cache row at past), read by the kernel when it runs.
//
// With Slots set the rows are not one run but each its own: slice i of
// the output along Axis lands at position slots[i], the value of the
// body's input Pos, an integer vector of the output's extent along Axis (a
// serving step's slot mapping, the new keys written into a paged pool),
// and a slice whose slot is -1 is not written (ir.OpScatter). Offset is 0.
type Window struct {
	Axis    int
	Offset  int64
	Shape   ir.Shape
	Runtime bool
	Slots   bool
	Pos     int
}

// OutputName is the name a body gives its output j when the output is
// written through w: "out0 into [1,8,4096,128] at 4095 along axis 2";
// with a runtime position "out0 into [1,8,4096,128] at 0 plus $3 along
// axis 2"; by slots "out0 into [32768,8,128] at slots $1 along axis 0".
func (w Window) OutputName(j int) string {
	switch {
	case w.Slots:
		return fmt.Sprintf("out%d into %s at slots $%d along axis %d", j, w.Shape, w.Pos, w.Axis)
	case w.Runtime:
		return fmt.Sprintf("out%d into %s at %d plus $%d along axis %d", j, w.Shape, w.Offset, w.Pos, w.Axis)
	}
	return fmt.Sprintf("out%d into %s at %d along axis %d", j, w.Shape, w.Offset, w.Axis)
}

// Start is where the window begins along its axis when the runtime
// position (ignored by a static window) is pos. A Slots window has no
// one start: see Row.
func (w Window) Start(pos int64) int64 {
	if w.Runtime {
		return w.Offset + pos
	}
	return w.Offset
}

// Row is where slice i of the output along the axis lands in the buffer
// along the axis, given the values of the window's input (at: the runtime
// position's one value, or the slots; ignored by a static window): -1
// for a slice not written, or one whose slot is outside the buffer (the
// kernel writes neither).
func (w Window) Row(i int64, at []int64) int64 {
	switch {
	case w.Slots:
		if i >= int64(len(at)) || at[i] < 0 || at[i] >= int64(w.Shape[w.Axis]) {
			return -1
		}
		return at[i]
	case w.Runtime && len(at) > 0:
		return w.Offset + at[0] + i
	}
	return w.Offset + i
}

// Offsets lists where the elements of an output of shape rows written
// through w land, given the values of the window's input (see Row): for
// each element, in row-major order, its row-major index in the buffer,
// or -1 where it is not written. (A check that runs a kernel alone gives
// it a buffer of w.Shape and reads the output's elements back from
// there.)
func (w Window) Offsets(rows ir.Shape, at []int64) []int64 {
	out := make([]int64, rows.NumElements())
	st, ix := w.Shape.Strides(), make([]int64, len(rows))
	for e := range out {
		out[e] = -1
		if r := w.Row(ix[w.Axis], at); r >= 0 {
			out[e] = r * st[w.Axis]
			for d := range ix {
				if d != w.Axis {
					out[e] += ix[d] * st[d]
				}
			}
		}
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
	switch {
	case strings.Contains(o.Name, " at slots $"):
		w.Slots = true
		if _, err := fmt.Sscanf(o.Name, "out%d into %s at slots $%d along axis %d", &at, &shape, &w.Pos, &w.Axis); err != nil {
			return fail("not a window: %v", err)
		}
	case strings.Contains(o.Name, " plus $"):
		w.Runtime = true
		if _, err := fmt.Sscanf(o.Name, "out%d into %s at %d plus $%d along axis %d", &at, &shape, &w.Offset, &w.Pos, &w.Axis); err != nil {
			return fail("not a window: %v", err)
		}
	default:
		if _, err := fmt.Sscanf(o.Name, "out%d into %s at %d along axis %d", &at, &shape, &w.Offset, &w.Axis); err != nil {
			return fail("not a window: %v", err)
		}
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
	if w.Runtime || w.Slots {
		ins := body.Inputs()
		if w.Pos < 0 || w.Pos >= len(ins) {
			return fail("the window's input is input %d of %d", w.Pos, len(ins))
		}
		n := body.Node(ins[w.Pos])
		switch {
		case w.Runtime && (!n.DType.IsInt() || len(n.Shape) != 0):
			return fail("the runtime position, input %d, is %s%v, not an integer scalar", w.Pos, n.DType, n.Shape)
		case w.Slots && (!n.DType.IsInt() || len(n.Shape) != 1 || n.Shape[0] != out[w.Axis]):
			return fail("the slots, input %d, are %s%v, not an integer vector of the output's %d slices", w.Pos, n.DType, n.Shape, out[w.Axis])
		}
	}
	if !w.Slots && (w.Offset < 0 || w.Offset+int64(out[w.Axis]) > int64(w.Shape[w.Axis])) {
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
	// Symbols are the runtime extents of the graph the program computes,
	// each fed through the input buffer of its name.
	Symbols []ir.Symbol
	// Step is the layout of a serving step's program (step.LayoutOf its
	// graph), nil for any other: its inputs are checked as a batch
	// (step.Layout.Unpad) before it runs.
	Step *step.Layout
	// ArenaBytes is the arena the memory plan needs for the Temp
	// buffers; TempBytes what they would take without reuse.
	ArenaBytes, TempBytes int64
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
