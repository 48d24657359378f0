package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The matrix-vector kernel over a quantized weight (cost's gemv_quant.go
// says which weights and how the model prices them): the weight is never
// dequantized to memory; every thread streams its packed codes with
// 16-byte loads (8-byte ones for awq past two rows), several in flight,
// and decodes them in registers. Each
// value is its code's in f32, times its scale (less its zero point) in
// f32, rounded to the weight's dtype as the reference rounds it (one
// rounding after an f32 product: ir/dequant.go), then multiplied by A's
// f32 values as a plain weight's are. The codes are decoded a word at a
// time by the prelude's lum_e2m1_top, lum_e4m3_top and lum_q4_byte.
//
// mxfp4 and fp8 ([N, K], K contiguous) take gemvPlainStream's
// K-contiguous layout, a lane's load 32 e2m1 codes (one block, whose e8m0
// scale byte is loaded with it) or 16 e4m3 ones (one f32 scale, or the
// column's, loaded once); A's chunk is laid out in slices (gemvChunk) so
// that a lane's float4 reads of it are conflict-free. awq ([K, N/8]
// words) and gptq ([K/8, N]) take a row-major layout: lanes across the
// columns (32 a lane for awq, a load's four words of 8 columns, or 16 and
// two words past two rows, whose 32 columns' accumulators spill; 4 for
// gptq, a load's four words of 8 k's), the block's rows of threads taking
// slabs of consecutive k within one quantization group
// (cost.GEMVQuantSlab), whose scales and zero points a thread loads with
// the slab's first codes and decodes once. With f16 or bf16 scales a value
// decodes in one multiply-add (lum_q4_fma: the code as 128 + q, times the
// scale, plus the column's biased zero point -(128 + z) s), exact as the
// reference's product; a slab whose biased zero points are not finite (a
// scale that is not, or a bf16 one past 2^121) decodes as the reference
// does, its code less its zero point, times its scale. A merged
// projection's weights (cost.GEMVQuantPart) are read in place, each
// column's (or thread's) part picked once before the main loop
// (pickPart), and a gathered epilogue's column groups (a merged gate and
// up projection's SiLU product) deal the columns to the blocks.

// gemvQuantStream streams quantized weight q, its columns dealt to the
// blocks by colMap (a gathered epilogue's groups, or the plain layout).
func gemvQuantStream(body *ir.Graph, g matmulGeom, q cost.GEMVQuant, s cost.Schedule, colMap gemvColumns) (gemvStream, error) {
	chunk, ok := cost.GEMVQuantChunk(q, s)
	if !ok {
		return gemvStream{}, fmt.Errorf("matrix-vector matmul over %s codes: schedule %s: no layout takes it", q.Format, s)
	}
	if !colMap.m.Fits(s.BN, q.LaneColumns()) {
		return gemvStream{}, fmt.Errorf("matrix-vector matmul over %s codes: schedule %s: its blocks do not hold the column groups (%d x %d) its epilogue reads together in whole lanes of %d columns", q.Format, s, colMap.m.P, colMap.m.I, q.LaneColumns())
	}
	if q.KContiguous() {
		return gemvQuantAlongK(body, g, q, s, chunk, colMap)
	}
	return gemvQuantRows(body, g, q, s, chunk, colMap)
}

// roundAll prints the rounding of the f32 products f[0..n) to the
// weight's dtype, in place: bf16 two at a time (one cvt.rn.bf16x2.f32,
// each half widened back by a shift or a mask), f16 one at a time. The
// product of an e2m1 value (two significant bits) and an e8m0 scale (a
// power of two) is exact in f32, and so in bf16, whose exponents are
// f32's: rounding it to either is the identity, left out.
func roundAll(b *strings.Builder, q cost.GEMVQuant, indent, f string, n int) {
	switch {
	case q.DType == ir.F32, q.Format == quant.MXFP4 && q.DType == ir.BF16:
	case q.DType == ir.BF16:
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int j = 0; j < %d; j += 2) {\n", indent, indent, n)
		fmt.Fprintf(b, "%s  const unsigned r = lum_pack_bf16x2(%s[j], %s[j + 1]);\n", indent, f, f)
		fmt.Fprintf(b, "%s  %s[j] = __uint_as_float(r << 16);\n%s  %s[j + 1] = __uint_as_float(r & 0xffff0000u);\n%s}\n", indent, f, indent, f, indent)
	default:
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int j = 0; j < %d; j++) %s[j] = %s;\n", indent, indent, n, f, castExpr(ir.F32, q.DType, f+"[j]"))
	}
}

// gemvQuantAlongK streams mxfp4 or fp8 codes, a lane's loads running
// along K (cost.GEMVLayout: warp w owns columns col0.. and the part-th
// split of K).
func gemvQuantAlongK(body *ir.Graph, g matmulGeom, q cost.GEMVQuant, s cost.Schedule, chunk int64, colMap gemvColumns) (gemvStream, error) {
	cols, split, ok := cost.GEMVLayout(s)
	if !ok {
		return gemvStream{}, fmt.Errorf("matrix-vector matmul: schedule %s: warps and BN columns must divide one another", s)
	}
	M, K, U := g.M, q.K, s.Stages
	vec := q.Vec()
	pass := 32 * vec * split // K covered by one load of every lane of a column's warps
	slices := vec / 4
	stride := chunk / int64(slices) // a slice of As
	mx := q.Format == quant.MXFP4
	// Bytes of codes a column and per k; the scales of a column, and the
	// K one scale covers.
	rowBytes, perK, scaleK := K/2, 2, int64(32)
	sk := (K + q.Group - 1) / q.Group
	if !mx {
		rowBytes, perK, scaleK = K, 1, q.Group
	}
	perColumn := q.ScalePerColumn()
	st := gemvStream{chunk: chunk, partials: split, slices: slices}
	st.decl = func(b *strings.Builder) {
		fmt.Fprintf(b, "  const int part = warp %% %d, col0 = warp / %d * %d, kl = (part * 32 + lane) * %d;\n", split, split, cols, vec)
		fmt.Fprintf(b, "  const unsigned char* wp[%d];\n", cols)
		if mx {
			fmt.Fprintf(b, "  const unsigned char* sp[%d];\n", cols)
		} else {
			fmt.Fprintf(b, "  const float* sp[%d];\n", cols)
		}
		fmt.Fprintf(b, "  for (int c = 0; c < %d; c++) {\n", cols)
		pickPart(b, q, colMap, "col0 + c", 1, func(p cost.GEMVQuantPart) string {
			codes, scales := paramName(body, p.Codes), paramName(body, p.Scales)
			if mx {
				return fmt.Sprintf("wp[c] = %s + n * %dLL; sp[c] = %s + n * %dLL;", codes, rowBytes, scales, K/32)
			}
			return fmt.Sprintf("wp[c] = %s + n * %dLL; sp[c] = %s + n / %dLL * %dLL;", codes, rowBytes, scales, q.GroupN, sk)
		})
		b.WriteString("  }\n")
		fmt.Fprintf(b, "  uint4 w[%d][%d];\n", U, cols)
		switch {
		case mx:
			fmt.Fprintf(b, "  unsigned s[%d][%d];\n", U, cols)
		case perColumn:
			// One scale a column: loaded once, out of the loop.
			fmt.Fprintf(b, "  float sc0[%d];\n  for (int c = 0; c < %d; c++) sc0[c] = sp[c][0];\n", cols, cols)
		default:
			fmt.Fprintf(b, "  float s[%d][%d];\n", U, cols)
		}
		if !mx {
			// e4m3's NaN codes (S.1111.111), a word's at a time: a
			// column that has one sums to NaN, as the reference's.
			fmt.Fprintf(b, "  unsigned nanw[%d];\n  for (int c = 0; c < %d; c++) nanw[c] = 0u;\n", cols, cols)
		}
		b.WriteString("  int kk = kl;\n")
		fmt.Fprintf(b, "  float acc[%d][%d];\n", M, cols)
		fmt.Fprintf(b, "  for (int i = 0; i < %d; i++) for (int c = 0; c < %d; c++) acc[i][c] = 0.0f;\n", M, cols)
	}
	// loads prints a group of n loads a column from kk, each with its
	// scale, issued together.
	loads := func(b *strings.Builder, w string, n int, kk string) {
		fmt.Fprintf(b, "      #pragma unroll\n      for (int c = 0; c < %d; c++) {\n", cols)
		fmt.Fprintf(b, "        const long long kq = k0 + %s;\n", kk)
		fmt.Fprintf(b, "        const unsigned char* p = wp[c] + kq / %d;\n", perK)
		fmt.Fprintf(b, "        #pragma unroll\n        for (int u = 0; u < %d; u++) %s[u][c] = lum_ld16(p + u * %d);\n", n, w, pass/perK)
		sv := "s" + strings.TrimPrefix(w, "w")
		switch {
		case perColumn:
		case int64(pass)%scaleK == 0:
			fmt.Fprintf(b, "        #pragma unroll\n        for (int u = 0; u < %d; u++) %s[u][c] = sp[c][kq / %d + u * %d];\n", n, sv, scaleK, int64(pass)/scaleK)
		default:
			fmt.Fprintf(b, "        #pragma unroll\n        for (int u = 0; u < %d; u++) %s[u][c] = sp[c][(kq + u * %d) / %d];\n", n, sv, pass, scaleK)
		}
		b.WriteString("      }\n")
	}
	consume := func(b *strings.Builder, w string, n int, kk string) {
		sv := "s" + strings.TrimPrefix(w, "w")
		fmt.Fprintf(b, "      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n", n)
		fmt.Fprintf(b, "        const int kx = %s + u * %d;\n", kk, pass)
		fmt.Fprintf(b, "        float sc[%d];\n", cols)
		switch {
		case mx:
			fmt.Fprintf(b, "        for (int c = 0; c < %d; c++) sc[c] = lum_e8m0_to_f32(%s[u][c]);\n", cols, sv)
		case perColumn:
			fmt.Fprintf(b, "        for (int c = 0; c < %d; c++) sc[c] = sc0[c];\n", cols)
		default:
			fmt.Fprintf(b, "        for (int c = 0; c < %d; c++) sc[c] = %s[u][c];\n", cols, sv)
		}
		per := vec / 4 // values a word
		b.WriteString("        #pragma unroll\n        for (int h = 0; h < 4; h++) {\n")
		fmt.Fprintf(b, "          float f[%d][%d];\n", cols, per)
		fmt.Fprintf(b, "          #pragma unroll\n          for (int c = 0; c < %d; c++) {\n", cols)
		fmt.Fprintf(b, "            const uint4 v = %s[u][c];\n", w)
		b.WriteString("            const unsigned x = h == 0 ? v.x : h == 1 ? v.y : h == 2 ? v.z : v.w;\n")
		for j := range per {
			// Value j of the word: the low nibble (byte) first.
			var code string
			if mx {
				code = fmt.Sprintf("lum_e2m1_top(x << %d)", 28-4*j)
				if j == 7 {
					code = "lum_e2m1_top(x)"
				}
			} else {
				code = fmt.Sprintf("lum_e4m3_top(x << %d)", 24-8*j)
				if j == 3 {
					code = "lum_e4m3_top(x)"
				}
			}
			fmt.Fprintf(b, "            f[c][%d] = %s * sc[c];\n", j, code)
		}
		roundAll(b, q, "            ", "f[c]", per)
		if !mx {
			b.WriteString("            nanw[c] |= ((x & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;\n")
		}
		b.WriteString("          }\n")
		fmt.Fprintf(b, "          #pragma unroll\n          for (int i = 0; i < %d; i++) {\n", M)
		// Word h holds k's per × h.. of the load: As's slices 2h and
		// 2h + 1 (mxfp4) or h (fp8), at the load's position kx / vec × 4.
		terms := make([]string, per)
		for j := range per {
			terms[j] = fmt.Sprintf("a%d.%c * f[c][%d]", j/4, "xyzw"[j%4], j)
		}
		if mx {
			fmt.Fprintf(b, "            const float4 a0 = lum_ld4(&As[i][2 * h * %d + kx / 8]), a1 = lum_ld4(&As[i][(2 * h + 1) * %d + kx / 8]);\n", stride, stride)
		} else {
			fmt.Fprintf(b, "            const float4 a0 = lum_ld4(&As[i][h * %d + kx / 4]);\n", stride)
		}
		fmt.Fprintf(b, "            #pragma unroll\n            for (int c = 0; c < %d; c++) acc[i][c] += %s;\n", cols, strings.Join(terms, " + "))
		b.WriteString("          }\n        }\n      }\n")
	}
	full := fmt.Sprintf("kk + %d < kc", (U-1)*pass)
	step := U * pass
	st.first = func(b *strings.Builder, again bool) {
		if again {
			fmt.Fprintf(b, "      kk = kl;\n      if (%s) {\n", full)
			loads(b, "w", U, "kk")
			b.WriteString("      }\n")
			return
		}
		fmt.Fprintf(b, "    if (%s) {\n", full)
		loads(b, "w", U, "kk")
		b.WriteString("    }\n")
	}
	st.main = func(b *strings.Builder) {
		fmt.Fprintf(b, "    for (; %s; kk += %d) {\n", full, step)
		consume(b, "w", U, "kk")
		fmt.Fprintf(b, "      if (kk + %d < kc) {\n", step+(U-1)*pass)
		loads(b, "w", U, fmt.Sprintf("kk + %d", step))
		b.WriteString("      }\n    }\n")
		if U > 1 {
			// The chunk's rest, fewer passes than a group: one load a
			// column at a time.
			fmt.Fprintf(b, "    #pragma unroll\n    for (int r = 0; r < %d; r++) {\n", U-1)
			fmt.Fprintf(b, "      if (kk >= kc) break;\n      uint4 w1[1][%d];\n", cols)
			if mx {
				fmt.Fprintf(b, "      unsigned s1[1][%d];\n", cols)
			} else if !perColumn {
				fmt.Fprintf(b, "      float s1[1][%d];\n", cols)
			}
			loads(b, "w1", 1, "kk")
			consume(b, "w1", 1, "kk")
			fmt.Fprintf(b, "      kk += %d;\n    }\n", pass)
		}
	}
	st.reduce = func(b *strings.Builder) {
		if !mx {
			fmt.Fprintf(b, "  for (int c = 0; c < %d; c++) if (nanw[c]) for (int i = 0; i < %d; i++) acc[i][c] = NAN;\n", cols, M)
		}
		fmt.Fprintf(b, "  #pragma unroll\n  for (int i = 0; i < %d; i++)\n  #pragma unroll\n  for (int c = 0; c < %d; c++) {\n", M, cols)
		b.WriteString("    float v = acc[i][c];\n")
		b.WriteString("    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n")
		b.WriteString("    if (lane == 0) Part[part][i][col0 + c] = v;\n  }\n")
	}
	return st, nil
}

// gemvQuantRows streams awq or gptq codes: lanes across the columns, the
// block's rows of threads taking slabs of consecutive k (row sl of a
// chunk's slabs, then sl + rows, ...), a thread's scales and zero points
// loaded with a slab's first codes and decoded once a slab.
func gemvQuantRows(body *ir.Graph, g matmulGeom, q cost.GEMVQuant, s cost.Schedule, chunk int64, colMap gemvColumns) (gemvStream, error) {
	lanes, rows, slab, _, _ := cost.GEMVQuantSlab(q, s)
	M, N, U := g.M, q.N, s.Stages
	awq := q.Format == quant.AWQ
	lc := q.LaneColumns()
	kStep := U * q.LoadK() // K one group of loads covers
	// A load's words (awq past two rows: two, an 8-byte load) and their
	// names.
	words, wordType, ld := q.LoadBytes()/4, "uint4", "lum_ld16"
	if words == 2 {
		wordType, ld = "uint2", "lum_ld8"
	}
	pick := func(v string) string {
		if words == 2 {
			return fmt.Sprintf("h == 0 ? %s.x : %s.y", v, v)
		}
		return fmt.Sprintf("h == 0 ? %[1]s.x : h == 1 ? %[1]s.y : h == 2 ? %[1]s.z : %[1]s.w", v)
	}
	sdt := q.ScaleDType
	// The rows of a part's codes (awq's one k, gptq's eight), scales and
	// zero points: constants for one weight, a thread's part's for a
	// merged one (picked with its pointers).
	rowWords, scaleRow, zeroRow := "nw", "ns", "nz"
	if len(q.Parts) == 1 {
		rw := N / 8
		if !awq {
			rw = N
		}
		rowWords, scaleRow, zeroRow = fmt.Sprintf("%dLL", rw), fmt.Sprintf("%dLL", N), fmt.Sprintf("%dLL", N/8)
	}
	// The raw scales of a thread's columns: 16-byte loads of them.
	scaleLoads := max(1, lc*sdt.Size()/16)
	scaleType := "uint4"
	if scaleLoads*16 > lc*sdt.Size() {
		scaleType = "uint2" // gptq's four f16 or bf16 scales
	}
	st := gemvStream{chunk: chunk, partials: s.Threads / 32, slices: 1}
	st.decl = func(b *strings.Builder) {
		fmt.Fprintf(b, "  const int cg = threadIdx.x %% %d, kr = threadIdx.x / %d;\n", lanes, lanes)
		fmt.Fprintf(b, "  const int* wp;\n  const %s* sp;\n  const int* zp;\n", storageType(sdt))
		if len(q.Parts) > 1 {
			b.WriteString("  long long nw, ns, nz;\n")
		}
		if !awq {
			b.WriteString("  unsigned zs;\n")
		}
		b.WriteString("  {\n")
		pickPart(b, q, colMap, fmt.Sprintf("cg * %d", lc), int64(lc), func(p cost.GEMVQuantPart) string {
			codes, scales, zeros := paramName(body, p.Codes), paramName(body, p.Scales), paramName(body, p.Zeros)
			var c strings.Builder
			if awq {
				fmt.Fprintf(&c, "wp = %s + n / 8;", codes)
			} else {
				fmt.Fprintf(&c, "wp = %s + n; zs = (unsigned)(n %% 8) * 4u;", codes)
			}
			fmt.Fprintf(&c, " sp = %s + n; zp = %s + n / 8;", scales, zeros)
			if len(q.Parts) > 1 {
				rw := p.N / 8
				if !awq {
					rw = p.N
				}
				fmt.Fprintf(&c, " nw = %dLL; ns = %dLL; nz = %dLL;", rw, p.N, p.N/8)
			}
			return c.String()
		})
		b.WriteString("  }\n")
		fmt.Fprintf(b, "  %s w[%d][1];\n  %s sr[%d];\n", wordType, U, scaleType, scaleLoads)
		if awq {
			fmt.Fprintf(b, "  %s zr;\n", wordType)
		} else {
			b.WriteString("  unsigned zr;\n")
		}
		b.WriteString("  int sl = kr;\n")
		fmt.Fprintf(b, "  float acc[%d][%d];\n", M, lc)
		fmt.Fprintf(b, "  #pragma unroll\n  for (int i = 0; i < %d; i++)\n  #pragma unroll\n  for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;\n", M, lc)
	}
	// group prints a group of loads from the chunk's kk, a row of codes
	// (awq's one k, gptq's eight) apart.
	group := func(b *strings.Builder, kk string) {
		fmt.Fprintf(b, "        {\n          const int* p = wp + (k0 + %s) / %d * %s;\n", kk, q.LoadK(), rowWords)
		fmt.Fprintf(b, "          #pragma unroll\n          for (int u = 0; u < %d; u++) w[u][0] = %s(p + u * %s);\n        }\n", U, ld, rowWords)
	}
	// slabLoads prints the loads of slab sl's scales and zero points
	// and its first group of codes, issued together.
	slabLoads := func(b *strings.Builder, sl string) {
		fmt.Fprintf(b, "        const long long grp = (k0 + %s * %d) / %d;\n", sl, slab, q.Group)
		load := "lum_ld16"
		if scaleType == "uint2" {
			load = "lum_ld8"
		}
		for j := range scaleLoads {
			fmt.Fprintf(b, "        sr[%d] = %s(sp + grp * %s + %d);\n", j, load, scaleRow, j*16/sdt.Size())
		}
		if awq {
			fmt.Fprintf(b, "        zr = %s(zp + grp * %s);\n", ld, zeroRow)
		} else {
			fmt.Fprintf(b, "        zr = (unsigned)zp[grp * %s];\n", zeroRow)
		}
		group(b, fmt.Sprintf("%s * %d", sl, slab))
	}
	st.first = func(b *strings.Builder, again bool) {
		ind := "    "
		if again {
			ind = "      "
			b.WriteString(ind + "sl = kr;\n")
		}
		fmt.Fprintf(b, "%sif (sl < kc / %d) {\n", ind, slab)
		slabLoads(b, "sl")
		b.WriteString(ind + "}\n")
	}
	// scaleOf is column j's scale from the raw loads.
	scaleOf := func(j int) string {
		words := 16 / 4
		if scaleType == "uint2" {
			words = 2
		}
		per := 4 / sdt.Size() // scales a 32-bit word
		wi := j / per
		word := fmt.Sprintf("sr[%d].%c", wi/words, "xyzw"[wi%words])
		switch sdt {
		case ir.F16:
			if j%2 == 0 {
				return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s & 0xffffu))", word)
			}
			return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s >> 16))", word)
		case ir.BF16:
			if j%2 == 0 {
				return fmt.Sprintf("__uint_as_float(%s << 16)", word)
			}
			return fmt.Sprintf("__uint_as_float(%s & 0xffff0000u)", word)
		}
		return fmt.Sprintf("__uint_as_float(%s)", word)
	}
	// value is one value's decode from byte byteOf of d, for column
	// scale sc: fused, d's bytes are codes (one a byte), decoded with the
	// column's scale and biased zero point (zb) in one multiply-add;
	// else they are codes less their zero points plus 16, times the
	// scale.
	value := func(fused bool, d string, byteOf int, sc string) string {
		if fused {
			return fmt.Sprintf("lum_q4_fma(%s, %du, %s, zb%s)", d, byteOf, sc, strings.TrimPrefix(sc, "sc"))
		}
		return fmt.Sprintf("lum_q4_byte(%s, %du) * %s", d, byteOf, sc)
	}
	// halves prints word x's codes, the even nibbles as de's bytes and
	// the odd ones as dd's (less the zero points zc[z0] and zc[z1] plus
	// 16, unless fused).
	halves := func(b *strings.Builder, fused bool, z0, z1 string) {
		if fused {
			b.WriteString("            const unsigned de = x & 0x0f0f0f0fu, dd = (x >> 4) & 0x0f0f0f0fu;\n")
			return
		}
		fmt.Fprintf(b, "            const unsigned de = (x & 0x0f0f0f0fu) + zc[%s], dd = ((x >> 4) & 0x0f0f0f0fu) + zc[%s];\n", z0, z1)
	}
	consume := func(b *strings.Builder, fused bool) {
		if awq {
			// The group's k's of A, one vector read a row.
			fmt.Fprintf(b, "        float a[%d][%d];\n", M, U)
			fmt.Fprintf(b, "        #pragma unroll\n        for (int i = 0; i < %d; i++) {\n", M)
			if U == 4 {
				b.WriteString("          const float4 r = lum_ld4(&As[i][kk]);\n          a[i][0] = r.x; a[i][1] = r.y; a[i][2] = r.z; a[i][3] = r.w;\n        }\n")
			} else {
				b.WriteString("          const float2 r = *reinterpret_cast<const float2*>(&As[i][kk]);\n          a[i][0] = r.x; a[i][1] = r.y;\n        }\n")
			}
		}
		fmt.Fprintf(b, "        #pragma unroll\n        for (int u = 0; u < %d; u++) {\n", U)
		if !awq {
			b.WriteString("          const int kx = kk + u * 8;\n")
		}
		fmt.Fprintf(b, "          const %s v = w[u][0];\n", wordType)
		if awq {
			fmt.Fprintf(b, "          float av[%d];\n", M)
			fmt.Fprintf(b, "          #pragma unroll\n          for (int i = 0; i < %d; i++) av[i] = a[i][u];\n", M)
			fmt.Fprintf(b, "          #pragma unroll\n          for (int h = 0; h < %d; h++) {\n", words)
			fmt.Fprintf(b, "            const unsigned x = %s;\n", pick("v"))
			halves(b, fused, "2 * h", "2 * h + 1")
			b.WriteString("            float f[8];\n")
			// Nibble i of a word is column AWQOrder[i]: the even
			// nibbles are de's bytes, the odd ones dd's.
			for i, col := range quant.AWQOrder {
				d := "de"
				if i%2 == 1 {
					d = "dd"
				}
				fmt.Fprintf(b, "            f[%d] = %s;\n", col, value(fused, d, i/2, fmt.Sprintf("sc[8 * h + %d]", col)))
			}
			roundAll(b, q, "            ", "f", 8)
			fmt.Fprintf(b, "            #pragma unroll\n            for (int i = 0; i < %d; i++) {\n", M)
			b.WriteString("              #pragma unroll\n              for (int j = 0; j < 8; j++) acc[i][8 * h + j] += av[i] * f[j];\n")
			b.WriteString("            }\n          }\n        }\n")
			return
		}
		fmt.Fprintf(b, "          float4 a0[%d], a1[%d];\n", M, M)
		fmt.Fprintf(b, "          #pragma unroll\n          for (int i = 0; i < %d; i++) { a0[i] = lum_ld4(&As[i][kx]); a1[i] = lum_ld4(&As[i][kx + 4]); }\n", M)
		b.WriteString("          #pragma unroll\n          for (int c = 0; c < 4; c++) {\n")
		b.WriteString("            const unsigned x = c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;\n")
		halves(b, fused, "c", "c")
		b.WriteString("            float f[8];\n")
		// Nibble j of a word is k + j: the even ones de's bytes, the
		// odd ones dd's.
		for j := range 8 {
			d := "de"
			if j%2 == 1 {
				d = "dd"
			}
			fmt.Fprintf(b, "            f[%d] = %s;\n", j, value(fused, d, j/2, "sc[c]"))
		}
		roundAll(b, q, "            ", "f", 8)
		fmt.Fprintf(b, "            #pragma unroll\n            for (int i = 0; i < %d; i++) acc[i][c] += a0[i].x * f[0] + a0[i].y * f[1] + a0[i].z * f[2] + a0[i].w * f[3] + a1[i].x * f[4] + a1[i].y * f[5] + a1[i].z * f[6] + a1[i].w * f[7];\n", M)
		b.WriteString("          }\n        }\n")
	}
	// slabLoop prints the main loop over slab sl: a group of loads in
	// flight, consumed, the slab's next group issued. Not unrolled: the
	// slab's length is known, and its loop is the kernel's main loop, a
	// group of loads an iteration.
	slabLoop := func(b *strings.Builder, fused bool) {
		fmt.Fprintf(b, "      #pragma unroll 1\n      for (int kk = sl * %d; kk < ke; kk += %d) {\n", slab, kStep)
		consume(b, fused)
		fmt.Fprintf(b, "        if (kk + %d < ke) {\n", kStep)
		group(b, fmt.Sprintf("kk + %d", kStep))
		b.WriteString("        }\n      }\n")
	}
	// zeroWords prints the slab's zero points as words of 16 less them a
	// byte (gptq's, stored less one: 15 less), which a word's codes, one
	// a byte, are added to.
	zeroWords := func(b *strings.Builder) {
		if awq {
			fmt.Fprintf(b, "      unsigned zc[%d];\n", 2*words)
			fmt.Fprintf(b, "      #pragma unroll\n      for (int h = 0; h < %d; h++) {\n", words)
			fmt.Fprintf(b, "        const unsigned z = %s;\n", pick("zr"))
			b.WriteString("        zc[2 * h] = 0x10101010u - (z & 0x0f0f0f0fu);\n")
			b.WriteString("        zc[2 * h + 1] = 0x10101010u - ((z >> 4) & 0x0f0f0f0fu);\n      }\n")
			return
		}
		b.WriteString("      unsigned zc[4];\n")
		b.WriteString("      for (int c = 0; c < 4; c++) zc[c] = 0x10101010u - (((zr >> (zs + 4u * c)) & 15u) + 1u) * 0x01010101u;\n")
	}
	st.main = func(b *strings.Builder) {
		fmt.Fprintf(b, "    for (; sl < kc / %d; sl += %d) {\n", slab, rows)
		// The slab's scales, decoded once.
		fmt.Fprintf(b, "      float sc[%d];\n", lc)
		for j := range lc {
			fmt.Fprintf(b, "      sc[%d] = %s;\n", j, scaleOf(j))
		}
		fmt.Fprintf(b, "      const int ke = (sl + 1) * %d;\n", slab)
		if !q.FusedDecode() {
			zeroWords(b)
			slabLoop(b, false)
		} else {
			// The fused decode's biased zero points, -(128 + z) s
			// (gptq's z stored less one: 129), exact (an 8-bit integer
			// times an f16 or bf16 significand), so that a value is
			// (128 + q) s + zb with one rounding, of an exact result.
			// A scale that is not finite, or a bf16 one whose
			// product overflows, makes zb ±∞ or NaN (chk then NaN):
			// that slab decodes as the reference does instead.
			fmt.Fprintf(b, "      float zb[%d];\n      float chk = 0.0f;\n", lc)
			if awq {
				fmt.Fprintf(b, "      #pragma unroll\n      for (int h = 0; h < %d; h++) {\n", words)
				fmt.Fprintf(b, "        const unsigned z = %s;\n", pick("zr"))
				b.WriteString("        #pragma unroll\n        for (int j = 0; j < 8; j++) zb[8 * h + j] = lum_keep((float)(128u + lum_awq_nibble(z, j)) * -sc[8 * h + j]);\n      }\n")
			} else {
				b.WriteString("      #pragma unroll\n      for (int c = 0; c < 4; c++) zb[c] = lum_keep((float)(129u + ((zr >> (zs + 4u * c)) & 15u)) * -sc[c]);\n")
			}
			fmt.Fprintf(b, "      #pragma unroll\n      for (int j = 0; j < %d; j++) chk = __fmaf_rn(zb[j], 0.0f, chk);\n", lc)
			b.WriteString("      if (chk == 0.0f) {\n")
			slabLoop(b, true)
			b.WriteString("      } else {\n")
			zeroWords(b)
			slabLoop(b, false)
			b.WriteString("      }\n")
		}
		// The thread's next slab: its scales, zero points and first
		// codes.
		fmt.Fprintf(b, "      if (sl + %d < kc / %d) {\n", rows, slab)
		slabLoads(b, fmt.Sprintf("(sl + %d)", rows))
		b.WriteString("      }\n    }\n")
	}
	st.reduce = func(b *strings.Builder) {
		fmt.Fprintf(b, "  #pragma unroll\n  for (int i = 0; i < %d; i++)\n  #pragma unroll\n  for (int j = 0; j < %d; j++) {\n", M, lc)
		b.WriteString("    float v = acc[i][j];\n")
		if lanes < 32 {
			fmt.Fprintf(b, "    for (int o = 16; o >= %d; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n", lanes)
		}
		fmt.Fprintf(b, "    if (lane < %d) Part[warp][i][cg * %d + j] = v;\n  }\n", lanes, lc)
	}
	return st, nil
}

// pickPart prints the pointers of local column lc (a C expression, its
// column clamped to the last whole group of vec columns) as set, given
// its part's arguments and n, the column within the part: a merged
// projection's column picks its part here, once, outside the main loop.
func pickPart(b *strings.Builder, q cost.GEMVQuant, colMap gemvColumns, lc string, vec int64, set func(cost.GEMVQuantPart) string) {
	if len(q.Parts) == 1 {
		fmt.Fprintf(b, "    %s\n    %s\n", colMap.decl("n", lc, vec), set(q.Parts[0]))
		return
	}
	fmt.Fprintf(b, "    %s\n    ", colMap.decl("n_", lc, vec))
	off := int64(0)
	for i, p := range q.Parts {
		if i < len(q.Parts)-1 {
			fmt.Fprintf(b, "if (n_ < %dLL) ", off+p.N)
		}
		fmt.Fprintf(b, "{ const long long n = n_ - %dLL; %s }", off, set(p))
		if i < len(q.Parts)-1 {
			b.WriteString(" else ")
		}
		off += p.N
	}
	b.WriteString("\n")
}
