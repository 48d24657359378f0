package quant

import "math"

// Where each fact about the element codes comes from:
//
//   - e2m1 and e8m0: the OCP Microscaling Formats (MX) Specification v1.0
//     (https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf),
//     section 5.3.3 (table 5: FP4 E2M1, bias 1, max normal S 11 1 = 6.0,
//     min normal 1.0, one subnormal 0.5, no infinity or NaN) and section
//     5.4.1 (table 7: E8M0, bias 127, exponents -127 to 127, NaN
//     0b11111111, no sign, zero or infinity). The e2m1 magnitudes agree
//     with triton_kernels' reference decoder (triton-lang/triton,
//     python/triton_kernels/triton_kernels/numerics_details/mxfp.py,
//     cvt_e2m1_to_fp32: vals = [0.0, 0.5, 1, 1.5, 2, 3, 4, 6], then
//     torch.cat([outputs, -outputs]) for the sign bit).
//   - e4m3: the OCP 8-bit Floating Point Specification (OFP8) revision 1.0,
//     table 1 (bias 7) and table 2 (max normal S.1111.110 = 448, min normal
//     S.0001.000 = 2^-6, subnormals S.0000.001 = 2^-9 to S.0000.111, NaN
//     S.1111.111 only, infinities N/A), as PyTorch decodes it
//     (pytorch/pytorch, c10/util/Float8_e4m3fn.h and Float8_e4m3fn-inl.h:
//     "bias = 7"; isnan is (x & 0b01111111) == 0b01111111).
//   - RoundE4M3: OFP8 table 3, whose non-saturating conversion of a value
//     beyond the largest magnitude gives NaN for e4m3, and PyTorch's
//     fp8e4m3fn_from_fp32_value (same file), which rounds to nearest even
//     (the mant_odd rounding bias) and gives 0x7f for every magnitude from
//     480, "the first value not representable": so (464, 480) rounds up to
//     the NaN pattern and 464 itself ties to 448's even code.
//   - AWQ's order: AutoAWQ (casper-hansen/AutoAWQ), awq/modules/linear/gemm.py,
//     WQLinear_GEMM.from_linear: order_map = [0, 2, 4, 6, 1, 3, 5, 7] and
//     qweight[:, col] |= intweight[:, col*8 + order_map[i]] << (i * 4), the
//     same for qzeros; awq/utils/packing_utils.py reads it back with
//     AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7] and (iweight - izeros) *
//     scales: the zero points are stored as they are.
//   - GPTQ's order: AutoGPTQ (AutoGPTQ/AutoGPTQ),
//     auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, QuantLinear.pack:
//     qweight[row] |= intweight[j] << (bits * (j - i)) along the input
//     features, then zeros -= 1 and qzeros[:, col] |= zeros[:, j] << (bits
//     * (j - i)) along the output features; forward adds the one back
//     (zeros = zeros + 1; weight = scales * (weight - zeros)).

// E2M1 is the value of a 4-bit e2m1 code (OCP MX v1.0, section 5.3.3):
// sign in bit 3, a 2-bit exponent of bias 1 and one mantissa bit. Its
// magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4 and 6; it has no infinity or
// NaN. Bits above the low four are ignored.
func E2M1(code uint8) float64 {
	e, m := int(code>>1)&3, float64(code&1)
	var v float64
	if e == 0 {
		v = m * 0.5 // subnormal: 2^(1-bias) × 0.m
	} else {
		v = math.Ldexp(1+m/2, e-1)
	}
	if code&8 != 0 {
		v = -v
	}
	return v
}

// MaxE2M1 is e2m1's largest magnitude.
const MaxE2M1 = 6

// roundE2M1 is the e2m1 code nearest x, ties to the even code, saturating:
// a magnitude past 6 gives ±6, as the MX conversion clamps normal numbers
// (OCP MX v1.0 section 6.3) and as triton_kernels' downcast_to_mxfp_torch
// does (round_inc = guard & (sticky | lsb_keep), then min(e2m1, 0x7)).
// Signed zeros keep their sign. x must not be NaN.
func roundE2M1(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign, x = 8, -x
	}
	c := uint8(0)
	for ; c < 7; c++ { // the magnitudes rise with the code
		mid := (E2M1(c) + E2M1(c+1)) / 2
		if x < mid || x == mid && c&1 == 0 {
			break
		}
	}
	return sign | c
}

// E8M0 is the value of an e8m0 scale (OCP MX v1.0, section 5.4.1): 2^(s −
// 127), and NaN for 0xFF. It has no sign, zero or infinity.
func E8M0(s uint8) float64 {
	if s == 0xFF {
		return math.NaN()
	}
	return math.Ldexp(1, int(s)-127)
}

// E4M3 is the value of an e4m3 code (OCP 8-bit Floating Point v1.0, the
// E4M3 column): sign in bit 7, a 4-bit exponent of bias 7, three mantissa
// bits; S.1111.111 (0x7F, 0xFF) is NaN, there is no infinity, and the
// largest magnitude is 448 (S.1111.110).
func E4M3(code uint8) float64 {
	e, m := int(code>>3)&15, float64(code&7)
	var v float64
	switch {
	case e == 15 && code&7 == 7:
		return math.NaN()
	case e == 0:
		v = math.Ldexp(m/8, -6) // subnormal: 2^(1-bias) × 0.m
	default:
		v = math.Ldexp(1+m/8, e-7)
	}
	if code&0x80 != 0 {
		v = -v
	}
	return v
}

// MaxE4M3 is e4m3's largest finite magnitude.
const MaxE4M3 = 448

// RoundE4M3 is the e4m3 code nearest x, ties to the even code, the way
// a conversion without saturation rounds: a magnitude past the largest
// finite one by more than half a step (|x| > 464), or NaN, gives NaN (0x7F,
// with x's sign). Signed zeros keep their sign.
func RoundE4M3(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if math.IsNaN(x) || x > 464 { // 464 ties to 448, the even code
		return sign | 0x7F
	}
	// Codes are ordered by magnitude, so the nearest is found among the
	// two codes around x.
	lo, hi := uint8(0), uint8(0x7E)
	for lo < hi { // the least code whose value is at least x
		mid := (lo + hi) / 2
		if E4M3(mid) < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	c := lo
	if c > 0 && E4M3(c) > x {
		below, above := E4M3(c-1), E4M3(c)
		switch d1, d2 := x-below, above-x; {
		case d1 < d2, d1 == d2 && (c-1)&1 == 0:
			c--
		}
	}
	return sign | c
}

// AWQOrder is where AWQ packs the eight columns of a 32-bit word: the
// value of column AWQOrder[i] (of the word's eight) is at bits 4i..4i+3
// (AutoAWQ's pack order 0, 2, 4, 6, 1, 3, 5, 7).
var AWQOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// awqShift is where column j of an AWQ word sits: 4 × the position of j
// in AWQOrder.
var awqShift = func() (s [8]uint) {
	for i, j := range AWQOrder {
		s[j] = uint(4 * i)
	}
	return s
}()

// AWQNibble is column j's (0..7) 4-bit value in an AWQ-packed word.
func AWQNibble(word uint32, j int) uint8 { return uint8(word>>awqShift[j]) & 15 }

// GPTQNibble is element j's (0..7) 4-bit value in a GPTQ-packed word:
// sequential, element j at bits 4j..4j+3.
func GPTQNibble(word uint32, j int) uint8 { return uint8(word>>(4*uint(j))) & 15 }

// SaturateE4M3 is x rounded to the nearest e4m3 value, ties to the even
// code, saturating at ±448 (NaN stays NaN): how a quantizer converts a
// scaled activation (torch's clamp to ±448 before .to(float8_e4m3fn)).
func SaturateE4M3(x float64) float64 {
	if math.IsNaN(x) {
		return x
	}
	return E4M3(RoundE4M3(math.Max(-MaxE4M3, math.Min(MaxE4M3, x))))
}
