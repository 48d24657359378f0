package sample

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPhiloxKnownAnswers checks Random123's known-answer vectors for
// Philox4x32-10 (its tests/kat_vectors).
func TestPhiloxKnownAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, Philox4x32(tc.ctr, tc.key), "ctr %x key %x", tc.ctr, tc.key)
	}
}

func TestUniformDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct{ seed, index uint64 }{
		{0, 0}, {1, 0}, {0, 1}, {42, 7}, {1 << 63, 1<<40 + 3}, {^uint64(0), ^uint64(0)},
	}
	seen := map[float64]bool{}
	for _, tc := range tests {
		u := Uniform(tc.seed, tc.index)
		assert.Equal(t, u, Uniform(tc.seed, tc.index), "seed %d index %d", tc.seed, tc.index)
		assert.True(t, u >= 0 && u < 1, "seed %d index %d: %v", tc.seed, tc.index, u)
		assert.Equal(t, u, float64(uint64(u*0x1p53))*0x1p-53, "53 bits exactly")
		assert.False(t, seen[u], "seed %d index %d repeats a draw", tc.seed, tc.index)
		seen[u] = true
	}
	// The high seed and index words matter.
	assert.NotEqual(t, Uniform(1, 5), Uniform(1|1<<32, 5))
	assert.NotEqual(t, Uniform(1, 5), Uniform(1, 5|1<<32))
}

// TestUniformChiSquare: the draws over consecutive indices of one seed,
// and over consecutive seeds at one index, fill 100 buckets evenly.
func TestUniformChiSquare(t *testing.T) {
	t.Parallel()
	const n, buckets = 100000, 100
	tests := []struct {
		name string
		draw func(i uint64) float64
	}{
		{"indices of seed 7", func(i uint64) float64 { return Uniform(7, i) }},
		{"seeds at index 3", func(i uint64) float64 { return Uniform(i, 3) }},
		{"high index words", func(i uint64) float64 { return Uniform(9, i<<32) }},
	}
	probs := make([]float64, buckets)
	for i := range probs {
		probs[i] = 1.0 / buckets
	}
	for _, tc := range tests {
		counts := make([]int, buckets)
		for i := range uint64(n) {
			counts[int(tc.draw(i)*buckets)]++
		}
		bad, stat, crit := rejects(counts, probs)
		assert.False(t, bad, "%s: chi-square %.1f > %.1f", tc.name, stat, crit)
	}
}

// TestUniformIndependence: consecutive draws of a request, and the draws
// of neighbouring seeds at one index, are independent: their pairs fill a
// 10x10 grid evenly.
func TestUniformIndependence(t *testing.T) {
	t.Parallel()
	const n, side = 50000, 10
	tests := []struct {
		name string
		pair func(i uint64) (float64, float64)
	}{
		{"index i and i+1", func(i uint64) (float64, float64) { return Uniform(11, 2*i), Uniform(11, 2*i+1) }},
		{"seed s and s+1", func(i uint64) (float64, float64) { return Uniform(2*i, 5), Uniform(2*i+1, 5) }},
	}
	probs := make([]float64, side*side)
	for i := range probs {
		probs[i] = 1.0 / (side * side)
	}
	for _, tc := range tests {
		counts := make([]int, side*side)
		for i := range uint64(n) {
			a, b := tc.pair(i)
			counts[int(a*side)*side+int(b*side)]++
		}
		bad, stat, crit := rejects(counts, probs)
		assert.False(t, bad, "%s: chi-square %.1f > %.1f", tc.name, stat, crit)
	}
}

// TestChiSquareRejectsWrongDistribution: the helper the distribution tests
// rest on tells a sampler that ignores temperature, top-k or top-p from
// the right one, and accepts the right one.
func TestChiSquareRejectsWrongDistribution(t *testing.T) {
	t.Parallel()
	logits := []float32{2, 1.5, 1.2, 1, 0.5, 0.2, 0, -0.5, -1, -2}
	want := Params{Temperature: 0.7, TopK: 6, TopP: 0.8}
	tests := []struct {
		name   string
		drawn  Params
		reject bool
	}{
		{"right", want, false},
		{"ignores temperature", Params{Temperature: 1, TopK: 6, TopP: 0.8}, true},
		{"ignores top-k", Params{Temperature: 0.7, TopP: 0.8}, true},
		{"ignores top-p", Params{Temperature: 0.7, TopK: 6, TopP: 1}, true},
		{"ignores both cuts", Params{Temperature: 0.7, TopP: 1}, true},
	}
	probs := wantDist(logits, want)
	for _, tc := range tests {
		counts := make([]int, len(logits))
		for i := range uint64(20000) {
			tok, _ := Reference(logits, tc.drawn, i)
			counts[tok]++
		}
		bad, stat, crit := rejects(counts, probs)
		require.Equal(t, tc.reject, bad, "%s: chi-square %.1f, critical %.1f", tc.name, stat, crit)
	}
}

func TestChiSquareCritical(t *testing.T) {
	t.Parallel()
	// Closed forms of the survival function: erfc(sqrt(x/2)) for one
	// degree of freedom, exp(-x/2) for two, exp(-x/2)(1+x/2) for four.
	tests := []struct {
		df int
		sf func(x float64) float64
	}{
		{1, func(x float64) float64 { return math.Erfc(math.Sqrt(x / 2)) }},
		{2, func(x float64) float64 { return math.Exp(-x / 2) }},
		{4, func(x float64) float64 { return math.Exp(-x/2) * (1 + x/2) }},
	}
	for _, tc := range tests {
		assert.InEpsilon(t, 1e-4, tc.sf(chiSquareCritical(tc.df)), 1e-6, "df %d", tc.df)
	}
	// Larger df: the Wilson-Hilferty approximation agrees within two percent.
	for _, df := range []int{10, 50, 99, 500} {
		k, h := float64(df), 2/(9*float64(df))
		wh := k * math.Pow(1-h+3.7190*math.Sqrt(h), 3)
		assert.InEpsilon(t, wh, chiSquareCritical(df), 0.02, "df %d", df)
	}
}
