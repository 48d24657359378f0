package ir

import (
	"context"
	"fmt"
	"math"
)

// EvalOptions tune Eval.
type EvalOptions struct {
	// Magnitude also computes, for every output, the magnitude of the terms
	// combined to make each element (to first order: the same computation
	// over absolute values, with nonlinear ops scaled by their slopes).
	// Comparisons measure errors against it, so that cancellation does not
	// fail a correct program.
	Magnitude bool
}

// Result is what a run of a graph produced.
type Result struct {
	// Outputs by name.
	Outputs map[string]*Tensor
	// States holds each updated state buffer's new content, by name.
	States map[string]*Tensor
	// Magnitudes of the outputs and state updates, by name, when asked.
	Magnitudes map[string]*Tensor
}

// Eval runs a graph in float64, the reference truth: feeds (by name: every
// input, weight and state) are taken as they are, already rounded to their
// dtypes by the Tensor constructors, and everything computed stays in
// float64 except where the graph casts. Integer results wrap to their
// dtype. Intermediates are freed after their last use.
func Eval(ctx context.Context, g *Graph, feeds map[string]*Tensor, opt EvalOptions) (*Result, error) {
	lastUse := make([]int, len(g.Nodes))
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			lastUse[in] = i
		}
	}
	keep := make([]bool, len(g.Nodes))
	for _, o := range g.Outputs {
		keep[o.Value] = true
	}
	for _, u := range g.Updates {
		keep[u.Value] = true
	}
	lazy := lazyTransposes(g)
	vals := make([]*Tensor, len(g.Nodes))
	var mags []*Tensor
	if opt.Magnitude {
		mags = make([]*Tensor, len(g.Nodes))
	}
	for i, n := range g.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("eval %s: %w", g.Name, err)
		}
		if lazy[i] {
			continue
		}
		ev := evaluator{g: g, n: n, vals: vals, mags: mags, magnitude: opt.Magnitude, lazy: lazy}
		v, m, err := ev.run(feeds)
		if err != nil {
			return nil, fmt.Errorf("eval %s: node %%%d (%s): %w", g.Name, i, n.Op, err)
		}
		vals[i] = v
		if opt.Magnitude {
			mags[i] = m
		}
		for _, in := range n.Inputs {
			if lastUse[in] == i && !keep[in] && !lazy[in] {
				vals[in] = nil
				if mags != nil {
					mags[in] = nil
				}
			}
		}
	}
	res := &Result{Outputs: map[string]*Tensor{}, States: map[string]*Tensor{}}
	if opt.Magnitude {
		res.Magnitudes = map[string]*Tensor{}
	}
	for _, o := range g.Outputs {
		res.Outputs[o.Name] = vals[o.Value]
		if opt.Magnitude {
			res.Magnitudes[o.Name] = mags[o.Value]
		}
	}
	for _, u := range g.Updates {
		name := g.Nodes[u.State].Name
		res.States[name] = vals[u.Value]
		if opt.Magnitude {
			res.Magnitudes[name] = mags[u.Value]
		}
	}
	return res, nil
}

// lazyTransposes marks permutes that only swap the last two axes and feed
// only matmuls as their second operand: the matmul reads the untransposed
// tensor instead, so a model's [out, in] weights are never copied.
func lazyTransposes(g *Graph) []bool {
	lazy := make([]bool, len(g.Nodes))
	users := make([][]int, len(g.Nodes))
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			if n.Op == OpMatMul && k == 1 {
				users[in] = append(users[in], i)
			} else {
				users[in] = append(users[in], -1)
			}
		}
	}
	for _, o := range g.Outputs {
		users[o.Value] = append(users[o.Value], -1)
	}
	for _, u := range g.Updates {
		users[u.Value] = append(users[u.Value], -1)
	}
	for i, n := range g.Nodes {
		if n.Op != OpPermute || len(users[i]) == 0 || !swapsLastTwo(n.Perm) {
			continue
		}
		ok := true
		for _, u := range users[i] {
			ok = ok && u >= 0
		}
		lazy[i] = ok
	}
	return lazy
}

func swapsLastTwo(perm []int) bool {
	r := len(perm)
	if r < 2 {
		return false
	}
	for i := range r - 2 {
		if perm[i] != i {
			return false
		}
	}
	return perm[r-2] == r-1 && perm[r-1] == r-2
}

// evaluator computes one node.
type evaluator struct {
	g         *Graph
	n         *Node
	vals      []*Tensor
	mags      []*Tensor
	magnitude bool
	lazy      []bool
}

func (e *evaluator) in(k int) *Tensor  { return e.vals[e.n.Inputs[k]] }
func (e *evaluator) mag(k int) *Tensor { return e.mags[e.n.Inputs[k]] }

// out makes the result tensor, and its magnitude when asked.
func (e *evaluator) out() (*Tensor, *Tensor) {
	v := NewTensor(e.n.DType, e.n.Shape)
	var m *Tensor
	if e.magnitude {
		m = NewTensor(e.n.DType, e.n.Shape)
	}
	return v, m
}

func (e *evaluator) run(feeds map[string]*Tensor) (*Tensor, *Tensor, error) {
	n := e.n
	switch n.Op.Class() {
	case ClassLeaf:
		return e.leaf(feeds)
	case ClassUnary:
		x := e.in(0)
		f := unaryFn(n.Op)
		v, m := e.out()
		for i := range v.F64 {
			xi := x.At(int64(i))
			v.F64[i] = n.DType.roundInt(f(xi))
			if m != nil {
				mi := e.mag(0).F64[i]
				switch n.Op {
				case OpNeg, OpAbs, OpNot, OpFloor, OpCeil:
					m.F64[i] = mi
				default:
					m.F64[i] = math.Abs(v.F64[i]) + math.Abs(unaryDeriv(n.Op, xi, v.F64[i]))*mi
				}
			}
		}
		return v, m, nil
	case ClassBinary, ClassCompare:
		a, b := e.in(0), e.in(1)
		dt := e.g.Nodes[n.Inputs[0]].DType
		f := binaryFn(n.Op, dt)
		v, m := e.out()
		for i := range v.F64 {
			ai, bi := a.At(int64(i)), b.At(int64(i))
			if dt.IsInt() && bi == 0 && (n.Op == OpDiv || n.Op == OpMod) {
				return nil, nil, fmt.Errorf("integer division by zero at element %d", i)
			}
			v.F64[i] = n.DType.roundInt(f(ai, bi))
			if m != nil {
				if n.Op.Class() == ClassCompare || n.Op == OpAnd || n.Op == OpOr {
					m.F64[i] = v.F64[i]
				} else {
					m.F64[i] = binaryMag(n.Op, ai, bi, e.mag(0).F64[i], e.mag(1).F64[i], v.F64[i])
				}
			}
		}
		return v, m, nil
	case ClassSelect:
		c, a, b := e.in(0), e.in(1), e.in(2)
		v, m := e.out()
		for i := range v.F64 {
			k := 2
			if c.At(int64(i)) != 0 {
				k = 1
			}
			v.F64[i] = e.in(k).At(int64(i))
			if m != nil {
				m.F64[i] = e.mag(k).F64[i]
			}
		}
		_, _ = a, b
		return v, m, nil
	case ClassReduce:
		return e.reduce()
	case ClassView, ClassMove:
		return e.move()
	}
	switch n.Op {
	case OpMatMul:
		return e.matmul()
	case OpSoftmax:
		return e.softmax()
	case OpLayerNorm, OpRMSNorm:
		return e.norm()
	case OpAttention:
		return e.attention()
	}
	return nil, nil, fmt.Errorf("no evaluation rule")
}

// roundInt wraps integer results to the dtype and leaves floats in float64.
func (d DType) roundInt(x float64) float64 {
	if d.IsInt() || d == Bool {
		return d.Round(x)
	}
	return x
}

func absTensor(t *Tensor) *Tensor {
	m := NewTensor(t.DType, t.Shape)
	for i := range m.F64 {
		m.F64[i] = math.Abs(t.At(int64(i)))
	}
	return m
}

func (e *evaluator) leaf(feeds map[string]*Tensor) (*Tensor, *Tensor, error) {
	n := e.n
	var v *Tensor
	switch n.Op {
	case OpInput, OpWeight, OpState:
		t, ok := feeds[n.Name]
		if !ok {
			return nil, nil, fmt.Errorf("no %s named %q was fed", n.Op, n.Name)
		}
		if err := t.check(n.DType, n.Shape); err != nil {
			return nil, nil, fmt.Errorf("%s %q: %w", n.Op, n.Name, err)
		}
		v = t
	case OpConst:
		v = NewTensor(n.DType, n.Shape)
		for i := range v.F64 {
			if len(n.Data) == 1 {
				v.F64[i] = n.Data[0]
			} else {
				v.F64[i] = n.Data[i]
			}
		}
	case OpIota:
		v = NewTensor(n.DType, n.Shape)
		st := n.Shape.Strides()
		ax, _ := normAxis(n.Axis, len(n.Shape))
		for i := range v.F64 {
			v.F64[i] = n.DType.Round(float64((int64(i) / st[ax]) % int64(n.Shape[ax])))
		}
	}
	if e.magnitude {
		return v, absTensor(v), nil
	}
	return v, nil, nil
}

// EvalKernel evaluates a kernel body: a small graph whose inputs are the
// kernel's numbered arguments, in the order they were declared. It returns
// the body's outputs in order.
func EvalKernel(ctx context.Context, body *Graph, args ...*Tensor) ([]*Tensor, error) {
	ins := body.Inputs()
	if len(ins) != len(args) {
		return nil, fmt.Errorf("eval kernel %s: %d arguments for %d inputs", body.Name, len(args), len(ins))
	}
	feeds := make(map[string]*Tensor, len(args))
	for i, v := range ins {
		feeds[body.Nodes[v].Name] = args[i]
	}
	res, err := Eval(ctx, body, feeds, EvalOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*Tensor, len(body.Outputs))
	for i, o := range body.Outputs {
		out[i] = res.Outputs[o.Name]
	}
	return out, nil
}
