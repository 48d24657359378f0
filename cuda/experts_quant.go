package cuda

import (
	"fmt"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// printExpertsQuant prints experts_up or experts_down over a quantized
// experts' weight (cost's experts_quant.go: MXFP4 or FP8 codes packed a
// column's reduction after another) in the quantized lane layout: a group
// of G lanes owns output column oc of the block's rows' slots, its L
// weight columns (gate and up, or down's one), lane gl of the group
// loading the columns' 16-byte pieces gl, gl + G, ... of each staged
// chunk of the reduction with their scales, Stages of them in flight.
// Each code is decoded to f32 and multiplied by its scale in f32, rounded
// to the dequant's dtype where that rounding is not exact
// (cost.ExpertsQuantRounds), and multiplied into the rows' staged values;
// the group's lanes add their f32 sums by shuffles in a fixed order. The
// work finding and the outputs are the plain layout's (expertsText).
func printExpertsQuant(k *Kernel, body *ir.Graph, p cost.ExpertsParts, s cost.Schedule) (string, error) {
	q := p.Quant
	E := q.Elements()
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: 32, BK: 4 * E, Threads: 128, Stages: 2} // fits every body
	}
	if !cost.ExpertsFits(p, s) {
		return "", fmt.Errorf("%s over %s weights: schedule %s: bk a group of 4 to 32 lanes' loads of %d codes, bn its columns (threads/32 × 32/group), 1 to 8 warps, 1 to 8 stages (a group's stages within a staged chunk's loads), bm 1 (up to 8 grouped) within %d bytes of shared memory",
			p.Op, q.Format, s, E, attnStaticShared)
	}
	l, _ := p.QuantLayout(s)
	T, BM, U, G, C, L := s.Threads, s.BM, s.Stages, l.G, l.C, l.L
	chunk := cost.ExpertsChunk(p.Kd, BM)
	stride := cost.ExpertsQuantStride(l)
	e := newExpertsText(k, body, p, s)
	w := e.w
	codes, scales := paramName(body, q.Codes), paramName(body, q.Scales)
	e.head()
	rowFloats := chunk / int64(E) * int64(stride)
	w("  __shared__ __align__(16) float A[%d][%d];\n  __shared__ float Sums[%d][%d][%d];\n", BM, rowFloats, BM, s.BN, L)
	e.findWork()
	w("  // Lanes cg * %d .. cg * %d + %d of the warp own output column oc, lane gl\n  // loading every %d-th piece of its weight columns' reduction.\n", G, G, G-1, G)
	w("  const int cg = lane / %d, gl = lane %% %d;\n", G, G)
	w("  const long long oc = o0 + warp * %d + cg;\n  const bool live = oc < %dLL;\n", C, p.N)
	cols := []string{"oc"}
	switch {
	case p.Op == ir.OpExpertsDown:
	case p.Gating == ir.GatingSwiGLU:
		cols = []string{"oc", fmt.Sprintf("%dLL + oc", p.N)}
	default:
		cols = []string{"2 * oc", "2 * oc + 1"}
	}
	w("  // The weight columns' codes and scales (a lane past the last column\n  // loads nothing).\n")
	for j, c := range cols {
		w("  const long long col%d = live ? %s : 0;\n", j, c)
		if q.Format == quant.MXFP4 {
			kb := p.Kd / 32
			w("  const unsigned char* Q%d = %s + ((long long)ex * %dLL + col%d) * %dLL;\n", j, codes, p.Read, j, kb*16)
			w("  const unsigned char* S%d = %s + ((long long)ex * %dLL + col%d) * %dLL;\n", j, scales, p.Read, j, kb)
		} else {
			sn, sk := (p.Read+q.GroupN-1)/q.GroupN, (p.Kd+q.Group-1)/q.Group
			w("  const unsigned char* Q%d = %s + ((long long)ex * %dLL + col%d) * %dLL;\n", j, codes, p.Read, j, p.Kd)
			w("  const float* S%d = %s + ((long long)ex * %dLL + col%d / %dLL) * %dLL;\n", j, scales, sn, j, q.GroupN, sk)
		}
	}
	w("  float acc[%d][%d];\n", BM, L)
	w("  for (int i = 0; i < %d; i++)\n    for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;\n", BM, L)
	w("  #pragma unroll 1\n  for (long long k0 = 0; k0 < %dLL; k0 += %dLL) {\n", p.Kd, chunk)
	w("    const int kc = %dLL - k0 < %dLL ? (int)(%dLL - k0) : %d;\n", p.Kd, chunk, p.Kd, chunk)
	w("    __syncthreads();\n")
	w("    // Each load's %d values a span of %d floats: a group's lanes, a span\n    // apart, read their float4s from different banks.\n", E, stride)
	w("    for (int i = 0; i < %d; i++)\n      for (int j = tid; j < kc; j += %d) {\n        const long long kk = k0 + j;\n", BM, T)
	w("        A[i][j / %d * %d + j %% %d] = %s;\n      }\n    __syncthreads();\n", E, stride, E, e.staged("i"))
	w("    const int nb = kc / %d;\n", E)
	w("    for (int b0 = gl; b0 < nb; b0 += %d) {\n", G*U)
	scaleType, noScale := "unsigned", "0u"
	if q.Format == quant.FP8 {
		scaleType, noScale = "float", "0.0f"
	}
	w("      uint4 q[%d][%d];\n      %s sc[%d][%d];\n", U, L, scaleType, U, L)
	w("      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n        const int bb = b0 + u * %d;\n        const bool ok = live && bb < nb;\n", U, G)
	for j := range L {
		if q.Format == quant.MXFP4 {
			w("        q[u][%d] = ok ? lum_ld16(Q%d + (k0 / 32 + bb) * 16LL) : make_uint4(0u, 0u, 0u, 0u);\n", j, j)
			w("        sc[u][%d] = ok ? (unsigned)S%d[k0 / 32 + bb] : %s;\n", j, j, noScale)
		} else {
			w("        q[u][%d] = ok ? lum_ld16(Q%d + k0 + bb * 16LL) : make_uint4(0u, 0u, 0u, 0u);\n", j, j)
			w("        sc[u][%d] = ok ? S%d[(k0 + bb * 16LL) / %dLL] : %s;\n", j, j, q.Group, noScale)
		}
	}
	w("      }\n")
	w("      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n        const int bb = b0 + u * %d;\n        if (bb >= nb) break;\n", U, G)
	w("        float s[%d];\n", L)
	for j := range L {
		if q.Format == quant.MXFP4 {
			w("        s[%d] = lum_e8m0_to_f32(sc[u][%d]);\n", j, j)
		} else {
			w("        s[%d] = sc[u][%d];\n", j, j)
		}
	}
	// Where the dequant's rounding is exact, an e2m1 code times its
	// power-of-two scale is the code's product times the scale, in every
	// rounding of the sums too: the load's codes are summed into part
	// unscaled, and part times the scale into acc.
	exact := !cost.ExpertsQuantRounds(q)
	sum, scaled := "acc", " * s[j]"
	if exact {
		sum, scaled = "part", ""
		w("        float part[%d][%d];\n", BM, L)
		w("        for (int i = 0; i < %d; i++)\n          for (int j = 0; j < %d; j++) part[i][j] = 0.0f;\n", BM, L)
	}
	w("        // The rows' values of this load, %d floats a row apart.\n", rowFloats)
	w("        const float* Ab = &A[0][bb * %d];\n", stride)
	w("        #pragma unroll\n        for (int h = 0; h < %d; h++) {\n", E/4)
	word, code := "h / 2", "lum_e2m1_in(w[j], 4 * (h % 2) + c)" // a word holds 8 e2m1 codes
	if q.Format == quant.FP8 {
		word, code = "h", "lum_e4m3_in(w[j], c)" // and 4 e4m3 ones
	}
	code += scaled
	if !exact {
		code = castExpr(ir.F32, q.DType, code)
	}
	w("          unsigned w[%d];\n          float v[%d][4];\n", L, L)
	w("          #pragma unroll\n          for (int j = 0; j < %d; j++) {\n", L)
	w("            w[j] = lum_u4_word(q[u][j], %s);\n", word)
	w("            #pragma unroll\n            for (int c = 0; c < 4; c++) v[j][c] = %s;\n          }\n", code)
	w("          #pragma unroll\n          for (int i = 0; i < %d; i++) {\n", BM)
	w("            const float4 a = lum_ld4(Ab + i * %d + 4 * h);\n", rowFloats)
	w("            #pragma unroll\n            for (int j = 0; j < %d; j++) {\n", L)
	w("              %s[i][j] += a.x * v[j][0];\n              %s[i][j] += a.y * v[j][1];\n", sum, sum)
	w("              %s[i][j] += a.z * v[j][2];\n              %s[i][j] += a.w * v[j][3];\n            }\n", sum, sum)
	w("          }\n        }\n")
	if exact {
		w("        #pragma unroll\n        for (int i = 0; i < %d; i++)\n", BM)
		w("          #pragma unroll\n          for (int j = 0; j < %d; j++) acc[i][j] += part[i][j] * s[j];\n", L)
	}
	w("      }\n    }\n  }\n")
	w("  // The group's lanes add their sums: a butterfly, in a fixed order.\n")
	w("  for (int i = 0; i < %d; i++)\n    for (int j = 0; j < %d; j++)\n", BM, L)
	w("      for (int o = %d; o > 0; o >>= 1) acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], o);\n", G/2)
	w("  if (gl == 0)\n    for (int i = 0; i < %d; i++)\n      for (int j = 0; j < %d; j++) Sums[i][warp * %d + cg][j] = acc[i][j];\n", BM, L, C)
	w("  __syncthreads();\n")
	e.epilogue(s.BN, "", [2]string{"Sums[i][ol][0]", "Sums[i][ol][1]"})
	return e.b.String(), nil
}
