package ir

import "math"

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
	case OpRoundE4M3:
		return roundE4M3Magnitude(x, y, mx)
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
	return attentionProbsSink(q, qm, k, km, scale, p, pm, nil)
}

// attentionProbsSink is attentionProbs with a sink when sink is not nil:
// its logit sink[0] (magnitude sink[1]) is one more column of the softmax
// whose weight is left out of p, as a sink column concatenated to the
// scores and sliced off after the softmax would be.
func attentionProbsSink(q, qm, k, km []float64, scale float64, p, pm []float64, sink *[2]float64) float64 {
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
	if sink != nil {
		mx = math.Max(mx, sink[0])
	}
	sum := 0.0
	for j := range p {
		p[j] = math.Exp(p[j] - mx)
		sum += p[j]
	}
	ps := 0.0
	if sink != nil {
		ps = math.Exp(sink[0] - mx)
		sum += ps
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
	if sink != nil && qm != nil {
		if e := scaled(ps/sum, sink[1]); e > 0 {
			avg2 += e * e
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
