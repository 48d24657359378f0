package sample

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
)

// u32 is f32's unit roundoff.
const u32 = 0x1p-24

// The kernel's error bounds (package comment, Precision), first order in
// u32. A weight w = exp(x), x = (l-m)/T, carries the roundings of l-m, of
// T to f32 and of the division (3u|x|) and expf's 2 ulps (4u): at most
// 4u*w*(1+|x|), so every sum of weights is within 4u*errScale of the
// reference's, and a difference of two (u*M - C) within 8u*errScale; the
// f32 top_p adds u*Z <= u*errScale. tolerance takes twice that, for the
// second-order terms and the f64 sums.
func tolerance(d decision) float64 { return 2 * 9 * u32 * d.errScale }

// logprobTolerance bounds the kernel's raw logprob: the raw sum within
// 4u*rawErrScale (relative 4u*rawErrScale/rawSum in its log), l-m within
// u|l-m|, and the f32 result within u|lp|; doubled as above.
func logprobTolerance(d decision, l, m float64) float64 {
	return 2 * u32 * (4*d.rawErrScale/d.rawSum + math.Abs(l-m) + math.Abs(d.logprob) + 1)
}

// drawMargin is how far a draw's target lies from the cumulative weights
// on either side of its token.
func drawMargin(d decision) float64 {
	return math.Min(d.target-d.before, d.before+d.weight-d.target)
}

// comparable reports whether the kernel must pick d's token: the row is
// greedy, or every top-p threshold the kernel may find within its error
// of TopP*Z (a group g with cumulative weight C[g] >= TopP*Z - tol and
// C[g-1] < TopP*Z + tol) draws that token with a margin over tol.
func comparable(d decision, logits []float32) bool {
	if d.greedy {
		return true
	}
	tol := tolerance(d)
	if d.groupV == nil {
		return drawMargin(d) > tol
	}
	for g, c := range d.groupCum {
		above := 0.0
		if g > 0 {
			above = d.groupCum[g-1]
		}
		if c < d.topPTarget-tol || above >= d.topPTarget+tol {
			continue
		}
		var alt decision
		alt.draw(logits, d.w, d.groupV[g], d.u)
		if alt.token != d.token || drawMargin(alt) <= tol {
			return false
		}
	}
	return true
}

// kernelRows are the rows one launch of the comparison test holds: each
// row's logits and params, repeated for several token indices.
type kernelRow struct {
	logits []float32
	p      Params
	index  uint64
}

func kernelRows(vocab int) []kernelRow {
	rng := rand.New(rand.NewPCG(uint64(vocab), 3))
	ninf := float32(math.Inf(-1))
	type base struct {
		logits []float32
		p      Params
	}
	masked := randLogits(rng, vocab, 3, 0)
	for i := range masked {
		if i%3 == 1 {
			masked[i] = ninf
		}
	}
	bases := []base{
		{randLogits(rng, vocab, 2, 0), Params{TopP: 1}}, // greedy
		{randLogits(rng, vocab, 0.5, 0), Params{Temperature: 1, TopP: 1}},
		{randLogits(rng, vocab, 4, 0), Params{Temperature: 0.7, TopK: 40, TopP: 1}},
		{randLogits(rng, vocab, 2, 0), Params{Temperature: 1.3, TopP: 0.9}},
		{randLogits(rng, vocab, 8, 0.25), Params{Temperature: 0.8, TopK: 50, TopP: 0.95}}, // ties
		{randLogits(rng, vocab, 1, 0.5), Params{Temperature: 2, TopK: 7, TopP: 0.5}},      // ties
		{masked, Params{Temperature: 1, TopK: vocab / 2, TopP: 0.99}},
		{randLogits(rng, vocab, 20, 0), Params{Temperature: 0.05, TopP: 1, Logprobs: 5}},
	}
	var rows []kernelRow
	for bi, b := range bases {
		for j := range 8 {
			p := b.p
			p.Seed = uint64(1000*vocab + bi)
			rows = append(rows, kernelRow{b.logits, p, uint64(j*j + bi)})
		}
	}
	// Shuffled, so that greedy and sampled rows interleave in the launch.
	rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	return rows
}

// TestKernelMatchesReference runs the kernel under the emulation on rows
// of mixed parameters and requires the reference's token wherever the
// decision's margin exceeds the kernel's error bound (always for greedy
// rows), and its logprob within the derived bound.
func TestKernelMatchesReference(t *testing.T) {
	t.Parallel()
	for _, vocab := range []int{97, 1000, 32000} {
		t.Run(fmt.Sprint(vocab), func(t *testing.T) {
			rows := kernelRows(vocab)
			logits := make([]float32, 0, len(rows)*vocab)
			params := make([]Params, len(rows))
			index := make([]uint64, len(rows))
			for i, r := range rows {
				logits = append(logits, r.logits...)
				params[i], index[i] = r.p, r.index
			}
			start := time.Now()
			res := runEmu(t, logits, vocab, params, index)
			t.Logf("vocab %d: %d rows in %v", vocab, len(rows), time.Since(start))
			compared, skipped := 0, 0
			for i, r := range rows {
				d := decide(r.logits, r.p, r.index)
				name := fmt.Sprintf("row %d %+v index %d", i, r.p, r.index)
				if !comparable(d, r.logits) {
					skipped++
					continue
				}
				compared++
				require.Equal(t, d.token, int(res[i].Token), "%s: token", name)
				m := math.Inf(-1)
				for _, v := range r.logits {
					m = math.Max(m, float64(v))
				}
				assert.InDelta(t, d.logprob, float64(res[i].Logprob), logprobTolerance(d, float64(r.logits[d.token]), m), "%s: logprob", name)
			}
			t.Logf("vocab %d: %d rows compared, %d within the margin skipped", vocab, compared, skipped)
			assert.GreaterOrEqual(t, compared, 9*len(rows)/10, "most rows are compared")
		})
	}
}

// TestKernelDistribution draws 1024 tokens from one row in one launch
// (1024 rows, token indices 0 to 1023) and tests them against wantDist.
func TestKernelDistribution(t *testing.T) {
	t.Parallel()
	const vocab, draws = 40, 1024
	tests := []struct {
		name   string
		logits []float32
		p      Params
	}{
		{"T=0.7 k=12 p=0.9", randLogits(rand.New(rand.NewPCG(5, 6)), vocab, 1.5, 0), Params{Temperature: 0.7, TopK: 12, TopP: 0.9, Seed: 77}},
		{"ties T=1.3 p=0.7", randLogits(rand.New(rand.NewPCG(7, 8)), vocab, 1.5, 0.5), Params{Temperature: 1.3, TopP: 0.7, Seed: 78}},
	}
	for _, tc := range tests {
		logits := make([]float32, 0, draws*vocab)
		params := make([]Params, draws)
		index := make([]uint64, draws)
		for i := range draws {
			logits = append(logits, tc.logits...)
			params[i], index[i] = tc.p, uint64(i)
		}
		res := runEmu(t, logits, vocab, params, index)
		counts := make([]int, vocab)
		for _, r := range res {
			counts[r.Token]++
		}
		bad, stat, crit := rejects(counts, wantDist(tc.logits, tc.p))
		assert.False(t, bad, "%s: chi-square %.1f > %.1f", tc.name, stat, crit)
		// The wrong distribution (top-p ignored) is told apart at this size.
		noTopP := tc.p
		noTopP.TopP = 1
		bad, stat, crit = rejects(counts, wantDist(tc.logits, noTopP))
		assert.True(t, bad, "%s against the distribution without top-p: chi-square %.1f <= %.1f", tc.name, stat, crit)
	}
}

// TestKernelBatchIndependent: a seeded request's token depends on its
// seed and index alone, not on its batchmates or its row in the batch.
func TestKernelBatchIndependent(t *testing.T) {
	t.Parallel()
	const vocab = 300
	rng := rand.New(rand.NewPCG(9, 10))
	mine := randLogits(rng, vocab, 2, 0)
	p := Params{Temperature: 1, TopK: 100, TopP: 0.9, Seed: 12345}
	alone := runEmu(t, mine, vocab, []Params{p}, []uint64{17})
	var logits []float32
	var params []Params
	var index []uint64
	for i := range 6 {
		if i == 4 {
			logits, params, index = append(logits, mine...), append(params, p), append(index, 17)
			continue
		}
		logits = append(logits, randLogits(rng, vocab, 3, 0)...)
		params = append(params, Params{Temperature: float64(i) / 3, TopP: 1, Seed: uint64(i)})
		index = append(index, uint64(100+i))
	}
	batch := runEmu(t, logits, vocab, params, index)
	assert.Equal(t, alone[0], batch[4])
	ref, _ := Reference(mine, p, 17)
	assert.Equal(t, ref, int(alone[0].Token))
}

func TestRunRejectsBadInput(t *testing.T) {
	t.Parallel()
	ok := DefaultParams()
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		vocab  int
		params []Params
		index  []uint64
		want   string
	}{
		{"short logits", make([]float32, 5), 3, []Params{ok, ok}, []uint64{0, 0}, "5 logits are not 2 sequences of 3"},
		{"long logits", make([]float32, 7), 3, []Params{ok, ok}, []uint64{0, 0}, "7 logits are not 2 sequences of 3"},
		{"zero vocab", nil, 0, []Params{ok}, []uint64{0}, "vocabulary size 0"},
		{"indices", make([]float32, 3), 3, []Params{ok}, []uint64{0, 1}, "2 token indices for 1 sequences"},
		{"bad params", make([]float32, 6), 3, []Params{ok, {Temperature: 3, TopP: 1}}, []uint64{0, 0}, "sequence 1: temperature must be in [0, 2]"},
		{"NaN logit", []float32{0, float32(math.NaN()), 0}, 3, []Params{ok}, []uint64{0}, "sequence 0: logit 1 is NaN"},
		{"+Inf logit", []float32{0, 0, float32(math.Inf(1))}, 3, []Params{ok}, []uint64{0}, "logit 2 is +Inf"},
		{"all -Inf", []float32{0, 0, ninf, ninf}, 2, []Params{ok, ok}, []uint64{0, 0}, "sequence 1: every logit is -Inf"},
	}
	for _, tc := range tests {
		_, err := Run(context.Background(), tc.logits, tc.vocab, tc.params, tc.index, emu.Options{CacheDir: testCache})
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
	res, err := Run(context.Background(), nil, 10, nil, nil, emu.Options{CacheDir: testCache})
	require.NoError(t, err, "no sequences")
	assert.Empty(t, res)
}

// TestKernelNVRTC compiles the kernel with NVRTC for the serving GPUs:
// it must compile alone (no prelude), with no spills.
func TestKernelNVRTC(t *testing.T) {
	t.Parallel()
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatalf("LUMSEARCH_REQUIRE_NVRTC=1: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		res, err := lib.Compile(context.Background(), KernelSource(), "sample.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		require.Contains(t, res.Kernels, KernelName, "%s log:\n%s", arch, res.Log)
		r := res.Kernels[KernelName]
		t.Logf("%s: %+v", arch, r)
		assert.Zero(t, r.SpillStores+r.SpillLoads, "%s spills", arch)
		assert.LessOrEqual(t, r.SharedBytes, 48*1024, arch)
	}
}
