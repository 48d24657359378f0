package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultParams()
	tests := []struct {
		name string
		edit func(*Params)
		want string // "" for valid
	}{
		{"defaults", func(*Params) {}, ""},
		{"greedy", func(p *Params) { p.Temperature = 0 }, ""},
		{"hot", func(p *Params) { p.Temperature = 2 }, ""},
		{"cuts", func(p *Params) { p.TopK, p.TopP, p.Logprobs = 40, 0.95, 20 }, ""},
		{"top_k -1", func(p *Params) { p.TopK = -1 }, ""},
		{"negative temperature", func(p *Params) { p.Temperature = -0.1 }, "temperature must be in [0, 2]"},
		{"temperature too high", func(p *Params) { p.Temperature = 2.01 }, "temperature must be in [0, 2]"},
		{"NaN temperature", func(p *Params) { p.Temperature = math.NaN() }, "temperature must be in [0, 2]"},
		{"top_p 0", func(p *Params) { p.TopP = 0 }, "top_p must be in (0, 1]"},
		{"top_p above 1", func(p *Params) { p.TopP = 1.5 }, "top_p must be in (0, 1]"},
		{"NaN top_p", func(p *Params) { p.TopP = math.NaN() }, "top_p must be in (0, 1]"},
		{"top_k -2", func(p *Params) { p.TopK = -2 }, "top_k must be"},
		{"top_k huge", func(p *Params) { p.TopK = math.MaxInt32 + 1 }, "top_k must be"},
		{"logprobs negative", func(p *Params) { p.Logprobs = -1 }, "top_logprobs must be in [0, 20]"},
		{"logprobs 21", func(p *Params) { p.Logprobs = 21 }, "top_logprobs must be in [0, 20]"},
	}
	for _, tc := range tests {
		p := ok
		tc.edit(&p)
		err := p.Validate()
		if tc.want == "" {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.name)
		}
	}
	assert.Error(t, Params{}.Validate(), "the zero value has top_p 0")
}

// FuzzValidate: Validate never panics, and what it accepts Reference and
// the kernel's parameter mapping take without surprise.
func FuzzValidate(f *testing.F) {
	f.Add(1.0, 0, 1.0, uint64(0), 0)
	f.Add(0.0, -1, 0.5, uint64(7), 20)
	f.Add(math.NaN(), math.MaxInt32+1, math.Inf(1), ^uint64(0), -5)
	logits := []float32{0.5, -1, 2, 2, 0}
	f.Fuzz(func(t *testing.T, temp float64, k int, topP float64, seed uint64, lp int) {
		p := Params{Temperature: temp, TopK: k, TopP: topP, Seed: seed, Logprobs: lp}
		if p.Validate() != nil {
			return
		}
		require.True(t, temp >= 0 && temp <= 2 && topP > 0 && topP <= 1 && k >= -1 && lp >= 0 && lp <= MaxLogprobs)
		tp := p.topP32()
		require.True(t, tp > 0 && tp <= 1 && (tp < 1) == (topP < 1), "top_p %v maps to %v", topP, tp)
		tok, logprob := Reference(logits, p, seed)
		require.True(t, tok >= 0 && tok < len(logits), "token %d", tok)
		require.LessOrEqual(t, logprob, 0.0)
	})
}

func TestReferenceGreedy(t *testing.T) {
	t.Parallel()
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		p      Params
		want   int
	}{
		{"plain", []float32{0, 3, 1}, Params{TopP: 1}, 1},
		{"ties to the lowest id", []float32{1, 5, 2, 5, 5}, Params{TopP: 1}, 1},
		{"-0 and +0 tie", []float32{-1, float32(math.Copysign(0, -1)), 0}, Params{TopP: 1}, 1},
		{"-Inf masked", []float32{ninf, -3, ninf}, Params{TopP: 1}, 1},
		{"cuts ignored", []float32{0, 3, 1}, Params{TopK: 1, TopP: 0.1}, 1},
		{"below MinTemperature", []float32{0, 3, 3.1}, Params{Temperature: MinTemperature / 2, TopP: 1}, 2},
	}
	for _, tc := range tests {
		for index := range uint64(5) {
			tok, lp := Reference(tc.logits, tc.p, index)
			require.Equal(t, tc.want, tok, "%s index %d", tc.name, index)
			var z float64
			for _, v := range tc.logits {
				z += math.Exp(float64(v))
			}
			assert.InDelta(t, float64(tc.logits[tc.want])-math.Log(z), lp, 1e-12, tc.name)
		}
	}
}

func TestReferenceBadInput(t *testing.T) {
	t.Parallel()
	ninf, inf := float32(math.Inf(-1)), float32(math.Inf(1))
	tests := []struct {
		name   string
		logits []float32
	}{
		{"empty", nil},
		{"NaN", []float32{0, float32(math.NaN())}},
		{"+Inf", []float32{0, inf}},
		{"all -Inf", []float32{ninf, ninf}},
	}
	for _, tc := range tests {
		for _, p := range []Params{{TopP: 1}, {Temperature: 1, TopK: 1, TopP: 0.5}} {
			tok, lp := Reference(tc.logits, p, 0)
			assert.Equal(t, -1, tok, tc.name)
			assert.True(t, math.IsNaN(lp), tc.name)
		}
	}
}

// TestReferenceCuts pins the tie rules with hand-made rows: the set a cut
// keeps is read off the tokens that ever come out.
func TestReferenceCuts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		logits []float32
		p      Params
		kept   []int
	}{
		{"top-k keeps ties at the k-th", []float32{3, 1, 2, 2, 0}, Params{Temperature: 1, TopK: 2, TopP: 1}, []int{0, 2, 3}},
		{"top-k 1 with a tie for first", []float32{1, 4, 4, 0}, Params{Temperature: 1, TopK: 1, TopP: 1}, []int{1, 2}},
		{"top-k over n is off", []float32{1, 0}, Params{Temperature: 1, TopK: 5, TopP: 1}, []int{0, 1}},
		// Probabilities 0.5, 0.25, 0.25: top_p 0.5 is reached by the first alone.
		{"top-p reached exactly", []float32{0, float32(-math.Ln2), float32(-math.Ln2)}, Params{Temperature: 1, TopP: 0.5}, []int{0}},
		{"top-p keeps the tied group", []float32{0, float32(-math.Ln2), float32(-math.Ln2)}, Params{Temperature: 1, TopP: 0.6}, []int{0, 1, 2}},
		{"top-p after top-k", []float32{0, -0.1, -0.2, -5, -5}, Params{Temperature: 1, TopK: 3, TopP: 0.6}, []int{0, 1}},
		{"-Inf never drawn", []float32{0, float32(math.Inf(-1)), 0}, Params{Temperature: 2, TopP: 1}, []int{0, 2}},
	}
	for _, tc := range tests {
		seen := map[int]bool{}
		for index := range uint64(2000) {
			tok, _ := Reference(tc.logits, tc.p, index)
			seen[tok] = true
		}
		var got []int
		for i := range tc.logits {
			if seen[i] {
				got = append(got, i)
			}
		}
		assert.Equal(t, tc.kept, got, tc.name)
	}
}

// distCases are rows and parameters whose draw distributions the tests
// check; the quantised rows have ties.
func distCases() []struct {
	name   string
	logits []float32
	p      Params
} {
	rng := rand.New(rand.NewPCG(1, 2))
	smooth := randLogits(rng, 40, 1.5, 0)
	ties := randLogits(rng, 40, 1.5, 0.5)
	type tc = struct {
		name   string
		logits []float32
		p      Params
	}
	var cases []tc
	for _, row := range []struct {
		name   string
		logits []float32
	}{{"smooth", smooth}, {"ties", ties}} {
		for _, p := range []Params{
			{Temperature: 0.7, TopP: 1},
			{Temperature: 1.3, TopP: 1},
			{Temperature: 1, TopK: 10, TopP: 1},
			{Temperature: 1, TopP: 0.8},
			{Temperature: 0.7, TopK: 12, TopP: 0.9},
			{Temperature: 1.3, TopK: 25, TopP: 0.6},
			{Temperature: 2, TopK: 3, TopP: 0.99},
		} {
			cases = append(cases, tc{fmt.Sprintf("%s T=%v k=%d p=%v", row.name, p.Temperature, p.TopK, p.TopP), row.logits, p})
		}
	}
	return cases
}

// TestReferenceDistribution draws 20000 tokens per case (indices 0 to
// 19999 of one seed) and tests them against wantDist.
func TestReferenceDistribution(t *testing.T) {
	t.Parallel()
	const draws = 20000
	for ci, tc := range distCases() {
		tc.p.Seed = uint64(100 + ci)
		probs := wantDist(tc.logits, tc.p)
		counts := make([]int, len(tc.logits))
		for i := range uint64(draws) {
			tok, _ := Reference(tc.logits, tc.p, i)
			counts[tok]++
		}
		bad, stat, crit := rejects(counts, probs)
		assert.False(t, bad, "%s: chi-square %.1f > %.1f", tc.name, stat, crit)
	}
}
