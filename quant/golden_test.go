package quant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Golden vectors: bytes made by hand and the values they must decode to,
// each group with the document it was read from. codes.go lists the same
// sources with the lines quoted.

// sameValue reports whether got is want, NaN matching NaN and the sign of
// a zero counting.
func sameValue(want, got float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return want == got && math.Signbit(want) == math.Signbit(got)
}

// e2m1Golden is every e2m1 code: OCP MX v1.0 section 5.3.3, table 5, and
// triton_kernels' cvt_e2m1_to_fp32 (numerics_details/mxfp.py: [0.0, 0.5,
// 1, 1.5, 2, 3, 4, 6] and their negations for codes 8 to 15).
var e2m1Golden = [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, math.Copysign(0, -1), -0.5, -1, -1.5, -2, -3, -4, -6}

// e8m0Golden is e8m0 codes and their scales: OCP MX v1.0 section 5.4.1,
// table 7 (bias 127, exponents -127 to 127, 0xFF NaN).
var e8m0Golden = []struct {
	code uint8
	want float64
}{
	{0, 0x1p-127}, {1, 0x1p-126}, {126, 0.5}, {127, 1}, {128, 2}, {254, 0x1p127}, {255, math.NaN()},
}

// e4m3Golden is e4m3 codes and their values: OFP8 v1.0 table 2 (min
// subnormal S.0000.001 = 2^-9, max subnormal S.0000.111, min normal
// S.0001.000 = 2^-6, max normal S.1111.110 = 448, NaN S.1111.111, no
// infinity: S.1111.000 is the normal 256) and PyTorch's
// fp8e4m3fn_to_fp32_value (c10/util/Float8_e4m3fn.h).
var e4m3Golden = []struct {
	code uint8
	want float64
}{
	{0x00, 0}, {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6}, {0x38, 1}, {0x39, 1.125},
	{0x77, 240}, {0x78, 256}, {0x7E, 448}, {0x7F, math.NaN()},
	{0x80, math.Copysign(0, -1)}, {0xB8, -1}, {0xFE, -448}, {0xFF, math.NaN()},
}

// roundE4M3Golden is values and the codes RoundE4M3 must give them:
// round to nearest, ties to the even code (PyTorch's
// fp8e4m3fn_from_fp32_value, c10/util/Float8_e4m3fn.h: the mant_odd
// rounding bias, and the FPU's own rounding for subnormals) and NaN past
// 464, where PyTorch's conversion reaches the S.1111.111 pattern (OFP8
// table 3, non-saturating mode: beyond the largest magnitude is NaN).
var roundE4M3Golden = []struct {
	x    float64
	want uint8
}{
	{0, 0x00},
	{math.Copysign(0, -1), 0x80},
	{0x1p-10, 0x00},           // half the least subnormal: ties to 0, even
	{0x1p-10 + 0x1p-30, 0x01}, // just past the tie
	{3 * 0x1p-10, 0x02},       // 1.5 × 2^-9: ties to 2 × 2^-9, even
	{7.5 * 0x1p-9, 0x08},      // between the largest subnormal 0x07 and 2^-6
	{1.0625, 0x38},            // between 1 (0x38) and 1.125 (0x39)
	{1.1875, 0x3A},            // between 1.125 (0x39) and 1.25 (0x3A)
	{-1.1875, 0xBA},
	{448, 0x7E},
	{456, 0x7E},       // below the midpoint of 448 and 480
	{464, 0x7E},       // the midpoint, 480 being no finite code: to 448, even
	{464.00001, 0x7F}, // past it: NaN
	{480, 0x7F},
	{-500, 0xFF},
	{math.Inf(1), 0x7F},
	{math.Inf(-1), 0xFF},
	{math.NaN(), 0x7F},
}

// awqWordGolden is an AWQ word whose eight columns hold their own index:
// AutoAWQ's WQLinear_GEMM.from_linear puts column order_map[i] (order_map
// = [0, 2, 4, 6, 1, 3, 5, 7]) at bits 4i, so the nibbles from the lowest
// are 0 2 4 6 1 3 5 7.
const awqWordGolden = 0x75316420

// gptqWordGolden is a GPTQ word whose eight elements hold their own index
// (AutoGPTQ's QuantLinear.pack: intweight[j] << (bits * (j - i))), and
// gptqHighWordGolden the same for 8 + index, whose top bit makes the
// int32 a checkpoint stores negative.
const gptqWordGolden = 0x76543210

var gptqHighWordGolden int32 = -0x01234568 // 0xFEDCBA98 as int32

// mxfp4BlockGolden is one MXFP4 block of 32 values with the bytes and
// scale it packs to. Its largest magnitude is 12, so the shared exponent
// is floor(log2 12) − 2 = 1 (OCP MX v1.0 section 6.3) and the scale code
// 128; the first 16 values are every e2m1 code times 2 in code order, the
// rest ties and roundings (to even, triton_kernels' downcast_to_mxfp_torch
// RTNE) and a negative value that rounds to −0. Bytes hold the even
// element in the low nibble (evens | odds << 4).
var mxfp4BlockGolden = struct {
	values []float64
	scale  uint8
	bytes  [16]uint8
	decode []float64
}{
	values: []float64{
		0, 1, 2, 3, 4, 6, 8, 12, math.Copysign(0, -1), -1, -2, -3, -4, -6, -8, -12,
		0.5, 1.5, 2.5, 3.5, 5, 7, 10, 11, -0.5, -1.5, -2.5, -3.5, -5, -7, -10, -0.2,
	},
	scale: 128,
	bytes: [16]uint8{
		0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,
		0x20, 0x42, 0x64, 0x76, 0xA8, 0xCA, 0xEC, 0x8E,
	},
	decode: []float64{
		0, 1, 2, 3, 4, 6, 8, 12, math.Copysign(0, -1), -1, -2, -3, -4, -6, -8, -12,
		0, 2, 2, 4, 4, 8, 8, 12, math.Copysign(0, -1), -2, -2, -4, -4, -8, -8, math.Copysign(0, -1),
	},
}

func TestE2M1Golden(t *testing.T) {
	for c, want := range e2m1Golden {
		assert.True(t, sameValue(want, E2M1(uint8(c))), "code %#x: %v, want %v", c, E2M1(uint8(c)), want)
		assert.Equal(t, uint8(c), roundE2M1(want), "value %v", want)
	}
}

func TestE8M0Golden(t *testing.T) {
	for _, tt := range e8m0Golden {
		assert.True(t, sameValue(tt.want, E8M0(tt.code)), "code %d: %v, want %v", tt.code, E8M0(tt.code), tt.want)
	}
}

func TestE4M3Golden(t *testing.T) {
	for _, tt := range e4m3Golden {
		assert.True(t, sameValue(tt.want, E4M3(tt.code)), "code %#x: %v, want %v", tt.code, E4M3(tt.code), tt.want)
	}
}

func TestRoundE4M3Golden(t *testing.T) {
	for _, tt := range roundE4M3Golden {
		assert.Equal(t, tt.want, RoundE4M3(tt.x), "RoundE4M3(%v)", tt.x)
	}
}

func TestWordGolden(t *testing.T) {
	highWord := uint32(gptqHighWordGolden)
	for j := range 8 {
		assert.Equal(t, uint8(j), AWQNibble(awqWordGolden, j), "awq column %d", j)
		assert.Equal(t, uint8(j), GPTQNibble(gptqWordGolden, j), "gptq element %d", j)
		assert.Equal(t, uint8(8+j), GPTQNibble(highWord, j), "gptq element %d", j)
	}
}

func TestMXFP4BlockGolden(t *testing.T) {
	g := mxfp4BlockGolden
	blocks, scales, err := PackMXFP4(g.values, 1, 32)
	require.NoError(t, err)
	assert.Equal(t, g.bytes[:], blocks)
	assert.Equal(t, []uint8{g.scale}, scales)
	got, err := DecodeMXFP4(g.bytes[:], []uint8{g.scale}, 1, 32)
	require.NoError(t, err)
	for i, want := range g.decode {
		assert.True(t, sameValue(want, got[i]), "element %d: %v, want %v", i, got[i], want)
	}
}

// Planted errors: decoders with one of the mistakes a kernel can make
// disagree with the golden vectors, so the vectors catch each mistake.
func TestGoldenCatchesPlantedErrors(t *testing.T) {
	g := mxfp4BlockGolden
	tests := []struct {
		name   string
		decode func() []float64 // what the mistaken decoder reads
		want   []float64
	}{
		{"mxfp4 nibbles swapped (even element high)", func() []float64 {
			out := make([]float64, 32)
			for i := range out {
				out[i] = E2M1(g.bytes[i/2]>>(4*uint(1-i%2))&15) * E8M0(g.scale)
			}
			return out
		}, g.decode},
		{"e8m0 bias 126", func() []float64 {
			out := make([]float64, 32)
			for i := range out {
				out[i] = E2M1(g.bytes[i/2]>>(4*uint(i%2))&15) * math.Ldexp(1, int(g.scale)-126)
			}
			return out
		}, g.decode},
		{"e8m0 bias 128", func() []float64 {
			out := make([]float64, len(e8m0Golden))
			for i, tt := range e8m0Golden {
				out[i] = math.Ldexp(1, int(tt.code)-128)
			}
			return out
		}, func() []float64 {
			out := make([]float64, len(e8m0Golden))
			for i, tt := range e8m0Golden {
				out[i] = tt.want
			}
			return out
		}()},
		{"awq read in sequential order", func() []float64 {
			out := make([]float64, 8)
			for j := range out {
				out[j] = float64(GPTQNibble(awqWordGolden, j))
			}
			return out
		}, []float64{0, 1, 2, 3, 4, 5, 6, 7}},
		{"gptq read in awq order", func() []float64 {
			out := make([]float64, 8)
			for j := range out {
				out[j] = float64(AWQNibble(gptqWordGolden, j))
			}
			return out
		}, []float64{0, 1, 2, 3, 4, 5, 6, 7}},
		{"e4m3 with an infinity at S.1111.000", func() []float64 {
			out := make([]float64, len(e4m3Golden))
			for i, tt := range e4m3Golden {
				if out[i] = E4M3(tt.code); tt.code&0x7F == 0x78 {
					out[i] = math.Inf(1)
				}
			}
			return out
		}, func() []float64 {
			out := make([]float64, len(e4m3Golden))
			for i, tt := range e4m3Golden {
				out[i] = tt.want
			}
			return out
		}()},
	}
	for _, tt := range tests {
		got := tt.decode()
		differs := false
		for i, want := range tt.want {
			differs = differs || !sameValue(want, got[i])
		}
		assert.True(t, differs, "%s: the golden vectors do not catch it", tt.name)
	}
}
