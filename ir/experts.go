package ir

import (
	"fmt"
	"math"
	"slices"
)

// A mixture-of-experts layer is two ops. Route turns a row's router logits
// into weights over the experts: the TopK largest logits get weights (how,
// Gating says), every other expert exactly 0. Experts runs each row
// through the experts its weights choose (those with a weight other than
// 0, and no other: the work and bytes follow the chosen experts) and sums
// their outputs, each times its weight. The weights are a dense [rows,
// experts] f32 matrix so that a kernel of either op, and the reference,
// see one exact meaning; it is small (rows × experts) beside any expert.

// Gating says how route weights the chosen logits, and which gated
// activation the experts apply.
type Gating uint8

// The gatings. Route takes the first two, experts the last two.
const (
	// GatingChosen is a softmax over the chosen logits (Mixtral,
	// gpt-oss, and Qwen3-MoE with norm_topk_prob).
	GatingChosen Gating = iota + 1
	// GatingAll is a softmax over all the logits, the chosen kept and
	// not renormalised (Qwen3-MoE without norm_topk_prob).
	GatingAll
	// GatingSwiGLU is silu(gate) * up, gate the first I columns of the
	// gate-up projection and up the next I.
	GatingSwiGLU
	// GatingClampedSwiGLU is gpt-oss's: gate the even columns and up the
	// odd ones, gate clamped to at most Limit and up to [-Limit, Limit],
	// then (up + 1) * gate * sigmoid(1.702 * gate).
	GatingClampedSwiGLU
)

// ClampedSwiGLUAlpha is the slope inside the clamped SwiGLU's sigmoid.
const ClampedSwiGLUAlpha = 1.702

var gatingNames = map[Gating]string{
	GatingChosen:        "softmax_chosen",
	GatingAll:           "softmax_all",
	GatingSwiGLU:        "swiglu",
	GatingClampedSwiGLU: "clamped_swiglu",
}

// String is the gating's name in the text format.
func (g Gating) String() string {
	if s, ok := gatingNames[g]; ok {
		return s
	}
	return fmt.Sprintf("gating(%d)", uint8(g))
}

// ParseGating reads a gating's name.
func ParseGating(s string) (Gating, error) {
	for g, name := range gatingNames {
		if name == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown gating %q (want softmax_chosen, softmax_all, swiglu or clamped_swiglu)", s)
}

func (p *textParser) gating() (Gating, error) {
	t := p.next()
	if t.kind != tWord {
		return 0, textErrorf(t.textPos, "want a gating, got %s", t.describe())
	}
	g, err := ParseGating(t.text)
	if err != nil {
		return 0, textErrorf(t.textPos, "%v", err)
	}
	return g, nil
}

// Route weights the k largest of each row of router logits [rows, experts]
// by g (GatingChosen or GatingAll); the result is f32.
func (b *Builder) Route(logits Value, k int, g Gating) Value {
	return b.Apply(OpRoute, Attrs{TopK: int64(k), Gating: g}, logits)
}

// Experts runs each row of x [rows, hidden] through the experts its
// weights [rows, experts] choose: gate_up [experts, hidden, 2I] and its
// bias [experts, 2I], the gated activation g (GatingSwiGLU, or
// GatingClampedSwiGLU with its limit), down [experts, I, hidden] and its
// bias [experts, hidden]; the weighted outputs summed. A row of weights
// has at most k entries other than 0 (a route's with the same k): more is
// an error, since kernels keep k slots a row.
func (b *Builder) Experts(x, weights, gateUp, down, gateUpBias, downBias Value, k int, g Gating, limit float64) Value {
	return b.Apply(OpExperts, Attrs{TopK: int64(k), Gating: g, Limit: limit}, x, weights, gateUp, down, gateUpBias, downBias)
}

func inferRoute(a Attrs, in []ValueType) (Shape, DType, error) {
	l := in[0]
	if len(l.Shape) != 2 || !l.DType.IsFloat() {
		return nil, 0, fmt.Errorf("logits must be a float matrix [rows, experts]")
	}
	if E := int64(l.Shape[1]); a.TopK < 1 || a.TopK > E {
		return nil, 0, fmt.Errorf("k=%d of %d experts; want 1..%d", a.TopK, E, E)
	}
	if a.Gating != GatingChosen && a.Gating != GatingAll {
		return nil, 0, fmt.Errorf("gating %s; want softmax_chosen or softmax_all", a.Gating)
	}
	return l.Shape.Clone(), F32, nil
}

func inferExperts(a Attrs, in []ValueType) (Shape, DType, error) {
	x, w, gu, dn, gub, dnb := in[0], in[1], in[2], in[3], in[4], in[5]
	if len(x.Shape) != 2 || !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("x must be a float matrix [rows, hidden]")
	}
	R, H := x.Shape[0], x.Shape[1]
	if len(w.Shape) != 2 || w.Shape[0] != R || w.DType != F32 {
		return nil, 0, fmt.Errorf("weights must be f32[%d, experts]", R)
	}
	E := w.Shape[1]
	if a.TopK < 1 || a.TopK > int64(E) {
		return nil, 0, fmt.Errorf("k=%d of %d experts; want 1..%d", a.TopK, E, E)
	}
	if len(gu.Shape) != 3 || gu.Shape[0] != E || gu.Shape[1] != H || gu.Shape[2]%2 != 0 || gu.Shape[2] == 0 {
		return nil, 0, fmt.Errorf("gate_up must be [%d, %d, 2 × intermediate]", E, H)
	}
	I := gu.Shape[2] / 2
	want := []struct {
		what string
		t    ValueType
		s    Shape
	}{{"gate_up", gu, Shape{E, H, 2 * I}}, {"down", dn, Shape{E, I, H}}, {"gate_up_bias", gub, Shape{E, 2 * I}}, {"down_bias", dnb, Shape{E, H}}}
	for _, o := range want {
		if o.t.DType != x.DType || !o.t.Shape.Equal(o.s) {
			return nil, 0, fmt.Errorf("%s must be %s%v", o.what, x.DType, o.s)
		}
	}
	if err := checkActivation(a); err != nil {
		return nil, 0, err
	}
	return x.Shape.Clone(), x.DType, nil
}

// checkActivation checks an experts gating and its limit.
func checkActivation(a Attrs) error {
	switch a.Gating {
	case GatingSwiGLU:
		if a.Limit != 0 {
			return fmt.Errorf("limit %v on a swiglu (only clamped_swiglu clamps)", a.Limit)
		}
	case GatingClampedSwiGLU:
		if !(a.Limit > 0) || math.IsInf(a.Limit, 0) {
			return fmt.Errorf("limit %v; a clamped swiglu needs a positive, finite limit", a.Limit)
		}
	default:
		return fmt.Errorf("gating %s; want swiglu or clamped_swiglu", a.Gating)
	}
	return nil
}

// TopK returns the indices of the k largest of xs, largest first, a tie
// going to the lower index: the choice route makes. A NaN sorts above
// everything, so that a row with one chooses it and its weights are NaN.
func TopK(xs []float64, k int) []int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := xs[a], xs[b]
		switch {
		case math.IsNaN(x) && math.IsNaN(y):
			return 0
		case math.IsNaN(x) || x > y:
			return -1
		case math.IsNaN(y) || x < y:
			return 1
		}
		return 0
	})
	return idx[:k]
}

// RouteMargin is how far a row's choice is from changing: the k-th largest
// logit less the (k+1)-th (+Inf when every expert is chosen). A choice
// whose margin is within the error allowed on the logits may go either
// way, and a kernel's other choice is as right as the reference's.
func RouteMargin(xs []float64, k int) float64 {
	if k >= len(xs) {
		return math.Inf(1)
	}
	top := TopK(xs, k+1)
	return xs[top[k-1]] - xs[top[k]]
}

// RouteRow writes the weights of one row of logits for the chosen experts
// into y (every other weight 0), and their magnitudes into ym when it is
// not nil (xm the logits' magnitudes).
func RouteRow(g Gating, xs, xm []float64, chosen []int, y, ym []float64) {
	clear(y)
	if ym != nil {
		clear(ym)
	}
	// The softmax runs over the chosen logits, or over all of them (then
	// a logit's place is its expert).
	x, m := make([]float64, len(chosen)), []float64(nil)
	for j, i := range chosen {
		x[j] = xs[i]
	}
	if xm != nil {
		m = make([]float64, len(chosen))
		for j, i := range chosen {
			m[j] = xm[i]
		}
	}
	if g == GatingAll {
		x, m = xs, xm
	}
	p := make([]float64, len(x))
	var pm []float64
	if xm != nil {
		pm = make([]float64, len(x))
	}
	softmaxRow(x, m, p, pm)
	for j, i := range chosen {
		at := j
		if g == GatingAll {
			at = i
		}
		y[i] = p[at]
		if ym != nil {
			ym[i] = pm[at]
		}
	}
}

func (e *evaluator) route() (*Tensor, *Tensor, error) {
	n := e.n
	x := e.in(0)
	R, E := int(x.Shape[0]), int(x.Shape[1])
	v, m := e.out()
	row, rowm := make([]float64, E), []float64(nil)
	if m != nil {
		rowm = make([]float64, E)
	}
	for r := range R {
		for j := range E {
			row[j] = x.At(int64(r*E + j))
			if m != nil {
				rowm[j] = e.mag(0).F64[r*E+j]
			}
		}
		var ym []float64
		if m != nil {
			ym = m.F64[r*E : (r+1)*E]
		}
		chosen := TopK(row, int(n.TopK))
		if e.routeChoice != nil {
			c, err := e.routeChoice(e.v, r, row, rowm, chosen)
			if err != nil {
				return nil, nil, fmt.Errorf("row %d: %w", r, err)
			}
			if c != nil {
				chosen = c
			}
		}
		RouteRow(n.Gating, row, rowm, chosen, v.F64[r*E:(r+1)*E], ym)
	}
	return v, m, nil
}

// expertsOperands are the operands of experts, experts_up or
// experts_down: the rows' vectors x (h for experts_down, [R, k, I]) and
// the routing weights as float64 slices, with their magnitudes when asked,
// and the experts' weights (which may be large) read in place.
type expertsOperands struct {
	x, w             []float64
	xm, wm           []float64
	gu, dn, gub, dnb floats
	R, H, E, I       int
	gating           Gating
	limit            float64
}

// operandsOf reads n's operands: the rows' vectors and the routing
// weights through read, the experts' weights through weights; shape gives
// an operand's shape.
func operandsOf(n *Node, shape func(k int) Shape, read func(k int) (v, m []float64), weights func(k int) floats) *expertsOperands {
	o := &expertsOperands{gating: n.Gating, limit: n.Limit}
	w := shape(1)
	o.R, o.E = int(w[0]), int(w[1])
	o.x, o.xm = read(0)
	o.w, o.wm = read(1)
	switch n.Op {
	case OpExperts:
		o.H, o.I = int(shape(0)[1]), int(shape(2)[2])/2
		o.gu, o.dn, o.gub, o.dnb = weights(2), weights(3), weights(4), weights(5)
	case OpExpertsUp:
		o.H, o.I = int(shape(0)[1]), int(shape(2)[2])/2
		o.gu, o.gub = weights(2), weights(3)
	default:
		o.I, o.H = int(shape(0)[2]), int(shape(2)[2])
		o.dn, o.dnb = weights(2), weights(3)
	}
	return o
}

// compute writes row r of op's result (at most k experts a row) into y,
// and its magnitudes into ym when not nil.
func (o *expertsOperands) compute(op Op, k, r int, y, ym []float64) error {
	if err := o.checkRow(r, k); err != nil {
		return err
	}
	if op == OpExperts {
		o.row(r, y, ym)
		return nil
	}
	return o.slotsRow(op, k, r, y, ym)
}

// moe evaluates experts, experts_up or experts_down, row by row.
func (e *evaluator) moe() (*Tensor, *Tensor, error) {
	read := func(k int) ([]float64, []float64) {
		var m []float64
		if e.magnitude {
			m = e.mag(k).F64
		}
		return e.in(k).Float64s(), m
	}
	o := operandsOf(e.n, func(k int) Shape { return e.in(k).Shape }, read, func(k int) floats {
		v, m := read(k)
		return floats{v: v, m: m}
	})
	v, m := e.out()
	L := int(e.n.Shape.NumElements()) / o.R
	for r := range o.R {
		var ym []float64
		if m != nil {
			ym = m.F64[r*L : (r+1)*L]
		}
		if err := o.compute(e.n.Op, int(e.n.TopK), r, v.F64[r*L:(r+1)*L], ym); err != nil {
			return nil, nil, err
		}
	}
	return v, m, nil
}

// floats is an operand's values and magnitudes (nil without magnitudes),
// or a point evaluation's store of it, read in place.
type floats struct {
	v, m []float64
	s    *pointStore
}

func (f floats) at(j int) (float64, float64) {
	if f.s != nil {
		return f.s.at(int64(j))
	}
	if f.m == nil {
		return f.v[j], 0
	}
	return f.v[j], f.m[j]
}

// checkRow refuses a row of weights with more than k experts chosen, or
// with a weight that is not finite: neither has a meaning.
func (o *expertsOperands) checkRow(r, k int) error {
	n := 0
	for ex, w := range o.w[r*o.E : (r+1)*o.E] {
		if w != 0 {
			n++
		}
		if math.IsInf(w, 0) {
			return fmt.Errorf("row %d weights expert %d by %v", r, ex, w)
		}
	}
	if n > k {
		return fmt.Errorf("row %d chooses %d experts, more than k=%d", r, n, k)
	}
	return nil
}

// row computes one row's output into y, and its magnitude into ym when it
// is not nil. Every partial result stays float64: the narrow roundings a
// kernel makes of the gate-up projection and the activation are within the
// magnitudes, which count each such value's size.
func (o *expertsOperands) row(r int, y, ym []float64) {
	clear(y)
	if ym != nil {
		clear(ym)
	}
	h, hm := make([]float64, o.I), make([]float64, o.I)
	d, dm := make([]float64, o.H), make([]float64, o.H)
	for ex := range o.E {
		wt := o.w[r*o.E+ex]
		if wt == 0 {
			continue
		}
		o.up(r, ex, h, hm, ym != nil)
		o.down(ex, h, hm, d, dm, ym != nil)
		for j := range o.H {
			y[j] += wt * d[j]
			if ym != nil {
				ym[j] += math.Abs(wt)*dm[j] + o.wm[r*o.E+ex]*math.Abs(d[j])
			}
		}
	}
}

// up is expert ex's gated activation of row r of x, into h (and its
// magnitudes into hm when mag).
func (o *expertsOperands) up(r, ex int, h, hm []float64, mag bool) {
	H, I := o.H, o.I
	x := o.x[r*H : (r+1)*H]
	gu, gum := make([]float64, 2*I), make([]float64, 2*I)
	for c := range 2 * I {
		s, sm := o.gub.at(ex*2*I + c)
		if !mag {
			sm = 0
		}
		for k := range H {
			wv, wm := o.gu.at((ex*H+k)*2*I + c)
			s += x[k] * wv
			if mag {
				sm += o.xm[r*H+k]*math.Abs(wv) + math.Abs(x[k])*wm
			}
		}
		gu[c], gum[c] = s, sm
	}
	for i := range I {
		gi, ui := i, I+i
		if o.gating == GatingClampedSwiGLU {
			gi, ui = 2*i, 2*i+1
		}
		h[i], hm[i] = gate(o.gating, o.limit, gu[gi], gu[ui], gum[gi], gum[ui])
	}
}

// down is expert ex's down projection of h (hm its magnitudes) plus its
// bias, into y (and ym when mag).
func (o *expertsOperands) down(ex int, h, hm, y, ym []float64, mag bool) {
	H, I := o.H, o.I
	for j := range H {
		s, sm := o.dnb.at(ex*H + j)
		if !mag {
			sm = 0
		}
		for i := range I {
			dv, dm := o.dn.at((ex*I+i)*H + j)
			s += h[i] * dv
			if mag {
				sm += hm[i]*math.Abs(dv) + math.Abs(h[i])*dm
			}
		}
		y[j] = s
		if mag {
			ym[j] = sm
		}
	}
}

// gate is the gated activation of one gate and up value, with the
// magnitude of the result (gm, um theirs).
func gate(g Gating, limit, gv, uv, gm, um float64) (float64, float64) {
	if g == GatingSwiGLU {
		sg := 1 / (1 + math.Exp(-gv))
		silu := gv * sg
		dsilu := sg * (1 + gv*(1-sg))
		y := silu * uv
		return y, math.Abs(y) + math.Abs(dsilu*uv)*gm + math.Abs(silu)*um
	}
	dg, du := 1.0, 1.0
	if gv > limit {
		gv, dg = limit, 0
	}
	if uv > limit || uv < -limit {
		uv, du = math.Max(-limit, math.Min(uv, limit)), 0
	}
	sg := 1 / (1 + math.Exp(-ClampedSwiGLUAlpha*gv))
	glu := gv * sg
	dglu := sg * (1 + ClampedSwiGLUAlpha*gv*(1-sg))
	y := (uv + 1) * glu
	// NaN passes through both clamps: Go's comparisons with NaN are
	// false, so gv and uv stay NaN and y is NaN.
	return y, math.Abs(y) + math.Abs((uv+1)*dglu)*dg*gm + math.Abs(glu)*du*um
}
