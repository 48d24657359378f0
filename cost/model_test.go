package cost

import (
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testDevice is the built-in H100 SXM description.
func testDevice(t testing.TB) *Device {
	t.Helper()
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	return d
}

// body builds a kernel body with the builder function over fresh inputs.
func body(t testing.TB, build func(b *ir.Builder) ir.Value) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	b.Output("out", build(b))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func matmulBody(t testing.TB, dt ir.DType, batch, m, k, n ir.Dim) *ir.Graph {
	return body(t, func(b *ir.Builder) ir.Value {
		if batch > 0 {
			return b.MatMul(b.Input("$0", dt, batch, m, k), b.Input("$1", dt, batch, k, n))
		}
		return b.MatMul(b.Input("$0", dt, m, k), b.Input("$1", dt, k, n))
	})
}

func TestMoreBytesNeverFaster(t *testing.T) {
	m := NewModel(testDevice(t), Defaults(testDevice(t)))
	prev := 0.0
	for _, n := range []ir.Dim{1 << 8, 1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 27} {
		e, err := m.Kernel(body(t, func(b *ir.Builder) ir.Value { return b.Exp(b.Input("$0", ir.F32, n)) }))
		require.NoError(t, err)
		assert.GreaterOrEqual(t, e.Seconds, prev, "exp over %d elements", n)
		prev = e.Seconds
	}
	// A longer reduction moves more bytes over the same grid.
	prev = 0
	for _, k := range []ir.Dim{256, 1024, 4096, 16384, 65536} {
		e, err := m.Kernel(matmulBody(t, ir.BF16, 0, 64, k, 1024))
		require.NoError(t, err)
		assert.GreaterOrEqual(t, e.Seconds, prev, "matmul 64x%dx1024", k)
		prev = e.Seconds
	}
	// And Predict itself never falls when bytes grow, all else equal.
	d := testDevice(t)
	for _, x := range []Features{
		{Blocks: 8, PerSM: 1, Launches: 1},
		{Blocks: 1000, PerSM: 4, Launches: 1, Work: []Work{{MMA, "bf16", 1e12}}},
		{Blocks: 133, PerSM: 1, Launches: 1, Work: []Work{{FMA, "f32", 1e9}}},
	} {
		prev := 0.0
		for _, b := range []float64{0, 1e3, 1e6, 1e9, 1e12} {
			x.Bytes = b
			p, err := Predict(d, Defaults(d), x)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, p, prev)
			prev = p
		}
	}
}

// TestLargerTilesFewerRereads: over every pair of matmul schedules where
// one's tile contains the other's, the larger never reads more.
func TestLargerTilesFewerRereads(t *testing.T) {
	d := testDevice(t)
	for _, shape := range [][3]ir.Dim{{8192, 8192, 8192}, {4096, 14336, 4096}, {16, 4096, 4096}} {
		k, err := analyze(matmulBody(t, ir.BF16, 0, shape[0], shape[1], shape[2]))
		require.NoError(t, err)
		scheds := k.schedules(d)
		for _, s1 := range scheds {
			for _, s2 := range scheds {
				if s1.Tensor != s2.Tensor || s2.BM < s1.BM || s2.BN < s1.BN || s1 == s2 {
					continue
				}
				f1, ok1 := k.features(s1, d)
				f2, ok2 := k.features(s2, d)
				if !ok1 || !ok2 {
					continue
				}
				assert.LessOrEqual(t, f2.Bytes, f1.Bytes, "%v: %s reads more than %s", shape, s2, s1)
			}
		}
	}
}

func TestWaves(t *testing.T) {
	d := testDevice(t)
	require.Equal(t, 132, d.SMs)
	f := Defaults(d)
	// Every block moves the same bytes.
	one := Features{Bytes: 132 << 20, Blocks: 132, PerSM: 1, Launches: 1}
	more := Features{Bytes: 133 << 20, Blocks: 133, PerSM: 1, Launches: 1}
	assert.Equal(t, 1, one.Waves(d))
	assert.Equal(t, 2, more.Waves(d), "133 equal tiles on 132 multiprocessors take two waves")
	t1, err := Predict(d, f, one)
	require.NoError(t, err)
	t2, err := Predict(d, f, more)
	require.NoError(t, err)
	assert.InEpsilon(t, 2*(t1-f.Launch), t2-f.Launch, 1e-9, "the last partial wave costs a whole one")
}

// TestMatVecPrefersSplitK prices a matrix-vector product with a long
// reduction as one kernel and as split-K (a batched partial kernel and a
// final sum, as the tile rules build it): split-K must win, because the
// unsplit grid leaves most multiprocessors idle.
func TestMatVecPrefersSplitK(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	const K, N, S = 16384, 1024, 8
	whole, err := m.Kernel(matmulBody(t, ir.BF16, 0, 1, K, N))
	require.NoError(t, err)
	partial, err := m.Kernel(matmulBody(t, ir.BF16, S, 1, K/S, N))
	require.NoError(t, err)
	final, err := m.Kernel(body(t, func(b *ir.Builder) ir.Value { return b.Sum(b.Input("$0", ir.BF16, S, 1, N), 0) }))
	require.NoError(t, err)
	t.Logf("whole %.3g s (%s, %d blocks), split %.3g + %.3g s", whole.Seconds, whole.Schedule, whole.Features.Blocks, partial.Seconds, final.Seconds)
	assert.Less(t, partial.Seconds+final.Seconds, whole.Seconds)
}

// linearBody is x [m, k] times an nn.Linear weight [n, k] read
// transposed: both operands K-contiguous plain buffers, which the
// tensor-core path copies with 16-byte cp.async.
func linearBody(t testing.TB, dt ir.DType, m, k, n ir.Dim) *ir.Graph {
	return body(t, func(b *ir.Builder) ir.Value {
		return b.MatMul(b.Input("$0", dt, m, k), b.Permute(b.Input("$1", dt, n, k), 1, 0))
	})
}

// TestBigMatmulComputeBound: an 8192^3 bf16 matmul on tensor cores whose
// operands stream through cp.async predicts about the time the
// description's achievable fraction of the mma.sync peak implies; with a
// row-major [K, N] right operand, which the kernel loads element by
// element, it predicts more.
func TestBigMatmulComputeBound(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	e, err := m.Kernel(linearBody(t, ir.BF16, 8192, 8192, 8192))
	require.NoError(t, err)
	scalar, err := m.Kernel(matmulBody(t, ir.BF16, 0, 8192, 8192, 8192))
	require.NoError(t, err)
	assert.Greater(t, scalar.Seconds, e.Seconds*1.1, "the scalar path for B (%s) against cp.async (%s)", scalar.Schedule, e.Schedule)
	p, ok := d.Peak(MMA, "bf16")
	require.True(t, ok)
	require.NotEmpty(t, p.Source)
	want := 2 * math.Pow(8192, 3) / (p.FLOPS * p.Achievable)
	t.Logf("predicted %.4g s with %s, %d blocks of %d per SM; peak share implies %.4g s", e.Seconds, e.Schedule, e.Features.Blocks, e.Features.PerSM, want)
	assert.True(t, e.Schedule.Tensor)
	assert.InEpsilon(t, want, e.Seconds, 0.15)
}

// fakeMeasurements serves one measured time.
type fakeMeasurements struct {
	spec, schedule string
	seconds        float64
	asked          int
}

func (f *fakeMeasurements) Measured(spec, schedule, device string) (float64, bool) {
	f.asked++
	if spec == f.spec && schedule == f.schedule {
		return f.seconds, true
	}
	return 0, false
}

func TestModelCacheAndMeasurements(t *testing.T) {
	d := testDevice(t)
	k := matmulBody(t, ir.F16, 0, 256, 1024, 1024)
	m := NewModel(d, Defaults(d))
	e1, err := m.Kernel(k)
	require.NoError(t, err)
	require.False(t, e1.Measured)
	e2, err := m.Kernel(k)
	require.NoError(t, err)
	assert.Equal(t, e1, e2)

	// A measured time below every prediction wins, for its schedule.
	meas := &fakeMeasurements{spec: k.String(), schedule: "bm=32,bn=64,bk=32,threads=64,stages=2,mma", seconds: e1.Seconds / 10}
	mm := NewModel(d, Defaults(d))
	mm.Measurements = meas
	e3, err := mm.Kernel(k)
	require.NoError(t, err)
	assert.True(t, e3.Measured)
	assert.Equal(t, meas.seconds, e3.Seconds)
	assert.Equal(t, meas.schedule, e3.Schedule.String())
	asked := meas.asked
	_, err = mm.Kernel(k)
	require.NoError(t, err)
	assert.Equal(t, asked, meas.asked, "the second call is served from the cache")
}

func TestAttentionFeatures(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	att := func(s, tk ir.Dim) *ir.Graph {
		return body(t, func(b *ir.Builder) ir.Value {
			q := b.Input("$0", ir.BF16, 1, 32, s, 128)
			k := b.Input("$1", ir.BF16, 1, 32, 128, tk)
			v := b.Input("$2", ir.BF16, 1, 32, tk, 128)
			return b.MatMul(b.Softmax(b.MatMul(q, k), 3), v)
		})
	}
	short, err := m.Kernel(att(128, 128))
	require.NoError(t, err)
	long, err := m.Kernel(att(4096, 4096))
	require.NoError(t, err)
	assert.Greater(t, long.Seconds, short.Seconds)
	// Scores never reach memory: while L2 keeps the keys and values, the
	// kernel moves its inputs and output once, fewer bytes than its
	// 32*1024*1024 scores.
	mid, err := m.Kernel(att(1024, 1024))
	require.NoError(t, err)
	assert.Less(t, mid.Features.Bytes, float64(32*1024*1024*2))
	assert.Equal(t, float64(4*32*1024*128*2), mid.Features.Bytes)
}

func BenchmarkKernelCost(b *testing.B) {
	d, err := LookupDevice("h100")
	require.NoError(b, err)
	k := matmulBody(b, ir.BF16, 0, 4096, 4096, 4096)
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			m := NewModel(d, Defaults(d))
			if _, err := m.Kernel(k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		m := NewModel(d, Defaults(d))
		if _, err := m.Kernel(k); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := m.Kernel(k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestResourcedFollowsTheCompiler: the compiler's register and shared
// memory report replaces the model's guesses, so more registers never
// predict a faster kernel, and a block that cannot fit is refused.
func TestResourcedFollowsTheCompiler(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	k := matmulBody(t, ir.F32, 0, 2048, 2048, 2048)
	best, err := m.Kernel(k)
	require.NoError(t, err)
	prev := 0.0
	for _, regs := range []int{32, 64, 128, 255} {
		e, err := m.Resourced(k, best.Schedule, Resources{Registers: regs, Shared: 9000})
		if regs*best.Schedule.Threads > d.RegistersPerBlock {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		assert.GreaterOrEqual(t, e.Seconds, prev, "%d registers", regs)
		assert.LessOrEqual(t, e.Features.PerSM, d.RegistersPerSM/(regs*best.Schedule.Threads))
		prev = e.Seconds
	}
	_, err = m.Resourced(k, best.Schedule, Resources{Registers: 32, Shared: d.SharedPerBlock + 1})
	require.Error(t, err)
}

// TestSmallTilesPayForL2: a large tensor-core matmul re-reads its operands
// from L2 once per tile, so a 32x32 tile (a quarter of a 128x128 tile's
// reuse) is L2-bound and the model picks a large tile.
func TestSmallTilesPayForL2(t *testing.T) {
	d := testDevice(t)
	m := NewModel(d, Defaults(d))
	k := matmulBody(t, ir.BF16, 0, 4096, 4096, 4096)
	ranked, err := m.Ranked(k)
	require.NoError(t, err)
	best := ranked[0]
	assert.GreaterOrEqual(t, best.Schedule.BM*best.Schedule.BN, 64*128, "best %s", best.Schedule)
	for _, e := range ranked {
		if e.Schedule.BM == 32 && e.Schedule.BN == 32 {
			assert.Greater(t, e.Seconds, 2*best.Seconds, "%s against %s", e.Schedule, best.Schedule)
			assert.Greater(t, e.Features.TileBytes, 3*best.Features.TileBytes)
		}
	}
}

// A gather reads the rows it takes, not its whole table: one token's
// embedding costs about what copying one row does, and a table that the
// kernel also reads some other way is read whole.
func TestGatherReadsItsRows(t *testing.T) {
	m := NewModel(testDevice(t), Defaults(testDevice(t)))
	const vocab, hidden = 128256, 4096
	gather := func(tokens ir.Dim, alsoWhole bool) Estimate {
		e, err := m.Kernel(body(t, func(b *ir.Builder) ir.Value {
			table := b.Input("$0", ir.BF16, vocab, hidden)
			rows := b.Gather(table, b.Input("$1", ir.I64, tokens), 0)
			if alsoWhole {
				return b.Add(rows, b.Sum(table, 0)) // a loop down each column
			}
			return rows
		}))
		require.NoError(t, err)
		return e
	}
	one, many, whole := gather(1, false), gather(512, false), gather(1, true)
	tableBytes := float64(vocab * hidden * 2)
	assert.Less(t, one.Features.Bytes, 4*float64(hidden*2)+64, "one row and its index: %v", one.Features.Bytes)
	assert.Less(t, one.Seconds, 10e-6)
	assert.Greater(t, many.Features.Bytes, one.Features.Bytes)
	assert.GreaterOrEqual(t, whole.Features.Bytes, tableBytes, "a table also summed whole is read whole")
}
