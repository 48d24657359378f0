package quant

import "math"

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
