package ir

import "math"

// rows splits a tensor of the node's shape into rows along axis: it
// returns the number of rows, the row length and the stride between a
// row's elements, and a function giving row r's first element.
func rowsAlong(shape Shape, axis int) (count, length int, stride int64, first func(r int) int64) {
	ax, _ := normAxis(axis, len(shape))
	inner := int64(1)
	for _, d := range shape[ax+1:] {
		inner *= int64(d)
	}
	length = int(shape[ax])
	count = int(shape.NumElements() / max(int64(length), 1))
	if length == 0 {
		count = 0
	}
	return count, length, inner, func(r int) int64 {
		o, i := int64(r)/inner, int64(r)%inner
		return o*int64(length)*inner + i
	}
}

// softmax is exp(x - max) / sum along the axis. Its magnitude, to first
// order: p_i (1 + m_i + sum_j p_j m_j), since dp_i = p_i (dx_i - sum_j p_j dx_j).
func (e *evaluator) softmax() (*Tensor, *Tensor, error) {
	x := e.in(0)
	v, m := e.out()
	count, length, stride, first := rowsAlong(e.n.Shape, e.n.Axis)
	for r := range count {
		base := first(r)
		mx := math.Inf(-1)
		for j := range length {
			mx = math.Max(mx, x.At(base+int64(j)*stride))
		}
		sum := 0.0
		for j := range length {
			k := base + int64(j)*stride
			ex := math.Exp(x.At(k) - mx)
			v.F64[k] = ex
			sum += ex
		}
		pm := 0.0
		for j := range length {
			k := base + int64(j)*stride
			v.F64[k] /= sum
			if m != nil {
				pm += v.F64[k] * e.mag(0).F64[k]
			}
		}
		if m != nil {
			for j := range length {
				k := base + int64(j)*stride
				m.F64[k] = v.F64[k] * (1 + e.mag(0).F64[k] + pm)
			}
		}
	}
	return v, m, nil
}

// norm is layer norm ((x - mean) / sqrt(var + eps) * scale + bias) or RMS
// norm (x / sqrt(mean(x^2) + eps) * scale) over the last axis. Magnitude,
// to first order: |y| plus |scale| times the spread of the input's error,
// scaled by 1/rms.
func (e *evaluator) norm() (*Tensor, *Tensor, error) {
	n := e.n
	x, w := e.in(0), e.in(1)
	v, m := e.out()
	count, length, _, _ := rowsAlong(n.Shape, -1)
	for r := range count {
		base := int64(r * length)
		mean := 0.0
		if n.Op == OpLayerNorm {
			for j := range length {
				mean += x.At(base + int64(j))
			}
			mean /= float64(length)
		}
		ss := 0.0
		mrow := 0.0
		for j := range length {
			d := x.At(base+int64(j)) - mean
			ss += d * d
			if m != nil {
				mrow += e.mag(0).F64[base+int64(j)]
			}
		}
		inv := 1 / math.Sqrt(ss/float64(length)+n.Eps)
		for j := range length {
			k := base + int64(j)
			y := (x.At(k) - mean) * inv * w.At(int64(j))
			if n.Op == OpLayerNorm {
				y += e.in(2).At(int64(j))
			}
			v.F64[k] = y
			if m != nil {
				mk := math.Abs(y) + math.Abs(w.At(int64(j)))*inv*(e.mag(0).F64[k]+mrow/float64(length)) +
					e.mag(1).F64[j]*math.Abs((x.At(k)-mean)*inv)
				if n.Op == OpLayerNorm {
					mk += e.mag(2).F64[j]
				}
				m.F64[k] = mk
			}
		}
	}
	return v, m, nil
}

// attention is softmax(q k^T * scale, masked causally when asked) v, with
// query head h reading key and value head h / (Hq / Hkv).
func (e *evaluator) attention() (*Tensor, *Tensor, error) {
	n := e.n
	q, k, vv := e.in(0), e.in(1), e.in(2)
	B, Hq, S, D := int(q.Shape[0]), int(q.Shape[1]), int(q.Shape[2]), int(q.Shape[3])
	Hkv, T := int(k.Shape[1]), int(k.Shape[2])
	group := Hq / Hkv
	v, m := e.out()
	p := make([]float64, T)
	pm := make([]float64, T)
	for b := range B {
		for h := range Hq {
			kh := h / group
			for i := range S {
				qo := int64(((b*Hq+h)*S + i) * D)
				limit := T
				if n.Causal {
					limit = int(n.Offset) + i + 1
				}
				mx := math.Inf(-1)
				for j := range limit {
					ko := int64(((b*Hkv+kh)*T + j) * D)
					s, sm := 0.0, 0.0
					for d := range D {
						s += q.At(qo+int64(d)) * k.At(ko+int64(d))
						if m != nil {
							sm += e.mag(0).F64[qo+int64(d)]*math.Abs(k.At(ko+int64(d))) + math.Abs(q.At(qo+int64(d)))*e.mag(1).F64[ko+int64(d)]
						}
					}
					p[j], pm[j] = s*n.Scale, sm*n.Scale
					mx = math.Max(mx, p[j])
				}
				sum := 0.0
				for j := range limit {
					p[j] = math.Exp(p[j] - mx)
					sum += p[j]
				}
				avg := 0.0
				for j := range limit {
					p[j] /= sum
					avg += p[j] * pm[j]
				}
				for d := range D {
					acc, macc := 0.0, 0.0
					for j := range limit {
						vo := int64(((b*Hkv+kh)*T+j)*D + d)
						acc += p[j] * vv.At(vo)
						if m != nil {
							macc += p[j]*e.mag(2).F64[vo] + p[j]*(1+pm[j]+avg)*math.Abs(vv.At(vo))
						}
					}
					v.F64[qo+int64(d)] = acc
					if m != nil {
						m.F64[qo+int64(d)] = macc
					}
				}
			}
		}
	}
	return v, m, nil
}
