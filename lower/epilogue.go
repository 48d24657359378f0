package lower

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// mergeEpilogues merges an elementwise launch into the matrix-vector
// matmul launch that produces what it reads, as more of the matmul's
// epilogue: a decode step's rotary embedding of the new keys and the
// cache writes of keys and values (one elementwise launch once
// pairUpdates has paired them) go into the QKV projection's launch, whose
// blocks hold the columns each output element reads (cost's gathered
// epilogue). The elementwise launch must be able to move up to the
// matmul's place: it reads nothing written in between, and nothing in
// between reads or writes what it writes. The matmul keeps its outputs
// (others read them: attention its queries); the merged body must be
// Legal, which holds only where the matrix-vector kernel can gather the
// epilogue (few rows, unbatched). Merged launches save a launch and the
// round trip of the projection through memory.
func (b *builder) mergeEpilogues() {
	if b.naive() {
		return
	}
	run := b.prog.Run
	gone := make([]bool, len(run))
	for j, c := range run {
		if gone[j] || c.Form.Kind != "elementwise" {
			continue
		}
		for i := j - 1; i >= 0; i-- {
			a := run[i]
			if gone[i] || a.Form.Kind != "matmul" {
				continue
			}
			x := -1
			for _, o := range a.Outs {
				if slices.Contains(c.Args, o) {
					x = o
				}
			}
			if x < 0 {
				continue
			}
			m, ok := mergeEpilogue(a, c)
			if !ok {
				break
			}
			at := i
			if !independent(c, run[i+1:j], gone[i+1:j]) {
				if at, ok = hoist(run, gone, i, j); !ok {
					break
				}
			}
			run[at], gone[j] = m, true
			break
		}
	}
	b.prog.Run = withoutGone(run, gone)
}

// hoist moves above run[i] the launches between run[i] and run[j] that
// run[j] depends on (it reads what they write, or they read or write what
// it writes), when each can move there: it reads nothing written by
// run[i] or by the launches it passes, and those neither read nor write
// what it writes. A decode step's first layer computes the rotary tables
// at the position between the QKV projection and the rotary launch that
// reads them; moved up, the rotary launch can join the projection. It
// returns run[i]'s new index; false (run unchanged) when one cannot move
// or a launch in between is gone.
func hoist(run []*Launch, gone []bool, i, j int) (int, bool) {
	if slices.Contains(gone[i:j], true) {
		return 0, false
	}
	c := run[j]
	var up, stay []*Launch
	for _, l := range run[i+1 : j] {
		if independent(c, []*Launch{l}, []bool{false}) {
			stay = append(stay, l)
			continue
		}
		// l passes run[i] and the launches before it that stay.
		passed := append([]*Launch{run[i]}, stay...)
		if !independent(l, passed, make([]bool, len(passed))) {
			return 0, false
		}
		up = append(up, l)
	}
	order := slices.Concat(up, []*Launch{run[i]}, stay)
	copy(run[i:j], order)
	return i + len(up), true
}

// mergeEpilogue returns the launch doing the work of matmul launch a and
// then elementwise launch c, which reads some of a's outputs: c's body
// inlined with those reads replaced by a's values, writing a's outputs
// then c's (windows renumbered). False when c writes what a reads or
// writes, or the merged body is not a LegalMerged matmul kernel.
func mergeEpilogue(a, c *Launch) (*Launch, bool) {
	if writesWhatOtherUses(c, a) {
		return nil, false
	}
	ab := newArgBinder(a.Body.Name)
	nb := ab.nb
	aIns := a.Body.Inputs()
	aVals := make([]ir.Value, len(aIns))
	for k, in := range aIns {
		aVals[k] = ab.input(a.Args[k], a.Body.Node(in))
	}
	produced := nb.Inline(a.Body, aVals)
	var outs []int
	name := func(body *ir.Graph, j int, vals []ir.Value) (string, bool) {
		w, windowed, err := OutputWindow(body, j)
		if err != nil {
			return "", false
		}
		if !windowed {
			return fmt.Sprintf("out%d", len(outs)), true
		}
		if w.Runtime || w.Slots {
			// The position's (or slots') input has its own number in
			// the merged body.
			if w.Pos = slices.Index(nb.Inputs(), vals[w.Pos]); w.Pos < 0 {
				return "", false
			}
		}
		return w.OutputName(len(outs)), true
	}
	for j, v := range produced {
		n, ok := name(a.Body, j, aVals)
		if !ok {
			return nil, false
		}
		nb.Output(n, v)
		outs = append(outs, a.Outs[j])
	}
	cIns := c.Body.Inputs()
	cVals := make([]ir.Value, len(cIns))
	for k, in := range cIns {
		n := c.Body.Node(in)
		if at := slices.Index(a.Outs, c.Args[k]); at >= 0 {
			if !nb.Shape(produced[at]).Equal(n.Shape) || nb.DType(produced[at]) != n.DType {
				return nil, false
			}
			cVals[k] = produced[at]
			continue
		}
		cVals[k] = ab.input(c.Args[k], n)
	}
	for j, v := range nb.Inline(c.Body, cVals) {
		n, ok := name(c.Body, j, cVals)
		if !ok {
			return nil, false
		}
		nb.Output(n, v)
		outs = append(outs, c.Outs[j])
	}
	body, err := nb.Build()
	if err != nil || !rules.LegalMerged(body) {
		return nil, false
	}
	form := rules.FormOf(body)
	if form.Kind != "matmul" {
		return nil, false
	}
	return &Launch{Name: a.Name, Body: body, Form: form, Args: ab.args, Outs: outs, Class: a.Class}, true
}

// naive reports whether every launch of the run computes one op: the
// naive program, which the matmul merges leave as it is (it is the
// baseline programs are compared with).
func (b *builder) naive() bool {
	for _, l := range b.prog.Run {
		if rules.NaiveKernels(l.Body) > 1 {
			return false
		}
	}
	return true
}

// writesWhatOtherUses reports whether launch c writes a buffer that launch
// a reads or writes: merged into one kernel, some blocks would read what
// others write (a state updated in place that the matmul also reads).
func writesWhatOtherUses(c, a *Launch) bool {
	for _, o := range c.Outs {
		if slices.Contains(a.Args, o) || slices.Contains(a.Outs, o) {
			return true
		}
	}
	return false
}
