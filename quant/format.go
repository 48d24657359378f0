package quant

import "fmt"

// Format is a quantized weight format.
type Format uint8

// The formats. The zero Format is none: a plain float weight.
const (
	None Format = iota
	// MXFP4 is the OCP microscaling format with e2m1 elements: blocks
	// of 32 values along the reduction, two elements a byte (the low
	// nibble the even index) and one e8m0 scale a block, as gpt-oss
	// stores its experts (`*_blocks`, `*_scales`).
	MXFP4
	// FP8 is e4m3 elements (one a byte) times f32 scales, one per
	// GroupN × GroupK block of the weight: per tensor, per output
	// channel or 128 × 128 blocks.
	FP8
	// AWQ is unsigned 4-bit elements with a zero point and an f16
	// scale per group of the reduction, eight a 32-bit word along the
	// output columns in AWQ's interleaved order.
	AWQ
	// GPTQ is unsigned 4-bit elements with a zero point and an f16
	// scale per group of the reduction, eight a 32-bit word along the
	// reduction in sequential order, zero points stored minus one (its
	// original checkpoint format).
	GPTQ
)

var formatNames = [...]string{None: "none", MXFP4: "mxfp4", FP8: "fp8", AWQ: "awq", GPTQ: "gptq"}

// String is the format's name: none, mxfp4, fp8, awq or gptq.
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// ParseFormat reads a format's name.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return None, fmt.Errorf("unknown weight format %q (want mxfp4, fp8, awq or gptq)", s)
}

// Valid reports whether f is one of the quantized formats (not None).
func (f Format) Valid() bool { return f > None && f <= GPTQ }

// BitsPerElement is the bits one element's code takes in memory, scales
// and zero points aside.
func (f Format) BitsPerElement() int {
	switch f {
	case MXFP4, AWQ, GPTQ:
		return 4
	case FP8:
		return 8
	}
	return 0
}
