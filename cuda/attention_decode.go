package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The flash-decoding layout of attention (Schedule.KeySplits), for a
// decode step's few query rows over a long KV cache. A block takes one key
// head (of one batch) and one KeySplits-th of the keys its rows see, and
// every query row that reads that head: the group's query heads (GQA)
// times the S rows, so each key and value row is loaded once for all of
// them. Without the split a decode step has a block per head, a quarter
// of an H100's multiprocessors for llama-3-8b; with it the grid is heads
// times splits.
//
// Loads: a key row of D elements is D/vec 16-byte pieces (vec = 8 in f16
// and bf16, 4 in f32), one a lane, so a warp reads 32/(D/vec) whole rows
// per load instruction, coalesced, and a lane keeps its pieces of the
// query rows and of the output accumulators in registers. A warp step
// takes BN keys: BN/(keys a load) key loads and as many value loads a
// lane, all issued before the first is used (what Little's law needs of
// a memory-bound loop). Addresses are two pointers advanced by a constant
// a step; the key index is 32-bit.
//
// Softmax: the lanes that read one key row reduce their partial dot
// products with shuffles, and every lane of the row keeps its own running
// max, sum and accumulators (the rows a warp reads at once are separate
// running softmaxes until the end), so a step needs no exchange between
// rows. At the end the running softmaxes combine, as flash-decoding
// combines its splits: with M the largest max, o = Σ e^(m_i - M) o_i over
// Σ e^(m_i - M) l_i, a part that saw no key (m_i = -inf) weighing 0:
// first the warp's rows (shuffles), then the block's warps (shared
// memory, in warp order), then the splits.
//
// The splits combine in the same launch: each block writes its partial
// (max, sum and accumulators, f32) to the kernel's workspace, counts
// itself done on its key head's counter (an atomic add after a memory
// fence), and the block that finds itself last combines every split's
// partial in split order and resets the counter to zero for the next
// launch. Which block is last varies from run to run; what it computes
// does not, so the result does not depend on the blocks' timing.
//
// The workspace is the kernel's own: static arrays in its body (global
// memory, one copy per loaded module), which the CUDA loader initializes
// when it loads the module (the counters to zero; the partials are
// written before they are read). Launches of one kernel run in stream order and each leaves the
// counters at zero, so launches share it; two streams running one loaded
// program at once would not, as they would not share its arena either.

// decodeMaxWarps bounds the warps of a flash-decoding block (their
// partials meet in shared memory).
const decodeMaxWarps = 8

// decodeMaxWorkspace bounds a flash-decoding kernel's workspace: splits
// are for grids too small to fill the device, whose partials are small.
const decodeMaxWorkspace = 16 << 20

// DecodeWorkspace is the workspace, in bytes, of the flash-decoding
// layout with splits splits: each block's partial (R rows of D
// accumulators, a max and a sum, f32) and each key head's counter; 0
// without a split.
func DecodeWorkspace(p cost.DecodeParts, splits int) int64 {
	if splits <= 1 {
		return 0
	}
	return p.Heads()*int64(splits)*p.Rows()*(p.D+2)*4 + p.Heads()*4
}

// printAttentionDecode prints the flash-decoding layout (see above).
func printAttentionDecode(k *Kernel, body *ir.Graph, p cost.AttentionParts, s cost.Schedule) (string, error) {
	dp, err := cost.DecodeAttention(body, p)
	if err != nil {
		return "", fmt.Errorf("attention: schedule %s: %w", s, err)
	}
	W := s.Threads / 32
	P := dp.KeysPerLoad()
	if s.BM != 1 || s.BN < int(P) || int64(s.BN)%P != 0 || int64(s.BN)/P > 8 || s.BK != 0 || s.Stages != 0 || s.Rows != 0 ||
		s.Tensor || s.GEMV || s.SplitKeys || s.TM != 0 || s.Warp != 0 || s.Threads%32 != 0 || W < 1 || W > decodeMaxWarps || s.KeySplits < 1 || s.KeySplits > 256 {
		return "", fmt.Errorf("attention: schedule %s: the flash-decoding layout takes bm=1, a multiple of %d keys (bn) up to %d a warp's step, 1 to %d warps and 1 to 256 key splits", s, P, 8*P, decodeMaxWarps)
	}
	g := attentionGeometry(body, p)
	R, D, S, G, vec, L := dp.Rows(), dp.D, dp.S, dp.Group, dp.Vec(), dp.Lanes()
	NI := int64(s.BN) / P
	n := int64(s.KeySplits)
	if sh := 4 * (R*D + int64(W)*R*(D+2)); sh > attnStaticShared {
		return "", fmt.Errorf("attention: schedule %s: %d bytes of shared memory, more than %d", s, sh, attnStaticShared)
	}
	ws := DecodeWorkspace(dp, s.KeySplits)
	if ws > decodeMaxWorkspace {
		return "", fmt.Errorf("attention: schedule %s: a workspace of %d bytes, more than %d", s, ws, decodeMaxWorkspace)
	}
	k.Schedule = s
	k.Block = [3]int{s.Threads, 1, 1}
	k.Grid = [3]int{s.KeySplits, int(dp.Heads()), 1}
	k.Workspace = ws
	wsName, cntName := "lum_ws", "lum_wc"
	var globals strings.Builder
	if n > 1 {
		k.BlockGroup = s.KeySplits
		fmt.Fprintf(&globals, "  // The workspace: each block's partial softmax (a max, a sum and %dx%d\n", R, D)
		globals.WriteString("  // accumulators, f32) and each key head's count of finished blocks, which\n")
		globals.WriteString("  // its last block resets; the loader zeroes both.\n")
		fmt.Fprintf(&globals, "  static float %s[%d];\n  static unsigned %s[%d] = {};\n", wsName, dp.Heads()*n*R*(D+2), cntName, dp.Heads())
	}
	emitter := func(reduced map[ir.Value]string) *elementwise {
		return &elementwise{body: body, temps: map[string]string{}, reduced: reduced}
	}
	// rowBatch prints, at indent, the batch indices b0, b1, ... of row r
	// of the block (query row r % S of head hk * G + r / S).
	rowBatch := func(b *strings.Builder, r, indent string) {
		fmt.Fprintf(b, "%slong long bz = hk * %dLL + (%s) / %d;\n", indent, G, r, S)
		g.printBatch(b, indent)
	}
	var b strings.Builder
	b.WriteString(globals.String())
	fmt.Fprintf(&b, "  __shared__ float Qs[%d][%d];\n", R, D)
	fmt.Fprintf(&b, "  __shared__ float Ms[%d][%d], Ls[%d][%d];\n  __shared__ float Os[%d][%d][%d];\n", W, R, W, R, W, R, D)
	b.WriteString("  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n")
	fmt.Fprintf(&b, "  // Lanes grp * %d .. grp * %d + %d read one key row, lane sub of them its\n", L, L, L-1)
	fmt.Fprintf(&b, "  // elements sub * %d ..\n", vec)
	fmt.Fprintf(&b, "  const int grp = lane / %d, sub = lane %% %d;\n", L, L)
	b.WriteString("  const long long hk = blockIdx.y;\n  const int split = blockIdx.x;\n")

	// The block's query rows, their prologue computed once a block.
	e := emitter(nil)
	qv, err := e.value(p.Q, g.opIndex(body.Node(p.Q).Shape, "s", "dd"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "  for (int i = threadIdx.x; i < %d; i += blockDim.x) {\n", R*D)
	fmt.Fprintf(&b, "    const long long dd = i %% %d, s = i / %d %% %d;\n", D, D, S)
	rowBatch(&b, fmt.Sprintf("i / %d", D), "    ")
	printLines(&b, e.lines, "    ")
	fmt.Fprintf(&b, "    Qs[i / %d][dd] = %s;\n  }\n", D, qv)
	// Each row's batch indices and query position, for the scores.
	rvars := []string{"rs"}
	for d := 0; d < g.r-2; d++ {
		rvars = append(rvars, fmt.Sprintf("rb%d", d))
	}
	fmt.Fprintf(&b, "  long long %s;\n", strings.Join(suffixAll(rvars, fmt.Sprintf("[%d]", R)), ", "))
	fmt.Fprintf(&b, "  for (int r = 0; r < %d; r++) {\n", R)
	rowBatch(&b, "r", "    ")
	fmt.Fprintf(&b, "    rs[r] = r %% %d;\n", S)
	for d := 0; d < g.r-2; d++ {
		fmt.Fprintf(&b, "    rb%d[r] = b%d;\n", d, d)
	}
	b.WriteString("  }\n")
	// The head's key and value rows: where batch index hk * G reads them.
	fmt.Fprintf(&b, "  long long kbase = %dLL, vbase = %dLL;\n  {\n", dp.KLayout.Offset, dp.VLayout.Offset)
	fmt.Fprintf(&b, "    long long bz = hk * %dLL;\n", G)
	g.printBatch(&b, "    ")
	for d := 0; d < g.r-2; d++ {
		bd := fmt.Sprintf("b%d", d)
		if e := modesOffset(dp.KLayout.Axes[d], bd); e != "" {
			fmt.Fprintf(&b, "    kbase += %s;\n", e)
		}
		if e := modesOffset(dp.VLayout.Axes[d], bd); e != "" {
			fmt.Fprintf(&b, "    vbase += %s;\n", e)
		}
	}
	b.WriteString("  }\n  __syncthreads();\n")
	fmt.Fprintf(&b, "  float qr[%d][%d];\n", R, vec)
	fmt.Fprintf(&b, "  #pragma unroll\n  for (int r = 0; r < %d; r++) {\n", R)
	fmt.Fprintf(&b, "    #pragma unroll\n    for (int e = 0; e < %d; e++) qr[r][e] = Qs[r][sub * %d + e];\n  }\n", vec, vec)

	// The split's keys: whole warp steps of the keys the rows see.
	keys := printKeyLoop(&b, body, p, dp.T, "0", fmt.Sprint(S-1), "  ")
	fmt.Fprintf(&b, "  const long long nk = %s - %s, chunk = (nk + %d) / %d * %d;\n", keys.end, keys.beg, n*int64(s.BN)-1, n*int64(s.BN), s.BN)
	fmt.Fprintf(&b, "  const long long kb0 = %s + split * chunk < %s ? %s + split * chunk : %s;\n", keys.beg, keys.end, keys.beg, keys.end)
	fmt.Fprintf(&b, "  const int k0 = (int)kb0, k1 = (int)(kb0 + chunk < %s ? kb0 + chunk : %s);\n", keys.end, keys.end)
	fmt.Fprintf(&b, "  float m[%d], l[%d], o[%d][%d];\n", R, R, R, vec)
	fmt.Fprintf(&b, "  #pragma unroll\n  for (int r = 0; r < %d; r++) {\n    m[r] = -INFINITY;\n    l[r] = 0.0f;\n", R)
	fmt.Fprintf(&b, "    #pragma unroll\n    for (int e = 0; e < %d; e++) o[r][e] = 0.0f;\n  }\n", vec)
	st := storageType(dp.DType)
	fmt.Fprintf(&b, "  int t0 = k0 + warp * %d;\n", s.BN)
	fmt.Fprintf(&b, "  const %s* kp = %s + kbase + (long long)(t0 + grp) * %dLL + sub * %d;\n", st, paramName(body, dp.K), dp.KStride, vec)
	fmt.Fprintf(&b, "  const %s* vp = %s + vbase + (long long)(t0 + grp) * %dLL + sub * %d;\n", st, paramName(body, dp.V), dp.VStride, vec)
	tile := decodeTile{dp: dp, body: body, p: p, g: g, s: s, NI: NI}
	b.WriteString("  // Whole warp steps: every load in bounds, no guard.\n")
	fmt.Fprintf(&b, "  for (; t0 + %d <= k1; t0 += %d) {\n", s.BN, W*s.BN)
	fmt.Fprintf(&b, "    uint4 kr[%d], vr[%d];\n", NI, NI)
	fmt.Fprintf(&b, "    #pragma unroll\n    for (int i = 0; i < %d; i++) {\n", NI)
	fmt.Fprintf(&b, "      kr[i] = lum_ld16(kp + i * %dLL);\n      vr[i] = lum_ld16(vp + i * %dLL);\n    }\n", P*dp.KStride, P*dp.VStride)
	fmt.Fprintf(&b, "    kp += %dLL;\n    vp += %dLL;\n", int64(W*s.BN)*dp.KStride, int64(W*s.BN)*dp.VStride)
	if err := tile.print(&b, false, "    "); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	b.WriteString("  // The last, partial step: keys past k1 are neither loaded nor scored.\n")
	b.WriteString("  if (t0 < k1) {\n")
	fmt.Fprintf(&b, "    uint4 kr[%d], vr[%d];\n", NI, NI)
	fmt.Fprintf(&b, "    #pragma unroll\n    for (int i = 0; i < %d; i++) {\n", NI)
	fmt.Fprintf(&b, "      kr[i] = vr[i] = make_uint4(0u, 0u, 0u, 0u);\n      if (t0 + i * %d + grp < k1) {\n", P)
	fmt.Fprintf(&b, "        kr[i] = lum_ld16(kp + i * %dLL);\n        vr[i] = lum_ld16(vp + i * %dLL);\n      }\n    }\n", P*dp.KStride, P*dp.VStride)
	if err := tile.print(&b, true, "    "); err != nil {
		return "", err
	}
	b.WriteString("  }\n")

	// The warp's rows of keys combined (lanes L apart hold other rows'
	// running softmaxes), then the block's warps.
	if L < 32 {
		fmt.Fprintf(&b, "  #pragma unroll\n  for (int w = %d; w < 32; w <<= 1) {\n", L)
		fmt.Fprintf(&b, "    #pragma unroll\n    for (int r = 0; r < %d; r++) {\n", R)
		b.WriteString(`      const float mo = __shfl_xor_sync(0xffffffffu, m[r], w), lo = __shfl_xor_sync(0xffffffffu, l[r], w);
      const float M = (m[r] != m[r] || m[r] > mo) ? m[r] : mo;
      const float a = m[r] == -INFINITY ? 0.0f : expf(m[r] - M), c = mo == -INFINITY ? 0.0f : expf(mo - M);
      l[r] = l[r] * a + lo * c;
      m[r] = M;
`)
		fmt.Fprintf(&b, "      #pragma unroll\n      for (int e = 0; e < %d; e++) {\n", vec)
		b.WriteString("        const float oo = __shfl_xor_sync(0xffffffffu, o[r][e], w);\n        o[r][e] = o[r][e] * a + oo * c;\n      }\n    }\n  }\n")
	}
	b.WriteString("  if (grp == 0) {\n")
	fmt.Fprintf(&b, "    #pragma unroll\n    for (int r = 0; r < %d; r++) {\n", R)
	b.WriteString("      if (sub == 0) {\n        Ms[warp][r] = m[r];\n        Ls[warp][r] = l[r];\n      }\n")
	fmt.Fprintf(&b, "      #pragma unroll\n      for (int e = 0; e < %d; e++) Os[warp][r][sub * %d + e] = o[r][e];\n    }\n  }\n", vec, vec)
	b.WriteString("  __syncthreads();\n")
	// The block's partial: the warps combined in warp order.
	store := func(acc string, indent string) error {
		st, err := attentionStore(body, p, g.outIndex("s", "d"), acc)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%sconst long long s = r %% %d;\n", indent, S)
		rowBatch(&b, "r", indent)
		printLines(&b, st, indent)
		return nil
	}
	fmt.Fprintf(&b, "  for (int i = threadIdx.x; i < %d; i += blockDim.x) {\n", R*D)
	fmt.Fprintf(&b, "    const int r = i / %d;\n    const long long d = i %% %d;\n", D, D)
	fmt.Fprintf(&b, "    float M = -INFINITY;\n    for (int w = 0; w < %d; w++) M = (M != M || M > Ms[w][r]) ? M : Ms[w][r];\n", W)
	fmt.Fprintf(&b, "    float acc = 0.0f, L = 0.0f;\n    for (int w = 0; w < %d; w++) {\n", W)
	b.WriteString("      const float a = Ms[w][r] == -INFINITY ? 0.0f : expf(Ms[w][r] - M);\n")
	b.WriteString("      acc += a * Os[w][r][d];\n      L += a * Ls[w][r];\n    }\n")
	if n == 1 {
		if err := store("(acc / L)", "    "); err != nil {
			return "", err
		}
		b.WriteString("  }\n")
		return b.String(), nil
	}
	fmt.Fprintf(&b, "    float* const part = %s + ((hk * %d + split) * %d + r) * %d;\n", wsName, n, R, D+2)
	fmt.Fprintf(&b, "    part[d] = acc;\n    if (d == 0) {\n      part[%d] = M;\n      part[%d] = L;\n    }\n  }\n", D, D+1)
	// The last block of the head combines the splits.
	b.WriteString("  // The partial is visible device-wide before the block counts itself\n  // done; the block that counts last sees every other's.\n")
	b.WriteString("  __shared__ bool lum_last;\n  __threadfence();\n  __syncthreads();\n")
	fmt.Fprintf(&b, "  if (threadIdx.x == 0) lum_last = atomicAdd(&%s[hk], 1u) == %du;\n", cntName, n-1)
	b.WriteString("  __syncthreads();\n  if (!lum_last) return;\n  __threadfence();\n")
	fmt.Fprintf(&b, "  for (int i = threadIdx.x; i < %d; i += blockDim.x) {\n", R*D)
	fmt.Fprintf(&b, "    const int r = i / %d;\n    const long long d = i %% %d;\n", D, D)
	fmt.Fprintf(&b, "    const float* const part = %s + (hk * %d * %d + r) * %d;\n", wsName, n, R, D+2)
	fmt.Fprintf(&b, "    float M = -INFINITY;\n    for (int j = 0; j < %d; j++) {\n", n)
	fmt.Fprintf(&b, "      const float mj = __ldcg(part + j * %d + %d);\n      M = (M != M || M > mj) ? M : mj;\n    }\n", R*(D+2), D)
	fmt.Fprintf(&b, "    float acc = 0.0f, L = 0.0f;\n    for (int j = 0; j < %d; j++) {\n", n)
	fmt.Fprintf(&b, "      const float* const pj = part + j * %d;\n", R*(D+2))
	fmt.Fprintf(&b, "      const float mj = __ldcg(pj + %d);\n", D)
	fmt.Fprintf(&b, "      const float a = mj == -INFINITY ? 0.0f : expf(mj - M);\n      acc += a * __ldcg(pj + d);\n      L += a * __ldcg(pj + %d);\n    }\n", D+1)
	if err := store("(acc / L)", "    "); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	fmt.Fprintf(&b, "  if (threadIdx.x == 0) %s[hk] = 0u;\n", cntName)
	return b.String(), nil
}

// decodeTile prints one warp step of the flash-decoding layout on keys
// loaded into kr and values into vr: the scores, the running softmax's
// update and the accumulation.
type decodeTile struct {
	dp   cost.DecodeParts
	body *ir.Graph
	p    cost.AttentionParts
	g    attnGeom
	s    cost.Schedule
	NI   int64
}

func (t decodeTile) print(b *strings.Builder, guarded bool, in string) error {
	dp := t.dp
	R, vec, L, P := dp.Rows(), dp.Vec(), dp.Lanes(), dp.KeysPerLoad()
	fmt.Fprintf(b, "%sfloat sc[%d][%d];\n", in, t.NI, R)
	fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int i = 0; i < %d; i++) {\n", in, in, t.NI)
	fmt.Fprintf(b, "%s  float kf[%d];\n", in, vec)
	unpack(b, dp.DType, "kr[i]", "kf", in+"  ")
	fmt.Fprintf(b, "%s  const long long t = t0 + i * %d + grp;\n", in, P)
	fmt.Fprintf(b, "%s  #pragma unroll\n%s  for (int r = 0; r < %d; r++) {\n", in, in, R)
	fmt.Fprintf(b, "%s    float dot = 0.0f;\n", in)
	fmt.Fprintf(b, "%s    #pragma unroll\n%s    for (int e = 0; e < %d; e++) dot += qr[r][e] * kf[e];\n", in, in, vec)
	if L > 1 {
		fmt.Fprintf(b, "%s    #pragma unroll\n%s    for (int w = %d; w > 0; w >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, w);\n", in, in, L/2)
	}
	es := &elementwise{body: t.body, temps: map[string]string{}, reduced: map[ir.Value]string{t.p.QK: "dot"}}
	sv, err := es.value(t.p.Scores, t.g.opIndex(t.body.Node(t.p.Scores).Shape, "s", "t"), false)
	if err != nil {
		return err
	}
	vars := []string{"s = rs[r]"}
	for d := 0; d < t.g.r-2; d++ {
		vars = append(vars, fmt.Sprintf("b%d = rb%d[r]", d, d))
	}
	fmt.Fprintf(b, "%s    float x = -INFINITY;\n", in)
	inner := in + "    "
	if guarded {
		fmt.Fprintf(b, "%s    if (t < k1) {\n", in)
		inner = in + "      "
	} else {
		fmt.Fprintf(b, "%s    {\n", in)
		inner = in + "      "
	}
	fmt.Fprintf(b, "%sconst long long %s;\n", inner, strings.Join(vars, ", "))
	printLines(b, es.lines, inner)
	fmt.Fprintf(b, "%sx = %s;\n%s    }\n", inner, sv, in)
	fmt.Fprintf(b, "%s    sc[i][r] = x;\n%s  }\n%s}\n", in, in, in)
	// The running softmax of the lane's key rows, rescaled once a step.
	fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int r = 0; r < %d; r++) {\n", in, in, R)
	fmt.Fprintf(b, "%s  float mx = sc[0][r];\n", in)
	for i := int64(1); i < t.NI; i++ {
		fmt.Fprintf(b, "%s  mx = (mx != mx || mx > sc[%d][r]) ? mx : sc[%d][r];\n", in, i, i)
	}
	fmt.Fprintf(b, "%s  const float mnew = (m[r] != m[r] || m[r] > mx) ? m[r] : mx;\n", in)
	fmt.Fprintf(b, "%s  const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mnew);\n", in)
	fmt.Fprintf(b, "%s  m[r] = mnew;\n%s  l[r] *= alpha;\n", in, in)
	fmt.Fprintf(b, "%s  #pragma unroll\n%s  for (int e = 0; e < %d; e++) o[r][e] *= alpha;\n%s}\n", in, in, vec, in)
	fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int i = 0; i < %d; i++) {\n", in, in, t.NI)
	fmt.Fprintf(b, "%s  float vf[%d];\n", in, vec)
	unpack(b, dp.DType, "vr[i]", "vf", in+"  ")
	fmt.Fprintf(b, "%s  #pragma unroll\n%s  for (int r = 0; r < %d; r++) {\n", in, in, R)
	fmt.Fprintf(b, "%s    const float pt = sc[i][r] == -INFINITY ? 0.0f : expf(sc[i][r] - m[r]);\n", in)
	fmt.Fprintf(b, "%s    l[r] += pt;\n", in)
	fmt.Fprintf(b, "%s    #pragma unroll\n%s    for (int e = 0; e < %d; e++) o[r][e] += pt * vf[e];\n%s  }\n%s}\n", in, in, vec, in, in)
	return nil
}

// unpack prints the widening of a 16-byte load w of dtype dt into the
// f32 array f.
func unpack(b *strings.Builder, dt ir.DType, w, f, in string) {
	words := []string{"x", "y", "z", "w"}
	for i, c := range words {
		src := w + "." + c
		switch dt {
		case ir.BF16:
			fmt.Fprintf(b, "%s%s[%d] = __uint_as_float(%s << 16);\n%s%s[%d] = __uint_as_float(%s & 0xffff0000u);\n", in, f, 2*i, src, in, f, 2*i+1, src)
		case ir.F16:
			fmt.Fprintf(b, "%s%s[%d] = lum_f16_to_f32((lum_f16)(%s & 0xffffu));\n%s%s[%d] = lum_f16_to_f32((lum_f16)(%s >> 16));\n", in, f, 2*i, src, in, f, 2*i+1, src)
		default:
			fmt.Fprintf(b, "%s%s[%d] = __uint_as_float(%s);\n", in, f, i, src)
		}
	}
}

// suffixAll is each of names with suffix appended.
func suffixAll(names []string, suffix string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + suffix
	}
	return out
}
