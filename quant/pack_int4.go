package quant

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// AWQ and GPTQ are both asymmetric 4-bit min-max quantizers over groups
// of `group` consecutive input features (rows of K) of one output column:
// a scale s and zero point z per group and column, and q = clamp(round(w/s)
// + z, 0, 15), rounding half to even as torch.round does, for a value
// (q − z) × s. They differ in where the range comes from, in the precision
// they compute in, and in how they pack.

// f16 rounds x to the nearest f16 value, through float32: for the result
// of one operation on f16 operands both roundings together are the one
// correct rounding (float32 has more than twice f16's precision, plus two
// bits), which is what torch computes on half tensors.
func f16(x float64) float64 { return float64(float16.Fromfloat32(float32(x)).Float32()) }

// f32 rounds x to the nearest float32 value.
func f32(x float64) float64 { return float64(float32(x)) }

// clamp4 clamps an integer-valued float to a 4-bit code.
func clamp4(x float64) int { return int(min(max(x, 0), 15)) }

// awqGroup quantizes one group of one column as AutoAWQ's
// AwqQuantizer.pseudo_quantize_tensor does with zero_point set
// (casper-hansen/AutoAWQ, awq/quantize/quantizer.py), on f16 weights (its
// _apply_quant calls .half() on the layer first), every step in f16:
//
//	scales = (max_val - min_val).clamp(min=1e-5) / max_int
//	zeros = (-torch.round(min_val / scales)).clamp_(min_int, max_int)
//	torch.clamp(torch.round(w / scales) + zeros, min_int, max_int)
//
// The range is the group's own: a group that does not straddle zero gets
// a zero point clamped to 0 or 15 and clips, as AutoAWQ's does.
// WQLinear_GEMM.from_linear then recovers q as round((w' + z·s) / s) from
// the dequantized w' = (q − z)·s, which is q again.
func awqGroup(w []float64, q []uint8) (s float64, z int) {
	mx, mn := w[0], w[0]
	for _, x := range w {
		mx, mn = max(mx, x), min(mn, x)
	}
	s = f16(max(f16(mx-mn), f16(1e-5)) / 15)
	z = clamp4(-math.RoundToEven(f16(mn / s)))
	for i, x := range w {
		q[i] = uint8(clamp4(math.RoundToEven(f16(x/s)) + float64(z)))
	}
	return s, z
}

// gptqGroup quantizes one group of one column as AutoGPTQ's Quantizer
// does with sym=False (AutoGPTQ/AutoGPTQ,
// auto_gptq/quantization/quantizer.py, find_params and quantize), on f32
// weights (GPTQ works on W.float()), every step in f32:
//
//	xmin = torch.minimum(x.min(1)[0], tmp)   # tmp = 0: the range holds 0
//	xmax = torch.maximum(x.max(1)[0], tmp)
//	xmin[tmp] = -1; xmax[tmp] = +1            # where both are 0
//	self.scale = (xmax - xmin) / self.maxq
//	self.zero = torch.round(-xmin / self.scale)
//	q = torch.clamp(torch.round(x / scale) + zero, 0, maxq)
//
// without GPTQ's error feedback to the columns not yet quantized (that is
// the quantizer GPTQ runs when the Hessian is diagonal). QuantLinear.pack
// stores the scale as f16 and recovers q from the dequantized weights.
//
// One departure: GPTQ's original checkpoint format stores z − 1, so a zero
// point of 0 (a group whose minimum is within half a step of 0) does not
// fit. AutoGPTQ's pack writes -1 there, as uint32 0xFFFFFFFF, whose shifted
// OR sets that column's nibble and every one above it in the word to 15:
// the sym=False zero-point underflow that AutoGPTQ PR #640 made the
// gptq_v2 format for (GPTQModel issue #2350 meets it again in AWQ's
// exllama repacking). Here such a zero point is raised to 1 and the
// group's codes computed with it, so that what is stored decodes as what
// was quantized: values up to one step (not half) off at the top of that
// group's range.
func gptqGroup(w []float64, q []uint8) (s32 float64, z int) {
	xmin, xmax := 0.0, 0.0
	for _, x := range w {
		xmin, xmax = min(xmin, x), max(xmax, x)
	}
	if xmin == 0 && xmax == 0 {
		xmin, xmax = -1, 1
	}
	s32 = f32(f32(xmax-xmin) / 15)
	z = min(max(int(math.RoundToEven(f32(-xmin/s32))), 1), 15)
	for i, x := range w {
		q[i] = uint8(clamp4(math.RoundToEven(f32(x/s32)) + float64(z)))
	}
	return s32, z
}

// int4Layout checks the sizes of an AWQ or GPTQ weight of K input and N
// output features: N a multiple of 8 (both pack eight zero points a word
// along N), for GPTQ K a multiple of 8 too, and a group dividing K.
func int4Layout(f Format, K, N, group int) error {
	if _, err := extent(f.String()+" weight", K, N); err != nil {
		return err
	}
	switch {
	case N%8 != 0:
		return fmt.Errorf("%s weight: N=%d output features is no multiple of 8", f, N)
	case f == GPTQ && K%8 != 0:
		return fmt.Errorf("gptq weight: K=%d input features is no multiple of 8", K)
	case group < 1 || K%group != 0:
		return fmt.Errorf("%s weight: group %d does not divide K=%d", f, group, K)
	}
	return nil
}

// PackAWQ quantizes w, row-major [K, N] (input features by output
// features, the transpose of a torch Linear's weight), as AutoAWQ's GEMM
// packing does: qweight [K, N/8] with eight columns a word in AWQOrder,
// qzeros [K/group, N/8] in the same order, zero points as they are, and
// scales [K/group, N], f16 values. Weights must be finite and within f16's
// range, since AutoAWQ quantizes f16 weights; a group whose scale
// overflows f16 is an error.
func PackAWQ(w []float64, K, N, group int) (qweight, qzeros []int32, scales []float64, err error) {
	return packInt4(AWQ, w, K, N, group)
}

// PackGPTQ quantizes w, row-major [K, N], as AutoGPTQ's asymmetric
// quantizer and QuantLinear.pack do (g_idx = k / group, no act-order):
// qweight [K/8, N] with eight input features a word, in order, qzeros
// [K/group, N/8] with eight columns a word, in order, each zero point
// stored minus one, and scales [K/group, N], f16 values. See gptqGroup for
// the one departure, zero points raised from 0 to 1. Weights must be
// finite and within f32's range; a group whose scale overflows f16 is an
// error.
func PackGPTQ(w []float64, K, N, group int) (qweight, qzeros []int32, scales []float64, err error) {
	return packInt4(GPTQ, w, K, N, group)
}

func packInt4(f Format, w []float64, K, N, group int) (qweight, qzeros []int32, scales []float64, err error) {
	if _, err := matrixSize(f.String()+" weight", len(w), K, N); err != nil {
		return nil, nil, nil, err
	}
	if err := int4Layout(f, K, N, group); err != nil {
		return nil, nil, nil, err
	}
	// The weights in the dtype the reference tool quantizes.
	round, dtype := f16, "f16"
	if f == GPTQ {
		round, dtype = f32, "f32"
	}
	wr := make([]float64, len(w))
	for i, x := range w {
		if wr[i] = round(x); math.IsNaN(x) || math.IsInf(wr[i], 0) {
			return nil, nil, nil, fmt.Errorf("%s weight: weight (%d, %d) = %g is no finite %s value", f, i/N, i%N, x, dtype)
		}
	}
	G := K / group
	qw, qz := make([]uint32, K*N/8), make([]uint32, G*N/8)
	scales = make([]float64, G*N)
	col, q := make([]float64, group), make([]uint8, group)
	for g := range G {
		for n := range N {
			for i := range col {
				col[i] = wr[(g*group+i)*N+n]
			}
			var s float64
			var z int
			if f == AWQ {
				s, z = awqGroup(col, q)
			} else {
				s, z = gptqGroup(col, q)
				z-- // stored minus one
			}
			if scales[g*N+n] = f16(s); math.IsInf(scales[g*N+n], 0) {
				return nil, nil, nil, fmt.Errorf("%s weight: group %d column %d has scale %g, past f16's range", f, g, n, s)
			}
			for i, c := range q {
				k := g*group + i
				if f == AWQ {
					qw[k*(N/8)+n/8] |= uint32(c) << awqShift[n%8]
				} else {
					qw[k/8*N+n] |= uint32(c) << (4 * uint(k%8))
				}
			}
			if f == AWQ {
				qz[g*(N/8)+n/8] |= uint32(z) << awqShift[n%8]
			} else {
				qz[g*(N/8)+n/8] |= uint32(z) << (4 * uint(n%8))
			}
		}
	}
	return words(qw), words(qz), scales, nil
}

// words is u as the int32 tensors checkpoints store: the same bits.
func words(u []uint32) []int32 {
	out := make([]int32, len(u))
	for i, x := range u {
		out[i] = int32(x)
	}
	return out
}

// DecodeAWQ gives the values of an AWQ weight as PackAWQ lays it out,
// [K, N] row-major: (q − z) × s with q and z read in AWQOrder, exactly.
func DecodeAWQ(qweight, qzeros []int32, scales []float64, K, N, group int) ([]float64, error) {
	return decodeInt4(AWQ, qweight, qzeros, scales, K, N, group)
}

// DecodeGPTQ gives the values of a GPTQ weight as PackGPTQ lays it out,
// [K, N] row-major: (q − (z + 1)) × s with q read along K and z along N,
// in order, exactly.
func DecodeGPTQ(qweight, qzeros []int32, scales []float64, K, N, group int) ([]float64, error) {
	return decodeInt4(GPTQ, qweight, qzeros, scales, K, N, group)
}

func decodeInt4(f Format, qweight, qzeros []int32, scales []float64, K, N, group int) ([]float64, error) {
	if err := int4Layout(f, K, N, group); err != nil {
		return nil, err
	}
	G := K / group
	if err := wantLen(f.String()+" qweight", len(qweight), K*N/8); err != nil {
		return nil, err
	}
	if err := wantLen(f.String()+" qzeros", len(qzeros), G*N/8); err != nil {
		return nil, err
	}
	if err := wantLen(f.String()+" scales", len(scales), G*N); err != nil {
		return nil, err
	}
	out := make([]float64, K*N)
	for k := range K {
		for n := range N {
			g := k / group
			zw := uint32(qzeros[g*(N/8)+n/8])
			var q, z int
			if f == AWQ {
				q = int(AWQNibble(uint32(qweight[k*(N/8)+n/8]), n%8))
				z = int(AWQNibble(zw, n%8))
			} else {
				q = int(GPTQNibble(uint32(qweight[k/8*N+n]), k%8))
				z = int(GPTQNibble(zw, n%8)) + 1
			}
			out[k*N+n] = float64(q-z) * scales[g*N+n]
		}
	}
	return out, nil
}
