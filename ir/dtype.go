package ir

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is an element type.
type DType uint8

// The element types. The zero DType is invalid, so that a forgotten dtype
// is caught by checking rather than read as f32.
const (
	InvalidDType DType = iota
	F32
	F16
	BF16
	I32
	I64
	Bool
	// U8 is an unsigned byte: the storage of packed quantized weights
	// (MXFP4's blocks and e8m0 scales, FP8's e4m3 codes), which only a
	// dequant reads. It is numbered last so that existing dtypes keep
	// their numbers (kernel digests hash them).
	U8
)

var dtypeNames = [...]string{InvalidDType: "invalid", F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", I64: "i64", Bool: "bool", U8: "u8"}

// String is the dtype's name in the text format: f32, f16, bf16, i32, i64,
// bool, u8.
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType reads a dtype name.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i > 0 && n == s {
			return DType(i), nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q (want f32, f16, bf16, i32, i64, bool or u8)", s)
}

// Valid reports whether d is one of the element types.
func (d DType) Valid() bool { return d > InvalidDType && d <= U8 }

// Size is the bytes one element takes in memory.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case I64:
		return 8
	case Bool, U8:
		return 1
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// IsInt reports whether d is an integer type.
func (d DType) IsInt() bool { return d == I32 || d == I64 || d == U8 }

// Eps is the unit roundoff of a float type (half the distance from 1 to the
// next value), and 0 for exact types.
func (d DType) Eps() float64 {
	switch d {
	case F32:
		return 0x1p-24
	case F16:
		return 0x1p-11
	case BF16:
		return 0x1p-8
	}
	return 0
}

// Round returns the value of dtype d nearest to x, the way storing x in a
// tensor of that dtype does: round to nearest even for floats (through
// float32, which is exact for f16 and bf16 because f32 carries more than
// twice their precision), truncation toward zero with two's-complement
// wrap-around for integers, and x != 0 for bool.
func (d DType) Round(x float64) float64 {
	switch d {
	case F32:
		return float64(float32(x))
	case F16:
		return float64(float16.Fromfloat32(float32(x)).Float32())
	case BF16:
		return float64(BF16FromFloat32(float32(x)).Float32())
	case I32, I64, U8:
		return float64(d.IntOf(x))
	case Bool:
		if x != 0 {
			return 1
		}
		return 0
	}
	return x
}

// IntOf converts x to a value of integer dtype d the way Round does:
// truncation toward zero, saturating at the int64 range (NaN gives 0),
// then two's-complement wrap-around to d; for bool, x != 0. Go's own
// conversion of an out-of-range float is implementation-defined (2^63
// becomes -2^63 on amd64), hence the explicit bounds.
func (d DType) IntOf(x float64) int64 {
	if d == Bool {
		return int64(d.Round(x))
	}
	var v int64
	switch {
	case math.IsNaN(x):
		v = 0
	case x >= 0x1p63:
		v = math.MaxInt64
	case x < -0x1p63:
		v = math.MinInt64
	default:
		v = int64(x) // truncates toward zero
	}
	return d.WrapInt(v)
}

// WrapInt wraps v to integer dtype d: two's complement for i32 and u8, v != 0
// for bool, v itself for i64 (and for float dtypes, which never store
// integers this way).
func (d DType) WrapInt(v int64) int64 {
	switch d {
	case I32:
		return int64(int32(v))
	case U8:
		return int64(uint8(v))
	case Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// MinInt and MaxInt are the least and greatest values of integer dtype d
// (0 and 1 for bool).
func (d DType) MinInt() int64 {
	switch d {
	case I32:
		return math.MinInt32
	case Bool, U8:
		return 0
	}
	return math.MinInt64
}

// MaxInt is the greatest value of integer dtype d; see MinInt.
func (d DType) MaxInt() int64 {
	switch d {
	case I32:
		return math.MaxInt32
	case U8:
		return math.MaxUint8
	case Bool:
		return 1
	}
	return math.MaxInt64
}

// BFloat16 is a bfloat16 value's bits: the top half of an IEEE float32.
type BFloat16 uint16

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even. NaN stays
// NaN (quiet).
func BF16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if f != f {
		return BFloat16(b>>16 | 0x40)
	}
	// Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to
	// even; an overflow carries correctly into the exponent, up to infinity.
	b += 0x7FFF + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 widens a bfloat16 exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }
