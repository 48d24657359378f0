package corpus

import (
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/lumsearch/lumsearch/quant"
)

// The packers that turn a float weight into a quantized format's codes,
// scales and zero points, for random weights that look like a real
// checkpoint's. They stand in for package quant's packers, which are
// being written beside this package: each has the signature of its
// counterpart there (PackMXFP4, PackFP8, PackAWQ, PackGPTQ), so that the
// four variables below are all that changes when those land. Whatever
// packs the bytes, the truth of a quantized model is the float64 value of
// its packed codes (the dequant op's reference decoding), so these need
// only be plausible, not optimal.
var (
	packMXFP4 = standInMXFP4
	packFP8   = standInFP8
	packAWQ   = standInAWQ
	packGPTQ  = standInGPTQ
)

// standInMXFP4 packs rows × cols values (row-major, cols a multiple of
// 32) into e2m1 codes, two a byte with the even column in the low nibble,
// and one e8m0 scale a block of 32 along a row: the OCP MX rule, the
// scale 2^(⌊log2 amax⌋ − 2) so that the block's largest magnitude lands
// in e2m1's top binade (4 to 6), elements rounded to the nearest code and
// saturated at ±6.
func standInMXFP4(w []float64, rows, cols int) (blocks, scales []uint8, err error) {
	if cols%32 != 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("mxfp4: %d values for %d × %d (columns a multiple of 32)", len(w), rows, cols)
	}
	blocks = make([]uint8, rows*cols/2)
	scales = make([]uint8, rows*cols/32)
	for b := range scales {
		vals := w[b*32 : (b+1)*32]
		amax := 0.0
		for _, v := range vals {
			amax = max(amax, math.Abs(v))
		}
		e := -127
		if amax > 0 {
			e = min(max(int(math.Floor(math.Log2(amax)))-2, -127), 127)
		}
		scales[b] = uint8(e + 127)
		for i, v := range vals {
			c := nearestE2M1(math.Ldexp(v, -e))
			blocks[b*16+i/2] |= c << (4 * uint(i%2))
		}
	}
	return blocks, scales, nil
}

// nearestE2M1 is the e2m1 code nearest x, ties to the even code,
// saturating at ±6.
func nearestE2M1(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign, x = 8, -x
	}
	best := uint8(0)
	for c := uint8(1); c < 8; c++ {
		d, db := math.Abs(quant.E2M1(c)-x), math.Abs(quant.E2M1(best)-x)
		if d < db || d == db && c&1 == 0 {
			best = c
		}
	}
	return sign | best
}

// standInFP8 packs rows × cols values into e4m3 codes with one f32 scale
// per groupN × groupK block (the last blocks may be partial): the scale
// maps the block's largest magnitude to e4m3's 448.
func standInFP8(w []float64, rows, cols, groupN, groupK int) (codes []uint8, scales []float32, err error) {
	if groupN < 1 || groupK < 1 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("fp8: %d values for %d × %d in %d × %d blocks", len(w), rows, cols, groupN, groupK)
	}
	sn, sk := (rows+groupN-1)/groupN, (cols+groupK-1)/groupK
	codes = make([]uint8, rows*cols)
	scales = make([]float32, sn*sk)
	for bi := range sn {
		for bj := range sk {
			amax := 0.0
			each := func(f func(i int)) {
				for r := bi * groupN; r < min(rows, (bi+1)*groupN); r++ {
					for c := bj * groupK; c < min(cols, (bj+1)*groupK); c++ {
						f(r*cols + c)
					}
				}
			}
			each(func(i int) { amax = max(amax, math.Abs(w[i])) })
			s := float32(1)
			if amax > 0 {
				s = float32(amax / quant.MaxE4M3)
			}
			scales[bi*sk+bj] = s
			each(func(i int) { codes[i] = quant.RoundE4M3(w[i] / float64(s)) })
		}
	}
	return codes, scales, nil
}

// int4Groups quantizes a row-major [K, N] matrix to unsigned 4-bit values
// with a zero point and a scale per group of rows and column: q =
// clamp(round(w / s) + z, 0, 15), w ≈ (q − z) s. Symmetric groups have
// the zero point 8 and s = amax / 7.5; asymmetric ones span min..max.
// Scales are rounded to f16, as the checkpoints store them, before the
// codes are computed from them.
func int4Groups(w []float64, K, N, group int, symmetric bool) (q, z []uint8, s []float64, err error) {
	if group < 1 || K%group != 0 || N%8 != 0 || len(w) != K*N {
		return nil, nil, nil, fmt.Errorf("int4: %d values for %d × %d in groups of %d (K a multiple of the group, N of 8)", len(w), K, N, group)
	}
	G := K / group
	q, z, s = make([]uint8, K*N), make([]uint8, G*N), make([]float64, G*N)
	for g := range G {
		for n := range N {
			lo, hi := 0.0, 0.0
			for k := g * group; k < (g+1)*group; k++ {
				lo, hi = min(lo, w[k*N+n]), max(hi, w[k*N+n])
			}
			zero, scale := 8.0, max(-lo, hi)/7.5
			if !symmetric {
				scale = (hi - lo) / 15
			}
			scale = float64(float16.Fromfloat32(float32(scale)).Float32())
			if scale == 0 {
				scale = 1
			}
			if !symmetric {
				zero = math.Min(15, math.Max(0, math.Round(-lo/scale)))
			}
			s[g*N+n], z[g*N+n] = scale, uint8(zero)
			for k := g * group; k < (g+1)*group; k++ {
				q[k*N+n] = uint8(math.Min(15, math.Max(0, math.Round(w[k*N+n]/scale)+zero)))
			}
		}
	}
	return q, z, s, nil
}

// standInAWQ packs a row-major [K, N] matrix as AutoAWQ's GEMM kernels
// store it: qweight [K, N/8] and qzeros [K/group, N/8], eight columns a
// 32-bit word in AWQ's interleaved order (quant.AWQOrder), and scales
// [K/group, N]; asymmetric groups, as zero_point true makes them.
func standInAWQ(w []float64, K, N, group int) (qweight, qzeros []int32, scales []float64, err error) {
	q, z, s, err := int4Groups(w, K, N, group, false)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("awq: %w", err)
	}
	pack := func(vals []uint8, rows int) []int32 {
		out := make([]int32, rows*N/8)
		for r := range rows {
			for n8 := range N / 8 {
				var word uint32
				for i, j := range quant.AWQOrder {
					word |= uint32(vals[r*N+n8*8+j]) << (4 * uint(i))
				}
				out[r*N/8+n8] = int32(word)
			}
		}
		return out
	}
	return pack(q, K), pack(z, K/group), s, nil
}

// standInGPTQ packs a row-major [K, N] matrix as GPTQ's original
// checkpoint format stores it: qweight [K/8, N], eight reduction rows a
// word in order, qzeros [K/group, N/8], eight columns a word in order and
// stored minus one, and scales [K/group, N]; symmetric groups (sym true,
// the zero point 8), since the format cannot store a zero point of 0.
func standInGPTQ(w []float64, K, N, group int) (qweight, qzeros []int32, scales []float64, err error) {
	if K%8 != 0 {
		return nil, nil, nil, fmt.Errorf("gptq: K=%d is no multiple of 8", K)
	}
	q, z, s, err := int4Groups(w, K, N, group, true)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gptq: %w", err)
	}
	qweight = make([]int32, K/8*N)
	for k8 := range K / 8 {
		for n := range N {
			var word uint32
			for j := range 8 {
				word |= uint32(q[(k8*8+j)*N+n]) << (4 * uint(j))
			}
			qweight[k8*N+n] = int32(word)
		}
	}
	G := K / group
	qzeros = make([]int32, G*N/8)
	for g := range G {
		for n8 := range N / 8 {
			var word uint32
			for j := range 8 {
				word |= uint32((z[g*N+n8*8+j]-1)&15) << (4 * uint(j))
			}
			qzeros[g*N/8+n8] = int32(word)
		}
	}
	return qweight, qzeros, s, nil
}
