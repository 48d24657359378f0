package cuda

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The mixture-of-experts kernels: route (a warp a row of router logits)
// and the two halves of the experts, by slot or by expert (cost's
// experts.go says what each schedule does and how it is priced).

// beatsLambda orders (value, index) pairs as ir.TopK does: a NaN above
// every number, then larger values, a tie going to the lower index. It is
// a strict total order, so a warp's butterfly of it leaves every lane the
// same winner.
const beatsLambda = "  auto beats = [](float a, int ia, float b, int ib) {\n" +
	"    if (a != a) return b == b || ia < ib;\n" +
	"    if (b != b) return false;\n" +
	"    return a > b || (a == b && ia < ib);\n" +
	"  };\n"

// printRoute prints the route op: warp w of a block takes row blockIdx.x
// * rows + w, its lanes logits lane, lane + 32, ...; k rounds of a warp's
// argmax choose the top k, largest first; their weights are exponentials
// of their distance to the largest over the sum of the chosen ones' (or
// of every logit's, for softmax_all), in f32. Each lane writes its
// logits' weights, 0 for those not chosen.
func printRoute(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := cost.Route(body)
	if err != nil {
		return "", err
	}
	if s == (cost.Schedule{}) {
		s = cost.Schedule{Threads: 128, Rows: 4}
	}
	if s.Rows < 1 || s.Threads != 32*s.Rows {
		return "", fmt.Errorf("route: schedule %s: a warp a row (threads = 32 × rows)", s)
	}
	k.Schedule = s
	L := (p.E + 31) / 32
	k.Block = [3]int{s.Threads, 1, 1}
	k.Grid = [3]int{int(max(1, (p.R+int64(s.Rows)-1)/int64(s.Rows))), 1, 1}
	rows := fmt.Sprintf("%dLL", p.R)
	if k.count != nil && k.count.Axis == 0 && k.count.Max == p.R {
		rows = "lum_t"
		k.Rows = &RowGrid{Dim: 0, Num: 1, Den: int64(s.Rows)}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s", beatsLambda)
	w("  const int lane = threadIdx.x %% 32;\n")
	w("  const long long r = (long long)blockIdx.x * %d + threadIdx.x / 32;\n", s.Rows)
	w("  if (r >= %s) return;\n", rows)
	w("  const %s* row = in0 + r * %dLL;\n", storageType(p.In), p.E)
	w("  float v[%d];\n  bool taken[%d];\n", L, L)
	w("  for (int i = 0; i < %d; i++) {\n    const int e = lane + 32 * i;\n", L)
	w("    v[i] = e < %d ? %s : -INFINITY;\n    taken[i] = false;\n  }\n", p.E, load(p.In, "row[e]"))
	w("  int ci[%d];\n  float cv[%d];\n", p.K, p.K)
	w("  for (int j = 0; j < %d; j++) {\n", p.K)
	w("    float bv = 0.0f;\n    int bi = -1;\n")
	w("    for (int i = 0; i < %d; i++) {\n      const int e = lane + 32 * i;\n", L)
	w("      if (e < %d && !taken[i] && (bi < 0 || beats(v[i], e, bv, bi))) {\n        bv = v[i];\n        bi = e;\n      }\n    }\n", p.E)
	w("    for (int o = 16; o > 0; o >>= 1) {\n")
	w("      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);\n      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);\n")
	w("      if (oi >= 0 && (bi < 0 || beats(ov, oi, bv, bi))) {\n        bv = ov;\n        bi = oi;\n      }\n    }\n")
	w("    ci[j] = bi;\n    cv[j] = bv;\n")
	w("    for (int i = 0; i < %d; i++)\n      if (lane + 32 * i == bi) taken[i] = true;\n  }\n", L)
	w("  // The largest chosen logit is the largest of all.\n  const float m = cv[0];\n")
	if p.Gating == ir.GatingAll {
		w("  float z = 0.0f;\n")
		w("  for (int i = 0; i < %d; i++)\n    if (lane + 32 * i < %d) z += expf(v[i] - m);\n", L, p.E)
		w("  for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);\n")
	} else {
		w("  float z = 0.0f;\n  for (int j = 0; j < %d; j++) z += expf(cv[j] - m);\n", p.K)
	}
	w("  for (int i = 0; i < %d; i++) {\n    const int e = lane + 32 * i;\n    if (e >= %d) break;\n", L, p.E)
	w("    float y = 0.0f;\n")
	w("    for (int j = 0; j < %d; j++)\n      if (ci[j] == e) y = expf(cv[j] - m) / z;\n", p.K)
	w("    out0[r * %dLL + e] = y;\n  }\n", p.E)
	return b.String(), nil
}

// printExperts prints experts_up or experts_down (cost.Experts): a block
// owns BN of a slot's output columns, a thread the columns tid, tid + T,
// ...; for each of its rows (one by slot, up to BM by expert) it stages
// the row's vector in shared memory in f32, a chunk at a time, and
// accumulates the products with its expert's weight rows in f32,
// ExpertsUnroll steps of loads in flight. experts_up adds the bias to
// the gate and up columns (the first and second halves of the
// projection, or its even and odd columns for the clamped SwiGLU),
// applies the activation and rounds once to the result's dtype;
// experts_down adds the bias, multiplies by the slot's weight and writes
// f32. Slots no expert takes are written as zeros; rows past the rows
// present are not written.
func printExperts(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := cost.Experts(body)
	if err != nil {
		return "", err
	}
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: 128, Threads: 128}
	}
	if s.BM < 1 || s.BM > s.Threads || s.Threads%32 != 0 || s.Threads < 32 || s.Threads > 1024 || s.BN < s.Threads || s.BN%s.Threads != 0 || (!s.Grouped && s.BM != 1) {
		return "", fmt.Errorf("%s: schedule %s: bm rows (1 unless grouped), bn columns a block, a multiple of threads", p.Op, s)
	}
	chunk := cost.ExpertsChunk(p.Kd, s.BM)
	if int(chunk)*s.BM*4 > attnStaticShared {
		return "", fmt.Errorf("%s: schedule %s: %d bytes of shared memory", p.Op, s, int(chunk)*s.BM*4)
	}
	k.Schedule = s
	up := p.Op == ir.OpExpertsUp
	T, BM, CT := s.Threads, s.BM, s.BN/s.Threads
	tiles := (p.N + int64(s.BN) - 1) / int64(s.BN)
	groups := cost.ExpertsGroupBlocks(p.R, BM)
	k.Block = [3]int{T, 1, 1}
	rows := fmt.Sprintf("%dLL", p.R)
	present := k.count != nil && k.count.Axis == 0 && k.count.Max == p.R
	if present {
		rows = "lum_t"
	}
	if s.Grouped {
		k.Grid = [3]int{int(tiles), int(p.E*groups + groups), 1}
	} else {
		k.Grid = [3]int{int(tiles), int(p.R * p.K), 1}
		if present {
			k.Rows = &RowGrid{Dim: 1, Num: p.K, Den: 1}
		}
	}
	if k.Grid[1] > 65535 {
		return "", fmt.Errorf("%s: schedule %s: a grid of %d blocks along y, more than 65535", p.Op, s, k.Grid[1])
	}
	wt := storageType(p.DType)
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("  const int tid = threadIdx.x;\n  const long long c0 = (long long)blockIdx.x * %dLL;\n", s.BN)
	w("  const float* wts = in1;\n")
	w("  __shared__ float A[%d][%d];\n  __shared__ long long rowOf[%d];\n  __shared__ int slotOf[%d];\n  __shared__ int nrows, ex;\n", BM, chunk, BM, BM)
	zeros := func(indent, r, slot string) {
		w("%sfor (long long c = c0 + tid; c < c0 + %dLL && c < %dLL; c += %d) out0[(%s * %dLL + %s) * %dLL + c] = %s;\n",
			indent, s.BN, p.N, T, r, p.K, slot, p.N, store(p.ResultDType, "0.0f"))
	}
	if !s.Grouped {
		w("  const long long r = blockIdx.y / %d;\n  const int s = blockIdx.y %% %d;\n", p.K, p.K)
		w("  if (r >= %s) return;\n", rows)
		w("  if (tid == 0) {\n    // The row's s-th chosen expert, in expert order.\n")
		w("    int n = 0, e = -1;\n    for (int j = 0; j < %d; j++)\n", p.E)
		w("      if (wts[r * %dLL + j] != 0.0f) {\n        if (n == s) e = j;\n        n++;\n      }\n", p.E)
		w("    ex = e;\n    rowOf[0] = r;\n    slotOf[0] = s;\n    nrows = e >= 0 ? 1 : 0;\n  }\n  __syncthreads();\n")
		w("  if (nrows == 0) {\n")
		zeros("    ", "r", "s")
		w("    return;\n  }\n")
	} else {
		w("  __shared__ int pre[%d];\n", T)
		w("  if (blockIdx.y >= %dLL) {\n", p.E*groups)
		w("    // Zeros for the slots no expert takes, of rows z * %d on.\n", BM)
		w("    const long long z = blockIdx.y - %dLL;\n", p.E*groups)
		w("    if (tid < %d) {\n      const long long r = z * %dLL + tid;\n      int n = 0;\n", BM, BM)
		w("      if (r < %s)\n        for (int j = 0; j < %d; j++) n += wts[r * %dLL + j] != 0.0f;\n", rows, p.E, p.E)
		w("      pre[tid] = n;\n    }\n    __syncthreads();\n")
		w("    for (int i = 0; i < %d; i++) {\n      const long long r = z * %dLL + i;\n      if (r >= %s) break;\n", BM, BM, rows)
		w("      for (int sl = pre[i]; sl < %d; sl++) {\n", p.K)
		zeros("        ", "r", "sl")
		w("      }\n    }\n    return;\n  }\n")
		w("  const int e = blockIdx.y / %d;\n  const long long g = blockIdx.y %% %d;\n", groups, groups)
		w("  // The rows choosing expert e: each thread counts those of its share,\n  // a prefix of the counts ranks them, group g takes ranks g * %d on.\n", BM)
		w("  const long long nr = %s, per = (nr + %d - 1) / %d, lo = tid * per, hi = lo + per < nr ? lo + per : nr;\n", rows, T, T)
		w("  int cnt = 0;\n  for (long long r = lo; r < hi; r++) cnt += wts[r * %dLL + e] != 0.0f;\n", p.E)
		w("  pre[tid] = cnt;\n  __syncthreads();\n")
		w("  if (tid == 0) {\n    int run = 0;\n    for (int i = 0; i < %d; i++) {\n      const int c = pre[i];\n      pre[i] = run;\n      run += c;\n    }\n", T)
		w("    const long long left = run - g * %dLL;\n    nrows = left <= 0 ? 0 : left < %d ? (int)left : %d;\n    ex = e;\n  }\n  __syncthreads();\n", BM, BM, BM)
		w("  if (nrows == 0) return;\n")
		w("  {\n    long long rank = pre[tid];\n    for (long long r = lo; r < hi; r++)\n      if (wts[r * %dLL + e] != 0.0f) {\n", p.E)
		w("        if (rank >= g * %dLL && rank < (g + 1) * %dLL) rowOf[rank - g * %dLL] = r;\n        rank++;\n      }\n  }\n  __syncthreads();\n", BM, BM, BM)
		w("  if (tid < nrows) {\n    // The row's slot for e: its chosen experts below e.\n    const long long r = rowOf[tid];\n    int n = 0;\n")
		w("    for (int j = 0; j < e; j++) n += wts[r * %dLL + j] != 0.0f;\n    slotOf[tid] = n;\n  }\n  __syncthreads();\n", p.E)
	}
	reads := 1
	if up {
		reads = 2
	}
	w("  float acc[%d][%d][%d];\n", BM, CT, reads)
	w("  for (int i = 0; i < %d; i++)\n    for (int c = 0; c < %d; c++)\n      for (int q = 0; q < %d; q++) acc[i][c][q] = 0.0f;\n", BM, CT, reads)
	// Column c of the thread reads weight columns colA (and colB).
	colA, colB := "col", ""
	if up {
		colA, colB = "col", fmt.Sprintf("%dLL + col", p.N)
		if p.Gating == ir.GatingClampedSwiGLU {
			colA, colB = "2 * col", "2 * col + 1"
		}
	}
	vec := func(i string) string { // row i's vector element kk
		if up {
			return fmt.Sprintf("in0[rowOf[%s] * %dLL + kk]", i, p.Kd)
		}
		return fmt.Sprintf("in0[(rowOf[%s] * %dLL + slotOf[%s]) * %dLL + kk]", i, p.K, i, p.Kd)
	}
	w("  const %s* W = in2 + (long long)ex * %dLL;\n", wt, p.Kd*p.Read)
	w("  for (long long k0 = 0; k0 < %dLL; k0 += %dLL) {\n", p.Kd, chunk)
	w("    const int kc = %dLL - k0 < %dLL ? (int)(%dLL - k0) : %d;\n", p.Kd, chunk, p.Kd, chunk)
	w("    __syncthreads();\n")
	w("    for (int t = tid; t < %d * kc; t += %d) {\n      const int i = t / kc, j = t %% kc;\n      const long long kk = k0 + j;\n", BM, T)
	w("      A[i][j] = i < nrows ? %s : 0.0f;\n    }\n    __syncthreads();\n", load(p.DType, vec("i")))
	w("    #pragma unroll %d\n", cost.ExpertsUnroll)
	w("    for (int j = 0; j < kc; j++) {\n      const %s* wr = W + (k0 + j) * %dLL;\n", wt, p.Read)
	w("      for (int c = 0; c < %d; c++) {\n        const long long col = c0 + tid + c * %d;\n        if (col >= %dLL) break;\n", CT, T, p.N)
	w("        const float wa = %s;\n", load(p.DType, "wr["+colA+"]"))
	if up {
		w("        const float wb = %s;\n", load(p.DType, "wr["+colB+"]"))
	}
	w("        for (int i = 0; i < %d; i++) {\n          acc[i][c][0] += A[i][j] * wa;\n", BM)
	if up {
		w("          acc[i][c][1] += A[i][j] * wb;\n")
	}
	w("        }\n      }\n    }\n  }\n")
	w("  const %s* bias = in3 + (long long)ex * %dLL;\n", wt, p.Read)
	w("  for (int i = 0; i < %d; i++) {\n    if (i >= nrows) break;\n", BM)
	w("    const long long o = (rowOf[i] * %dLL + slotOf[i]) * %dLL;\n", p.K, p.N)
	if !up {
		w("    const float wgt = wts[rowOf[i] * %dLL + ex];\n", p.E)
	}
	w("    for (int c = 0; c < %d; c++) {\n      const long long col = c0 + tid + c * %d;\n      if (col >= %dLL) break;\n", CT, T, p.N)
	if up {
		w("      float g = acc[i][c][0] + %s, u = acc[i][c][1] + %s;\n", load(p.DType, "bias["+colA+"]"), load(p.DType, "bias["+colB+"]"))
		if p.Gating == ir.GatingClampedSwiGLU {
			lim := fmt.Sprintf("%sf", fmtFloat32(p.Limit))
			w("      // Comparisons keep a NaN (fminf would drop it).\n")
			w("      g = g > %s ? %s : g;\n      u = u > %s ? %s : u < -%s ? -%s : u;\n", lim, lim, lim, lim, lim, lim)
			w("      const float a = %sf * g;\n", fmtFloat32(ir.ClampedSwiGLUAlpha))
			w("      const float sg = a >= 0.0f ? 1.0f / (1.0f + expf(-a)) : expf(a) / (1.0f + expf(a));\n")
			w("      const float h = (u + 1.0f) * (g * sg);\n")
		} else {
			w("      const float sg = g >= 0.0f ? 1.0f / (1.0f + expf(-g)) : expf(g) / (1.0f + expf(g));\n")
			w("      const float h = g * sg * u;\n")
		}
		w("      out0[o + col] = %s;\n", store(p.ResultDType, "h"))
	} else {
		w("      out0[o + col] = wgt * (acc[i][c][0] + %s);\n", load(p.DType, "bias[col]"))
	}
	w("    }\n  }\n")
	return b.String(), nil
}

// fmtFloat32 prints v rounded to f32, exactly, as the digits of a float
// literal (an exponent always, so that the f suffix makes one).
func fmtFloat32(v float64) string {
	return strconv.FormatFloat(float64(float32(v)), 'e', -1, 32)
}
