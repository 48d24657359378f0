package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

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
		if w.Runtime || w.Slots {
			// The position's (or slots') input has its own number in the
			// merged body.
			w.Pos = slices.Index(ab.nb.Inputs(), vals[w.Pos])
		}
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
