package cost

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSchedule(t *testing.T) {
	for _, s := range []Schedule{
		{Threads: 256},
		{BM: 64, BN: 128, BK: 32, Threads: 128, Stages: 3, Tensor: true},
		{BM: 16, BN: 64, Threads: 128, Stages: 2},
		{BM: 16, BN: 32, BK: 16, Threads: 128, Stages: 1, TM: 1},
		{Threads: 128, Rows: 4},
		{BM: 8, BN: 256, Threads: 256, Stages: 4, GEMV: true},
		{BM: 1, BN: 32, Threads: 512, SplitKeys: true},
	} {
		got, err := ParseSchedule(s.String())
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	for _, bad := range []string{"", "bm=64", "threads=0", "threads=x", "warps=4,threads=128", "bm=64,,threads=128"} {
		_, err := ParseSchedule(bad)
		assert.Error(t, err, bad)
	}
}

// syntheticRecords measures a mix of kernels under every schedule that
// fits them, as a GPU would if it ran at factors truth, with lognormal
// noise.
func syntheticRecords(t *testing.T, d *Device, truth Factors, seed uint64) []tunedb.Record {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var bodies []*ir.Graph
	for _, n := range []ir.Dim{1 << 12, 1 << 18, 1 << 22, 1 << 25} {
		bodies = append(bodies, body(t, func(b *ir.Builder) ir.Value { return b.Exp(b.Input("$0", ir.F32, n)) }))
	}
	for _, mnk := range [][3]ir.Dim{{16, 4096, 4096}, {512, 4096, 4096}, {4096, 4096, 4096}, {2048, 8192, 1024}} {
		bodies = append(bodies, matmulBody(t, ir.BF16, 0, mnk[0], mnk[1], mnk[2]), matmulBody(t, ir.F32, 0, mnk[0], mnk[1], mnk[2]),
			linearBody(t, ir.BF16, mnk[0], mnk[1], mnk[2]))
	}
	var recs []tunedb.Record
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, g := range bodies {
		k, err := analyze(g)
		require.NoError(t, err)
		for _, s := range k.schedules(d) {
			x, ok := k.features(s, d)
			if !ok {
				continue
			}
			p, err := Predict(d, truth, x)
			require.NoError(t, err)
			m := p * math.Exp(0.04*rng.NormFloat64())
			recs = append(recs, tunedb.Record{
				Key:    tunedb.Key{Spec: g.String(), Schedule: s.String(), Shapes: "-", DTypes: "-", Device: d.Name, Driver: "test", Compiler: "test"},
				Median: m, Spread: m / 20, Samples: 10, Where: tunedb.WhereGPU, At: at,
			})
		}
	}
	return recs
}

// TestCalibrateFromRecords fits a device's factors from tuning-database
// records of known factors and checks them, and the held-out ranking.
func TestCalibrateFromRecords(t *testing.T) {
	d := testDevice(t)
	truth := Defaults(d)
	truth.Memory = 0.7
	truth.Compute[computeKey(FMA, "f32")] = 0.6
	truth.Compute[computeKey(MMA, "bf16")] = 0.5
	truth.Launch = 4e-6
	recs := syntheticRecords(t, d, truth, 1)
	// Records of another device and emulated ones are not samples.
	other := recs[0]
	other.Key.Device = "a100-sxm-80gb"
	emulated := recs[1]
	emulated.Where = tunedb.WhereEmulated
	emulated.Median *= 1000
	recs = append(recs, other, emulated)

	m := NewModel(d, Defaults(d))
	samples, err := m.SamplesFromRecords(recs)
	require.NoError(t, err)
	require.Len(t, samples, len(recs)-2)
	f, rep, err := CrossCheck(d, samples, 0.25, 3, FitOptions{})
	require.NoError(t, err)
	t.Logf("%d samples: memory %.3f fma %.3f mma %.3f launch %.3g; held out %+v", len(samples), f.Memory,
		f.Compute[computeKey(FMA, "f32")], f.Compute[computeKey(MMA, "bf16")], f.Launch, rep)
	assert.InEpsilon(t, truth.Memory, f.Memory, 0.05)
	assert.InEpsilon(t, truth.Compute[computeKey(MMA, "bf16")], f.Compute[computeKey(MMA, "bf16")], 0.05)
	assert.InEpsilon(t, truth.Launch, f.Launch, 0.1)
	assert.GreaterOrEqual(t, rep.Spearman, 0.8)

	bad := recs[0]
	bad.Key.Spec = "not a graph"
	_, err = m.SamplesFromRecords([]tunedb.Record{bad})
	require.ErrorContains(t, err, "kernel body")
}
