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
		rows = fmt.Sprintf("(lum_t < %dLL ? lum_t : %dLL)", p.R, p.R)
		k.Rows = &RowGrid{Dim: 0, Num: 1, Den: int64(s.Rows)}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s", beatsLambda)
	w("  const int lane = threadIdx.x %% 32;\n")
	w("  const long long r = (long long)blockIdx.x * %d + threadIdx.x / 32;\n", s.Rows)
	w("  if (r >= %s) return;\n", rows)
	w("  const %s* row = %s + r * %dLL;\n", storageType(p.In), paramName(body, cost.ArgumentOf(body, body.Node(p.Node).Inputs[0])), p.E)
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

// printExperts prints experts_up or experts_down (cost.Experts) in the
// lane layout cost.ExpertsParts.Layout gives: a block owns 32 P output
// columns of its rows' slots, lane l the columns l P .. l P + P - 1, read
// as L vectors of V weight elements (16 bytes) a reduction step; the
// block's warps take every W-th step of the reduction, each lane keeping
// Stages steps of loads in flight, and add their partial sums in shared
// memory at the end. The rows' vectors (the row of x, or the slot's
// activations) are staged in shared memory in f32, a chunk at a time.
// Everything accumulates in f32; experts_up adds the bias to the gate and
// up columns (the first and second halves of the projection, or its even
// and odd columns for the clamped SwiGLU), applies the activation and
// rounds once to the result's dtype; experts_down adds the bias,
// multiplies by the slot's weight and writes f32. Slots no expert takes
// are written as zeros; rows past the rows present are not written. An
// experts' weight quantized as its checkpoint packs it (each column's
// reduction contiguous) is read in the quantized layout instead
// (printExpertsQuant), which finds its work and writes its outputs with
// the same code (expertsText).
func printExperts(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := cost.Experts(body)
	if err != nil {
		return "", err
	}
	if p.Quant.Quantized() {
		return printExpertsQuant(k, body, p, s)
	}
	l := p.Layout()
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: 32 * l.P, Threads: 128, Stages: 4}
	}
	if !cost.ExpertsFits(p, s) {
		return "", fmt.Errorf("%s: schedule %s: bn %d (32 × %d columns a lane), 1 to 8 warps, 1 to 8 stages, bm 1 (up to 8 grouped) within %d accumulators and %d bytes of shared memory",
			p.Op, s, 32*l.P, l.P, 64, attnStaticShared)
	}
	up := p.Op == ir.OpExpertsUp
	T, W, BM, U := s.Threads, s.Threads/32, s.BM, s.Stages
	V, L, P := l.V, l.L, l.P
	chunk := cost.ExpertsChunk(p.Kd, BM)
	e := newExpertsText(k, body, p, s)
	w, arg := e.w, e.arg
	wt := storageType(p.DType)
	e.head()
	w("  __shared__ float A[%d][%d];\n  __shared__ float Part[%d][%d][32][%d][%d];\n", BM, chunk, W, BM, L, V)
	e.findWork()
	// The lane's first weight column of each of its L vectors.
	var cols [2]string
	switch {
	case !up:
		cols[0] = fmt.Sprintf("o0 + lane * %d", P)
	case p.Gating == ir.GatingSwiGLU:
		cols[0], cols[1] = fmt.Sprintf("o0 + lane * %d", P), fmt.Sprintf("%dLL + o0 + lane * %d", p.N, P)
	case V == 1:
		cols[0], cols[1] = "2 * (o0 + lane)", "2 * (o0 + lane) + 1"
	default:
		cols[0] = fmt.Sprintf("2 * o0 + lane * %d", V)
	}
	w("  // The lane's columns; a lane past the last column loads nothing.\n")
	w("  const bool live = o0 + lane * %d < %dLL;\n", P, p.N)
	for j := range L {
		w("  const long long col%d = %s;\n", j, cols[j])
	}
	w("  float acc[%d][%d][%d];\n", BM, L, V)
	w("  for (int i = 0; i < %d; i++)\n    for (int j = 0; j < %d; j++)\n      for (int v = 0; v < %d; v++) acc[i][j][v] = 0.0f;\n", BM, L, V)
	w("  const %s* Wt = %s + (long long)ex * %dLL;\n", wt, arg(2), p.Kd*p.Read)
	w("  for (long long k0 = 0; k0 < %dLL; k0 += %dLL) {\n", p.Kd, chunk)
	w("    const int kc = %dLL - k0 < %dLL ? (int)(%dLL - k0) : %d;\n", p.Kd, chunk, p.Kd, chunk)
	w("    __syncthreads();\n")
	w("    for (int t = tid; t < %d * kc; t += %d) {\n      const int i = t / kc, j = t %% kc;\n      const long long kk = k0 + j;\n", BM, T)
	w("      A[i][j] = %s;\n    }\n    __syncthreads();\n", e.staged("i"))
	w("    for (int kb = warp; kb < kc; kb += %d) {\n", W*U)
	if V > 1 {
		w("      uint4 q[%d][%d];\n", U, L)
	} else {
		w("      float q[%d][%d];\n", U, L)
	}
	w("      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n        const int kr = kb + u * %d;\n", U, W)
	w("        const %s* wr = Wt + (k0 + kr) * %dLL;\n", wt, p.Read)
	w("        #pragma unroll\n        for (int j = 0; j < %d; j++) {\n", L)
	colOf := "col0"
	if L == 2 {
		colOf = "(j == 0 ? col0 : col1)"
	}
	if V > 1 {
		w("          q[u][j] = live && kr < kc ? lum_ld16(wr + %s) : make_uint4(0u, 0u, 0u, 0u);\n", colOf)
	} else {
		w("          q[u][j] = live && kr < kc ? %s : 0.0f;\n", load(p.DType, "wr["+colOf+"]"))
	}
	w("        }\n      }\n")
	w("      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n        const int kr = kb + u * %d;\n        if (kr >= kc) break;\n", U, W)
	w("        #pragma unroll\n        for (int j = 0; j < %d; j++) {\n", L)
	w("          float f[%d];\n", V)
	if V > 1 {
		for v := range V {
			w("          f[%d] = %s;\n", v, unpackElement(p.DType, "q[u][j]", v))
		}
	} else {
		w("          f[0] = q[u][j];\n")
	}
	w("          #pragma unroll\n          for (int i = 0; i < %d; i++) {\n            const float a = A[i][kr];\n", BM)
	w("            #pragma unroll\n            for (int v = 0; v < %d; v++) acc[i][j][v] += a * f[v];\n          }\n", V)
	w("        }\n      }\n    }\n  }\n")
	w("  for (int i = 0; i < %d; i++)\n    for (int j = 0; j < %d; j++)\n      for (int v = 0; v < %d; v++) Part[warp][i][lane][j][v] = acc[i][j][v];\n", BM, L, V)
	w("  __syncthreads();\n")
	w("  auto sum = [&](int i, int ln, int j, int v) {\n    float t = 0.0f;\n    for (int ww = 0; ww < %d; ww++) t += Part[ww][i][ln][j][v];\n    return t;\n  };\n", W)
	// Output column ol of the tile: lane ln's j-th; its gate (or down)
	// and up sums.
	var sums [2]string
	switch {
	case !up, p.Gating == ir.GatingSwiGLU:
		sums = [2]string{"sum(i, ln, 0, j)", "sum(i, ln, 1, j)"}
	case V == 1:
		sums = [2]string{"sum(i, ln, 0, 0)", "sum(i, ln, 1, 0)"}
	default:
		sums = [2]string{"sum(i, ln, 0, 2 * j)", "sum(i, ln, 0, 2 * j + 1)"}
	}
	e.epilogue(32*P, fmt.Sprintf(", ln = ol / %d, j = ol %% %d", P, P), sums)
	return e.b.String(), nil
}

// expertsText is an experts kernel's text as both lane layouts print it:
// how a block finds its work (a row's slot, or an expert's group of rows)
// and how it writes its outputs are the same in both; only how the lanes
// load the experts' weight differs.
type expertsText struct {
	p    cost.ExpertsParts
	s    cost.Schedule
	body *ir.Graph
	rows string // the rows the kernel computes: all, or the rows present
	b    strings.Builder
}

// newExpertsText sets k's launch for p under s: the work along x (up to
// 2^31 - 1 blocks: a long chunk's slots, or every expert's groups), the
// column tiles of s.BN along y; by slot, a grid that follows the rows
// present.
func newExpertsText(k *Kernel, body *ir.Graph, p cost.ExpertsParts, s cost.Schedule) *expertsText {
	k.Schedule = s
	k.Block = [3]int{s.Threads, 1, 1}
	e := &expertsText{p: p, s: s, body: body, rows: fmt.Sprintf("%dLL", p.R)}
	present := k.count != nil && k.count.Axis == 0 && k.count.Max == p.R
	if present {
		// The rows present, never past the buffers' rows.
		e.rows = fmt.Sprintf("(lum_t < %dLL ? lum_t : %dLL)", p.R, p.R)
	}
	tiles := (p.N + int64(s.BN) - 1) / int64(s.BN)
	k.Grid = [3]int{int(cost.ExpertsWorkBlocks(p, s)), int(tiles), 1}
	if !s.Grouped && present {
		k.Rows = &RowGrid{Dim: 0, Num: p.K, Den: 1}
	}
	return e
}

func (e *expertsText) w(format string, a ...any) { fmt.Fprintf(&e.b, format, a...) }

// arg is the kernel argument of the op's operand k (through reshapes).
func (e *expertsText) arg(k int) string {
	return paramName(e.body, cost.ArgumentOf(e.body, e.body.Node(e.p.Node).Inputs[k]))
}

// head prints the thread's place, the block's first output column o0 and
// the routing weights' pointer.
func (e *expertsText) head() {
	e.w("  const int tid = threadIdx.x, lane = tid %% 32, warp = tid / 32;\n")
	e.w("  // The block's output columns o0 .. o0 + %d.\n  const long long o0 = (long long)blockIdx.y * %dLL;\n", e.s.BN-1, e.s.BN)
	e.w("  const float* wts = %s;\n", e.arg(1))
}

// staged is row i's vector element kk in f32 (0 for a row or slot the
// block does not compute): what a block stages in shared memory.
func (e *expertsText) staged(i string) string {
	p := e.p
	at := fmt.Sprintf("%s[rowOf[%s] * %dLL + kk]", e.arg(0), i, p.Kd)
	if p.Op == ir.OpExpertsDown {
		at = fmt.Sprintf("%s[(rowOf[%s] * %dLL + slotOf[%s]) * %dLL + kk]", e.arg(0), i, p.K, i, p.Kd)
	}
	return fmt.Sprintf("%s < nrows && slotOf[%s] >= 0 ? %s : 0.0f", i, i, load(p.DType, at))
}

// findWork prints how a block finds its work: its expert ex, its rows
// rowOf[0 .. nrows) and their slots slotOf (-1 for a row that chose more
// than k experts). By slot, a block a row's slot looks the expert up in
// the row's weights, writing zeros for a slot no expert takes; by
// expert, a block an expert and group of BM rows ranks the rows choosing
// the expert, and the blocks past the experts' write the zeros of the
// slots no expert takes. A block with no rows returns, whole.
func (e *expertsText) findWork() {
	p, s, w, rows := e.p, e.s, e.w, e.rows
	T, BM := s.Threads, s.BM
	groups := cost.ExpertsGroupBlocks(p.R, BM)
	w("  __shared__ long long rowOf[%d];\n  __shared__ int slotOf[%d];\n  __shared__ int nrows, ex;\n", BM, BM)
	zeros := func(indent, r, slot string) {
		w("%sfor (long long c = o0 + tid; c < o0 + %dLL && c < %dLL; c += %d) out0[(%s * %dLL + %s) * %dLL + c] = %s;\n",
			indent, s.BN, p.N, T, r, p.K, slot, p.N, store(p.ResultDType, "0.0f"))
	}
	if !s.Grouped {
		w("  const long long r = blockIdx.x / %d;\n  const int s = blockIdx.x %% %d;\n", p.K, p.K)
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
		w("  if (blockIdx.x >= %dLL) {\n", p.E*groups)
		w("    // Zeros for the slots no expert takes, of rows z * %d on.\n", BM)
		w("    const long long z = blockIdx.x - %dLL;\n", p.E*groups)
		w("    if (tid < %d) {\n      const long long r = z * %dLL + tid;\n      int n = 0;\n", BM, BM)
		w("      if (r < %s)\n        for (int j = 0; j < %d; j++) n += wts[r * %dLL + j] != 0.0f;\n", rows, p.E, p.E)
		w("      pre[tid] = n;\n    }\n    __syncthreads();\n")
		w("    for (int i = 0; i < %d; i++) {\n      const long long r = z * %dLL + i;\n      if (r >= %s) break;\n", BM, BM, rows)
		w("      for (int sl = pre[i]; sl < %d; sl++) {\n", p.K)
		zeros("        ", "r", "sl")
		w("      }\n    }\n    return;\n  }\n")
		w("  const int e = (int)(blockIdx.x / %dLL);\n  const long long g = blockIdx.x %% %dLL;\n", groups, groups)
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
		w("    for (int j = 0; j < e; j++) n += wts[r * %dLL + j] != 0.0f;\n", p.E)
		w("    // A row choosing more than %d experts has no meaning: not written past its slots.\n    slotOf[tid] = n < %d ? n : -1;\n  }\n  __syncthreads();\n", p.K, p.K)
	}
}

// epilogue prints the loop that writes the block's outputs: output
// column ol of its tile of the given width for row i, its sums sums[0]
// (the gate's, or experts_down's) and sums[1] (the up's) being C
// expressions of i, ol and the loop's locals (declared after them). Up
// adds the bias to the gate and up columns (the first and second halves
// of the projection, or its even and odd columns for the clamped SwiGLU),
// applies the activation and rounds once to the result's dtype; down adds
// the bias, multiplies by the slot's weight and writes f32.
func (e *expertsText) epilogue(tile int, locals string, sums [2]string) {
	p, s, w := e.p, e.s, e.w
	BM, T := s.BM, s.Threads
	up := p.Op == ir.OpExpertsUp
	w("  const %s* bias = %s + (long long)ex * %dLL;\n", storageType(p.DType), e.arg(3), p.Read)
	w("  for (int idx = tid; idx < %d; idx += %d) {\n", BM*tile, T)
	w("    const int i = idx / %d, ol = idx %% %d%s;\n", tile, tile, locals)
	w("    const long long col = o0 + ol;\n    if (i >= nrows || slotOf[i] < 0 || col >= %dLL) continue;\n", p.N)
	w("    const long long o = (rowOf[i] * %dLL + slotOf[i]) * %dLL;\n", p.K, p.N)
	switch {
	case !up:
		w("    const float wgt = wts[rowOf[i] * %dLL + ex];\n", p.E)
		w("    out0[o + col] = wgt * (%s + %s);\n", sums[0], load(p.DType, "bias[col]"))
	default:
		g, u, gcol, ucol := sums[0], sums[1], "2 * col", "2 * col + 1"
		if p.Gating == ir.GatingSwiGLU {
			gcol, ucol = "col", fmt.Sprintf("%dLL + col", p.N)
		}
		w("    float g = %s + %s, u = %s + %s;\n", g, load(p.DType, "bias["+gcol+"]"), u, load(p.DType, "bias["+ucol+"]"))
		if p.Gating == ir.GatingClampedSwiGLU {
			lim := fmtFloat32(p.Limit) + "f"
			w("    // Comparisons keep a NaN (fminf would drop it).\n")
			w("    g = g > %s ? %s : g;\n    u = u > %s ? %s : u < -%s ? -%s : u;\n", lim, lim, lim, lim, lim, lim)
			w("    const float a = %sf * g;\n", fmtFloat32(ir.ClampedSwiGLUAlpha))
			w("    const float sg = a >= 0.0f ? 1.0f / (1.0f + expf(-a)) : expf(a) / (1.0f + expf(a));\n")
			w("    const float h = (u + 1.0f) * (g * sg);\n")
		} else {
			w("    const float sg = g >= 0.0f ? 1.0f / (1.0f + expf(-g)) : expf(g) / (1.0f + expf(g));\n")
			w("    const float h = g * sg * u;\n")
		}
		w("    out0[o + col] = %s;\n", store(p.ResultDType, "h"))
	}
	w("  }\n")
}

// unpackElement is element v of a 16-byte vector q of dt, widened to f32:
// the words hold the elements in order, the lower-indexed half of a word
// in its low 16 bits.
func unpackElement(dt ir.DType, q string, v int) string {
	word := func(i int) string { return q + "." + string("xyzw"[i]) }
	switch dt {
	case ir.BF16:
		if v%2 == 0 {
			return fmt.Sprintf("__uint_as_float(%s << 16)", word(v/2))
		}
		return fmt.Sprintf("__uint_as_float(%s & 0xffff0000u)", word(v/2))
	case ir.F16:
		if v%2 == 0 {
			return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s & 0xffffu))", word(v/2))
		}
		return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s >> 16))", word(v/2))
	}
	return fmt.Sprintf("__uint_as_float(%s)", word(v))
}

// fmtFloat32 prints v rounded to f32, exactly, as the digits of a float
// literal (an exponent always, so that the f suffix makes one).
func fmtFloat32(v float64) string {
	return strconv.FormatFloat(float64(float32(v)), 'e', -1, 32)
}

// verifyExpertsElements bounds the experts' weights (elements) a kernel of
// the experts form is verified with at its real shapes: past it (gpt-oss's
// and Qwen3-MoE's gigabytes), the kernel is printed again for fewer
// experts (verifyExperts of them), whose code differs from its own only in
// the count of experts it scans, and verified so: at its real rows,
// hidden and intermediate sizes, schedule and grid layout.
var verifyExpertsElements int64 = 1 << 26 // a variable for the tests

const verifyExperts = 8

// fewerExperts is k and body with the experts cut to verifyExperts (at
// least twice the chosen), when the body is an experts form over more
// weights than verifyExpertsElements and k is what the printer prints for
// it; ok is false otherwise.
func fewerExperts(k *Kernel, body *ir.Graph) (*Kernel, *ir.Graph, bool, error) {
	p, err := cost.Experts(body)
	if err != nil {
		return nil, nil, false, nil
	}
	keep := max(int64(verifyExperts), 2*p.K)
	if p.E <= keep || p.E*p.Kd*p.Read <= verifyExpertsElements {
		return nil, nil, false, nil
	}
	// Only the printer's own text for the body stands for it: a kernel
	// edited, or read from elsewhere, is verified as it is.
	code := func(text string) string { // past the comment
		if i := strings.Index(text, "extern \"C\""); i >= 0 {
			return text[i:]
		}
		return ""
	}
	if own, err := printKernel(k.Name, k.comment, body, k.Schedule, k.count); err != nil || code(k.Text) == "" || code(own.Text) != code(k.Text) {
		return nil, nil, false, nil
	}
	op := body.Node(p.Node)
	role := map[ir.Value]int{}
	for i, in := range op.Inputs {
		a := cost.ArgumentOf(body, in)
		if i > 0 && a != in {
			return nil, nil, false, nil // a reshaped weight: verified whole
		}
		role[a] = i
	}
	if q := p.Quant; q.Quantized() {
		// A quantized weight's codes and scales hold the experts along
		// their first axis too.
		role[q.Codes], role[q.Scales] = 2, 2
	}
	b := ir.NewBuilder(body.Name)
	vals := make([]ir.Value, len(body.Nodes))
	for i, n := range body.Nodes {
		v := ir.Value(i)
		switch {
		case n.Op == ir.OpInput:
			s := n.Shape.Clone()
			switch role[v] {
			case 1:
				s[1] = ir.Dim(keep)
			case 2, 3:
				s[0] = ir.Dim(keep)
			}
			vals[i] = b.Input(n.Name, n.DType, s...)
		default: // the op, the reshapes of its operands, a weight's decoding
			ins := make([]ir.Value, len(n.Inputs))
			for j, in := range n.Inputs {
				ins[j] = vals[in]
			}
			vals[i] = b.Apply(n.Op, n.Attrs, ins...)
		}
	}
	for _, o := range body.Outputs {
		b.Output(o.Name, vals[o.Value])
	}
	small, err := b.Build()
	if err != nil {
		return nil, nil, false, fmt.Errorf("verify kernel %s over %d experts: %w", k.Name, keep, err)
	}
	sk, err := printKernel(k.Name, k.comment, small, k.Schedule, k.count)
	if err != nil {
		return nil, nil, false, fmt.Errorf("verify kernel %s over %d experts: %w", k.Name, keep, err)
	}
	return sk, small, true, nil
}
