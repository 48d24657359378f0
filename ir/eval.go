package ir

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// EvalOptions tune Eval.
type EvalOptions struct {
	// Magnitude also computes, for every output, the magnitude of each
	// element: the size of the terms combined to make it, plus the errors
	// it inherits from its inputs, to first order (the rules are stated
	// above unaryMagnitude). Comparisons measure errors against it, so that
	// cancellation does not fail a correct program.
	Magnitude bool
	// RoundEach rounds every float value the graph computes to its
	// declared dtype, as a kernel that materializes each value in memory
	// would: the precision a program as written actually has. The truth
	// (the default) keeps float intermediates in float64 and rounds only
	// where the graph casts; the rule verifier evaluates both sides of a
	// rewrite this way too, so that a rewrite which stores a partial result
	// in a narrower dtype than its accumulator shows its error (EvalAt
	// ignores it).
	RoundEach bool
	// RouteChoice, when set, may replace the experts a route's row
	// chooses (the reference's own top k): it is called for every row of
	// every route node v with the row's logits, their magnitudes (nil
	// without Magnitude) and the reference's choice, and returns the
	// choice to evaluate with, or nil for the reference's. Verification
	// uses it at near ties, where a kernel's choice is as right as the
	// reference's (EvalAt ignores it).
	RouteChoice func(v Value, row int, logits, mags []float64, ref []int) ([]int, error)
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
		ev := evaluator{g: g, n: n, vals: vals, mags: mags, magnitude: opt.Magnitude, lazy: lazy, v: Value(i), routeChoice: opt.RouteChoice}
		v, m, err := ev.run(feeds)
		if err != nil {
			return nil, fmt.Errorf("eval %s: node %%%d (%s): %w", g.Name, i, n.Op, err)
		}
		if opt.RoundEach && n.Op.Class() != ClassLeaf {
			v = roundedTo(v, n.DType)
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
	// v is n's value; routeChoice is EvalOptions.RouteChoice.
	v           Value
	routeChoice func(v Value, row int, logits, mags []float64, ref []int) ([]int, error)
}

func (e *evaluator) in(k int) *Tensor  { return e.vals[e.n.Inputs[k]] }
func (e *evaluator) mag(k int) *Tensor { return e.mags[e.n.Inputs[k]] }

// out makes the result tensor, and its magnitude when asked.
func (e *evaluator) out() (*Tensor, *Tensor) {
	v := NewTensor(e.n.DType, e.n.Shape)
	var m *Tensor
	if e.magnitude {
		m = newMagnitudes(e.n.DType, e.n.Shape)
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
		if x.DType.IsInt() {
			return e.intElementwise()
		}
		f := unaryFn(n.Op)
		v, m := e.out()
		for i := range v.F64 {
			xi := x.At(int64(i))
			v.F64[i] = n.DType.roundInt(f(xi))
			if m != nil {
				m.F64[i] = unaryMagnitude(n.Op, xi, v.F64[i], e.mag(0).F64[i])
			}
		}
		return v, m, nil
	case ClassBinary, ClassCompare:
		a, b := e.in(0), e.in(1)
		dt := e.g.Nodes[n.Inputs[0]].DType
		if dt.IsInt() {
			return e.intElementwise()
		}
		f := binaryFn(n.Op, dt)
		v, m := e.out()
		for i := range v.F64 {
			ai, bi := a.At(int64(i)), b.At(int64(i))
			if divisionByZero(n.Op, dt, bi) {
				return nil, nil, fmt.Errorf("integer division by zero at element %d", i)
			}
			v.F64[i] = n.DType.roundInt(f(ai, bi))
			if m != nil {
				m.F64[i] = binaryMagnitude(n.Op, ai, bi, e.mag(0).F64[i], e.mag(1).F64[i], v.F64[i])
			}
		}
		return v, m, nil
	case ClassSelect:
		c := e.in(0)
		v, m := e.out()
		for i := range v.Len() {
			k := selectBranch(c.At(i))
			copyElem(v, i, e.in(k), i)
			if m != nil {
				m.F64[i] = e.mag(k).F64[i]
			}
		}
		return v, m, nil
	case ClassReduce:
		return e.reduceAxis()
	case ClassView, ClassMove:
		if n.Op == OpScatter {
			return e.scatter()
		}
		if n.Op == OpCast {
			x := e.in(0)
			v, m := e.out()
			for i := range v.Len() {
				castValue(v, i, x, i)
				if m != nil {
					m.F64[i] = castMagnitude(n.DType, v.At(i), e.mag(0).F64[i])
				}
			}
			return v, m, nil
		}
		return e.move()
	}
	switch n.Op {
	case OpMatMul:
		return e.matmulValues()
	case OpSoftmax:
		return e.softmaxAxis()
	case OpLayerNorm, OpRMSNorm:
		return e.normRows()
	case OpAttention:
		return e.attentionHeads()
	case OpPagedAttention:
		return e.pagedAttention()
	case OpRoute:
		return e.route()
	case OpExperts, OpExpertsUp, OpExpertsDown:
		return e.moe()
	case OpDequant:
		return e.dequant()
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
	m := newMagnitudes(t.DType, t.Shape)
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
		for i := range v.Len() {
			if v.intStorage() {
				v.setInt(i, n.ConstInt(i))
			} else {
				v.F64[i] = n.ConstAt(i)
			}
		}
	case OpIota:
		v = NewTensor(n.DType, n.Shape)
		st := n.Shape.Strides()
		ax, _ := normAxis(n.Axis, len(n.Shape))
		for i := range v.Len() {
			v.SetInt(i, (i/st[ax])%int64(n.Shape[ax]))
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

// reduceAxis computes sum and reduce_max along one axis.
func (e *evaluator) reduceAxis() (*Tensor, *Tensor, error) {
	n := e.n
	x := e.in(0)
	if x.DType.IsInt() {
		return e.intReduce()
	}
	count, length, stride, first := rowsAlong(x.Shape, n.Axis)
	v, m := e.out()
	if length == 0 {
		// No rows to fold: every result is the empty fold, 0 for a sum
		// and -inf for a max (ONNX ReduceMax over an empty axis).
		for i := range v.F64 {
			v.F64[i] = newReducer(n.Op).v
		}
		return v, m, nil
	}
	for r := range count {
		base := first(r)
		red := newReducer(n.Op)
		for j := range int64(length) {
			mx := 0.0
			if m != nil {
				mx = e.mag(0).F64[base+j*stride]
			}
			red.add(j, x.At(base+j*stride), mx)
		}
		// Row r of the input is element r of the result, whose reduced
		// axis has extent 1.
		v.F64[r] = n.DType.roundInt(red.v)
		if m != nil {
			m.F64[r] = red.magnitude()
		}
	}
	return v, m, nil
}

// softmaxAxis computes softmax along the node's axis, row by row.
func (e *evaluator) softmaxAxis() (*Tensor, *Tensor, error) {
	x := e.in(0)
	v, m := e.out()
	count, length, stride, first := rowsAlong(e.n.Shape, e.n.Axis)
	rb := newRowBuffers(length, m != nil)
	for r := range count {
		base := first(r)
		for j := range length {
			k := base + int64(j)*stride
			rb.x[j] = x.At(k)
			if m != nil {
				rb.xm[j] = e.mag(0).F64[k]
			}
		}
		softmaxRow(rb.x, rb.xm, rb.y, rb.ym)
		for j := range length {
			k := base + int64(j)*stride
			v.F64[k] = rb.y[j]
			if m != nil {
				m.F64[k] = rb.ym[j]
			}
		}
	}
	return v, m, nil
}

// normRows computes layer norm or RMS norm over the last axis.
func (e *evaluator) normRows() (*Tensor, *Tensor, error) {
	n := e.n
	x := e.in(0)
	v, m := e.out()
	count, length, _, _ := rowsAlong(n.Shape, -1)
	w := e.in(1).Float64s()
	var b, wm, bm []float64
	if n.Op == OpLayerNorm {
		b = e.in(2).Float64s()
	}
	if m != nil {
		wm = e.mag(1).F64
		if n.Op == OpLayerNorm {
			bm = e.mag(2).F64
		}
	}
	rb := newRowBuffers(length, m != nil)
	for r := range count {
		base := int64(r * length)
		for j := range length {
			rb.x[j] = x.At(base + int64(j))
			if m != nil {
				rb.xm[j] = e.mag(0).F64[base+int64(j)]
			}
		}
		var ym []float64
		if m != nil {
			ym = m.F64[base : base+int64(length)]
		}
		normRow(n.Op, n.Eps, rb.x, rb.xm, w, wm, b, bm, v.F64[base:base+int64(length)], ym)
	}
	return v, m, nil
}

// attentionHeads computes attention query row by query row, with query
// head h reading key and value head h / (Hq / Hkv). Each key-value head's
// keys and transposed values are gathered once, so that the row rules read
// contiguous slices.
func (e *evaluator) attentionHeads() (*Tensor, *Tensor, error) {
	n := e.n
	q, k, vv := e.in(0), e.in(1), e.in(2)
	B, Hq, S, D := int(q.Shape[0]), int(q.Shape[1]), int(q.Shape[2]), int(q.Shape[3])
	Hkv, T := int(k.Shape[1]), int(k.Shape[2])
	group := Hq / Hkv
	first, err := attentionFirst(n, S, T, func(v Value) int64 { return e.vals[v].Int(0) })
	if err != nil {
		return nil, nil, err
	}
	v, m := e.out()
	mag := m != nil
	kr, vt := make([]float64, T*D), make([]float64, T*D)
	qr := make([]float64, D)
	p := make([]float64, T)
	var krm, vtm, qrm, pm []float64
	if mag {
		krm, vtm, qrm, pm = make([]float64, T*D), make([]float64, T*D), make([]float64, D), make([]float64, T)
	}
	for b := range B {
		for kh := range Hkv {
			off := int64((b*Hkv + kh) * T * D)
			for j := range T {
				for d := range D {
					src := off + int64(j*D+d)
					kr[j*D+d], vt[d*T+j] = k.At(src), vv.At(src)
					if mag {
						krm[j*D+d], vtm[d*T+j] = e.mag(1).F64[src], e.mag(2).F64[src]
					}
				}
			}
			for h := kh * group; h < (kh+1)*group; h++ {
				for i := range S {
					qo := int64(((b*Hq+h)*S + i) * D)
					for d := range D {
						qr[d] = q.At(qo + int64(d))
						if mag {
							qrm[d] = e.mag(0).F64[qo+int64(d)]
						}
					}
					limit := T
					if n.Causal {
						limit = int(first) + i + 1
					}
					var pml []float64
					if mag {
						pml = pm[:limit]
					}
					avg := attentionProbs(qr, qrm, kr, krm, n.Scale, p[:limit], pml)
					for d := range D {
						var col []float64
						if mag {
							col = vtm[d*T : d*T+limit]
						}
						val, mg := attentionOut(p[:limit], pml, avg, vt[d*T:d*T+limit], col)
						v.F64[qo+int64(d)] = val
						if mag {
							m.F64[qo+int64(d)] = mg
						}
					}
				}
			}
		}
	}
	return v, m, nil
}

// attentionFirst is the position of an attention's first query: its
// static Offset plus, with a runtime position operand, that operand's
// value (read by value), checked so that every causal query's keys exist.
func attentionFirst(n *Node, S, T int, value func(Value) int64) (int64, error) {
	first := n.Offset
	if p, ok := n.DynamicOffset(); ok {
		at := value(p)
		first += at
		if first < 0 || first > int64(T-S) {
			return 0, fmt.Errorf("runtime position %d puts queries at %d..%d, past %d keys", at, first, first+int64(S)-1, T)
		}
	}
	return first, nil
}

// matmulValues computes a matmul's values as matmul does (reading a lazily
// transposed weight in place) and its magnitudes by matmulMagnitude, in
// blocks of columns of B spread over the processors.
func (e *evaluator) matmulValues() (*Tensor, *Tensor, error) {
	values := *e
	values.magnitude = false
	v, _, err := values.matmul()
	if err != nil || !e.magnitude {
		return v, nil, err
	}
	n := e.n
	a, am := e.in(0).Float64s(), e.mag(0).F64
	bv := n.Inputs[1]
	b, bm, bt := e.vals[bv], e.mags[bv], false
	if e.lazy[bv] {
		src := e.g.Nodes[bv].Inputs[0]
		b, bm, bt = e.vals[src], e.mags[src], true
	}
	r := len(n.Shape)
	M, N := int(n.Shape[r-2]), int(n.Shape[r-1])
	K := int(e.in(0).Shape[r-1])
	batch := int(n.Shape[:r-2].NumElements())
	m := NewTensor(n.DType, n.Shape)
	const jb = 16 // columns of B per block, gathered as rows of B^T
	perBatch := (N + jb - 1) / jb
	blocks := batch * perBatch
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), blocks) {
		wg.Go(func() {
			cols, colm := make([]float64, jb*K), make([]float64, jb*K)
			for {
				blk := int(next.Add(1) - 1)
				if blk >= blocks {
					return
				}
				s, j0 := blk/perBatch, (blk%perBatch)*jb
				j1 := min(j0+jb, N)
				for k := range K {
					for j := j0; j < j1; j++ {
						src := (s*K+k)*N + j
						if bt {
							src = (s*N+j)*K + k
						}
						cols[(j-j0)*K+k], colm[(j-j0)*K+k] = b.At(int64(src)), bm.F64[src]
					}
				}
				for i := range M {
					row := (s*M + i) * K
					for j := j0; j < j1; j++ {
						c := (j - j0) * K
						m.F64[(s*M+i)*N+j] = matmulMagnitude(a[row:row+K], am[row:row+K], cols[c:c+K], colm[c:c+K])
					}
				}
			}
		})
	}
	wg.Wait()
	return v, m, nil
}

// roundedTo is t with every element rounded to dt: t itself when its
// storage already holds values of dt (float32 storage, an exact dtype, or
// no element that changes), else a rounded copy, since t's storage may be
// shared with an input or a feed.
func roundedTo(t *Tensor, dt DType) *Tensor {
	if !dt.IsFloat() || t.F64 == nil {
		return t
	}
	for i, x := range t.F64 {
		if r := dt.Round(x); r != x && !math.IsNaN(x) {
			c := &Tensor{DType: t.DType, Shape: t.Shape, F64: append([]float64(nil), t.F64...)}
			for j := i; j < len(c.F64); j++ {
				c.F64[j] = dt.Round(c.F64[j])
			}
			return c
		}
	}
	return t
}
