package cost

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trueFactors are the factors the synthetic samples are generated from,
// each away from the H100 defaults so that recovering them means something.
func trueFactors(d *Device) Factors {
	f := Defaults(d)
	f.Memory = 0.82
	f.Compute["fma/f32"] = 0.65
	f.Compute["mma.sync/bf16"] = 0.55
	f.Launch = 4.5e-6
	return f
}

// synthetic generates samples on d from factors f: memory-bound
// elementwise kernels, compute-bound FMA kernels, mma.sync bf16 matmuls
// (compute- and memory-bound, with FMA epilogues), launch-bound tiny
// kernels, all on grids of mixed fill; times get lognormal noise of the
// given sigma, and every 40th sample (offset 7) is a gross outlier (times 3
// or times 0.35) when outliers is set.
func synthetic(t testing.TB, d *Device, f Factors, seed uint64, sigma float64, outliers bool) []Sample {
	rng := rand.New(rand.NewPCG(seed, 1))
	logU := func(lo, hi float64) float64 {
		return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
	}
	grid := func() (int, int) {
		per := []int{1, 2, 4, 8}[rng.IntN(4)]
		blocks := int(logU(1, float64(20*d.SMs*per)))
		return blocks, per
	}
	var xs []Features
	for range 70 { // memory-bound elementwise
		b := logU(4<<20, 4<<30)
		blocks, per := grid()
		xs = append(xs, Features{Bytes: b, Work: []Work{{FMA, "f32", b / 8}}, Blocks: blocks, PerSM: per, Launches: 1})
	}
	for range 50 { // compute-bound FMA
		fl := logU(1e9, 1e12)
		blocks, per := grid()
		xs = append(xs, Features{Bytes: fl / logU(60, 600), Work: []Work{{FMA, "f32", fl}}, Blocks: blocks, PerSM: per, Launches: 1})
	}
	for range 80 { // matmuls
		m, n, k := logU(256, 16384), logU(256, 16384), logU(64, 16384)
		reread := logU(1, 8)
		blocks, per := grid()
		xs = append(xs, Features{
			Bytes:    2*(m*k+k*n)*reread + 2*m*n,
			Work:     []Work{{MMA, "bf16", 2 * m * n * k}, {FMA, "f32", m * n * logU(1, 8)}},
			Blocks:   blocks,
			PerSM:    per,
			Launches: 1,
		})
	}
	for range 40 { // launch-bound
		b := logU(256, 64<<10)
		xs = append(xs, Features{Bytes: b, Work: []Work{{FMA, "f32", b}}, Blocks: 1 + rng.IntN(64), PerSM: 8, Launches: 1 + rng.IntN(3)})
	}
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	samples := make([]Sample, len(xs))
	for i, x := range xs {
		p, err := Predict(d, f, x)
		require.NoError(t, err)
		p *= math.Exp(sigma * rng.NormFloat64())
		if outliers && i%40 == 7 {
			if (i/40)%2 == 0 {
				p *= 3
			} else {
				p *= 0.35
			}
		}
		samples[i] = Sample{Features: x, Seconds: p}
	}
	return samples
}

func h100(t testing.TB) *Device {
	d, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	return d
}

func assertFactors(t *testing.T, want, got Factors, tol float64) {
	t.Helper()
	assert.InEpsilon(t, want.Memory, got.Memory, tol, "memory")
	assert.InEpsilon(t, want.Launch, got.Launch, tol, "launch")
	for _, k := range []string{"fma/f32", "mma.sync/bf16"} {
		assert.InEpsilon(t, want.Compute[k], got.Compute[k], tol, k)
	}
}

func TestFitExact(t *testing.T) {
	d := h100(t)
	want := trueFactors(d)
	got, err := Fit(d, synthetic(t, d, want, 1, 0, false), FitOptions{})
	require.NoError(t, err)
	assertFactors(t, want, got, 1e-6)
	assert.Equal(t, Defaults(d).Compute["wgmma/bf16"], got.Compute["wgmma/bf16"], "terms the samples do not use keep their defaults")
}

func TestFitRecoversFactors(t *testing.T) {
	d := h100(t)
	near := trueFactors(d)
	// far is a device running at half its stated efficiencies with a slow
	// launch: the fit starts far from the answer.
	far := trueFactors(d)
	far.Memory, far.Compute["fma/f32"], far.Compute["mma.sync/bf16"], far.Launch = 0.4, 0.3, 0.25, 10e-6
	for _, tt := range []struct {
		name string
		want Factors
		loss string
		seed uint64
	}{
		{"huber", near, "huber", 1}, {"huber", near, "huber", 2}, {"huber", near, "huber", 3},
		{"tukey", near, "tukey", 1}, {"tukey", near, "tukey", 2}, {"tukey", near, "tukey", 3},
		{"far huber", far, "huber", 4}, {"far tukey", far, "tukey", 5},
	} {
		t.Run(fmt.Sprintf("%s seed %d", tt.name, tt.seed), func(t *testing.T) {
			want := tt.want
			samples := synthetic(t, d, want, tt.seed, 0.05, true)
			got, err := Fit(d, samples, FitOptions{Loss: tt.loss})
			require.NoError(t, err)
			assertFactors(t, want, got, 0.03)
			t.Logf("memory %.4f (true %.4f), fma/f32 %.4f (%.4f), mma.sync/bf16 %.4f (%.4f), launch %.3g s (%.3g)",
				got.Memory, want.Memory, got.Compute["fma/f32"], want.Compute["fma/f32"],
				got.Compute["mma.sync/bf16"], want.Compute["mma.sync/bf16"], got.Launch, want.Launch)
		})
	}
}

func TestFitClampsFractions(t *testing.T) {
	d := h100(t)
	f := trueFactors(d)
	// Memory-bound kernels running faster than the peak allows: the fit
	// may not claim more than the peak.
	samples := synthetic(t, d, f, 4, 0.01, false)
	for i := range samples {
		samples[i].Seconds *= 0.5
	}
	got, err := Fit(d, samples, FitOptions{})
	require.NoError(t, err)
	assert.LessOrEqual(t, got.Memory, 1.0)
	assert.Positive(t, got.Memory)
	for k, v := range got.Compute {
		assert.LessOrEqual(t, v, 1.0, k)
		assert.Positive(t, v, k)
	}
	assert.GreaterOrEqual(t, got.Launch, 0.0)
}

func TestFitKeepsUnidentifiedDefaults(t *testing.T) {
	d := h100(t)
	f := trueFactors(d)
	var samples []Sample
	for _, s := range synthetic(t, d, f, 5, 0.02, false) {
		if len(s.Features.Work) == 1 && s.Features.Work[0].FLOPs*8 <= s.Features.Bytes*1.0001 && s.Features.Bytes >= 4<<20 {
			samples = append(samples, s) // memory-bound elementwise only
		}
	}
	require.Greater(t, len(samples), 20)
	got, err := Fit(d, samples, FitOptions{})
	require.NoError(t, err)
	assert.InEpsilon(t, f.Memory, got.Memory, 0.03)
	assert.Equal(t, Defaults(d).Compute["fma/f32"], got.Compute["fma/f32"], "never dominant, so not fitted")
}

func TestFitErrors(t *testing.T) {
	d := h100(t)
	a100, err := LookupDevice("a100")
	require.NoError(t, err)
	f := trueFactors(d)
	good := synthetic(t, d, f, 6, 0, false)
	mem := Sample{Features: Features{Bytes: 1 << 30, Launches: 1}, Seconds: 5e-4}
	tiny := Sample{Features: Features{Bytes: 1024, Launches: 1}, Seconds: 5e-6}
	// Matmuls whose FMA epilogue is always 1% of the mma work: the two
	// compute terms cannot be told apart.
	var collinear []Sample
	for i := range 40 {
		fl := 1e11 * float64(i+1)
		x := Features{Bytes: 1e6, Work: []Work{{MMA, "bf16", fl}, {FMA, "f32", fl / 100}}, Launches: 1}
		p, err := Predict(d, f, x)
		require.NoError(t, err)
		collinear = append(collinear, Sample{x, p})
	}
	bad := func(i int, edit func(*Sample)) []Sample {
		s := append([]Sample(nil), good...)
		edit(&s[i])
		return s
	}
	tests := []struct {
		name    string
		d       *Device
		samples []Sample
		opt     FitOptions
		want    string
	}{
		{"no device", nil, good, FitOptions{}, "no device"},
		{"no samples", d, nil, FitOptions{}, "0 samples"},
		{"too few", d, good[:3], FitOptions{}, "need at least"},
		{"zero seconds", d, bad(3, func(s *Sample) { s.Seconds = 0 }), FitOptions{}, "sample 3: seconds"},
		{"NaN seconds", d, bad(3, func(s *Sample) { s.Seconds = math.NaN() }), FitOptions{}, "seconds"},
		{"negative bytes", d, bad(4, func(s *Sample) { s.Features.Bytes = -1 }), FitOptions{}, "bytes"},
		{"no peak", a100, []Sample{
			{Features{Work: []Work{{WGMMA, "bf16", 1e12}}}, 1}, mem, mem, mem,
		}, FitOptions{}, "no peak for wgmma bf16"},
		{"unknown loss", d, good, FitOptions{Loss: "cauchy"}, "unknown loss"},
		{"nothing identifiable", d, []Sample{mem, mem, tiny, tiny}, FitOptions{}, "no term is identifiable"},
		{"collinear", d, collinear, FitOptions{}, "cannot be told apart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Fit(tt.d, tt.samples, tt.opt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestCrossCheck(t *testing.T) {
	d := h100(t)
	want := trueFactors(d)
	samples := synthetic(t, d, want, 7, 0.05, true)
	got, rep, err := CrossCheck(d, samples, 0.25, 42, FitOptions{})
	require.NoError(t, err)
	assert.Equal(t, 60, rep.N)
	assert.GreaterOrEqual(t, rep.Spearman, 0.95)
	assert.Less(t, rep.MedianAbsRelError, 0.06)
	assertFactors(t, want, got, 0.05)
	t.Logf("held out: %+v", rep)

	// Deterministic: the same seed, the same answer; another seed, another split.
	got2, rep2, err := CrossCheck(d, samples, 0.25, 42, FitOptions{})
	require.NoError(t, err)
	assert.Equal(t, got, got2)
	assert.Equal(t, rep, rep2)
	_, rep3, err := CrossCheck(d, samples, 0.25, 43, FitOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, rep.MedianAbsRelError, rep3.MedianAbsRelError)

	for _, frac := range []float64{0, 1, -0.5, math.NaN()} {
		_, _, err := CrossCheck(d, samples, frac, 1, FitOptions{})
		require.Error(t, err, frac)
	}
	_, _, err = CrossCheck(d, samples[:5], 0.5, 1, FitOptions{})
	require.Error(t, err)
}

func TestEvaluate(t *testing.T) {
	d := h100(t)
	f := Defaults(d)
	x := Features{Bytes: 1 << 30, Launches: 1}
	p, err := Predict(d, f, x)
	require.NoError(t, err)
	rep, err := Evaluate(d, f, []Sample{{x, p}, {x, p / 2}, {x, p * 2}})
	require.NoError(t, err)
	assert.Equal(t, 3, rep.N)
	assert.InDelta(t, 0.5, rep.MedianAbsRelError, 1e-12) // errors 0, 1, 0.5
	assert.InDelta(t, 1.0, rep.MaxAbsRelError, 1e-12)
	assert.True(t, math.IsNaN(rep.Spearman), "equal predictions have no rank correlation")

	_, err = Evaluate(d, f, nil)
	require.Error(t, err)
	_, err = Evaluate(d, f, []Sample{{x, -1}})
	require.Error(t, err)
	_, err = Evaluate(d, f, []Sample{{Features{Work: []Work{{MMA, "f64", 1}}}, 1}})
	require.Error(t, err)
}

func TestSpearman(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want float64
	}{
		{"identical order", []float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{"monotone not linear", []float64{1, 2, 3, 4, 5}, []float64{1, 4, 9, 16, 1000}, 1},
		{"reversed", []float64{1, 2, 3}, []float64{3, 2, 1}, -1},
		// ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
		{"ties", []float64{1, 2, 2, 3}, []float64{1, 2, 3, 4}, 4.5 / math.Sqrt(4.5*5)},
		// ranks (1.5, 1.5, 3, 4, 5) against (2, 1, 4, 3, 5)
		{"ties both", []float64{5, 5, 6, 7, 8}, []float64{2, 1, 4, 3, 5}, 0.8720815992723809},
		{"uncorrelated", []float64{1, 2, 3, 4, 5}, []float64{3, 1, 5, 2, 4}, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, Spearman(tt.a, tt.b), 1e-12)
			assert.InDelta(t, tt.want, Spearman(tt.b, tt.a), 1e-12, "symmetric")
		})
	}
	for _, nan := range [][2][]float64{
		{{1, 2}, {1}},
		{{1}, {1}},
		{nil, nil},
		{{1, 1, 1}, {1, 2, 3}},
	} {
		assert.True(t, math.IsNaN(Spearman(nan[0], nan[1])), "%v", nan)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	d := h100(t)
	path := filepath.Join(t.TempDir(), "h100.profile.json")
	p := Profile{
		Device:  d.Name,
		Factors: trueFactors(d),
		Fitted:  time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC),
		Samples: 240,
		HeldOut: Report{MedianAbsRelError: 0.04, MaxAbsRelError: 2, Spearman: 0.99, N: 60},
	}
	require.NoError(t, SaveProfile(path, p))
	got, err := LoadProfile(path)
	require.NoError(t, err)
	assert.True(t, p.Fitted.Equal(got.Fitted))
	got.Fitted = p.Fitted
	assert.Equal(t, p, got)

	// An undefined Spearman survives as NaN (JSON null).
	p.HeldOut.Spearman = math.NaN()
	require.NoError(t, SaveProfile(path, p))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"spearman": null`)
	got, err = LoadProfile(path)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(got.HeldOut.Spearman))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary files left behind")
}

func TestProfileErrors(t *testing.T) {
	d := h100(t)
	dir := t.TempDir()
	good := Profile{Device: d.Name, Factors: Defaults(d), Samples: 1}

	bad := good
	bad.Factors.Memory = 1.5
	path := filepath.Join(dir, "bad.json")
	err := SaveProfile(path, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	err = SaveProfile(path, Profile{Factors: Defaults(d)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no device")
	err = SaveProfile(filepath.Join(dir, "no-such-dir", "p.json"), good)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-dir")

	tests := []struct{ name, content, want string }{
		{"unknown field", `{"device": "h100-sxm", "factors": {"memory": 0.9, "launch_seconds": 1e-6}, "fitted": "2025-01-01T00:00:00Z", "samples": 3, "held_out": {"n": 0}, "extra": 1}`, `unknown field "extra"`},
		{"unknown report field", `{"device": "h100-sxm", "factors": {"memory": 0.9, "launch_seconds": 1e-6}, "fitted": "2025-01-01T00:00:00Z", "samples": 3, "held_out": {"n": 0, "rmse": 1}}`, `unknown field "rmse"`},
		{"bad factor", `{"device": "h100-sxm", "factors": {"memory": 0.9, "compute": {"fma/f32": 0}, "launch_seconds": 1e-6}, "fitted": "2025-01-01T00:00:00Z", "samples": 3, "held_out": {"n": 0}}`, "fma/f32"},
		{"no device", `{"factors": {"memory": 0.9, "launch_seconds": 1e-6}, "fitted": "2025-01-01T00:00:00Z", "samples": 3, "held_out": {"n": 0}}`, "no device"},
		{"syntax", `{`, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "p.json")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))
			_, err := LoadProfile(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err = LoadProfile(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.json")
}

func BenchmarkFit(b *testing.B) {
	d := h100(b)
	samples := synthetic(b, d, trueFactors(d), 1, 0.05, true)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fit(d, samples, FitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
