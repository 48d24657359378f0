package quant

import (
	"fmt"
	"math"
)

// The packers quantize float64 weights the way each format's reference
// tool does, and the decoders give every packed element its value from the
// element decoders alone, independently of any kernel, so that packing and
// decoding check each other and the dequant op. Sizes are checked before
// anything is allocated or indexed: a bad size is an error that names it,
// never a panic.

// extent is rows × cols, checked: both positive and the product within
// int.
func extent(what string, rows, cols int) (int, error) {
	if rows < 1 || cols < 1 {
		return 0, fmt.Errorf("%s: %d×%d has no elements; want positive extents", what, rows, cols)
	}
	if rows > math.MaxInt/cols {
		return 0, fmt.Errorf("%s: %d×%d overflows int", what, rows, cols)
	}
	return rows * cols, nil
}

// matrixSize is extent's rows × cols, with length (the slice given for
// the matrix) equal to it.
func matrixSize(what string, length, rows, cols int) (int, error) {
	n, err := extent(what, rows, cols)
	if err == nil && length != n {
		err = fmt.Errorf("%s: %d values for %d×%d; want %d", what, length, rows, cols, n)
	}
	return n, err
}

// wantLen checks a packed operand's length.
func wantLen(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s: %d elements; want %d", what, got, want)
	}
	return nil
}

// finite checks that every weight is a number.
func finite(what string, w []float64, cols int) error {
	for i, x := range w {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%s: weight (%d, %d) is %v", what, i/cols, i%cols, x)
		}
	}
	return nil
}

// mxBlock is the elements an MXFP4 scale covers along a row.
const mxBlock = 32

// mxSharedExp is a block's shared exponent as OCP MX v1.0 section 6.3
// computes it, the exponent of the block's largest magnitude less e2m1's
// largest exponent (emax_elem = 2): shared_exp = floor(log2(amax)) −
// emax_elem, X = 2^shared_exp. This is the MX paper's Algorithm 1 (arXiv
// 2310.10537), microxcaling's _quantize_mx (microsoft/microxcaling,
// mx/mx_ops.py: floor(log2(amax)), shared_exp - emax, then shared_exp <
// -scale_emax clamped to -scale_emax) and triton_kernels' ROUND_DOWN mode
// ("follows the OCP standard": the f32 exponent of amax / 4). It is
// clamped below to e8m0's least exponent, -127 (an all-zero block gets
// it, as in both); past e8m0's largest, 127, there is no scale, which
// microxcaling marks NaN and PackMXFP4 refuses.
func mxSharedExp(amax float64) int {
	if amax == 0 {
		return -127
	}
	_, e := math.Frexp(amax) // amax = f × 2^e with f in [0.5, 1)
	return max(e-1-2, -127)
}

// PackMXFP4 quantizes w, row-major [rows, cols] with cols a multiple of
// 32, to MXFP4: blocks is [rows, cols/32, 16] (each row's blocks of 32
// elements along cols, two e2m1 codes a byte, the even element in the low
// nibble, as triton_kernels packs evens | odds << 4) and scales
// [rows, cols/32] e8m0 codes. Each block's scale is 2^shared_exp (see
// mxSharedExp) and each element the e2m1 code nearest w/X, ties to even,
// saturating at ±6. Non-finite weights, and a block whose largest
// magnitude reaches 2^130 (beyond e8m0's 2^127 × 6 range), are errors.
//
// This is the OCP scale: a block whose largest magnitude is past 6X (amax
// / X in (6, 8)) clips it to 6X. triton_kernels quantizes gpt-oss-style
// weights by default with ROUND_UP instead (2^ceil(log2(amax / 6)), which
// never clips); both decode the same way.
func PackMXFP4(w []float64, rows, cols int) (blocks, scales []uint8, err error) {
	if _, err := matrixSize("mxfp4 weight", len(w), rows, cols); err != nil {
		return nil, nil, err
	}
	if cols%mxBlock != 0 {
		return nil, nil, fmt.Errorf("mxfp4 weight: %d columns is no multiple of the block, %d", cols, mxBlock)
	}
	if err := finite("mxfp4 weight", w, cols); err != nil {
		return nil, nil, err
	}
	nb := len(w) / mxBlock
	blocks, scales = make([]uint8, nb*mxBlock/2), make([]uint8, nb)
	for b := range nb {
		v := w[b*mxBlock : (b+1)*mxBlock]
		var amax float64
		for _, x := range v {
			amax = max(amax, math.Abs(x))
		}
		e := mxSharedExp(amax)
		if e > 127 {
			return nil, nil, fmt.Errorf("mxfp4 weight: row %d block %d has magnitude %g, past e8m0's largest scale 2^127", b/(cols/mxBlock), b%(cols/mxBlock), amax)
		}
		scales[b] = uint8(e + 127)
		for i, x := range v {
			// Scaling by a power of two is exact (v/X is below 8), or
			// so small that its rounding is zero regardless.
			c := roundE2M1(math.Ldexp(x, -e))
			blocks[b*16+i/2] |= c << (4 * uint(i%2))
		}
	}
	return blocks, scales, nil
}

// DecodeMXFP4 gives the values of MXFP4 blocks and scales as PackMXFP4
// lays them out for a [rows, cols] weight: E2M1(code) × E8M0(scale), NaN
// where the scale is 0xFF.
func DecodeMXFP4(blocks, scales []uint8, rows, cols int) ([]float64, error) {
	n, err := extent("mxfp4 weight", rows, cols)
	if err != nil {
		return nil, err
	}
	if cols%mxBlock != 0 {
		return nil, fmt.Errorf("mxfp4 weight: %d columns is no multiple of the block, %d", cols, mxBlock)
	}
	if err := wantLen("mxfp4 blocks", len(blocks), n/2); err != nil {
		return nil, err
	}
	if err := wantLen("mxfp4 scales", len(scales), n/mxBlock); err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i := range out {
		c := blocks[i/2] >> (4 * uint(i%2)) & 15
		out[i] = E2M1(c) * E8M0(scales[i/mxBlock])
	}
	return out, nil
}

// fp8Grid is the scale blocks of an fp8 weight: ⌈rows/groupN⌉ ×
// ⌈cols/groupK⌉, checked.
func fp8Grid(rows, cols, groupN, groupK int) (sn, sk int, err error) {
	if groupN < 1 || groupK < 1 {
		return 0, 0, fmt.Errorf("fp8 weight: scale block %d×%d; want positive extents", groupN, groupK)
	}
	return (rows-1)/groupN + 1, (cols-1)/groupK + 1, nil
}

// PackFP8 quantizes w, row-major [rows, cols], to e4m3 codes [rows, cols]
// and f32 scales [⌈rows/groupN⌉, ⌈cols/groupK⌉], one per groupN × groupK
// block (the last blocks along each axis may be partial): per tensor is
// groupN = rows, groupK = cols; per output channel groupN = 1, groupK =
// cols; DeepSeek-V3's blocks 128 × 128. A block's scale is its largest
// magnitude over 448, rounded to f32 (1 for a block of zeros), and each
// code RoundE4M3(w / scale) after clamping the quotient to ±448, so that
// the conversion saturates (OFP8 table 3's saturating mode) instead of
// giving NaN where the f32 scale rounded down. Non-finite weights, and a
// block whose scale falls outside f32's range, are errors.
func PackFP8(w []float64, rows, cols, groupN, groupK int) (codes []uint8, scales []float32, err error) {
	if _, err := matrixSize("fp8 weight", len(w), rows, cols); err != nil {
		return nil, nil, err
	}
	sn, sk, err := fp8Grid(rows, cols, groupN, groupK)
	if err != nil {
		return nil, nil, err
	}
	if err := finite("fp8 weight", w, cols); err != nil {
		return nil, nil, err
	}
	codes, scales = make([]uint8, len(w)), make([]float32, sn*sk)
	for bi := range sn {
		for bj := range sk {
			r0, r1 := bi*groupN, min((bi+1)*groupN, rows)
			c0, c1 := bj*groupK, min((bj+1)*groupK, cols)
			var amax float64
			for r := r0; r < r1; r++ {
				for _, x := range w[r*cols+c0 : r*cols+c1] {
					amax = max(amax, math.Abs(x))
				}
			}
			s := float32(1)
			if amax > 0 {
				s = float32(amax / MaxE4M3)
				if s == 0 || math.IsInf(float64(s), 0) {
					return nil, nil, fmt.Errorf("fp8 weight: block (%d, %d) has magnitude %g, whose scale %g is outside f32's range", bi, bj, amax, amax/MaxE4M3)
				}
			}
			scales[bi*sk+bj] = s
			for r := r0; r < r1; r++ {
				for c := c0; c < c1; c++ {
					q := min(max(w[r*cols+c]/float64(s), -MaxE4M3), MaxE4M3)
					codes[r*cols+c] = RoundE4M3(q)
				}
			}
		}
	}
	return codes, scales, nil
}

// DecodeFP8 gives the values of e4m3 codes and f32 scales as PackFP8 lays
// them out: E4M3(code) × scale, exactly (the product of a 4-bit and a
// 24-bit significand fits float64's).
func DecodeFP8(codes []uint8, scales []float32, rows, cols, groupN, groupK int) ([]float64, error) {
	n, err := matrixSize("fp8 weight", len(codes), rows, cols)
	if err != nil {
		return nil, err
	}
	sn, sk, err := fp8Grid(rows, cols, groupN, groupK)
	if err != nil {
		return nil, err
	}
	if err := wantLen("fp8 scales", len(scales), sn*sk); err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i, c := range codes {
		r, k := i/cols, i%cols
		out[i] = E4M3(c) * float64(scales[r/groupN*sk+k/groupK])
	}
	return out, nil
}
