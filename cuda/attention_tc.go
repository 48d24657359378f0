package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The attention form on tensor cores, FlashAttention-2 style, for f16 and
// bf16 operands (q, k, v and the probabilities all of one of them): a block
// of W warps owns BM = 16 W query rows of one batch (and head), warp w rows
// 16 w .. 16 w + 15, the rows of one m16n8k16 tile. Per tile of BN keys:
//
//   - S = Q K^T: the query rows' A fragments stay in registers for the
//     whole kernel (loaded once, through shared memory and ldmatrix); the keys' B
//     fragments come from the key tile with ldmatrix (a key's head dims
//     are contiguous, the "col" layout mma takes); f32 accumulators.
//   - The elementwise scores (scale, mask) are computed on the
//     accumulators, each at its (query row, key) of the m16n8 C layout:
//     lane l holds rows l/4 and l/4 + 8, keys 2 (l%4) and 2 (l%4) + 1 of
//     every 8, so a row's values sit in the 4 lanes of a quad, whose
//     shuffles (xor 1, 2) give the row max and sum of the online softmax.
//   - The probabilities exp(s - max), rounded to the operand dtype, are the
//     A fragments of P V as they stand: the C layout of two adjacent n8
//     tiles is the A layout of one k16 step, so the registers are reused
//     with no trip through shared memory.
//   - O += P V: the values' B fragments come from the row-major value tile
//     with ldmatrix.trans; the output accumulators (f32) are rescaled by
//     exp(old max - new max) before each tile's sum.
//
// The output is divided by the running sum once, at the end. The key and
// value tiles are loaded one while the other is used: the value tile while
// the scores and softmax run, the next key tile while P V runs, by cp.async
// where the operand is a plain buffer (through views keeping its head dim
// contiguous: the GQA reshape-expand of k and v), else computed in f32
// through the operand's prologue (rotary) and rounded once, when packed.
// Head dims are padded to multiples of 16 with zeros, keys from the key
// loop's end on (T, or the mask's bound: keyLoop) zeros, never read, and
// their scores -inf, query rows past S zeros and not stored.
//
// Numerics: the probabilities enter P V rounded to the operand dtype, as
// the graph's own cast of the softmax to that dtype does (though here
// before the division by the sum, FlashAttention's way); the sum is of the
// unrounded values. A computed q or k is rounded to the operand dtype once,
// where the reference keeps it exact: the tensor cores take f16/bf16.

// attnTCPad is the words of padding per shared row: row strides of 4 (mod
// 8) words put the 8 rows an ldmatrix phase reads (and the rows of the
// query fragments) in different banks, and keep rows 16-byte aligned.
const attnTCPad = 4

// attnTCMaxHead bounds the padded head dims of the tensor-core layout:
// past it the output accumulators and query fragments no longer fit in
// registers (at 256, sm_90 needs 255 registers and spills; at 192, 229).
const attnTCMaxHead = 192

func pad16(n int64) int64 { return (n + 15) / 16 * 16 }

// attnTCShared is the shared memory, in bytes, of the tensor-core layout:
// the query tile is staged where the key and value tiles go afterwards.
// cost.attentionFeatures prices the same.
func attnTCShared(bm, bn int, d, dv int64) int64 {
	kw, vw := pad16(d)/2+attnTCPad, pad16(dv)/2+attnTCPad
	return 4 * max(int64(bm)*kw, int64(bn)*(kw+vw))
}

// attnTCDType is the operand dtype of an attention body's tensor-core
// layout: q, k, v and the probabilities all f16 or all bf16.
func attnTCDType(body *ir.Graph, p cost.AttentionParts) (ir.DType, error) {
	dt := body.Node(p.Q).DType
	probs := body.Node(p.PV).Inputs[0]
	for _, v := range []ir.Value{p.KT, p.V, probs} {
		if body.Node(v).DType != dt {
			dt = ir.F32
		}
	}
	if dt != ir.F16 && dt != ir.BF16 {
		return dt, fmt.Errorf("the tensor-core attention takes q, k, v and the probabilities all f16 or all bf16, not %s, %s, %s and %s",
			body.Node(p.Q).DType, body.Node(p.KT).DType, body.Node(p.V).DType, body.Node(probs).DType)
	}
	return dt, nil
}

// attnDirect walks an operand's views down to an input: it returns the
// input and the input's index of the operand's element at ix, when the
// operand is an input of dtype dt seen through reshapes, expands and
// permutes that keep its last axis contiguous and last (so that 8
// consecutive elements along it are 16 contiguous, aligned bytes, given
// last axes of multiples of 8 and an index there of one).
func attnDirect(body *ir.Graph, v ir.Value, ix index, dt ir.DType) (ir.Value, index, bool) {
	for {
		n := body.Node(v)
		last := len(n.Shape) - 1
		if last < 0 {
			return 0, nil, false
		}
		var in ir.Shape
		if len(n.Inputs) > 0 {
			in = body.Node(n.Inputs[0]).Shape
		}
		switch n.Op {
		case ir.OpInput:
			if n.DType != dt || n.Shape[last]%8 != 0 {
				return 0, nil, false
			}
			return v, ix, true
		case ir.OpReshape:
			// Equal last axes, or the input's split into the output's
			// (heads out of a row of a projection): a run along the
			// output's last axis stays a run along the input's.
			if len(in) == 0 || in[len(in)-1]%n.Shape[last] != 0 {
				return 0, nil, false
			}
			ix = split(in, linear(n.Shape, ix))
		case ir.OpExpand:
			if in[last] != n.Shape[last] {
				return 0, nil, false
			}
			kix := make(index, len(in))
			for d := range in {
				kix[d] = ix[d]
				if in[d] == 1 {
					kix[d] = "0"
				}
			}
			ix = kix
		case ir.OpPermute:
			if n.Attrs.Perm[last] != last {
				return 0, nil, false
			}
			kix := make(index, len(ix))
			for d, p := range n.Attrs.Perm {
				kix[p] = ix[d]
			}
			ix = kix
		default:
			return 0, nil, false
		}
		v = n.Inputs[0]
	}
}

// attnOperandTile is one operand tile of the tensor-core layout: rows of packed
// pairs of the operand dtype in shared memory.
type attnOperandTile struct {
	dst      string // the shared array
	rows     int    // rows in the tile
	rowVar   string // the row's index variable (a query row, a key)
	rowBase  string // the tile's first row
	rowLimit string // rows from it on are zeros (a C expression)
	colVar   string // the column's index variable (a head dim)
	cols     int64  // columns; past them, up to the padded width, zeros
	words    int64  // the row stride in words
	operand  ir.Value
	// at is the operand's index at (row, col); src, when the operand is
	// read directly, the index of the source that holds it with col
	// contiguous (for the keys, the transposed k before the permute).
	at   func(row, col string) index
	src  func(row, col string) index
	srcV ir.Value
}

// printTileLoad prints the loading of one tile by the block's threads:
// 16-byte cp.async copies when the operand is a plain buffer (waited for
// by lum_cp_async_wait), else pairs of values computed in f32 and packed.
func printTileLoad(b *strings.Builder, body *ir.Graph, tl attnOperandTile, dt ir.DType, threads int, indent string) error {
	padded := pad16(tl.cols)
	suffix := map[ir.DType]string{ir.F16: "f16", ir.BF16: "bf16"}[dt]
	if tl.srcV >= 0 && tl.cols%8 == 0 && (int64(tl.rows)*padded/8+int64(threads)-1)/int64(threads) <= 32 {
		if in, six, ok := attnDirect(body, tl.srcV, tl.src(tl.rowVar, tl.colVar), dt); ok {
			chunks := int64(tl.rows) * padded / 8
			fmt.Fprintf(b, "%sfor (int i = threadIdx.x; i < %d; i += %d) {\n", indent, chunks, threads)
			fmt.Fprintf(b, "%s  const int rr = i / %d, cc = i %% %d * 8;\n", indent, padded/8, padded/8)
			fmt.Fprintf(b, "%s  const long long %s = %s + rr, %s = cc;\n", indent, tl.rowVar, tl.rowBase, tl.colVar)
			fmt.Fprintf(b, "%s  if (%s < %s && %s < %dLL) lum_cp_async16(&%s[rr * %d + cc / 2], %s + %s);\n",
				indent, tl.rowVar, tl.rowLimit, tl.colVar, tl.cols, tl.dst, tl.words, paramName(body, in), linear(body.Node(in).Shape, six))
			fmt.Fprintf(b, "%s  else for (int w = 0; w < 4; w++) %s[rr * %d + cc / 2 + w] = 0u;\n", indent, tl.dst, tl.words)
			fmt.Fprintf(b, "%s}\n", indent)
			return nil
		}
	}
	pairs := int64(tl.rows) * padded / 2
	fmt.Fprintf(b, "%sfor (int i = threadIdx.x; i < %d; i += %d) {\n", indent, pairs, threads)
	fmt.Fprintf(b, "%s  const int rr = i / %d, cp = i %% %d;\n", indent, padded/2, padded/2)
	fmt.Fprintf(b, "%s  const long long %s = %s + rr;\n", indent, tl.rowVar, tl.rowBase)
	b.WriteString(indent + "  float lo = 0.0f, hi = 0.0f;\n")
	fmt.Fprintf(b, "%s  if (%s < %s) {\n", indent, tl.rowVar, tl.rowLimit)
	for h, name := range []string{"lo", "hi"} {
		e := &elementwise{body: body, temps: map[string]string{}}
		x, err := e.value(tl.operand, tl.at(tl.rowVar, tl.colVar), false)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s    {\n", indent)
		fmt.Fprintf(b, "%s      const long long %s = 2 * cp + %d;\n", indent, tl.colVar, h)
		fmt.Fprintf(b, "%s      if (%s < %dLL) {\n", indent, tl.colVar, tl.cols)
		printLines(b, e.lines, indent+"        ")
		fmt.Fprintf(b, "%s        %s = %s;\n%s      }\n%s    }\n", indent, name, x, indent, indent)
	}
	fmt.Fprintf(b, "%s  }\n", indent)
	fmt.Fprintf(b, "%s  %s[rr * %d + cp] = lum_pack_%sx2(lo, hi);\n", indent, tl.dst, tl.words, suffix)
	fmt.Fprintf(b, "%s}\n", indent)
	return nil
}

// printAttentionTC prints the tensor-core layout (Tensor, BM = 16 query
// rows a warp, BN keys a tile, a multiple of 16).
func printAttentionTC(k *Kernel, body *ir.Graph, p cost.AttentionParts, s cost.Schedule) (string, error) {
	dt, err := attnTCDType(body, p)
	if err != nil {
		return "", fmt.Errorf("attention: schedule %s: %w", s, err)
	}
	g := attentionGeometry(body, p)
	S, D, T, Dv := g.S, g.D, g.T, g.Dv
	warps := s.BM / 16
	if s.BM%16 != 0 || warps < 1 || warps > 8 || s.Threads != 32*warps || s.BN%16 != 0 || s.BN < 16 || s.BN > 128 || s.BK != 0 || s.Stages != 0 || s.Rows != 0 {
		return "", fmt.Errorf("attention: schedule %s: the tensor-core layout takes a warp per 16 query rows (bm 16 to 128, 32 threads a warp) and keys (bn) 16 to 128 a tile, a multiple of 16", s)
	}
	Dp, Dvp := pad16(D), pad16(Dv)
	if Dp > attnTCMaxHead || Dvp > attnTCMaxHead {
		return "", fmt.Errorf("attention: schedule %s: head dims %d and %d, more than the %d the tensor-core layout keeps in registers", s, D, Dv, attnTCMaxHead)
	}
	if sh := attnTCShared(s.BM, s.BN, D, Dv); sh > attnStaticShared {
		return "", fmt.Errorf("attention: schedule %s: %d bytes of shared memory for head dims %d and %d, more than %d", s, sh, D, Dv, attnStaticShared)
	}
	suffix := map[ir.DType]string{ir.F16: "f16", ir.BF16: "bf16"}[dt]
	k.Schedule = s
	BM, BN := int64(s.BM), int64(s.BN)
	kw, vw := Dp/2+attnTCPad, Dvp/2+attnTCPad
	tilesS := (S + BM - 1) / BM
	k.Block = [3]int{s.Threads, 1, 1}
	k.Grid = [3]int{int(min(g.batch*tilesS, 65535)), 1, 1}
	dk, nb, dn := Dp/16, BN/8, Dvp/8 // k16 steps of Q K^T, n8 tiles of S and of O
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ __align__(16) unsigned Sm[%d];\n", attnTCShared(s.BM, s.BN, D, Dv)/4)
	b.WriteString("  // The query tile is staged where the key and value tiles go next.\n")
	fmt.Fprintf(&b, "  unsigned* const Qs = Sm;\n  unsigned* const Ks = Sm;\n  unsigned* const Vs = Sm + %d;\n", BN*kw)
	b.WriteString("  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, tg = lane % 4;\n")
	fmt.Fprintf(&b, "  for (long long tile = blockIdx.x; tile < %dLL; tile += gridDim.x) {\n", g.batch*tilesS)
	fmt.Fprintf(&b, "    const long long s0 = tile %% %dLL * %d;\n    long long bz = tile / %dLL;\n", tilesS, BM, tilesS)
	g.printBatch(&b, "    ")
	keys := printKeyLoop(&b, body, p, T, "s0", lastRow(BM, S), "    ")

	qShape, ktShape, vShape := body.Node(p.Q).Shape, body.Node(p.KT).Shape, body.Node(p.V).Shape
	qTile := attnOperandTile{dst: "Qs", rows: s.BM, rowVar: "s", rowBase: "s0", rowLimit: fmt.Sprintf("%dLL", S), colVar: "dd", cols: D, words: kw, operand: p.Q,
		at: func(row, col string) index { return g.opIndex(qShape, row, col) }, srcV: p.Q}
	qTile.src = qTile.at
	// The keys: kt is k transposed; its source before the permute holds a
	// key's head dims contiguously.
	kTile := attnOperandTile{dst: "Ks", rows: s.BN, rowVar: "tk", rowBase: "t0", rowLimit: keys.end, colVar: "dd", cols: D, words: kw, operand: p.KT,
		at: func(row, col string) index { return g.opIndex(ktShape, col, row) }, srcV: -1}
	if n := body.Node(p.KT); n.Op == ir.OpPermute && swapsLastTwo(n.Attrs.Perm) {
		src := body.Node(n.Inputs[0]).Shape
		kTile.srcV = n.Inputs[0]
		kTile.src = func(row, col string) index { return g.opIndex(src, row, col) }
	}
	vTile := attnOperandTile{dst: "Vs", rows: s.BN, rowVar: "tk", rowBase: "t0", rowLimit: keys.end, colVar: "d", cols: Dv, words: vw, operand: p.V,
		at: func(row, col string) index { return g.opIndex(vShape, row, col) }, srcV: p.V}
	vTile.src = vTile.at

	b.WriteString("    // The query rows, their A fragments kept in registers.\n")
	if err := printTileLoad(&b, body, qTile, dt, s.Threads, "    "); err != nil {
		return "", err
	}
	b.WriteString("    lum_cp_async_wait();\n    __syncthreads();\n")
	fmt.Fprintf(&b, "    unsigned qa[%d][4];\n", dk)
	// ldmatrix: lane l addresses row l %% 8 of matrix l / 8, the matrices
	// (rows 0-7, dims 0-7), (rows 8-15, dims 0-7), (rows 0-7, dims 8-15),
	// (rows 8-15, dims 8-15) of the warp's 16 rows: a0..a3 of the A
	// fragment.
	fmt.Fprintf(&b, "    for (int kq = 0; kq < %d; kq++)\n", dk)
	fmt.Fprintf(&b, "      lum_ldmatrix_x4(qa[kq], Qs + (warp * 16 + lane / 8 %% 2 * 8 + lane %% 8) * %d + kq * 8 + lane / 16 * 4);\n", kw)
	b.WriteString("    __syncthreads();\n")
	fmt.Fprintf(&b, "    float oacc[%d][4];\n    for (int dn = 0; dn < %d; dn++) for (int q = 0; q < 4; q++) oacc[dn][q] = 0.0f;\n", dn, dn)
	b.WriteString("    // Running max and sum of rows g and g + 8 of the warp's 16.\n")
	b.WriteString("    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};\n")
	fmt.Fprintf(&b, "    {\n      const long long t0 = %s;\n", keys.beg)
	if err := printTileLoad(&b, body, kTile, dt, s.Threads, "      "); err != nil {
		return "", err
	}
	b.WriteString("    }\n    lum_cp_async_wait();\n    __syncthreads();\n")
	fmt.Fprintf(&b, "    for (long long t0 = %s; t0 < %s; t0 += %d) {\n", keys.beg, keys.end, BN)
	b.WriteString("      // The value tile loads while the scores are computed.\n")
	if err := printTileLoad(&b, body, vTile, dt, s.Threads, "      "); err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "      float sacc[%d][4];\n      for (int nt = 0; nt < %d; nt++) for (int q = 0; q < 4; q++) sacc[nt][q] = 0.0f;\n", nb, nb)
	fmt.Fprintf(&b, "      for (int kq = 0; kq < %d; kq++) for (int np = 0; np < %d; np++) {\n", dk, nb/2)
	b.WriteString("        unsigned kb[4];\n")
	fmt.Fprintf(&b, "        lum_ldmatrix_x4(kb, Ks + (np * 16 + lane / 16 * 8 + lane %% 8) * %d + kq * 8 + lane / 8 %% 2 * 4);\n", kw)
	fmt.Fprintf(&b, "        lum_mma_m16n8k16_%s(sacc[2 * np], qa[kq], kb);\n", suffix)
	fmt.Fprintf(&b, "        lum_mma_m16n8k16_%s(sacc[2 * np + 1], qa[kq], kb + 2);\n      }\n", suffix)
	// The scores, elementwise on the accumulators.
	es := &elementwise{body: body, temps: map[string]string{}, reduced: map[ir.Value]string{p.QK: "sacc[nt][q]"}}
	sv, err := es.value(p.Scores, g.opIndex(body.Node(p.Scores).Shape, "s", "tk"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "      for (int nt = 0; nt < %d; nt++) for (int q = 0; q < 4; q++) {\n", nb)
	b.WriteString("        const long long s = s0 + warp * 16 + g + q / 2 * 8, tk = t0 + nt * 8 + tg * 2 + q % 2;\n")
	b.WriteString("        float sc = -INFINITY;\n")
	fmt.Fprintf(&b, "        if (s < %dLL && tk < %s) {\n", S, keys.end)
	printLines(&b, es.lines, "          ")
	fmt.Fprintf(&b, "          sc = %s;\n        }\n        sacc[nt][q] = sc;\n      }\n", sv)
	// The online softmax of rows g (h = 0) and g + 8 (h = 1).
	b.WriteString("      for (int h = 0; h < 2; h++) {\n        float mx = -INFINITY;\n")
	fmt.Fprintf(&b, "        for (int nt = 0; nt < %d; nt++) for (int c = 0; c < 2; c++) {\n", nb)
	b.WriteString("          const float x = sacc[nt][2 * h + c];\n          mx = (mx != mx || mx > x) ? mx : x;\n        }\n")
	b.WriteString("        // A row's values sit in the 4 lanes of a quad.\n")
	b.WriteString("        for (int w = 1; w < 4; w <<= 1) { const float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }\n")
	b.WriteString("        const float mnew = (mr[h] != mr[h] || mr[h] > mx) ? mr[h] : mx;\n        float ps = 0.0f;\n")
	fmt.Fprintf(&b, "        for (int nt = 0; nt < %d; nt++) for (int c = 0; c < 2; c++) {\n", nb)
	b.WriteString("          const float x = sacc[nt][2 * h + c];\n")
	b.WriteString("          const float pt = x == -INFINITY ? 0.0f : expf(x - mnew);\n")
	b.WriteString("          sacc[nt][2 * h + c] = pt;\n          ps += pt;\n        }\n")
	b.WriteString("        for (int w = 1; w < 4; w <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);\n")
	b.WriteString("        // The rescaling of what the earlier tiles accumulated.\n")
	b.WriteString("        const float alpha = mr[h] == -INFINITY ? 0.0f : expf(mr[h] - mnew);\n")
	b.WriteString("        mr[h] = mnew;\n        lr[h] = lr[h] * alpha + ps;\n")
	fmt.Fprintf(&b, "        for (int dn = 0; dn < %d; dn++) { oacc[dn][2 * h] *= alpha; oacc[dn][2 * h + 1] *= alpha; }\n      }\n", dn)
	b.WriteString("      // P in the operand dtype: the C fragments of n8 tiles 2kk and 2kk + 1\n")
	b.WriteString("      // are the A fragment of k16 step kk.\n")
	fmt.Fprintf(&b, "      unsigned pa[%d][4];\n      for (int kk = 0; kk < %d; kk++) {\n", nb/2, nb/2)
	for i, src := range []string{"sacc[2 * kk][0], sacc[2 * kk][1]", "sacc[2 * kk][2], sacc[2 * kk][3]", "sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]", "sacc[2 * kk + 1][2], sacc[2 * kk + 1][3]"} {
		fmt.Fprintf(&b, "        pa[kk][%d] = lum_pack_%sx2(%s);\n", i, suffix, src)
	}
	b.WriteString("      }\n")
	b.WriteString("      // The value tile is in; every warp is done with the key tile.\n")
	b.WriteString("      lum_cp_async_wait();\n      __syncthreads();\n")
	fmt.Fprintf(&b, "      if (t0 + %d < %s) {\n", BN, keys.end)
	b.WriteString("        // The next key tile loads while P V runs.\n")
	fmt.Fprintf(&b, "        const long long t1 = t0 + %d;\n", BN)
	kNext := kTile
	kNext.rowBase = "t1"
	if err := printTileLoad(&b, body, kNext, dt, s.Threads, "        "); err != nil {
		return "", err
	}
	b.WriteString("      }\n")
	fmt.Fprintf(&b, "      for (int kk = 0; kk < %d; kk++) for (int np = 0; np < %d; np++) {\n", nb/2, dn/2)
	b.WriteString("        unsigned vb[4];\n")
	fmt.Fprintf(&b, "        lum_ldmatrix_x4_trans(vb, Vs + (kk * 16 + lane / 8 %% 2 * 8 + lane %% 8) * %d + np * 8 + lane / 16 * 4);\n", vw)
	fmt.Fprintf(&b, "        lum_mma_m16n8k16_%s(oacc[2 * np], pa[kk], vb);\n", suffix)
	fmt.Fprintf(&b, "        lum_mma_m16n8k16_%s(oacc[2 * np + 1], pa[kk], vb + 2);\n      }\n", suffix)
	b.WriteString("      // The next key tile is in; every warp is done with the value tile.\n")
	b.WriteString("      lum_cp_async_wait();\n      __syncthreads();\n    }\n")
	// The rows, divided by their sums, through the views after pv.
	st, err := attentionStore(body, p, g.outIndex("s", "d"), "(oacc[dn][q] / lr[q / 2])")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (int dn = 0; dn < %d; dn++) for (int q = 0; q < 4; q++) {\n", dn)
	b.WriteString("      const long long s = s0 + warp * 16 + g + q / 2 * 8, d = dn * 8 + tg * 2 + q % 2;\n")
	fmt.Fprintf(&b, "      if (s >= %dLL || d >= %dLL) continue;\n", S, Dv)
	printLines(&b, st, "      ")
	b.WriteString("    }\n  }\n")
	return b.String(), nil
}

// swapsLastTwo reports whether perm swaps the last two axes and keeps the
// others.
func swapsLastTwo(perm []int) bool {
	r := len(perm)
	if r < 2 {
		return false
	}
	for d, p := range perm {
		want := d
		switch d {
		case r - 2:
			want = r - 1
		case r - 1:
			want = r - 2
		}
		if p != want {
			return false
		}
	}
	return true
}
