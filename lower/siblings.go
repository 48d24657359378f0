package lower

import (
	"fmt"
	"maps"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// mergeSiblingMatmuls merges two matmul launches whose matmuls multiply
// the same left operand (the same computation over the same buffers) into
// one launch whose matmul multiplies it by both weights side by side:
// concat(W1, W2) along the columns, read in place from the two weight
// buffers (cost.GEMVWeight's concatenated weights), with each launch's
// epilogue applied to its slice of the product. A decode step's gate and
// up projections, which normalize the same residual stream and whose
// SiLU product the up projection's epilogue computes from the gate's
// output, become one matrix-vector launch: the norm and the activation
// computed once, the gate never written to memory (the epilogue gathers
// both slices: cost's gathered epilogue). The earlier launch must be able
// to move down to the later one's place. The merged body must be Legal,
// which holds where the matrix-vector kernel runs it.
func (b *builder) mergeSiblingMatmuls() {
	if b.naive() {
		return
	}
	run := b.prog.Run
	gone := make([]bool, len(run))
	drop := map[int]bool{}
	for j, c := range run {
		if c.Form.Kind != "matmul" {
			continue
		}
		for i := j - 1; i >= max(0, j-siblingReach); i-- {
			a := run[i]
			if gone[i] || a.Form.Kind != "matmul" || !slices.ContainsFunc(a.Args, func(x int) bool { return slices.Contains(c.Args, x) }) {
				continue
			}
			if !independent(a, run[i+1:j], gone[i+1:j]) {
				continue
			}
			// a's outputs that others read (or that outlive the run)
			// stay outputs of the merged launch.
			keep := make([]bool, len(a.Outs))
			for k, x := range a.Outs {
				// A state's new content is read by the copy launch
				// copyStates adds later.
				keep[k] = b.prog.Buffers[x].Kind != Temp || slices.Contains(slices.Collect(maps.Values(b.prog.Updates)), x)
				for l, o := range run {
					keep[k] = keep[k] || l != i && l != j && !gone[l] && slices.Contains(o.Args, x)
				}
			}
			m, ok := mergeSiblings(a, c, keep)
			if !ok {
				continue
			}
			run[j], gone[i] = m, true
			for k, x := range a.Outs {
				if !keep[k] {
					drop[x] = true
				}
			}
			break
		}
	}
	b.prog.Run = withoutGone(run, gone)
	b.dropBuffers(drop)
}

// siblingReach is how many launches back mergeSiblingMatmuls looks for a
// sibling.
const siblingReach = 4

// mergeSiblings returns the launch doing the work of matmul launches a
// and c (a first; c may read a's outputs), writing a's outputs that keep
// marks and then c's; false when the two matmuls do not share their left
// operand, c writes what a reads or writes, either writes
// through a window, or the merged body is not a LegalMerged matmul kernel.
func mergeSiblings(a, c *Launch, keep []bool) (*Launch, bool) {
	if writesWhatOtherUses(c, a) {
		return nil, false
	}
	for _, l := range []*Launch{a, c} {
		for j := range l.Body.Outputs {
			if _, windowed, err := OutputWindow(l.Body, j); windowed || err != nil {
				return nil, false
			}
		}
	}
	ab := newArgBinder(c.Body.Name)
	nb := ab.nb
	aIns := a.Body.Inputs()
	aVals := make([]ir.Value, len(aIns))
	for k, in := range aIns {
		aVals[k] = ab.input(a.Args[k], a.Body.Node(in))
	}
	produced := nb.Inline(a.Body, aVals)
	var outs []int
	for k, v := range produced {
		if keep[k] {
			nb.Output(fmt.Sprintf("out%d", len(outs)), v)
			outs = append(outs, a.Outs[k])
		}
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
	for _, v := range nb.Inline(c.Body, cVals) {
		nb.Output(fmt.Sprintf("out%d", len(outs)), v)
	}
	outs = append(outs, c.Outs...)
	both, err := nb.Build()
	if err != nil {
		return nil, false
	}
	// Equal subterms merged: the two prologues become one.
	canon, order, err := ir.Canonical(both)
	if err != nil {
		return nil, false
	}
	body, ok := concatMatmuls(canon)
	if !ok || !rules.LegalMerged(body) {
		return nil, false
	}
	form := rules.FormOf(body)
	if form.Kind != "matmul" {
		return nil, false
	}
	args := make([]int, len(order))
	for i, o := range order {
		args[i] = ab.args[o]
	}
	return &Launch{Name: c.Name, Body: body, Form: form, Args: args, Outs: outs, Class: c.Class}, true
}

// concatMatmuls rewrites a body with two matmuls of one left operand,
// matmul(L, R1) and matmul(L, R2), into one of L by concat(R1, R2) along
// the last axis, each former product its slice; false when the body does
// not hold exactly two such matmuls of one result type.
func concatMatmuls(body *ir.Graph) (*ir.Graph, bool) {
	var mms []ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			mms = append(mms, ir.Value(i))
		}
	}
	if len(mms) != 2 {
		return nil, false
	}
	m1, m2 := body.Node(mms[0]), body.Node(mms[1])
	r := len(m1.Shape)
	if m1.Inputs[0] != m2.Inputs[0] || m1.DType != m2.DType || m1.Attrs.DType != m2.Attrs.DType || len(m2.Shape) != r || r != 2 {
		return nil, false
	}
	n1, n2 := int64(m1.Shape[r-1]), int64(m2.Shape[r-1])
	b := ir.NewBuilder(body.Name)
	built := make([]ir.Value, len(body.Nodes))
	done := make([]bool, len(body.Nodes))
	var merged ir.Value
	var build func(v ir.Value) ir.Value
	build = func(v ir.Value) ir.Value {
		if done[v] {
			return built[v]
		}
		n := body.Node(v)
		var nv ir.Value
		switch {
		case n.Op == ir.OpInput:
			nv = b.Input(n.Name, n.DType, n.Shape...)
		case v == mms[0] || v == mms[1]:
			if !done[mms[0]] && !done[mms[1]] {
				w := b.Concat(r-1, build(m1.Inputs[1]), build(m2.Inputs[1]))
				merged = b.Apply(ir.OpMatMul, m1.Attrs, build(m1.Inputs[0]), w)
			}
			if v == mms[0] {
				nv = b.Slice(merged, r-1, 0, n1, 1)
			} else {
				nv = b.Slice(merged, r-1, n1, n1+n2, 1)
			}
		default:
			ins := make([]ir.Value, len(n.Inputs))
			for k, in := range n.Inputs {
				ins[k] = build(in)
			}
			nv = b.Apply(n.Op, n.Attrs, ins...)
		}
		built[v], done[v] = nv, true
		return nv
	}
	// Inputs first, in order, so that the argument order stays.
	for _, in := range body.Inputs() {
		build(in)
	}
	for _, o := range body.Outputs {
		b.Output(o.Name, build(o.Value))
	}
	g, err := b.Build()
	return g, err == nil
}
