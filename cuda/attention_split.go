package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// attnSplitColumns bounds the value columns a lane of the split-keys
// layout accumulates, as cost's attentionFeatures does.
const attnSplitColumns = 8

// printAttentionSplit prints the split-keys layout of one query row a
// block (BM 1, SplitKeys): the block loads the row (its prologue computed)
// into shared memory once, then warp w of W takes key tiles w, w + W, ...
// of 32 keys with a running softmax of its own: lane c scores key c of the
// tile, the warp's max and sum come from shuffles, and lane c accumulates
// value columns c, c + 32, ... of the tile's probability-weighted value
// rows. No warp waits for another inside the loop, which is what makes a
// decode step's few rows (a head each) keep a multiprocessor busy.
//
// At the end each warp leaves its max, sum and accumulators in shared
// memory, and the block combines them as flash-decoding does: with M the
// largest of the warps' maxima, the output is Σ_w e^(m_w - M) o_w over
// Σ_w e^(m_w - M) l_w, a warp that saw no key (m_w = -inf) weighing 0.
func printAttentionSplit(k *Kernel, body *ir.Graph, p cost.AttentionParts, s cost.Schedule) (string, error) {
	g := attentionGeometry(body, p)
	S, D, T, Dv := g.S, g.D, g.T, g.Dv
	warps := s.Threads / 32
	cols := int((Dv + 31) / 32)
	if s.BN != attnTile || s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Threads%32 != 0 || s.Threads > 1024 || warps == 0 {
		return "", fmt.Errorf("attention: schedule %s: the split-keys layout takes a query row (bm=1) a block, %d keys (bn) a warp's step and 32 to 1024 threads", s, attnTile)
	}
	if cols > attnSplitColumns {
		return "", fmt.Errorf("attention: schedule %s: value rows of %d keep %d accumulators a lane, more than %d", s, Dv, cols, attnSplitColumns)
	}
	if sh := 4 * (D + int64(warps)*(attnTile+Dv+2)); sh > attnStaticShared {
		return "", fmt.Errorf("attention: schedule %s: %d bytes of shared memory for head dims %d and %d, more than %d", s, sh, D, Dv, attnStaticShared)
	}
	k.Schedule = s
	rows := g.batch * S
	k.Block = [3]int{s.Threads, 1, 1}
	k.Grid = [3]int{int(min(rows, 65535)), 1, 1}
	emitter := func(reduced map[ir.Value]string) *elementwise {
		return &elementwise{body: body, temps: map[string]string{}, reduced: reduced}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float Qs[%d];\n  __shared__ float Ps[%d][%d];\n", D, warps, attnTile)
	fmt.Fprintf(&b, "  __shared__ float Os[%d][%d];\n  __shared__ float Ms[%d], Ls[%d];\n", warps, Dv, warps, warps)
	b.WriteString("  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n")
	fmt.Fprintf(&b, "  for (long long row = blockIdx.x; row < %dLL; row += gridDim.x) {\n", rows)
	fmt.Fprintf(&b, "    const long long s = row %% %dLL;\n    long long bz = row / %dLL;\n", S, S)
	g.printBatch(&b, "    ")
	// The query row, its prologue computed.
	e := emitter(nil)
	qv, err := e.value(p.Q, g.opIndex(body.Node(p.Q).Shape, "s", "dd"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (long long dd = threadIdx.x; dd < %dLL; dd += blockDim.x) {\n", D)
	printLines(&b, e.lines, "      ")
	fmt.Fprintf(&b, "      Qs[dd] = %s;\n    }\n", qv)
	fmt.Fprintf(&b, "    float m = -INFINITY, l = 0.0f, o[%d];\n", cols)
	fmt.Fprintf(&b, "    for (int j = 0; j < %d; j++) o[j] = 0.0f;\n", cols)
	b.WriteString("    __syncthreads();\n")
	keys := printKeyLoop(&b, body, p, T, "s", "s", "    ")
	fmt.Fprintf(&b, "    for (long long t0 = %s + warp * %d; t0 < %s; t0 += %d) {\n", keys.beg, attnTile, keys.end, warps*attnTile)
	b.WriteString("      const long long t = t0 + lane;\n      float sc = -INFINITY;\n")
	fmt.Fprintf(&b, "      if (t < %s) {\n        float dot = 0.0f;\n", keys.end)
	ek := emitter(nil)
	kv, err := ek.value(p.KT, g.opIndex(body.Node(p.KT).Shape, "dd", "t"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "        for (long long dd = 0; dd < %dLL; dd++) {\n", D)
	printLines(&b, ek.lines, "          ")
	fmt.Fprintf(&b, "          dot += Qs[dd] * %s;\n        }\n", kv)
	es := emitter(map[ir.Value]string{p.QK: "dot"})
	sv, err := es.value(p.Scores, g.opIndex(body.Node(p.Scores).Shape, "s", "t"), false)
	if err != nil {
		return "", err
	}
	printLines(&b, es.lines, "        ")
	fmt.Fprintf(&b, "        sc = %s;\n      }\n", sv)
	b.WriteString(`      float mx = sc;
      for (int w = 16; w > 0; w >>= 1) { float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }
      const float mnew = (m != m || m > mx) ? m : mx;
      const float pt = sc == -INFINITY ? 0.0f : expf(sc - mnew);
      float ps = pt;
      for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
      // The warp's earlier tiles rescaled to the new max.
      const float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
      m = mnew;
      l = l * alpha + ps;
      Ps[warp][lane] = pt;
`)
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j++) o[j] *= alpha;\n", cols)
	b.WriteString("      // The warp reads its own probabilities only.\n      __syncwarp();\n")
	fmt.Fprintf(&b, "      for (int c = 0; c < %d && t0 + c < %s; c++) {\n", attnTile, keys.end)
	b.WriteString("        const long long t = t0 + c;\n        const float pc = Ps[warp][c];\n")
	fmt.Fprintf(&b, "        for (int j = 0; j < %d; j++) {\n", cols)
	fmt.Fprintf(&b, "          const long long d = lane + 32 * j;\n          if (d >= %dLL) break;\n", Dv)
	ev := emitter(nil)
	vv, err := ev.value(p.V, g.opIndex(body.Node(p.V).Shape, "t", "d"), false)
	if err != nil {
		return "", err
	}
	printLines(&b, ev.lines, "          ")
	fmt.Fprintf(&b, "          o[j] += pc * %s;\n        }\n      }\n", vv)
	b.WriteString("      // The next tile's probabilities overwrite Ps.\n      __syncwarp();\n    }\n")
	// The combine across the warps.
	b.WriteString("    if (lane == 0) {\n      Ms[warp] = m;\n      Ls[warp] = l;\n    }\n")
	fmt.Fprintf(&b, "    for (int j = 0; j < %d; j++) {\n", cols)
	fmt.Fprintf(&b, "      const int d = lane + 32 * j;\n      if (d < %d) Os[warp][d] = o[j];\n    }\n", Dv)
	b.WriteString("    __syncthreads();\n")
	fmt.Fprintf(&b, "    for (long long d = threadIdx.x; d < %dLL; d += blockDim.x) {\n", Dv)
	fmt.Fprintf(&b, "      float M = -INFINITY;\n      for (int w = 0; w < %d; w++) M = (M != M || M > Ms[w]) ? M : Ms[w];\n", warps)
	b.WriteString("      float acc = 0.0f, L = 0.0f;\n")
	fmt.Fprintf(&b, "      for (int w = 0; w < %d; w++) {\n", warps)
	b.WriteString("        const float a = Ms[w] == -INFINITY ? 0.0f : expf(Ms[w] - M);\n")
	b.WriteString("        acc += a * Os[w][d];\n        L += a * Ls[w];\n      }\n")
	st, err := attentionStore(body, p, g.outIndex("s", "d"), "(acc / L)")
	if err != nil {
		return "", err
	}
	printLines(&b, st, "      ")
	b.WriteString("    }\n")
	b.WriteString("    // The next row overwrites Qs, Ms, Ls and Os, which slower threads may\n    // still read.\n    __syncthreads();\n  }\n")
	return b.String(), nil
}
