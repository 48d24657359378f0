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
				m.F64[i] = unaryMagnitude(n.Op, xi, v.F64[i], e.mag(0).F64[i])
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
		for i := range v.F64 {
			k := selectBranch(c.At(int64(i)))
			v.F64[i] = e.in(k).At(int64(i))
			if m != nil {
				m.F64[i] = e.mag(k).F64[i]
			}
		}
		return v, m, nil
	case ClassReduce:
		return e.reduceAxis()
	case ClassView, ClassMove:
		if n.Op == OpCast {
			x := e.in(0)
			v, m := e.out()
			for i := range v.F64 {
				v.F64[i] = n.DType.Round(x.At(int64(i)))
				if m != nil {
					m.F64[i] = castMagnitude(n.DType, v.F64[i], e.mag(0).F64[i])
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

// The rules below compute one element, or one row of a reduction or a
// composite op, from plain slices. Eval's whole-tensor loops and EvalAt's
// sparse evaluation both call them, so that the two agree on every op's
// meaning and on every magnitude rule; only the bookkeeping around them
// (which elements, stored where) differs.
//
// Magnitudes. The magnitude M(x) of a value bounds the error a correct
// program makes computing it, in the units Compare scales by Tolerance. It
// is |x| (x's own rounding when stored) plus an excess E(x) = M(x) - |x| >=
// 0, the errors x inherits, built op by op to first order:
//
//   - Leaves are exact but count one rounding: M = |x|.
//   - A unary op: |y| + |dy/dx| M(x). (The whole of M(x): approximate
//     intrinsics' errors grow with their argument.)
//   - A zero slope passes nothing on, even of an infinite magnitude: exp of
//     a masked score, -3.4e38 less the row's max, is 0 and so is its
//     magnitude, not inf*0 or 3.4e38.
//   - Only the operand that makes the value counts: where's selected
//     branch, the winner of max and min and of reduce_max.
//   - Add, sub, sum, matmul and the like combine terms: their magnitude is
//     the terms' absolute values (the accumulation's rounding grows with
//     them, not with the result, which may cancel) plus the terms' excesses
//     in quadrature, sqrt(sum_j E_j^2). A product ab, alone or as a term,
//     has the excess |b| E(a) and |a| E(b) in quadrature: the first-order
//     part of M(a) M(b) - |ab|, its two factors' errors being independent.
//   - Div and pow: |y| plus their two operands' contributions, |dy/da|
//     M(a) and |dy/db| M(b), in quadrature.
//   - The composite ops follow from their decompositions by the same rules
//     (softmax, attention), or from their first-order error directly (the
//     norms, see normRow).
//
// Why quadrature: the excesses are the rounding errors of many independent
// computations upstream, which are not aligned. Adding them linearly (every
// one at its worst, in the same direction) multiplied the bound by about
// the square root of the reduction length at every matmul, and taking the
// product of magnitudes squared the relative excess at every x*x of a
// norm: after a transformer layer or two the magnitudes were 1e38 or
// infinite against values of a few units, and Compare accepted anything.
// The quadrature sum is the size independent errors reach in practice, by
// the same reasoning that gives Tolerance its square root of the reduction
// length. Through two transformer layers with a causal mask the magnitudes
// stay within a few tens of the values, a correct f32 program uses about a
// thousandth of the error allowed, and a program with a wrong mask, wrong
// heads or a dropped term is off by a hundred times that or more
// (TestTransformerMagnitudes).

// scaled is slope * m, where a zero slope contributes nothing, even of an
// infinite or NaN magnitude (a NaN magnitude would make Compare accept any
// result), and an infinite slope on an exact zero contributes nothing
// either.
func scaled(slope, m float64) float64 {
	if slope == 0 || m == 0 {
		return 0
	}
	return slope * m
}

// excess is m's part beyond |x|: the errors x inherits.
func excess(m, x float64) float64 {
	if d := m - math.Abs(x); d > 0 {
		return d
	}
	return 0 // also for inf - inf: |x| is infinite, and M with it
}

// unaryMagnitude is the magnitude of y = op(x), x's magnitude being mx: the
// result's own size plus the slope times x's magnitude. Neg and abs keep
// x's magnitude; floor and ceil too, but never below |y| (ceil(0.3) is 1);
// not gives an exact boolean.
func unaryMagnitude(op Op, x, y, mx float64) float64 {
	switch op {
	case OpNeg, OpAbs:
		return mx
	case OpFloor, OpCeil:
		return math.Max(mx, math.Abs(y))
	case OpNot:
		return math.Abs(y)
	}
	return math.Abs(y) + scaled(math.Abs(unaryDeriv(op, x, y)), mx)
}

// binaryMagnitude is the magnitude of y = op(a, b). Comparisons and logic
// give exact booleans, whose magnitude is the value itself.
func binaryMagnitude(op Op, a, b, ma, mb, y float64) float64 {
	switch op {
	case OpAdd, OpSub:
		return math.Abs(a) + math.Abs(b) + math.Hypot(excess(ma, a), excess(mb, b))
	case OpMul:
		return math.Abs(y) + math.Hypot(scaled(math.Abs(b), excess(ma, a)), scaled(math.Abs(a), excess(mb, b)))
	case OpDiv:
		return math.Abs(y) + math.Hypot(scaled(1/math.Abs(b), ma), scaled(math.Abs(a)/(b*b), mb))
	case OpPow:
		// d/da a^b = b a^(b-1); d/db a^b = a^b ln a.
		return math.Abs(y) + math.Hypot(scaled(math.Abs(b*math.Pow(a, b-1)), ma), scaled(math.Abs(y*math.Log(math.Abs(a))), mb))
	case OpMax, OpMin:
		switch {
		case y == a && y != b:
			return ma
		case y == b && y != a:
			return mb
		}
		return math.Max(ma, mb) // a tie (either could be taken) or a NaN
	}
	return math.Abs(y) // mod, comparisons, logic
}

// castMagnitude is the magnitude of y, x cast to dt, x's magnitude being
// mx: a float cast adds one rounding of y; a cast to an exact type starts
// afresh from the value.
func castMagnitude(dt DType, y, mx float64) float64 {
	if dt.IsFloat() {
		return math.Max(mx, math.Abs(y))
	}
	return math.Abs(y)
}

// divisionByZero reports an integer division or remainder by zero, which
// the interpreter refuses rather than inventing a value.
func divisionByZero(op Op, dt DType, b float64) bool {
	return dt.IsInt() && b == 0 && (op == OpDiv || op == OpMod)
}

// selectBranch is the input of where that condition c picks: 1 (a) when c
// is true, 2 (b) otherwise.
func selectBranch(c float64) int {
	if c != 0 {
		return 1
	}
	return 2
}

// reducer folds a row of a reduction, element by element.
type reducer struct {
	op         Op
	v          float64 // the running result
	own, prop2 float64 // sum: the sum of |x_j| and of the squared excesses; max: the winner's magnitude in own
}

func newReducer(op Op) reducer {
	if op == OpMaxReduce {
		return reducer{op: op, v: math.Inf(-1)}
	}
	return reducer{op: op}
}

// add folds element j (value x, magnitude mx). A max keeps the winning
// element's magnitude, and a NaN, once seen, wins for good.
func (r *reducer) add(j int64, x, mx float64) {
	if r.op == OpSum {
		r.v += x
		r.own += math.Abs(x)
		if e := excess(mx, x); e > 0 {
			r.prop2 += e * e
		}
		return
	}
	if (x > r.v || x != x || j == 0) && r.v == r.v {
		r.v, r.own = x, mx
	}
}

// magnitude is the result's magnitude: for a sum, its terms plus their
// excesses in quadrature.
func (r *reducer) magnitude() float64 {
	if r.op == OpSum {
		return r.own + math.Sqrt(r.prop2)
	}
	return r.own
}

// matmulMagnitude is the magnitude of one element of a matmul, from a row
// a of A and a column b of B with their magnitudes: the terms combined,
// sum_k |a_k b_k|, plus the terms' excesses, |b_k| E(a_k) and |a_k| E(b_k),
// in quadrature.
func matmulMagnitude(a, am, b, bm []float64) float64 {
	own, prop2 := 0.0, 0.0
	for k, ak := range a {
		x, y := math.Abs(ak), math.Abs(b[k])
		own += x * y
		e1, e2 := scaled(y, excess(am[k], ak)), scaled(x, excess(bm[k], b[k]))
		prop2 += e1*e1 + e2*e2
	}
	return own + math.Sqrt(prop2)
}

// softmaxRow writes softmax(x) into y. With magnitudes (xm and ym not
// nil): p_i (1 + m_i + sqrt(sum_j (p_j m_j)^2)), since dp_i = p_i (dx_i -
// sum_j p_j dx_j), the sum's independent errors taken in quadrature. An
// element whose weight underflows to 0 (a masked one) passes nothing on.
func softmaxRow(x, xm, y, ym []float64) {
	mx := math.Inf(-1)
	for _, xj := range x {
		mx = math.Max(mx, xj)
	}
	sum := 0.0
	for j, xj := range x {
		y[j] = math.Exp(xj - mx)
		sum += y[j]
	}
	pm2 := 0.0
	for j := range y {
		y[j] /= sum
		if xm != nil {
			if e := scaled(y[j], xm[j]); e > 0 {
				pm2 += e * e
			}
		}
	}
	if xm != nil {
		pm := math.Sqrt(pm2)
		for j := range y {
			ym[j] = scaled(y[j], 1+xm[j]+pm)
		}
	}
}

// normRow writes layer norm ((x - mean) / sqrt(var + eps) * w + b) or RMS
// norm (x / sqrt(mean(x^2) + eps) * w) of one row into y; b and bm are
// unused for RMS norm.
//
// Magnitude. With c_k = (x_k - mean) r, r = 1/sqrt(var + eps) and y_k =
// w_k c_k + b_k, to first order
//
//	dy_k = w_k r (dx_k - dmean) + w_k c_k dr/r + c_k dw_k + db_k,
//	dmean = sum_j dx_j / L,  dr/r = -r^2 sum_j (x_j - mean) dx_j / L
//
// (the mean's error drops out of dr, since sum_j (x_j - mean) = 0). The
// first term is the element's own error, |w_k| r m_k in absolute terms,
// which no norm can shrink: an element near 0 keeps its input's absolute
// error. The terms through the mean and the scale r average the errors of
// the whole row; those are independent, so they add in quadrature:
// sqrt(sum_j m_j^2) / L for the mean, rho = r^2 sqrt(sum_j ((x_j - mean)
// m_j)^2) / L for dr/r, which is about the row's relative error divided by
// sqrt(L). A normalized value's magnitude is thus its input's relative
// error times the output, not more: adding the row's errors linearly (the
// worst case) doubled the relative error at every norm, and the product of
// magnitudes that the decomposed norm used to take squared it.
func normRow(op Op, eps float64, x, xm, w, wm, b, bm, y, ym []float64) {
	length := len(x)
	mean := 0.0
	if op == OpLayerNorm {
		for _, xj := range x {
			mean += xj
		}
		mean /= float64(length)
	}
	ss, dm2, dr2 := 0.0, 0.0, 0.0
	for j, xj := range x {
		d := xj - mean
		ss += d * d
		if xm != nil {
			dm2 += xm[j] * xm[j]
			if e := scaled(math.Abs(d), xm[j]); e > 0 {
				dr2 += e * e
			}
		}
	}
	inv := 1 / math.Sqrt(ss/float64(length)+eps)
	dmean := 0.0
	if op == OpLayerNorm {
		dmean = math.Sqrt(dm2) / float64(length)
	}
	rho := inv * inv * math.Sqrt(dr2) / float64(length)
	for j, xj := range x {
		c := (xj - mean) * inv
		yj := c * w[j]
		if op == OpLayerNorm {
			yj += b[j]
		}
		y[j] = yj
		if ym != nil {
			aw := math.Abs(w[j])
			mj := math.Abs(yj) + scaled(aw*inv, xm[j]+dmean) + scaled(aw*math.Abs(c), rho) + scaled(math.Abs(c), wm[j])
			if op == OpLayerNorm {
				mj += bm[j]
			}
			ym[j] = mj
		}
	}
}

// attentionProbs computes one query row's attention weights: p[j] =
// softmax_j(scale * q·k_j) over the len(p) keys k holds (row j at
// k[j*len(q):]). With magnitudes (qm not nil) pm[j] is the magnitude of
// score j (a dot product's, as matmulMagnitude) and the result is the
// quadrature sum sqrt(sum_j (p_j pm_j)^2), which attentionOut needs, as
// softmaxRow.
func attentionProbs(q, qm, k, km []float64, scale float64, p, pm []float64) float64 {
	D := len(q)
	mx := math.Inf(-1)
	for j := range p {
		kr := k[j*D : (j+1)*D]
		s := 0.0
		for d, qd := range q {
			s += qd * kr[d]
		}
		p[j] = s * scale
		if qm != nil {
			pm[j] = matmulMagnitude(q, qm, kr, km[j*D:(j+1)*D]) * scale
		}
		mx = math.Max(mx, p[j])
	}
	sum := 0.0
	for j := range p {
		p[j] = math.Exp(p[j] - mx)
		sum += p[j]
	}
	avg2 := 0.0
	for j := range p {
		p[j] /= sum
		if qm != nil {
			if e := scaled(p[j], pm[j]); e > 0 {
				avg2 += e * e
			}
		}
	}
	return math.Sqrt(avg2)
}

// attentionOut is one output element of attention: sum_j p_j v_j over a
// column v of the values, and its magnitude when vm is not nil, as a
// matmul's: the terms p_j |v_j|, plus in quadrature the terms' excesses,
// the weight's (its magnitude beyond p_j, p_j (pm_j + avg), as
// softmaxRow's) times |v_j| and p_j times the value's.
func attentionOut(p, pm []float64, avg float64, v, vm []float64) (float64, float64) {
	acc, own, prop2 := 0.0, 0.0, 0.0
	for j, pj := range p {
		acc += pj * v[j]
		if vm != nil {
			av := math.Abs(v[j])
			own += pj * av
			e1, e2 := scaled(pj, excess(vm[j], v[j])), scaled(pj*(pm[j]+avg), av)
			prop2 += e1*e1 + e2*e2
		}
	}
	return acc, own + math.Sqrt(prop2)
}

// reduceAxis computes sum and reduce_max along one axis.
func (e *evaluator) reduceAxis() (*Tensor, *Tensor, error) {
	n := e.n
	x := e.in(0)
	count, length, stride, first := rowsAlong(x.Shape, n.Axis)
	v, m := e.out()
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

// rowBuffers are a row's values and magnitudes gathered from a strided
// tensor, so that the row rules read plain slices.
type rowBuffers struct{ x, xm, y, ym []float64 }

func newRowBuffers(length int, magnitude bool) rowBuffers {
	b := rowBuffers{x: make([]float64, length), y: make([]float64, length)}
	if magnitude {
		b.xm, b.ym = make([]float64, length), make([]float64, length)
	}
	return b
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
						limit = int(n.Offset) + i + 1
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
