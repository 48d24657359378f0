package corpus

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// TestPackersRoundTrip: the packers' bytes decode (refMatrix, the
// checkpoints' meaning) to values near the float weights they packed,
// within each format's resolution, so that random quantized weights are
// a real checkpoint's, not saturated or flushed.
func TestPackersRoundTrip(t *testing.T) {
	const N, K = 16, 64
	rng := rand.New(rand.NewPCG(1, 2))
	w32 := make([]float32, N*K)
	fillNormal(rng, w32, weightStd)
	w := make([]float64, N*K)  // [N, K]
	wt := make([]float64, N*K) // [K, N]
	for i, v := range w32 {
		w[i] = float64(v)
		wt[(i%K)*N+i/K] = float64(v)
	}
	u8s := func(shape ir.Shape, b []uint8) *ir.Tensor {
		tt, err := ir.TensorOfBytes(shape, b)
		require.NoError(t, err)
		return tt
	}
	i32s := func(shape ir.Shape, w []int32) *ir.Tensor {
		tt := ir.NewTensor(ir.I32, shape)
		require.Len(t, w, len(tt.I32))
		copy(tt.I32, w)
		return tt
	}
	floats := func(dt ir.DType, shape ir.Shape, vals []float64) *ir.Tensor {
		tt, err := ir.TensorOf(dt, shape, vals...)
		require.NoError(t, err)
		return tt
	}
	for _, tt := range []struct {
		f   quant.Format
		rel float64 // the largest error over the weights' largest magnitude
	}{{quant.MXFP4, 0.25}, {quant.FP8, 0.07}, {quant.AWQ, 0.1}, {quant.GPTQ, 0.1}} {
		ws := map[string]*ir.Tensor{}
		group, groupN := 32, 4
		switch tt.f {
		case quant.MXFP4:
			b, s, err := packMXFP4(w, N, K)
			require.NoError(t, err)
			ws["w_blocks"], ws["w_scales"] = u8s(ir.Shape{N, K / 32, 16}, b), u8s(ir.Shape{N, K / 32}, s)
		case quant.FP8:
			c, s, err := packFP8(w, N, K, groupN, group)
			require.NoError(t, err)
			sf := make([]float64, len(s))
			for i, v := range s {
				sf[i] = float64(v)
			}
			ws["w"], ws["w_scale"] = u8s(ir.Shape{N, K}, c), floats(ir.F32, ir.Shape{ir.Dim(N / groupN), ir.Dim(K / group)}, sf)
		default:
			pack := packAWQ
			if tt.f == quant.GPTQ {
				pack = packGPTQ
			}
			qw, qz, s, err := pack(wt, K, N, group)
			require.NoError(t, err)
			ws["w.qweight"] = i32s(ir.Shape{ir.Dim(len(qw))}, qw)
			ws["w.qzeros"] = i32s(ir.Shape{ir.Dim(len(qz))}, qz)
			ws["w.scales"] = floats(ir.F16, ir.Shape{ir.Dim(K / group), N}, s)
		}
		got := refMatrix(t, ws, "w", tt.f, 1, N, K, group, groupN)
		amax, worst := 0.0, 0.0
		for i := range w {
			amax = math.Max(amax, math.Abs(w[i]))
			worst = math.Max(worst, math.Abs(got[i]-w[i]))
		}
		t.Logf("%s: worst error %.3g of the largest magnitude %.3g", tt.f, worst, amax)
		assert.Less(t, worst, tt.rel*amax, tt.f)
		assert.Positive(t, worst, "%s quantizes", tt.f)
	}
}
