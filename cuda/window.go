package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// Stores through windows: an elementwise kernel writing a state's new
// rows in place (lower.Window) stores each element at its place in the
// state buffer, moved by the window's offset or put at its slice's slot.

// outputWindows reads the windows of body's outputs (lower.OutputWindow):
// nil for an output written whole.
func outputWindows(body *ir.Graph) ([]*lower.Window, error) {
	ws := make([]*lower.Window, len(body.Outputs))
	for j := range body.Outputs {
		w, ok, err := lower.OutputWindow(body, j)
		if err != nil {
			return nil, err
		}
		if ok {
			ws[j] = &w
		}
	}
	return ws, nil
}

// storeIndex is the linear index, in the buffer of window w, of the output
// element at ix (an index of the output's shape, out): ix moved by the
// window's offset along its axis, or for a Slots window put at its
// slice's slot. A nil w is the output's own linear index.
func storeIndex(body *ir.Graph, out ir.Shape, ix index, w *lower.Window) string {
	if w == nil {
		return linear(out, ix)
	}
	at := slices.Clone(ix)
	switch {
	case w.Slots:
		at[w.Axis] = slotOf(body, ix, w)
	case w.Runtime:
		// The position is read from its input; the host checked it
		// against the symbol's range before the launch.
		at[w.Axis] = fmt.Sprintf("(%s + %dLL + (long long)%s[0])", ix[w.Axis], w.Offset, paramName(body, body.Inputs()[w.Pos]))
	case w.Offset == 0:
	case ix[w.Axis] == "0":
		at[w.Axis] = fmt.Sprintf("%dLL", w.Offset)
	default:
		at[w.Axis] = fmt.Sprintf("(%s + %dLL)", ix[w.Axis], w.Offset)
	}
	return linear(w.Shape, at)
}

// slotOf is the slot of the output's slice at ix (along w's axis), read
// from the window's input.
func slotOf(body *ir.Graph, ix index, w *lower.Window) string {
	return fmt.Sprintf("(long long)%s[%s]", paramName(body, body.Inputs()[w.Pos]), ix[w.Axis])
}

// storeGuard is the condition under which the output element at ix is
// stored through window w: for a Slots window, that its slice's slot is
// within the buffer (a slot of -1, a token of no sequence, writes
// nothing; so does a slot outside the buffer, which the reference calls
// an error, rather than writing past it). Empty: always.
func storeGuard(body *ir.Graph, ix index, w *lower.Window) string {
	if w == nil || !w.Slots {
		return ""
	}
	return fmt.Sprintf("(unsigned long long)%s < %dULL", slotOf(body, ix, w), w.Shape[w.Axis])
}

// windowVectorizable reports whether an output of shape out written
// through window w keeps 16-byte stores valid: every quad of consecutive
// output elements lands on four consecutive buffer elements starting at a
// multiple of four. Output elements run contiguously in the buffer for
// out's extent along the axis times the extents after it; those runs start
// at the window's offset times the inner extents, and follow one another a
// buffer's extent along the axis apart. A nil w keeps them.
func windowVectorizable(out ir.Shape, w *lower.Window) bool {
	if w == nil {
		return true
	}
	if w.Slots {
		// Each slice lands where its slot says and may not land at all:
		// the scalar loop stores under the slot's guard.
		return false
	}
	inner := int64(1)
	for _, d := range out[w.Axis+1:] {
		inner *= int64(d)
	}
	run, start, stride := int64(out[w.Axis])*inner, w.Offset*inner, int64(w.Shape[w.Axis])*inner
	// A runtime position moves the start by whole rows of inner elements.
	return run%4 == 0 && start%4 == 0 && stride%4 == 0 && (!w.Runtime || inner%4 == 0)
}

// storeVectorAt moves the 16-byte store that vector emits last from the
// output's own quad to buffer element at (a windowed output's).
func (e *elementwise) storeVectorAt(at string) error {
	const own = "(out0 + 4 * q, "
	last := len(e.lines) - 1
	if last < 0 || strings.Count(e.lines[last], own) != 1 || !strings.Contains(e.lines[last], "lum_st4") {
		return fmt.Errorf("elementwise kernel: no vector store of out0 to move into its window")
	}
	e.lines[last] = strings.Replace(e.lines[last], own, "(out0 + ("+at+"), ", 1)
	return nil
}
