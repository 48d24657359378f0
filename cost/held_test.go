package cost

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without a GPU the model grades itself, so two rules hold it (see
// docs/cost-model.md, "Sanity table"): it never prices a kernel kind above
// the published figure of the equivalent library kernel, and a worse
// technique never predicts less time.

// Published fractions of peak the best library kernels reach, the caps
// the model's predictions stay under (sources in docs/cost-model.md).
const (
	capGEMM      = 0.80 // cuBLAS large bf16 GEMM, of the dense mma peak
	capGEMV      = 0.90 // vLLM / TensorRT-LLM decode GEMV, of HBM bandwidth
	capAttention = 0.70 // FlashAttention-2/3 forward, of the dense mma peak
	capStream    = 0.92 // a device-to-device copy, of HBM bandwidth
)

// heldDevices are the targets the caps are checked on.
var heldDevices = []string{"h100", "h200", "a100"}

// TestModelUnderPublishedCaps draws random shapes of each kernel kind
// (seeded) and checks every schedule the model ranks, not only the best,
// against the cap of its kind: the useful work at the cap's fraction of
// the peak is a lower bound on the predicted time.
func TestModelUnderPublishedCaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	pick := func(lo, hi, mult int) ir.Dim { return ir.Dim((lo + rng.IntN(hi-lo+1)) / mult * mult) }
	for _, name := range heldDevices {
		d, err := LookupDevice(name)
		require.NoError(t, err)
		m := NewModel(d, Defaults(d))
		mma, ok := d.Peak(MMA, "bf16")
		require.True(t, ok)
		bw := d.MemoryBandwidth
		check := func(what string, body *ir.Graph, floor float64) {
			t.Helper()
			r, err := m.Ranked(body)
			require.NoError(t, err, what)
			for _, e := range r {
				assert.GreaterOrEqual(t, e.Seconds, floor, "%s on %s, %s: predicted %.3g s under the published cap's %.3g s", what, name, e.Schedule, e.Seconds, floor)
			}
		}
		for range 12 {
			M, N, K := pick(512, 8192, 64), pick(512, 8192, 64), pick(512, 8192, 64)
			check(fmt.Sprintf("gemm %dx%dx%d", M, N, K), linearBody(t, ir.BF16, M, K, N), 2*float64(M)*float64(N)*float64(K)/(capGEMM*mma.FLOPS))
		}
		for range 12 {
			M, N, K := pick(1, 8, 1), pick(256, 16384, 8), pick(256, 16384, 8)
			weight := float64(N) * float64(K) * 2
			check(fmt.Sprintf("gemv %dx%dx%d", M, N, K), linearBody(t, ir.BF16, M, K, N), weight/(capGEMV*bw))
			check(fmt.Sprintf("gemv row-major %dx%dx%d", M, N, K), matmulBody(t, ir.BF16, 0, M, K, N), weight/(capGEMV*bw))
		}
		for range 6 {
			S, D := pick(256, 4096, 64), ir.Dim(64*(1+rng.IntN(2)))
			att := body(t, func(b *ir.Builder) ir.Value {
				q := b.Input("$0", ir.BF16, 1, 8, S, D)
				k := b.Input("$1", ir.BF16, 1, 8, S, D)
				v := b.Input("$2", ir.BF16, 1, 8, S, D)
				return b.Attention(q, k, v, 0.125, false, 0)
			})
			useful := 4 * 8 * float64(S) * float64(S) * float64(D)
			check(fmt.Sprintf("attention S=T=%d D=%d", S, D), att, useful/(capAttention*mma.FLOPS))
		}
		for range 6 {
			// Decode: one query row a head over T keys, bound by reading
			// the keys and values.
			T, D := pick(256, 16384, 1), ir.Dim(64*(1+rng.IntN(2)))
			att := body(t, func(b *ir.Builder) ir.Value {
				q := b.Input("$0", ir.BF16, 1, 8, 1, D)
				k := b.Input("$1", ir.BF16, 1, 8, T, D)
				v := b.Input("$2", ir.BF16, 1, 8, T, D)
				return b.Attention(q, k, v, 0.125, false, 0)
			})
			check(fmt.Sprintf("decode attention T=%d D=%d", T, D), att, 2*8*float64(T)*float64(D)*2/(capGEMV*bw))
		}
		for range 6 {
			n := pick(1<<16, 1<<26, 8)
			ew := body(t, func(b *ir.Builder) ir.Value {
				x := b.Input("$0", ir.BF16, n)
				return b.Mul(x, b.Sigmoid(x))
			})
			check(fmt.Sprintf("elementwise %d", n), ew, 4*float64(n)/(capStream*bw))
		}
	}
}

// TestWorseTechniqueNeverFaster: over random shapes, each schedule priced
// with a worse technique in place of a better one predicts no less time.
func TestWorseTechniqueNeverFaster(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 41))
	pick := func(lo, hi, mult int) ir.Dim { return ir.Dim((lo + rng.IntN(hi-lo+1)) / mult * mult) }
	for _, name := range heldDevices {
		d, err := LookupDevice(name)
		require.NoError(t, err)
		m := NewModel(d, Defaults(d))
		features := func(body *ir.Graph, s Schedule) (Features, bool) {
			k, err := m.analyze(body)
			require.NoError(t, err)
			return k.features(s, d)
		}
		price := func(body *ir.Graph, s Schedule) (float64, bool) {
			x, ok := features(body, s)
			if !ok {
				return 0, false
			}
			p, err := Predict(d, m.Factors, x)
			require.NoError(t, err)
			return p, true
		}
		for range 10 {
			M, N, K := pick(16, 4096, 16), pick(64, 8192, 64), pick(64, 8192, 64)
			direct, scalar := linearBody(t, ir.BF16, M, K, N), matmulBody(t, ir.BF16, 0, M, K, N)
			r, err := m.Ranked(direct)
			require.NoError(t, err)
			// A kernel that loads scalars is not priced like one that
			// streams 16-byte copies: the best schedule with the right
			// operand computed is strictly slower, past launch-bound
			// sizes.
			best, err := m.Kernel(scalar)
			require.NoError(t, err)
			if r[0].Seconds > 4*m.Factors.Launch {
				assert.Greater(t, best.Seconds, r[0].Seconds, "%s, %dx%dx%d: the scalar path's best (%s) predicts no more than cp.async's (%s)", name, M, N, K, best.Schedule, r[0].Schedule)
			}
			for _, e := range r {
				s := e.Schedule
				if !s.Tensor {
					continue
				}
				// A 16-byte cp.async operand replaced by the computed
				// scalar path.
				if worse, ok := price(scalar, s); ok {
					assert.GreaterOrEqual(t, worse, e.Seconds, "%s on %s, %dx%dx%d: the scalar path predicts less than cp.async", s, name, M, N, K)
				}
				// Three stages replaced by two, where the third stage's
				// shared memory leaves the blocks a multiprocessor holds
				// as they were (where it costs a block, fewer tiles in
				// flight may be the right prediction: 5 blocks of 3
				// stages against 8 of 2).
				if s.Stages == 3 {
					two := s
					two.Stages = 2
					x2, ok := features(direct, two)
					require.True(t, ok, "%s fits with three stages, not with two", s)
					if x2.PerSM == e.Features.PerSM {
						worse, _ := price(direct, two)
						assert.GreaterOrEqual(t, worse, e.Seconds, "%s on %s, %dx%dx%d: two stages predict less than three", s, name, M, N, K)
					}
				}
				// A 64x64 warp patch replaced by 32x32 ones (four times
				// the warps in the same tile), where the larger patch's
				// fewer warps hide latency as well (a small grid of
				// one-warp blocks leaves a multiprocessor's schedulers
				// idle, which the model rightly prices).
				if s.Warp == 64 {
					small := s
					small.Warp, small.Threads = 0, s.Threads*4
					if x, ok := features(direct, small); ok && x.occupancyShare(d) <= e.Features.occupancyShare(d) {
						worse, _ := price(direct, small)
						assert.GreaterOrEqual(t, worse, e.Seconds, "%s on %s, %dx%dx%d: 32x32 warp patches predict less than 64x64", s, name, M, N, K)
					}
				}
			}
		}
		// A matrix-vector schedule with fewer loads in flight.
		for range 10 {
			M, N, K := pick(1, 8, 1), pick(256, 16384, 8), pick(256, 16384, 8)
			for _, body := range []*ir.Graph{linearBody(t, ir.BF16, M, K, N), matmulBody(t, ir.BF16, 0, M, K, N)} {
				r, err := m.Ranked(body)
				require.NoError(t, err)
				for _, e := range r {
					s := e.Schedule
					if !s.GEMV || s.Stages == 1 {
						continue
					}
					fewer := s
					fewer.Stages = s.Stages / 2
					if worse, ok := price(body, fewer); ok {
						assert.GreaterOrEqual(t, worse, e.Seconds, "%s on %s, %dx%dx%d: fewer loads in flight predict less", s, name, M, N, K)
					}
				}
			}
		}
	}
}

// TestIssueBound: with the compiler's count of a main loop's instructions
// (Resources.LoopInstructions) a kernel is priced at no less than its
// warps issuing them at one a clock per scheduler, and a heavier loop never
// predicts less time.
func TestIssueBound(t *testing.T) {
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	for _, c := range []struct {
		body *ir.Graph
		s    Schedule
	}{
		{linearBody(t, ir.BF16, 4096, 4096, 4096), Schedule{BM: 128, BN: 128, BK: 32, Threads: 128, Stages: 2, Tensor: true, Warp: 64}},
		{linearBody(t, ir.BF16, 1, 4096, 14336), Schedule{BM: 1, BN: 4, Threads: 128, Stages: 2, GEMV: true}},
		{matmulBody(t, ir.BF16, 0, 1, 4096, 14336), Schedule{BM: 1, BN: 128, Threads: 128, Stages: 4, GEMV: true}},
	} {
		prev := 0.0
		for _, loop := range []int{0, 50, 200, 800, 3200} {
			e, err := m.Resourced(c.body, c.s, Resources{Registers: 128, Shared: 32 << 10, LoopInstructions: loop})
			require.NoError(t, err, "%s", c.s)
			assert.GreaterOrEqual(t, e.Seconds, prev, "%s: %d instructions a loop", c.s, loop)
			assert.GreaterOrEqual(t, e.Seconds, e.Features.Instructions/issueRate(d), "%s", c.s)
			if loop > 0 {
				assert.Positive(t, e.Features.Instructions, "%s", c.s)
			}
			prev = e.Seconds
		}
		heavy, err := m.Resourced(c.body, c.s, Resources{Registers: 128, Shared: 32 << 10, LoopInstructions: 3200})
		require.NoError(t, err)
		light, err := m.Resourced(c.body, c.s, Resources{Registers: 128, Shared: 32 << 10})
		require.NoError(t, err)
		assert.Greater(t, heavy.Seconds, light.Seconds, "%s: a loop of 3200 instructions is issue-bound", c.s)
	}
}
