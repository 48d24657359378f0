package sample

import (
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
	// Sampled rows: the draw's target u*M, the cumulative weight of the
	// kept tokens before the token, and the token's weight.
	target, before, weight float64
	// topPMargin is how far TopP*Z lies from the cumulative weights of
	// the threshold group and the group above it; +Inf when top-p is off.
	topPMargin float64
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
	d := decision{topPMargin: math.Inf(1)}
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
	if p.TopP < 1 {
		thr, d.topPMargin = topPThreshold(logits, w, p.TopP*z)
		for i, v := range logits {
			if float64(v) < thr {
				w[i] = 0
			}
		}
	}
	var mass float64
	last := -1
	for i, wi := range w {
		if wi > 0 {
			mass += wi
			last = i
		}
	}
	u := Uniform(p.Seed, index)
	d.target = u * mass
	d.token = -1
	var cum float64
	for i, wi := range w {
		if wi > 0 && cum+wi > d.target {
			d.token, d.before, d.weight = i, cum, wi
			break
		}
		cum += wi
	}
	if d.token < 0 { // rounding: u*M at or past the total
		d.token, d.before, d.weight = last, mass-w[last], w[last]
	}
	d.logprob = lp(d.token)
	return d
}

// topPThreshold returns the highest logit value v of the tokens of weight
// w > 0 such that the weight of those with logits >= v reaches target, and
// how far target lies from that group's cumulative weight and the one
// above.
func topPThreshold(logits []float32, w []float64, target float64) (float64, float64) {
	type group struct{ v, mass float64 }
	var groups []group
	for i, v := range logits {
		if w[i] > 0 {
			groups = append(groups, group{float64(v), w[i]})
		}
	}
	slices.SortFunc(groups, func(a, b group) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return 0
	})
	var cum float64
	for j := 0; j < len(groups); {
		k, above := j, cum
		for ; k < len(groups) && groups[k].v == groups[j].v; k++ {
			cum += groups[k].mass
		}
		if cum >= target || k == len(groups) {
			return groups[j].v, math.Min(math.Abs(cum-target), math.Abs(target-above))
		}
		j = k
	}
	return math.Inf(-1), math.Inf(1) // unreachable: the maximum has weight 1
}
