package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomWeights is n weights drawn from a normal distribution of the
// given spread, with a fixed seed.
func randomWeights(seed uint64, n int, spread float64) []float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	w := make([]float64, n)
	for i := range w {
		w[i] = r.NormFloat64() * spread
	}
	return w
}

// mxfp4Bound is how far an element x of a block of scale X may decode
// from x: half the e2m1 step at |x|/X, or the clipping past 6X that the
// OCP scale allows.
func mxfp4Bound(x, X float64) float64 {
	y := math.Abs(x) / X
	switch {
	case y > MaxE2M1:
		return (y - MaxE2M1) * X
	case y >= 4:
		return X
	case y >= 2:
		return X / 2
	}
	return X / 4
}

// e4m3Bound is half the e4m3 step at magnitude y (at most 448, or a
// little past it before the saturating clamp).
func e4m3Bound(y float64) float64 {
	if y > MaxE4M3 {
		return y - MaxE4M3
	}
	if y < 0x1p-6 {
		return 0x1p-10
	}
	_, e := math.Frexp(y)
	return math.Ldexp(1, e-1-4)
}

func TestPackMXFP4RoundTrip(t *testing.T) {
	tests := []struct {
		name       string
		rows, cols int
		spread     float64
	}{
		{"unit", 3, 64, 1},
		{"small", 2, 96, 1e-30},
		{"large", 4, 32, 1e30},
		{"subnormal scales", 1, 32, 1e-300},
	}
	for i, tt := range tests {
		w := randomWeights(uint64(i), tt.rows*tt.cols, tt.spread)
		blocks, scales, err := PackMXFP4(w, tt.rows, tt.cols)
		require.NoError(t, err, tt.name)
		require.Len(t, blocks, tt.rows*tt.cols/2, tt.name)
		require.Len(t, scales, tt.rows*tt.cols/32, tt.name)
		got, err := DecodeMXFP4(blocks, scales, tt.rows, tt.cols)
		require.NoError(t, err, tt.name)
		for j, x := range w {
			X := E8M0(scales[j/32])
			assert.LessOrEqual(t, math.Abs(got[j]-x), mxfp4Bound(x, X), "%s: element %d = %g decodes to %g (scale %g)", tt.name, j, x, got[j], X)
		}
	}
}

// The OCP scale leaves the block maximum in [4X, 8X): past 6X it clips.
// An all-zero block gets the least scale, and a block too small for e8m0
// the least scale too, its elements flushing to zero.
func TestPackMXFP4Scale(t *testing.T) {
	tests := []struct {
		name      string
		amax      float64
		wantScale uint8
		wantMax   float64 // the block maximum, decoded
	}{
		{"zero", 0, 0, 0},
		{"one", 1, 125, 1},         // 2^(0-2): 1 is 4X
		{"seven clips", 7, 127, 6}, // 2^(2-2): 7 is past 6X
		{"just under 8", 7.999, 127, 6},
		{"eight", 8, 128, 8},
		{"tiny", 0x1p-200, 0, 0}, // 2^-202 is below 2^-127 × 0.25
		{"least scale", 0x1p-125, 0, 0x1p-125},
		{"largest", 0x1p129 * 1.5, 254, 0x1p129 * 1.5},
	}
	for _, tt := range tests {
		w := make([]float64, 32)
		w[5] = tt.amax
		w[6] = -tt.amax / 4
		blocks, scales, err := PackMXFP4(w, 1, 32)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.wantScale, scales[0], tt.name)
		got, err := DecodeMXFP4(blocks, scales, 1, 32)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.wantMax, got[5], tt.name)
	}
}

func TestPackFP8RoundTrip(t *testing.T) {
	tests := []struct {
		name           string
		rows, cols     int
		groupN, groupK int
		wantScales     int
	}{
		{"per tensor", 5, 7, 5, 7, 1},
		{"per channel", 5, 7, 1, 7, 5},
		{"blocks", 300, 260, 128, 128, 3 * 3},
		{"partial blocks", 5, 7, 2, 3, 3 * 3},
		{"groups past the extents", 3, 4, 8, 8, 1},
	}
	for i, tt := range tests {
		w := randomWeights(uint64(10+i), tt.rows*tt.cols, 0.02)
		codes, scales, err := PackFP8(w, tt.rows, tt.cols, tt.groupN, tt.groupK)
		require.NoError(t, err, tt.name)
		require.Len(t, scales, tt.wantScales, tt.name)
		got, err := DecodeFP8(codes, scales, tt.rows, tt.cols, tt.groupN, tt.groupK)
		require.NoError(t, err, tt.name)
		sk := (tt.cols-1)/tt.groupK + 1
		for j, x := range w {
			s := float64(scales[j/tt.cols/tt.groupN*sk+j%tt.cols/tt.groupK])
			// Past 448 the bound is a difference of near values: give it
			// float64's rounding of x.
			bound := e4m3Bound(math.Abs(x)/s)*s + math.Abs(x)*0x1p-50
			assert.LessOrEqual(t, math.Abs(got[j]-x), bound, "%s: element %d", tt.name, j)
		}
	}
	// A block of zeros gets scale 1; the largest magnitude gets 448 × scale.
	codes, scales, err := PackFP8([]float64{0, 0, -3, 1.5}, 2, 2, 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []float32{1, float32(3.0 / 448)}, scales)
	assert.Equal(t, []uint8{0, 0, 0xFE, RoundE4M3(1.5 / float64(float32(3.0/448)))}, codes)
}

// int4HalfStep bounds an AWQ or GPTQ round trip in steps of the stored
// scale: half a step, plus the f16 (AWQ) or f32 (GPTQ) arithmetic of the
// quantizer and the f16 rounding of the stored scale.
const int4HalfStep = 0.5 + 40*0x1p-11

func TestPackAWQRoundTrip(t *testing.T) {
	const K, N, group = 256, 24, 64
	w := randomWeights(20, K*N, 0.05)
	qweight, qzeros, scales, err := PackAWQ(w, K, N, group)
	require.NoError(t, err)
	got, err := DecodeAWQ(qweight, qzeros, scales, K, N, group)
	require.NoError(t, err)
	for k := range K {
		for n := range N {
			i, s := k*N+n, scales[k/group*N+n]
			assert.Equal(t, s, f16(s), "scales are f16 values")
			bound := s*int4HalfStep + math.Abs(w[i])*0x1p-11 // w itself rounds to f16
			assert.LessOrEqual(t, math.Abs(got[i]-w[i]), bound, "(%d, %d)", k, n)
		}
	}
}

func TestPackGPTQRoundTrip(t *testing.T) {
	const K, N, group = 256, 16, 32
	w := randomWeights(21, K*N, 0.05)
	qweight, qzeros, scales, err := PackGPTQ(w, K, N, group)
	require.NoError(t, err)
	got, err := DecodeGPTQ(qweight, qzeros, scales, K, N, group)
	require.NoError(t, err)
	for k := range K {
		for n := range N {
			i, g := k*N+n, k/group
			s := scales[g*N+n]
			steps := int4HalfStep
			if GPTQNibble(uint32(qzeros[g*(N/8)+n/8]), n%8) == 0 {
				steps += 0.5 // possibly a zero point raised from 0: see gptqGroup
			}
			assert.LessOrEqual(t, math.Abs(got[i]-w[i]), s*steps+math.Abs(w[i])*0x1p-24, "(%d, %d)", k, n)
		}
	}
}

// Hand-built weights whose scales, zero points and codes are known: the
// packed words are the golden words of golden_test.go.
func TestPackInt4Golden(t *testing.T) {
	// AWQ, K = 2, one group: column j spans −j/2 (q = 0) to (15 − j)/2
	// (q = 15), so s = 0.5 and z = j.
	w := make([]float64, 2*8)
	for j := range 8 {
		w[j], w[8+j] = -float64(j)/2, float64(15-j)/2
	}
	qweight, qzeros, scales, err := PackAWQ(w, 2, 8, 2)
	require.NoError(t, err)
	assert.Equal(t, []int32{0, -1}, qweight)
	assert.Equal(t, []int32{awqWordGolden}, qzeros)
	assert.Equal(t, []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, scales)

	// GPTQ, K = 8, one group: column j has z = j + 1 (stored j), s = 0.25
	// and codes 0, 15, 1, 2, 3, 4, 5, 6 along K.
	codes := []int{0, 15, 1, 2, 3, 4, 5, 6}
	w = make([]float64, 8*8)
	for k, q := range codes {
		for j := range 8 {
			w[k*8+j] = float64(q-(j+1)) * 0.25
		}
	}
	qweight, qzeros, scales, err = PackGPTQ(w, 8, 8, 8)
	require.NoError(t, err)
	assert.Equal(t, []int32{0x654321F0, 0x654321F0, 0x654321F0, 0x654321F0, 0x654321F0, 0x654321F0, 0x654321F0, 0x654321F0}, qweight)
	assert.Equal(t, []int32{gptqWordGolden}, qzeros)
	assert.Equal(t, []float64{0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25}, scales)
	got, err := DecodeGPTQ(qweight, qzeros, scales, 8, 8, 8)
	require.NoError(t, err)
	assert.Equal(t, w, got)
}

// The reference quantizers' own limits, kept: an AWQ group that does not
// straddle zero clips (its zero point clamps to 0), and a GPTQ zero point
// of 0 is raised to 1 without touching the other columns of its word.
func TestPackInt4Limits(t *testing.T) {
	w := make([]float64, 8*8)
	for k := range 8 {
		w[k*8] = 10 + float64(k)*0.01 // column 0: 10 to 10.07, all positive
	}
	qweight, qzeros, scales, err := PackAWQ(w, 8, 8, 8)
	require.NoError(t, err)
	got, err := DecodeAWQ(qweight, qzeros, scales, 8, 8, 8)
	require.NoError(t, err)
	assert.Equal(t, uint8(0), AWQNibble(uint32(qzeros[0]), 0))
	assert.Equal(t, 15*scales[0], got[7*8], "clipped at code 15, far below 10.07")

	// GPTQ column 3 spans 0 to 1.5: s = 0.1, zero point 0 raised to 1.
	// Every other column is zeros, whose range GPTQ widens to [-1, 1]: s =
	// f32(2/15) = 0.13333334, 1/s = 7.4999995 in f32, so z = 7, stored 6.
	w = make([]float64, 8*8)
	for k := range 8 {
		w[k*8+3] = 1.5 * float64(k) / 7
	}
	qweight, qzeros, scales, err = PackGPTQ(w, 8, 8, 8)
	require.NoError(t, err)
	for j := range 8 {
		want := uint8(6)
		if j == 3 {
			want = 0
		}
		assert.Equal(t, want, GPTQNibble(uint32(qzeros[0]), j), "column %d", j)
	}
	got, err = DecodeGPTQ(qweight, qzeros, scales, 8, 8, 8)
	require.NoError(t, err)
	s := scales[3]
	assert.Equal(t, 14*s, got[7*8+3], "the top code, 15, is 14 steps above the raised zero point")
	assert.InDelta(t, 1.5, got[7*8+3], 1.01*s)
}

func TestPackErrors(t *testing.T) {
	big := math.MaxInt/2 + 1
	nan, inf := math.NaN(), math.Inf(1)
	w32 := make([]float64, 32)
	mx := func(w []float64, rows, cols int) error { _, _, err := PackMXFP4(w, rows, cols); return err }
	fp8 := func(w []float64, rows, cols, gn, gk int) error {
		_, _, err := PackFP8(w, rows, cols, gn, gk)
		return err
	}
	awq := func(w []float64, K, N, g int) error { _, _, _, err := PackAWQ(w, K, N, g); return err }
	gptq := func(w []float64, K, N, g int) error { _, _, _, err := PackGPTQ(w, K, N, g); return err }
	with := func(i int, x float64) []float64 {
		w := make([]float64, 64)
		w[i] = x
		return w
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"mxfp4 nil", mx(nil, 1, 32), "0 values for 1×32; want 32"},
		{"mxfp4 negative", mx(w32, -1, 32), "-1×32 has no elements"},
		{"mxfp4 overflow", mx(w32, big, 4), "overflows int"},
		{"mxfp4 columns", mx(w32, 2, 16), "16 columns is no multiple of the block, 32"},
		{"mxfp4 nan", mx(with(33, nan), 2, 32), "weight (1, 1) is NaN"},
		{"mxfp4 inf", mx(with(0, -inf), 1, 64), "weight (0, 0) is -Inf"},
		{"mxfp4 past e8m0", mx(with(40, 0x1p130), 1, 64), "row 0 block 1 has magnitude"},
		{"fp8 group", fp8(w32, 4, 8, 0, 8), "scale block 0×8"},
		{"fp8 length", fp8(w32, 4, 9, 1, 9), "32 values for 4×9"},
		{"fp8 nan", fp8(with(9, nan), 8, 8, 8, 8), "weight (1, 1) is NaN"},
		{"fp8 tiny scale", fp8(with(3, 1e-50), 8, 8, 4, 4), "block (0, 0) has magnitude 1e-50"},
		{"fp8 huge scale", fp8(with(63, 1e300), 8, 8, 4, 4), "block (1, 1)"},
		{"awq N", awq(w32, 8, 4, 8), "N=4 output features is no multiple of 8"},
		{"awq group", awq(w32, 4, 8, 3), "group 3 does not divide K=4"},
		{"awq zero group", awq(w32, 4, 8, 0), "group 0 does not divide K=4"},
		{"awq past f16", awq(with(8, 1e5), 8, 8, 8), "weight (1, 0) = 100000 is no finite f16 value"},
		{"gptq K", gptq(w32, 4, 8, 4), "K=4 input features is no multiple of 8"},
		{"gptq past f32", gptq(with(2, 1e39), 8, 8, 8), "no finite f32 value"},
		{"gptq scale past f16", gptq(with(2, 2e6), 8, 8, 8), "group 0 column 2 has scale"},
		{"gptq length", gptq(w32, 8, 8, 8), "32 values for 8×8; want 64"},
	}
	for _, tt := range tests {
		assert.ErrorContains(t, tt.err, tt.want, tt.name)
	}
	// A group spanning more than f16 holds has an infinite f16 scale.
	w := with(0, 60000)
	w[8] = -60000
	assert.ErrorContains(t, awq(w, 8, 8, 8), "group 0 column 0 has scale +Inf, past f16's range")
}

func TestDecodeErrors(t *testing.T) {
	b16 := make([]uint8, 16)
	tests := []struct {
		name string
		err  func() error
		want string
	}{
		{"mxfp4 blocks", func() error { _, err := DecodeMXFP4(b16[:15], b16[:1], 1, 32); return err }, "mxfp4 blocks: 15 elements; want 16"},
		{"mxfp4 scales", func() error { _, err := DecodeMXFP4(b16, nil, 1, 32); return err }, "mxfp4 scales: 0 elements; want 1"},
		{"mxfp4 columns", func() error { _, err := DecodeMXFP4(b16, b16[:1], 2, 16); return err }, "no multiple of the block"},
		{"mxfp4 overflow", func() error { _, err := DecodeMXFP4(b16, b16, math.MaxInt, 32); return err }, "overflows int"},
		{"fp8 codes", func() error { _, err := DecodeFP8(b16, []float32{1}, 4, 5, 4, 5); return err }, "16 values for 4×5; want 20"},
		{"fp8 scales", func() error { _, err := DecodeFP8(b16, nil, 4, 4, 2, 2); return err }, "fp8 scales: 0 elements; want 4"},
		{"fp8 group", func() error { _, err := DecodeFP8(b16, nil, 4, 4, 2, -1); return err }, "scale block 2×-1"},
		{"awq qweight", func() error { _, err := DecodeAWQ(nil, []int32{0}, make([]float64, 8), 8, 8, 8); return err }, "awq qweight: 0 elements; want 8"},
		{"awq qzeros", func() error { _, err := DecodeAWQ(make([]int32, 8), nil, make([]float64, 8), 8, 8, 8); return err }, "awq qzeros: 0 elements; want 1"},
		{"gptq scales", func() error { _, err := DecodeGPTQ(make([]int32, 8), []int32{0}, nil, 8, 8, 8); return err }, "gptq scales: 0 elements; want 8"},
		{"gptq K", func() error { _, err := DecodeGPTQ(nil, nil, nil, 6, 8, 6); return err }, "K=6 input features"},
	}
	for _, tt := range tests {
		assert.ErrorContains(t, tt.err(), tt.want, tt.name)
	}
}
