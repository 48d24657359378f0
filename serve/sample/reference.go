package sample

import (
	"cmp"
	"math"
	"slices"
)

// Reference samples one token from logits (one row, the vocabulary in id
// order) for the request's index-th token, in float64, by the definition
// in the package comment. It returns the token and its raw logprob, or
// -1 and NaN when logits is empty or holds a NaN or +Inf or only -Inf
// (Run rejects such rows).
func Reference(logits []float32, p Params, index uint64) (token int, logprob float64) {
	d := decide(logits, p, index)
	return d.token, d.logprob
}

// decision is Reference's result with what the tests need to tell a
// decision the kernel can make differently (within f32 rounding) from one
// it must make alike.
type decision struct {
	token   int
	logprob float64
	greedy  bool
	// Sampled rows: the uniform, the draw's target u*M, the cumulative weight of the
	// kept tokens before the token, and the token's weight.
	u, target, before, weight float64
	// Top-p rows: the weights after top-k, TopP*Z, and the kept groups
	// of tied logits in decreasing order: their values and the cumulative
	// weight down to each.
	w                []float64
	topPTarget       float64
	groupV, groupCum []float64
	// errScale is the sum over all tokens of w*(1+|x|), x = (l-m)/T, by
	// which the kernel's f32 weights' error is bounded; rawErrScale and
	// rawSum the same, and the sum of weights, at temperature 1.
	errScale, rawErrScale, rawSum float64
}

func decide(logits []float32, p Params, index uint64) decision {
	bad := decision{token: -1, logprob: math.NaN()}
	n := len(logits)
	if n == 0 {
		return bad
	}
	m, arg := math.Inf(-1), -1
	for i, v := range logits {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 1) {
			return bad
		}
		if f > m {
			m, arg = f, i
		}
	}
	if arg < 0 {
		return bad // every logit is -Inf
	}
	var d decision
	for _, v := range logits {
		x := float64(v) - m
		if w := math.Exp(x); w > 0 {
			d.rawSum += w
			d.rawErrScale += w * (1 - x)
		}
	}
	lp := func(i int) float64 { return float64(logits[i]) - m - math.Log(d.rawSum) }
	if p.greedy() {
		d.token, d.logprob, d.greedy = arg, lp(arg), true
		return d
	}
	// Top-k on the raw logits: the k-th highest, ties kept.
	thr := math.Inf(-1)
	if k := p.topK(n); k > 0 {
		sorted := make([]float64, n)
		for i, v := range logits {
			sorted[i] = float64(v)
		}
		slices.Sort(sorted)
		thr = sorted[n-k]
	}
	w := make([]float64, n)
	var z float64
	for i, v := range logits {
		x := (float64(v) - m) / p.Temperature
		e := math.Exp(x)
		if e > 0 {
			d.errScale += e * (1 + math.Abs(x))
		}
		if float64(v) >= thr {
			w[i] = e
			z += e
		}
	}
	u := Uniform(p.Seed, index)
	d.u = u
	if p.TopP < 1 {
		d.w, d.topPTarget = w, p.TopP*z
		d.groupV, d.groupCum = topPGroups(logits, w)
		thr = d.groupV[len(d.groupV)-1]
		for g, c := range d.groupCum {
			if c >= d.topPTarget {
				thr = d.groupV[g]
				break
			}
		}
	}
	d.draw(logits, w, thr, u)
	d.logprob = lp(d.token)
	return d
}

// draw picks the token from the weights w of the tokens whose logits are
// at least thr, for the uniform u.
func (d *decision) draw(logits []float32, w []float64, thr, u float64) {
	var mass float64
	last := -1
	for i, wi := range w {
		if wi > 0 && float64(logits[i]) >= thr {
			mass += wi
			last = i
		}
	}
	d.target = u * mass
	d.token = -1
	var cum float64
	for i, wi := range w {
		if wi == 0 || float64(logits[i]) < thr {
			continue
		}
		if cum+wi > d.target {
			d.token, d.before, d.weight = i, cum, wi
			return
		}
		cum += wi
	}
	// Rounding left u*M at or past the total.
	d.token, d.before, d.weight = last, mass-w[last], w[last]
}

// topPGroups returns the distinct logit values of the tokens of weight
// w > 0, decreasing, and the cumulative weight of the tokens with logits
// at least each. The top-p threshold is the first value whose cumulative
// weight reaches TopP*Z.
func topPGroups(logits []float32, w []float64) (values, cum []float64) {
	type tok struct{ v, w float64 }
	var toks []tok
	for i, v := range logits {
		if w[i] > 0 {
			toks = append(toks, tok{float64(v), w[i]})
		}
	}
	slices.SortFunc(toks, func(a, b tok) int { return cmp.Compare(b.v, a.v) })
	var c float64
	for i, t := range toks {
		c += t.w
		if i+1 == len(toks) || toks[i+1].v != t.v {
			values = append(values, t.v)
			cum = append(cum, c)
		}
	}
	return values, cum
}
