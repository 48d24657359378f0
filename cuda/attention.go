package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The attention kernel form, flash style: the scores and probabilities
// never reach memory; keys and values stream past the query rows a tile at
// a time, an online softmax keeping each row's running max and sum and
// rescaling its output accumulated from the values. Four layouts, by
// schedule:
//
//   - one query row a block (BM 1, the default), in f32 (half-precision
//     operands widened on load): the block loads the row (its prologue,
//     rotary say, computed on the way) into shared memory, then streams the
//     keys in tiles of 32: a warp computes the tile's scores (each lane one
//     key's dot product, the key's prologue computed as it is read, then
//     the elementwise scale and mask) while the others wait, and every
//     thread owns a few value columns.
//   - one query row a block whose warps split the keys (SplitKeys;
//     printAttentionSplit in attention_split.go), for decode: each warp
//     its own tiles and running softmax, the block combining them.
//   - BM query rows a block (BM 4, 8 or 16; printAttentionRows), in f32:
//     each K/V tile is loaded into shared memory once for BM rows (its
//     prologue computed once a block rather than once a row), a warp owns
//     BM/warps rows, its lanes the tile's 32 keys for the scores and 32
//     value columns apart for the output, so no warp idles.
//   - tensor cores for f16 and bf16 operands (Tensor; printAttentionTC in
//     attention_tc.go), FlashAttention-2 style: a warp owns 16 query rows,
//     S = Q K^T and O += P V run as mma.sync m16n8k16 with f32
//     accumulators, the softmax on the accumulator fragments.
//
// In every layout a block loops over the keys its query rows can see
// (keyLoop, attention_bound.go): all of them, or where the mask bounds
// them (causal, at a static offset or a runtime position read from the
// kernel's input) those up to its last row's position, so a decode step
// over a KV cache does the work of its position, not of the capacity.
const (
	attnThreads = 128
	attnTile    = 32
)

// forward maps an index of value from to the index of value to, which
// from reaches through permutes, reshapes and elementwise ops (those keep
// the index) only.
func forward(body *ir.Graph, from, to ir.Value, ix index) (index, error) {
	reaches := make([]bool, len(body.Nodes))
	reaches[to] = true
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		if reaches[i] {
			for _, in := range body.Nodes[i].Inputs {
				reaches[in] = true
			}
		}
	}
	if !reaches[from] {
		return nil, fmt.Errorf("the output does not read the result")
	}
	cur := from
	for cur != to {
		next := ir.Value(-1)
		for i, n := range body.Nodes {
			if reaches[i] && slices.Contains(n.Inputs, cur) {
				next = ir.Value(i)
				break
			}
		}
		n := body.Node(next)
		switch {
		case n.Op == ir.OpPermute:
			out := make(index, len(ix))
			for d, p := range n.Attrs.Perm {
				out[d] = ix[p]
			}
			ix = out
		case n.Op == ir.OpReshape:
			ix = split(n.Shape, linear(body.Node(cur).Shape, ix))
		case n.Op == ir.OpCast, n.Op.Class() == ir.ClassUnary, n.Op.Class() == ir.ClassBinary, n.Op.Class() == ir.ClassCompare, n.Op.Class() == ir.ClassSelect:
			if !n.Shape.Equal(body.Node(cur).Shape) {
				return nil, fmt.Errorf("a broadcast of the result before the output")
			}
		default:
			return nil, fmt.Errorf("a %s between the result and the output", n.Op)
		}
		cur = next
	}
	return ix, nil
}

func printAttention(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := cost.Attention(body)
	if err != nil {
		return "", err
	}
	if len(body.Outputs) != 1 {
		return "", fmt.Errorf("attention with %d outputs", len(body.Outputs))
	}
	pv := body.Node(p.PV).Shape
	q := body.Node(p.Q).Shape
	kt := body.Node(p.KT).Shape
	r := len(pv)
	S, Dv := int64(pv[r-2]), int64(pv[r-1])
	D, T := int64(q[len(q)-1]), int64(kt[len(kt)-1])
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: attnTile, Threads: attnThreads}
	}
	switch {
	case s.KeySplits > 0:
		return printAttentionDecode(k, body, p, s)
	case s.SplitKeys && (s.BM != 1 || s.Tensor || s.GEMV):
		return "", fmt.Errorf("attention: schedule %s: the warps share the keys of one query row a block (bm=1) in f32", s)
	case s.SplitKeys:
		return printAttentionSplit(k, body, p, s)
	case s.Tensor:
		return printAttentionTC(k, body, p, s)
	case s.BM > 1:
		return printAttentionRows(k, body, p, s)
	}
	if s.BM != 1 || s.BN != attnTile || s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Threads%32 != 0 || s.Threads > 1024 {
		return "", fmt.Errorf("attention: schedule %s: the attention form takes a query row (bm=1) and %d keys (bn) a block, 32 to 1024 threads; several rows (bm > 1) or tensor cores (mma) in their own layouts", s, attnTile)
	}
	threads := int64(s.Threads)
	if Dv > 4*threads {
		return "", fmt.Errorf("attention with value rows of %d: at most %d (4 per thread) are printed with %d threads", Dv, 4*threads, threads)
	}
	k.Schedule = s
	rows := pv.NumElements() / Dv
	batch := rows / S
	k.Block = [3]int{int(threads), 1, 1}
	k.Grid = [3]int{int(min(rows, 65535)), 1, 1}

	// Indices over the batch dims of pv (b0..), with an operand's size-1
	// batch dims read at 0.
	opIndex := func(shape ir.Shape, row, col string) index { return batchedIndex(r, shape, row, col) }
	emitter := func(reduced map[ir.Value]string) *elementwise {
		return &elementwise{body: body, temps: map[string]string{}, reduced: reduced}
	}
	lines := func(b *strings.Builder, e *elementwise, indent string) {
		for _, l := range e.lines {
			b.WriteString(indent + strings.TrimPrefix(l, "    ") + "\n")
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float Qs[%d];\n  __shared__ float Ps[%d];\n  __shared__ float St[3];\n", D, attnTile)
	fmt.Fprintf(&b, "  for (long long row = blockIdx.x; row < %dLL; row += gridDim.x) {\n", batch*S)
	fmt.Fprintf(&b, "    long long s = row %% %dLL, bz = row / %dLL;\n", S, S)
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "    long long b%d = bz %% %dLL; bz /= %dLL;\n", d, pv[d], pv[d])
	}
	// The query row, its prologue computed.
	e := emitter(nil)
	qv, err := e.value(p.Q, opIndex(q, "s", "dd"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (long long dd = threadIdx.x; dd < %dLL; dd += blockDim.x) {\n", D)
	lines(&b, e, "      ")
	fmt.Fprintf(&b, "      Qs[dd] = %s;\n    }\n", qv)
	b.WriteString("    float m = -INFINITY, l = 0.0f;\n")
	fmt.Fprintf(&b, "    float o[%d];\n    for (int j = 0; j < %d; j++) o[j] = 0.0f;\n", (Dv+threads-1)/threads, (Dv+threads-1)/threads)
	b.WriteString("    __syncthreads();\n")
	keys := printKeyLoop(&b, body, p, T, "s", "s", "    ")
	fmt.Fprintf(&b, "    for (long long t0 = %s; t0 < %s; t0 += %d) {\n", keys.beg, keys.end, attnTile)
	fmt.Fprintf(&b, "      if (threadIdx.x < %d) {\n", attnTile)
	b.WriteString("        long long t = t0 + threadIdx.x;\n        float sc = -INFINITY;\n")
	fmt.Fprintf(&b, "        if (t < %s) {\n          float dot = 0.0f;\n", keys.end)
	ek := emitter(nil)
	kv, err := ek.value(p.KT, opIndex(kt, "dd", "t"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "          for (long long dd = 0; dd < %dLL; dd++) {\n", D)
	lines(&b, ek, "            ")
	fmt.Fprintf(&b, "            dot += Qs[dd] * %s;\n          }\n", kv)
	es := emitter(map[ir.Value]string{p.QK: "dot"})
	sv, err := es.value(p.Scores, opIndex(body.Node(p.Scores).Shape, "s", "t"), false)
	if err != nil {
		return "", err
	}
	lines(&b, es, "          ")
	fmt.Fprintf(&b, "          sc = %s;\n        }\n", sv)
	b.WriteString(`        float mx = sc;
        for (int w = 16; w > 0; w >>= 1) { float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }
        float mnew = (m != m || m > mx) ? m : mx;
        float pt = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        float ps = pt;
        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
        Ps[threadIdx.x] = pt;
        if (threadIdx.x == 0) {
          float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
          St[0] = alpha; St[1] = mnew; St[2] = l * alpha + ps;
        }
      }
      __syncthreads();
      float alpha = St[0];
      m = St[1]; l = St[2];
`)
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j++) {\n", (Dv+threads-1)/threads)
	fmt.Fprintf(&b, "        long long d = threadIdx.x + j * %d;\n        if (d >= %dLL) break;\n", threads, Dv)
	b.WriteString("        float acc = o[j] * alpha;\n")
	fmt.Fprintf(&b, "        for (int tt = 0; tt < %d && t0 + tt < %s; tt++) {\n          long long t = t0 + tt;\n", attnTile, keys.end)
	ev := emitter(nil)
	vv, err := ev.value(p.V, opIndex(body.Node(p.V).Shape, "t", "d"), false)
	if err != nil {
		return "", err
	}
	lines(&b, ev, "          ")
	fmt.Fprintf(&b, "          acc += Ps[tt] * %s;\n        }\n        o[j] = acc;\n      }\n      __syncthreads();\n    }\n", vv)
	// Write the row through the views after pv.
	pix := make(index, r)
	for d := 0; d < r-2; d++ {
		pix[d] = fmt.Sprintf("b%d", d)
	}
	pix[r-2], pix[r-1] = "s", "d"
	st, err := attentionStore(body, p, pix, "(o[j] / l)")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (int j = 0; j < %d; j++) {\n", (Dv+threads-1)/threads)
	fmt.Fprintf(&b, "      long long d = threadIdx.x + j * %d;\n      if (d >= %dLL) break;\n", threads, Dv)
	for _, l := range st {
		b.WriteString("      " + l + "\n")
	}
	b.WriteString("    }\n")
	b.WriteString("    __syncthreads();\n  }\n")
	return b.String(), nil
}

// attentionStore prints the store of one output element: acc is pv's
// element at pix (the batch dims b0, b1, ..., then the query row and the
// value column), written at the index the views after pv give it. Views
// alone keep the plain store; casts and elementwise ops after pv (an
// epilogue) are computed on acc, as the matmul form's epilogue is.
func attentionStore(body *ir.Graph, p cost.AttentionParts, pix index, acc string) ([]string, error) {
	outV := body.Outputs[0].Value
	out := body.Node(outV)
	oix, err := forward(body, p.PV, outV, pix)
	if err != nil {
		return nil, err
	}
	views := true
	for v := outV; v != p.PV; v = body.Node(v).Inputs[0] {
		if op := body.Node(v).Op; op != ir.OpReshape && op != ir.OpPermute {
			views = false
			break
		}
	}
	if views {
		return []string{fmt.Sprintf("out0[%s] = %s;", linear(out.Shape, oix), store(out.DType, acc))}, nil
	}
	e := &elementwise{body: body, temps: map[string]string{}, reduced: map[ir.Value]string{p.PV: acc}}
	v, err := e.value(outV, oix, false)
	if err != nil {
		return nil, err
	}
	e.emit("out0[%s] = %s;", linear(out.Shape, oix), store(out.DType, v))
	lines := make([]string, len(e.lines))
	for i, l := range e.lines {
		lines[i] = strings.TrimPrefix(l, "    ")
	}
	return lines, nil
}

// attnGeom is the geometry of an attention body the multi-row layouts
// share: pv's shape (its batch dims are the kernel's b0, b1, ...), the
// query rows S, the keys T, the head dims D (of q and k) and Dv (of v),
// and the batch (the product of pv's batch dims).
type attnGeom struct {
	pv                 ir.Shape
	r                  int
	S, D, T, Dv, batch int64
}

func attentionGeometry(body *ir.Graph, p cost.AttentionParts) attnGeom {
	pv := body.Node(p.PV).Shape
	q, kt := body.Node(p.Q).Shape, body.Node(p.KT).Shape
	r := len(pv)
	g := attnGeom{pv: pv, r: r, S: int64(pv[r-2]), Dv: int64(pv[r-1]), D: int64(q[len(q)-1]), T: int64(kt[len(kt)-1])}
	g.batch = pv.NumElements() / (g.S * g.Dv)
	return g
}

// opIndex is an operand's index at (row, col), its batch dims following
// pv's, a size-1 batch dim (a broadcast) read at 0.
func (g attnGeom) opIndex(shape ir.Shape, row, col string) index {
	return batchedIndex(g.r, shape, row, col)
}

// outIndex is pv's index at query row s and value column d.
func (g attnGeom) outIndex(s, d string) index {
	ix := make(index, g.r)
	for i := 0; i < g.r-2; i++ {
		ix[i] = fmt.Sprintf("b%d", i)
	}
	ix[g.r-2], ix[g.r-1] = s, d
	return ix
}

// printBatch declares the batch indices b0, b1, ... of the flat batch
// index bz (which it consumes).
func (g attnGeom) printBatch(b *strings.Builder, indent string) {
	for d := g.r - 3; d >= 0; d-- {
		fmt.Fprintf(b, "%slong long b%d = bz %% %dLL; bz /= %dLL;\n", indent, d, g.pv[d], g.pv[d])
	}
}

// printLines writes an emitter's lines at indent.
func printLines(b *strings.Builder, lines []string, indent string) {
	for _, l := range lines {
		b.WriteString(indent + strings.TrimPrefix(l, "    ") + "\n")
	}
}

// attnStaticShared is the static shared memory a block may declare
// (larger needs dynamic shared memory, which the printer does not use):
// the multi-row and tensor-core layouts are refused past it, as the cost
// model does not list them.
const attnStaticShared = 48 * 1024

// attnRowsShared is the shared memory, in bytes, of the f32 multi-row
// layout: the query rows, a key tile (a column of padding keeps the lanes'
// reads of different keys in different banks), a value tile and the
// probabilities, all f32. cost.attentionFeatures prices the same.
func attnRowsShared(bm, bn int, d, dv int64) int64 {
	return 4 * (int64(bm)*d + int64(bn)*(d+1) + int64(bn)*dv + int64(bm*bn))
}

// printAttentionRows prints the f32 layout of BM query rows a block (BM >
// 1, keys 32 a tile). The block owns rows s0 .. s0+BM-1 of one batch (and
// head); warp w owns rows w, w + W, ... (W warps), BM/W of them. For each
// tile of 32 keys the block loads the keys and values into shared memory
// once (their prologues computed there), then each warp computes its rows'
// scores, lane c taking key c (the query rows are broadcast reads, the
// keys read with a padded stride, conflict-free), applies the scale and
// mask, and updates its rows' running max and sum with shuffles across the
// lanes; the probabilities go to shared memory for the warp itself, and
// each lane accumulates value columns lane, lane + 32, ... of its rows. The
// warp that computes a row's softmax also owns its output, so the
// rescaling factor and the sum never leave its registers.
func printAttentionRows(k *Kernel, body *ir.Graph, p cost.AttentionParts, s cost.Schedule) (string, error) {
	g := attentionGeometry(body, p)
	S, D, T, Dv := g.S, g.D, g.T, g.Dv
	warps := s.Threads / 32
	if s.BN != attnTile || s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Threads%32 != 0 || s.Threads > 1024 || warps == 0 || s.BM%warps != 0 {
		return "", fmt.Errorf("attention: schedule %s: the multi-row layout takes %d keys (bn) a step and a whole number of query rows (bm) per warp", s, attnTile)
	}
	rpw := s.BM / warps         // rows per warp
	cols := int((Dv + 31) / 32) // value columns per lane
	if rpw*cols > attnRowsAccumulators {
		return "", fmt.Errorf("attention: schedule %s: %d rows of %d value columns a warp keep %d accumulators a thread, more than %d", s, rpw, Dv, rpw*cols, attnRowsAccumulators)
	}
	if sh := attnRowsShared(s.BM, s.BN, D, Dv); sh > attnStaticShared {
		return "", fmt.Errorf("attention: schedule %s: %d bytes of shared memory for head dims %d and %d, more than %d", s, sh, D, Dv, attnStaticShared)
	}
	k.Schedule = s
	BM, BN := int64(s.BM), int64(s.BN)
	tilesS := (S + BM - 1) / BM
	k.Block = [3]int{s.Threads, 1, 1}
	k.Grid = [3]int{int(min(g.batch*tilesS, 65535)), 1, 1}
	emitter := func(reduced map[ir.Value]string) *elementwise {
		return &elementwise{body: body, temps: map[string]string{}, reduced: reduced}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float Qs[%d][%d];\n", BM, D)
	fmt.Fprintf(&b, "  __shared__ float Ks[%d][%d];\n", BN, D+1)
	fmt.Fprintf(&b, "  __shared__ float Vs[%d][%d];\n", BN, Dv)
	fmt.Fprintf(&b, "  __shared__ float Ps[%d][%d];\n", BM, BN)
	b.WriteString("  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n")
	fmt.Fprintf(&b, "  for (long long tile = blockIdx.x; tile < %dLL; tile += gridDim.x) {\n", g.batch*tilesS)
	fmt.Fprintf(&b, "    const long long s0 = tile %% %dLL * %d;\n    long long bz = tile / %dLL;\n", tilesS, BM, tilesS)
	g.printBatch(&b, "    ")

	// The query rows, their prologue computed; rows past S are zeros.
	e := emitter(nil)
	qv, err := e.value(p.Q, g.opIndex(body.Node(p.Q).Shape, "s", "dd"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (int i = threadIdx.x; i < %d; i += %d) {\n", BM*D, s.Threads)
	fmt.Fprintf(&b, "      const int r = i / %d;\n      const long long dd = i %% %d, s = s0 + r;\n      float x = 0.0f;\n", D, D)
	fmt.Fprintf(&b, "      if (s < %dLL) {\n", S)
	printLines(&b, e.lines, "        ")
	fmt.Fprintf(&b, "        x = %s;\n      }\n      Qs[r][dd] = x;\n    }\n", qv)
	fmt.Fprintf(&b, "    float m[%d], l[%d], o[%d][%d];\n", rpw, rpw, rpw, cols)
	fmt.Fprintf(&b, "    for (int i = 0; i < %d; i++) {\n      m[i] = -INFINITY; l[i] = 0.0f;\n", rpw)
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j++) o[i][j] = 0.0f;\n    }\n", cols)
	keys := printKeyLoop(&b, body, p, T, "s0", lastRow(BM, S), "    ")
	fmt.Fprintf(&b, "    for (long long t0 = %s; t0 < %s; t0 += %d) {\n", keys.beg, keys.end, BN)
	b.WriteString("      // The previous tile's keys and values (the first time, the query\n")
	b.WriteString("      // rows' writes) are done with.\n")
	b.WriteString("      __syncthreads();\n")
	// The key and value tiles, their prologues computed; keys from the
	// loop's end on (T, or the mask's bound: keyLoop) are zeros, never
	// read (their probabilities are zero, and 0 * 0 stays 0 where
	// uninitialized memory could hold a NaN).
	tileLoad := func(v ir.Value, ix index, dst string, width int64, col string) error {
		e := emitter(nil)
		x, err := e.value(v, ix, false)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "      for (int i = threadIdx.x; i < %d; i += %d) {\n", BN*width, s.Threads)
		fmt.Fprintf(&b, "        const int c = i / %d;\n        const long long %s = i %% %d, t = t0 + c;\n        float x = 0.0f;\n", width, col, width)
		fmt.Fprintf(&b, "        if (t < %s) {\n", keys.end)
		printLines(&b, e.lines, "          ")
		fmt.Fprintf(&b, "          x = %s;\n        }\n        %s[c][%s] = x;\n      }\n", x, dst, col)
		return nil
	}
	if err := tileLoad(p.KT, g.opIndex(body.Node(p.KT).Shape, "dd", "t"), "Ks", D, "dd"); err != nil {
		return "", err
	}
	if err := tileLoad(p.V, g.opIndex(body.Node(p.V).Shape, "t", "d"), "Vs", Dv, "d"); err != nil {
		return "", err
	}
	b.WriteString("      __syncthreads();\n")
	// Scores: lane = key, every row of the warp from one read of the key.
	fmt.Fprintf(&b, "      float dot[%d];\n      for (int i = 0; i < %d; i++) dot[i] = 0.0f;\n", rpw, rpw)
	fmt.Fprintf(&b, "      for (int dd = 0; dd < %d; dd++) {\n        const float kd = Ks[lane][dd];\n", D)
	fmt.Fprintf(&b, "        for (int i = 0; i < %d; i++) dot[i] += Qs[warp + %d * i][dd] * kd;\n      }\n", rpw, warps)
	fmt.Fprintf(&b, "      for (int i = 0; i < %d; i++) {\n", rpw)
	fmt.Fprintf(&b, "        const long long s = s0 + warp + %d * i, t = t0 + lane;\n        float sc = -INFINITY;\n", warps)
	es := emitter(map[ir.Value]string{p.QK: "dot[i]"})
	sv, err := es.value(p.Scores, g.opIndex(body.Node(p.Scores).Shape, "s", "t"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "        if (s < %dLL && t < %s) {\n", S, keys.end)
	printLines(&b, es.lines, "          ")
	fmt.Fprintf(&b, "          sc = %s;\n        }\n", sv)
	b.WriteString(`        float mx = sc;
        for (int w = 16; w > 0; w >>= 1) { float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }
        const float mnew = (m[i] != m[i] || m[i] > mx) ? m[i] : mx;
        const float pt = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        float ps = pt;
        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
`)
	fmt.Fprintf(&b, "        Ps[warp + %d * i][lane] = pt;\n", warps)
	b.WriteString(`        // The rescaling of what the earlier tiles accumulated.
        const float alpha = m[i] == -INFINITY ? 0.0f : expf(m[i] - mnew);
        m[i] = mnew;
        l[i] = l[i] * alpha + ps;
`)
	fmt.Fprintf(&b, "        for (int j = 0; j < %d; j++) o[i][j] *= alpha;\n      }\n", cols)
	b.WriteString("      // Each warp reads only its own rows' probabilities.\n      __syncwarp();\n")
	fmt.Fprintf(&b, "      for (int c = 0; c < %d && t0 + c < %s; c++) {\n", BN, keys.end)
	fmt.Fprintf(&b, "        float vc[%d];\n", cols)
	fmt.Fprintf(&b, "        for (int j = 0; j < %d; j++) vc[j] = lane + 32 * j < %d ? Vs[c][lane + 32 * j] : 0.0f;\n", cols, Dv)
	fmt.Fprintf(&b, "        for (int i = 0; i < %d; i++) {\n", rpw)
	fmt.Fprintf(&b, "          const float pc = Ps[warp + %d * i][c];\n", warps)
	fmt.Fprintf(&b, "          for (int j = 0; j < %d; j++) o[i][j] += pc * vc[j];\n        }\n      }\n    }\n", cols)
	// The rows, through the views after pv.
	st, err := attentionStore(body, p, g.outIndex("s", "d"), "(o[i][j] / l[i])")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (int i = 0; i < %d; i++) {\n", rpw)
	fmt.Fprintf(&b, "      const long long s = s0 + warp + %d * i;\n      if (s >= %dLL) continue;\n", warps, S)
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j++) {\n        const long long d = lane + 32 * j;\n        if (d >= %dLL) break;\n", cols, Dv)
	printLines(&b, st, "        ")
	b.WriteString("      }\n    }\n")
	b.WriteString("    // The next tile's query rows overwrite Qs, which slower warps may\n    // still read.\n    __syncthreads();\n  }\n")
	return b.String(), nil
}

// attnRowsAccumulators bounds the output accumulators a thread of the
// multi-row layout keeps (rows a warp times value columns a lane), so that
// they stay in registers.
const attnRowsAccumulators = 32
