package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// pagedThreads is the paged attention form's default block: 4 warps.
const pagedThreads = 128

// printPagedAttention prints a serving step's paged attention (the
// paged_attention op alone, cost.Paged) in one launch for every sequence
// of the step: a block per (token, key head), grid-striding over the T x
// Hkv pairs. The block finds its token's sequence by a binary search of
// the query starts (tokens past the last present sequence write zeros),
// reads the sequence's length and first token, and so the token's
// position p, cached context ctx and first key lo (the window's start).
// The group's query rows go to shared memory in f32; then warp w of W
// takes the tiles of 32 keys lo + 32w, lo + 32(w + W), ... up to p, lane
// c key c of a tile: a key below ctx is the pool's slot table[seq, j /
// Block] * Block + j % Block, the block id loaded by the lane at the
// block's first position (or the tile's first lane) and passed to the
// others by a shuffle, so once per Block positions; a key at or past ctx
// is the step's own row first + j - ctx of k and v. Each lane scores its
// key against the group's query heads (its key row read 4 elements a
// load where the head size allows); each warp keeps a running max and
// sum per head (shuffles) and accumulates value columns lane, lane + 32,
// ... of the tile's probability-weighted value rows, in f32. At the end
// the block combines its warps' partials as flash-decoding does and
// rounds each output element once to q's dtype.
//
// With KeySplits n above 1 (flash-decoding, for steps of few tokens over
// long contexts, whose T x Hkv blocks would leave most of the device
// idle) each pair's keys lo..p are split across n consecutive blocks, each
// an equal share in whole tiles (PagedSplitChunk's; a short context
// leaves the last shares empty). Each block combines its warps as above
// but keeps the result unnormalized, in f32: it writes its running max,
// sum and accumulators per query head to the kernel's workspace, counts
// itself done on its pair's counter (an atomic add after a memory fence)
// and the pair's last block combines the n partials in split order, a
// split that saw no key (max -inf) weighing 0, rounds once to q's dtype
// and resets the counter for the next launch, as the decode kind's
// flash-decoding layout does (attention_decode.go, which says why the
// kernel's static workspace may be shared by its launches). Split 0
// always holds key lo, so the sum is never 0. The grid is pairs x n
// blocks, the splits of a pair consecutive (Kernel.BlockGroup), and
// follows the tokens present as before (n x Hkv blocks a token).
//
// With sinks (the op's tenth operand, gpt-oss's learned sink logit a
// query head) each head's softmax has one more term in its denominator:
// the sink is counted once, in the final combine (the warps' without a
// split, the pair's last block's with splits), which takes it into the
// max and adds exp(sink - max) to the sum, never to the accumulators.
// Counting it anywhere earlier would count it once a warp or a split.
//
// The work follows the lengths: a block reads only the keys lo..p of its
// token and the table entries of its sequence's cached blocks below ctx,
// never the pool's capacity or the table's width. The metadata is read
// from device memory as the host wrote it, and trusted: it is checked
// before launch as ir.PagedTokens checks it (the host library's lum_run,
// the GPU runner's plan.CheckPaged, the emulation's NewEmulation), since
// a block id past the pool would read outside it.
func printPagedAttention(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := cost.Paged(body)
	if err != nil {
		return "", err
	}
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: cost.PagedTile, Threads: pagedThreads, SplitKeys: true}
	}
	warps, splits := s.Threads/32, max(s.KeySplits, 1)
	if s.BM != 1 || s.BN != cost.PagedTile || !s.SplitKeys || s.Threads%32 != 0 || warps < 1 || s.Threads > 1024 ||
		s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Tensor || s.GEMV || s.TM != 0 || s.Warp != 0 || s.KeySplits < 0 || s.KeySplits > cost.PagedMaxSplits {
		return "", fmt.Errorf("paged attention: schedule %s: a token and key head a block (bm=1), %d keys (bn) a warp's step, the warps sharing the keys (splitkeys), 32 to 1024 threads, keys split across at most %d blocks", s, cost.PagedTile, cost.PagedMaxSplits)
	}
	G, D := p.Group(), p.D
	cols := (D + 31) / 32
	if G*cols > 32 {
		return "", fmt.Errorf("paged attention: %d query heads a key head of size %d keep %d accumulators a lane, more than 32", G, D, G*cols)
	}
	if sh := cost.PagedShared(p, warps, splits); sh > attnStaticShared {
		return "", fmt.Errorf("paged attention: schedule %s: %d bytes of shared memory, more than %d", s, sh, attnStaticShared)
	}
	ws := cost.PagedWorkspace(p, splits)
	if ws > cost.PagedMaxWorkspace {
		return "", fmt.Errorf("paged attention: schedule %s: a workspace of %d bytes for %d tokens, more than %d", s, ws, p.T, cost.PagedMaxWorkspace)
	}
	k.Schedule = s
	pairs := p.T * p.Hkv
	k.Block = [3]int{s.Threads, 1, 1}
	// A multiple of splits blocks, so that grid-striding keeps a pair's splits
	// in one group of consecutive blocks.
	k.Grid = [3]int{int(min(max(pairs*int64(splits), 1), 65535/int64(splits)*int64(splits))), 1, 1}
	k.Workspace = ws
	n := body.Node(p.Node)
	arg := func(i int) string { return paramName(body, n.Inputs[i]) }
	kk, kpool, vpool := arg(1), arg(3), arg(4)
	meta := func(i int, at string) string { return load(p.MetaTypes[i], fmt.Sprintf("%s[%s]", arg(5+i), at)) }
	dt := p.DType
	st := storageType(dt)
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	// The sinks' lines in the final combine (see above); a partial that
	// saw no key still weighs 0, and M is finite.
	sinkMax, sinkSum := func(func(string, ...any), string) {}, func(func(string, ...any), string) {}
	if p.Sinks.Valid() {
		sink := load(p.Sinks, fmt.Sprintf("%s[kh * %dLL + g]", arg(9), G))
		sinkMax = func(w func(string, ...any), ind string) {
			w("%s// The head's sink: a logit in the denominator alone, counted once.\n", ind)
			w("%sconst float sk = %s;\n%sM = M > sk ? M : sk;\n", ind, sink, ind)
		}
		sinkSum = func(w func(string, ...any), ind string) { w("%sL += expf(sk - M);\n", ind) }
	}
	w("  __shared__ float Qs[%d][%d];\n  __shared__ float Ps[%d][%d][%d];\n", G, D, warps, G, cost.PagedTile)
	w("  __shared__ float Os[%d][%d][%d];\n  __shared__ float Ms[%d][%d], Ls[%d][%d];\n", warps, G, D, warps, G, warps, G)
	w("  // A tile's key rows: a pool slot (>= 0), or -1 - the step's row.\n")
	w("  __shared__ long long Rs[%d][%d];\n", warps, cost.PagedTile)
	if splits > 1 {
		k.BlockGroup = splits
		w("  // The workspace: each block's partial softmax (per query head of the\n")
		w("  // group a max, a sum and %d accumulators, f32) and each pair's count\n", D)
		w("  // of finished blocks, which its last block resets; the loader zeroes\n  // both.\n")
		w("  static float lum_ws[%d];\n  static unsigned lum_wc[%d] = {};\n", pairs*int64(splits)*G*(D+2), pairs)
		w("  __shared__ bool lum_last;\n")
	}
	w("  const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;\n")
	w("  const long long seqs = %s;\n", meta(3, "0"))
	bound := fmt.Sprintf("%dLL", pairs*int64(splits))
	if k.count != nil && !k.count.Sequences && k.count.Max == p.T && k.count.Axis == 0 {
		// The tokens present, read from the row count's parameters (in
		// a step, the same metadata): a token past them belongs to no
		// sequence and is not written.
		w("%s", k.count.line())
		bound = fmt.Sprintf("lum_t * %dLL", p.Hkv*int64(splits))
		k.Rows = &RowGrid{Dim: 0, Num: p.Hkv * int64(splits), Den: 1}
	}
	if splits > 1 {
		w("  for (long long bs = blockIdx.x; bs < %s; bs += gridDim.x) {\n", bound)
		w("    // The pair (token, key head) and which of its %d shares of keys.\n", splits)
		w("    const long long bt = bs / %dLL, split = bs %% %dLL;\n", splits, splits)
	} else {
		w("  for (long long bt = blockIdx.x; bt < %s; bt += gridDim.x) {\n", bound)
	}
	w("    const long long t = bt / %dLL, kh = bt %% %dLL;\n", p.Hkv, p.Hkv)
	w("    // The query rows of the group and their outputs: heads kh * %d on.\n", G)
	w("    const long long qo = (t * %dLL + kh * %dLL) * %dLL;\n", p.Hq, G, D)
	w("    // The token's sequence: the last s < seqs with starts[s] <= t\n    // (starts[0] is 0), none past starts[seqs].\n")
	w("    long long seq = -1;\n")
	w("    if (seqs > 0 && t < %s) {\n", meta(2, "seqs"))
	w("      long long a = 0, z = seqs - 1;\n")
	w("      while (a < z) {\n        const long long mid = (a + z + 1) / 2;\n")
	w("        if (%s <= t) a = mid; else z = mid - 1;\n      }\n      seq = a;\n    }\n", meta(2, "mid"))
	w("    if (seq < 0) {\n")
	zeros := fmt.Sprintf("for (long long i = threadIdx.x; i < %dLL; i += blockDim.x) out0[qo + i] = %s;", G*D, store(dt, "0.0f"))
	if splits > 1 {
		// The first split alone writes them; none counts itself.
		zeros = "if (split == 0)\n        " + zeros
	}
	w("      %s\n      continue;\n    }\n", zeros)
	w("    const long long first = %s, last = %s;\n", meta(2, "seq"), meta(2, "seq + 1"))
	w("    const long long ctx = %s - (last - first);\n", meta(1, "seq"))
	w("    const long long pos = ctx + t - first;\n")
	if p.Window > 0 {
		w("    const long long lo = pos - %dLL + 1 > 0 ? pos - %dLL + 1 : 0;\n", p.Window, p.Window)
	} else {
		w("    const long long lo = 0;\n")
	}
	if splits > 1 {
		w("    // The split's keys kb..ke-1: an equal share of lo..pos in whole tiles\n    // (the last shares of a short context are empty).\n")
		w("    const long long chunk = (pos - lo + %dLL) / %dLL * %dLL;\n", int64(splits)*cost.PagedTile, int64(splits)*cost.PagedTile, cost.PagedTile)
		w("    const long long kb = lo + split * chunk, ke = kb + chunk < pos + 1 ? kb + chunk : pos + 1;\n")
	} else {
		w("    const long long kb = lo, ke = pos + 1;\n")
	}
	qLines, qv, err := pagedRead(body, n, 0, "t", fmt.Sprintf("(kh * %dLL + i / %d)", G, D), fmt.Sprintf("(i %% %d)", D))
	if err != nil {
		return "", err
	}
	w("    for (long long i = threadIdx.x; i < %dLL; i += blockDim.x) {\n", G*D)
	printLines(&b, qLines, "      ")
	w("      Qs[i / %d][i %% %d] = %s;\n    }\n", D, D, qv)
	w("    float m[%d], l[%d], o[%d][%d];\n", G, G, G, cols)
	w("    for (int g = 0; g < %d; g++) {\n      m[g] = -INFINITY;\n      l[g] = 0.0f;\n", G)
	w("      for (int c = 0; c < %d; c++) o[g][c] = 0.0f;\n    }\n", cols)
	w("    __syncthreads();\n")
	w("    for (long long j0 = kb + warp * %d; j0 < ke; j0 += %d) {\n", cost.PagedTile, warps*cost.PagedTile)
	w("      const long long j = j0 + lane;\n      const bool live = j < ke;\n")
	w("      // The block id, loaded by the lane at a block's first position or\n      // the tile's first lane, shuffled to the lanes of the same block.\n")
	w("      const int within = (int)(j %% %dLL);\n", p.Block)
	w("      long long blk = 0;\n")
	w("      if (live && j < ctx && (lane == 0 || within == 0)) blk = %s;\n", meta(0, fmt.Sprintf("seq * %dLL + %s", p.Blocks, pagedBlockIndex(p.Block))))
	w("      blk = __shfl_sync(0xffffffffu, blk, lane > within ? lane - within : 0);\n")
	w("      const long long r = !live ? 0 : j < ctx ? blk * %dLL + within : -1 - (first + j - ctx);\n", p.Block)
	w("      Rs[warp][lane] = r;\n")
	w("      float sc[%d];\n", G)
	w("      for (int g = 0; g < %d; g++) sc[g] = -INFINITY;\n", G)
	w("      if (live) {\n")
	w("        float dot[%d];\n        for (int g = 0; g < %d; g++) dot[g] = 0.0f;\n", G, G)
	// The key's row from the pool, or the step's own, read in place or
	// through its views (a slice of a fused projection, a reshape).
	dotRow := func(ptr string) {
		w("          const %s* kr = %s;\n", st, ptr)
		if D%4 == 0 {
			// Rows of whole quads: a vector load of 4 elements at a time
			// (rows start at multiples of D, so the quads are aligned).
			w("          for (int d = 0; d < %d; d += 4) {\n            const float4 kd = lum_ld4%s(kr + d);\n", D, vectorSuffix(dt))
			w("            for (int g = 0; g < %d; g++) dot[g] += Qs[g][d] * kd.x + Qs[g][d + 1] * kd.y + Qs[g][d + 2] * kd.z + Qs[g][d + 3] * kd.w;\n          }\n", G)
		} else {
			w("          for (int d = 0; d < %d; d++) {\n            const float kd = %s;\n", D, load(dt, "kr[d]"))
			w("            for (int g = 0; g < %d; g++) dot[g] += Qs[g][d] * kd;\n          }\n", G)
		}
	}
	w("        if (r >= 0) {\n")
	dotRow(fmt.Sprintf("%s + (r * %dLL + kh) * %dLL", kpool, p.Hkv, D))
	w("        } else {\n")
	if pagedDirect(body, n, 1) {
		dotRow(fmt.Sprintf("%s + ((-1 - r) * %dLL + kh) * %dLL", kk, p.Hkv, D))
	} else {
		kLines, kv, err := pagedRead(body, n, 1, "(-1 - r)", "kh", "d")
		if err != nil {
			return "", err
		}
		w("          for (int d = 0; d < %d; d++) {\n", D)
		printLines(&b, kLines, "            ")
		w("            for (int g = 0; g < %d; g++) dot[g] += Qs[g][d] * %s;\n          }\n", G, kv)
	}
	w("        }\n")
	w("        for (int g = 0; g < %d; g++) sc[g] = dot[g] * %s;\n      }\n", G, floatLiteral(p.Scale))
	w("      for (int g = 0; g < %d; g++) {\n", G)
	w(`        float mx = sc[g];
        for (int x = 16; x > 0; x >>= 1) { const float y = __shfl_xor_sync(0xffffffffu, mx, x); mx = mx > y ? mx : y; }
        const float mnew = m[g] > mx ? m[g] : mx;
        const float pt = live ? expf(sc[g] - mnew) : 0.0f;
        float ps = pt;
        for (int x = 16; x > 0; x >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, x);
        // The warp's earlier tiles rescaled to the new max.
        const float alpha = m[g] == -INFINITY ? 0.0f : expf(m[g] - mnew);
        m[g] = mnew;
        l[g] = l[g] * alpha + ps;
        Ps[warp][g][lane] = pt;
`)
	w("        for (int c = 0; c < %d; c++) o[g][c] *= alpha;\n      }\n", cols)
	w("      // The warp reads its own probabilities and rows only.\n      __syncwarp();\n")
	w("      for (int c = 0; c < %d && j0 + c < ke; c++) {\n", cost.PagedTile)
	w("        const long long rc = Rs[warp][c];\n")
	// The value row: the same for the whole warp, so either branch is
	// taken by all of its lanes.
	accumulate := func(lines []string, val string) {
		w("          for (int x = 0; x < %d; x++) {\n", cols)
		w("            const int d = lane + 32 * x;\n            if (d >= %d) break;\n", D)
		printLines(&b, lines, "            ")
		w("            const float vd = %s;\n", val)
		w("            for (int g = 0; g < %d; g++) o[g][x] += Ps[warp][g][c] * vd;\n          }\n", G)
	}
	w("        if (rc >= 0) {\n")
	w("          const %s* vr = %s + (rc * %dLL + kh) * %dLL;\n", st, vpool, p.Hkv, D)
	accumulate(nil, load(dt, "vr[d]"))
	w("        } else {\n")
	vLines, vval, err := pagedRead(body, n, 2, "(-1 - rc)", "kh", "d")
	if err != nil {
		return "", err
	}
	accumulate(vLines, vval)
	w("        }\n      }\n")
	w("      // The next tile overwrites Ps and Rs.\n      __syncwarp();\n    }\n")
	w("    // The combine across the warps; a warp that saw no key has m = -inf\n    // and weighs 0 (warp 0 always sees key kb, but in an empty share).\n")
	w("    for (int g = 0; g < %d; g++) {\n", G)
	w("      if (lane == 0) {\n        Ms[warp][g] = m[g];\n        Ls[warp][g] = l[g];\n      }\n")
	w("      for (int x = 0; x < %d; x++) {\n        const int d = lane + 32 * x;\n", cols)
	w("        if (d < %d) Os[warp][g][d] = o[g][x];\n      }\n    }\n", D)
	w("    __syncthreads();\n")
	w("    for (long long i = threadIdx.x; i < %dLL; i += blockDim.x) {\n", G*D)
	w("      const int g = (int)(i / %d), d = (int)(i %% %d);\n", D, D)
	w("      float M = -INFINITY;\n")
	w("      for (int x = 0; x < %d; x++) M = M > Ms[x][g] ? M : Ms[x][g];\n", warps)
	if splits == 1 {
		sinkMax(w, "      ")
	}
	w("      float acc = 0.0f, L = 0.0f;\n")
	w("      for (int x = 0; x < %d; x++) {\n", warps)
	w("        const float a = Ms[x][g] == -INFINITY ? 0.0f : expf(Ms[x][g] - M);\n")
	w("        acc += a * Os[x][g][d];\n        L += a * Ls[x][g];\n      }\n")
	if splits == 1 {
		sinkSum(w, "      ")
		w("      out0[qo + i] = %s;\n    }\n", store(dt, "(acc / L)"))
	} else {
		printPagedCombine(w, splits, G, D, dt, sinkMax, sinkSum)
	}
	w("    // The next token overwrites Qs, Ms, Ls and Os, which slower threads\n    // may still read.\n    __syncthreads();\n  }\n")
	return b.String(), nil
}

// printPagedCombine prints, inside the loop over the warps' combined
// elements i of a split block (acc, L and M for query head g, column d),
// the block's partial written to the workspace, its count on its pair's
// counter, and the pair's last block combining the splits partials in split
// order into out0 (see printPagedAttention).
func printPagedCombine(w func(string, ...any), splits int, G, D int64, dt ir.DType, sinkMax, sinkSum func(func(string, ...any), string)) {
	part := G * (D + 2) // one split's partial
	w("      // The block's partial, unnormalized: split j of pair bt, head g.\n")
	w("      float* const part = lum_ws + ((bt * %dLL + split) * %d + g) * %d;\n", splits, G, D+2)
	w("      part[d] = acc;\n      if (d == 0) {\n        part[%d] = M;\n        part[%d] = L;\n      }\n    }\n", D, D+1)
	w("    // The partial is visible device-wide before the block counts itself\n    // done; the block that counts last sees every other's.\n")
	w("    __threadfence();\n    __syncthreads();\n")
	w("    if (threadIdx.x == 0) lum_last = atomicAdd(&lum_wc[bt], 1u) == %du;\n", splits-1)
	w("    __syncthreads();\n")
	w("    if (lum_last) {\n      __threadfence();\n")
	w("      for (long long i = threadIdx.x; i < %dLL; i += blockDim.x) {\n", G*D)
	w("        const int g = (int)(i / %d), d = (int)(i %% %d);\n", D, D)
	w("        const float* const part = lum_ws + (bt * %dLL * %d + g) * %d;\n", splits, G, D+2)
	w("        float M = -INFINITY;\n")
	w("        for (int x = 0; x < %d; x++) {\n          const float mx = __ldcg(part + x * %d + %d);\n          M = M > mx ? M : mx;\n        }\n", splits, part, D)
	sinkMax(w, "        ")
	w("        float acc = 0.0f, L = 0.0f;\n")
	w("        for (int x = 0; x < %d; x++) {\n", splits)
	w("          const float* const px = part + x * %d;\n", part)
	w("          const float mx = __ldcg(px + %d);\n", D)
	w("          const float a = mx == -INFINITY ? 0.0f : expf(mx - M);\n")
	w("          acc += a * __ldcg(px + d);\n          L += a * __ldcg(px + %d);\n        }\n", D+1)
	sinkSum(w, "        ")
	w("        out0[qo + i] = %s;\n      }\n", store(dt, "(acc / L)"))
	w("      if (threadIdx.x == 0) lum_wc[bt] = 0u;\n    }\n")
}

// pagedDirect says operand k of paged attention n is a kernel argument
// itself, read in place (not through views).
func pagedDirect(body *ir.Graph, n *ir.Node, k int) bool {
	return body.Node(n.Inputs[k]).Op == ir.OpInput
}

// pagedRead is the element (row, head, d) of operand k (q, k or v) of
// paged attention n, read through the views and casts between it and the
// kernel's arguments (cost.Paged admits only those): the lines that
// compute it and its f32 value.
func pagedRead(body *ir.Graph, n *ir.Node, k int, row, head, d string) ([]string, string, error) {
	e := &elementwise{body: body, temps: map[string]string{}}
	v, err := e.value(n.Inputs[k], index{row, head, d}, false)
	if err != nil {
		return nil, "", fmt.Errorf("paged attention: operand %d: %w", k, err)
	}
	return e.lines, v, nil
}

// pagedBlockIndex is the block table column of key position j: the
// tests plant an off-by-one in it, so it is printed from one place.
func pagedBlockIndex(block int64) string {
	return fmt.Sprintf("j / %dLL", block)
}

// floatLiteral prints an f32 constant as a C float literal.
func floatLiteral(x float64) string {
	return fmt.Sprintf("%.9ef", float32(x))
}
