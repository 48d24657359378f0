package sample

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/emu"
)

// testCache is a compile cache of the emulation's runners for this test
// run, so that the user's cache is left alone.
var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lumsearch-sample-test-")
	if err != nil {
		panic(err)
	}
	testCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runEmu runs the kernel for the test with a generous deadline, skipping
// the test without a compiler. Vary runs the blocks in every thread order
// the emulation has, so that a missing barrier shows.
func runEmu(t *testing.T, logits []float32, vocab int, params []Params, index []uint64) []Result {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, logits, vocab, params, index, emu.Options{CacheDir: testCache, Vary: true, Seed: 1})
	require.NoError(t, err)
	return res
}

// chiSquareCritical is the chi-square distribution's upper 1e-4 quantile
// for df degrees of freedom: the x where the survival function
// Q(df/2, x/2) falls to 1e-4, found by bisection.
func chiSquareCritical(df int) float64 {
	lo, hi := 0.0, 10*float64(df)+100
	for range 200 {
		mid := (lo + hi) / 2
		if gammaQ(float64(df)/2, mid/2) > 1e-4 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// gammaQ is the regularized upper incomplete gamma function Q(a, x): the
// series for x < a+1, Lentz's continued fraction beyond (Numerical Recipes
// 6.2).
func gammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	front := math.Exp(-x + a*math.Log(x) - lg)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := 1.0; n < 1000; n++ {
			term *= x / (a + n)
			sum += term
			if term < sum*1e-16 {
				break
			}
		}
		return 1 - sum*front
	}
	const tiny = 1e-300
	b := x + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1.0; i < 1000; i++ {
		an := -i * (i - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-16 {
			break
		}
	}
	return front * h
}

// chiSquare returns Pearson's statistic of the counts against the
// probabilities and its degrees of freedom. Bins expected to hold fewer
// than 5 draws are pooled into one (dropped if the pool still is); a draw
// in a bin of probability 0 makes the statistic +Inf.
func chiSquare(counts []int, probs []float64) (float64, int) {
	n := 0
	for _, c := range counts {
		n += c
	}
	var stat, poolExp float64
	poolObs, bins := 0, 0
	for i, p := range probs {
		e := p * float64(n)
		switch {
		case p == 0 && counts[i] > 0:
			return math.Inf(1), 1
		case p == 0:
		case e < 5:
			poolExp += e
			poolObs += counts[i]
		default:
			d := float64(counts[i]) - e
			stat += d * d / e
			bins++
		}
	}
	if poolExp >= 5 {
		d := float64(poolObs) - poolExp
		stat += d * d / poolExp
		bins++
	}
	return stat, bins - 1
}

// rejects reports whether counts are unlikely (p < 1e-4) under probs.
func rejects(counts []int, probs []float64) (bool, float64, float64) {
	stat, df := chiSquare(counts, probs)
	if df < 1 {
		return !math.IsInf(stat, 1) && stat != 0, stat, 0
	}
	crit := chiSquareCritical(df)
	return stat > crit, stat, crit
}

// wantDist is the sampling distribution by a second formulation of the
// package comment's rules: a token survives top-k when fewer than k tokens
// have a strictly higher logit, and top-p when the renormalised
// probability of the survivors strictly more probable than it is below p.
func wantDist(logits []float32, p Params) []float64 {
	n := len(logits)
	probs := make([]float64, n)
	m := float64(slices.Max(logits))
	if p.Temperature < MinTemperature {
		probs[slices.Index(logits, float32(m))] = 1
		return probs
	}
	k := p.TopK
	if k <= 0 {
		k = n
	}
	var z float64
	for i, li := range logits {
		higher := 0
		for _, lj := range logits {
			if lj > li {
				higher++
			}
		}
		if higher < k {
			probs[i] = math.Exp((float64(li) - m) / p.Temperature)
			z += probs[i]
		}
	}
	for i := range probs {
		probs[i] /= z
	}
	if p.TopP < 1 {
		keep := make([]bool, n)
		for i := range probs {
			var above float64
			for j := range probs {
				if probs[j] > 0 && logits[j] > logits[i] {
					above += probs[j]
				}
			}
			keep[i] = probs[i] > 0 && above < p.TopP
		}
		z = 0
		for i := range probs {
			if !keep[i] {
				probs[i] = 0
			}
			z += probs[i]
		}
		for i := range probs {
			probs[i] /= z
		}
	}
	return probs
}

// randLogits returns n logits of the given scale, from a normal
// distribution, rounded to multiples of quantum when it is not 0 (which
// makes ties).
func randLogits(rng *rand.Rand, n int, scale, quantum float64) []float32 {
	l := make([]float32, n)
	for i := range l {
		v := rng.NormFloat64() * scale
		if quantum > 0 {
			v = math.Round(v/quantum) * quantum
		}
		l[i] = float32(v)
	}
	return l
}
