package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The matmul kernel form, matrix-vector path (cost's gemv.go says when the
// model picks it and how it prices it): C[b] = A[b] x B[b] for A of at
// most cost.GEMVRows rows and B a weight that is a plain buffer
// (cost.GEMVWeight) or a quantized weight's packed codes (gemv_quant.go),
// a decode step's projections, which stream the weight
// once and are bound by how many bytes each multiprocessor keeps in
// flight. Every thread issues a group of independent 16-byte weight loads
// together, with no branch between them (a column past N reads the last
// column's row, whose sums are never stored; K's rest, fewer passes than
// a group, goes one load at a time after the main loop), and consumes
// them before issuing the next group. Over a K-contiguous weight (an
// nn.Linear weight [N, K] read transposed) a block owns BN columns, each
// warp cols (TM) of them with Stages loads in flight per column, and split
// warps share a group of columns, each a split of K (split-K within the
// block, for few columns). Over a row-major weight ([K, N], N contiguous:
// a weight stored transposed, or a split-K batch) lanes side by side cover
// the block's BN columns, vec each, and the block's rows groups of them
// take every rows-th k, Stages loads in flight a thread. The first group
// is issued before the prologue (gemv_prologue.go: a norm's statistics,
// then A's chunk of K in f32 into shared memory, both with 16-byte loads
// by every thread), which its latency overlaps; the block computes A once
// for all its columns. The lanes' f32 partial sums are reduced by
// shuffles, a split's warps' through shared memory in a fixed order, and
// the epilogue is applied as C is written. Nothing is rounded to a
// narrower type before C's own store.
func printGEMV(k *Kernel, body *ir.Graph, mm ir.Value, s cost.Schedule) (string, error) {
	mn := body.Node(mm)
	a := body.Node(mn.Inputs[0])
	g, err := matmulGeometry(body, mm)
	var gath *cost.Gathered
	if err != nil || cost.WritesWindows(body) {
		// An epilogue that reads other columns than its own, or writes
		// through windows, is gathered (gemv_gather.go).
		var gerr error
		if gath, gerr = cost.GatheredEpilogue(body, mm); gerr != nil {
			if err == nil {
				err = gerr
			}
			return "", err
		}
		g = matmulShape(body, mm)
	}
	M, N, K := g.M, g.N, g.K
	if !s.GEMV || s.Tensor || int64(s.BM) != M || M > cost.GEMVRows || s.Stages < 1 || s.Stages > 8 || s.Threads > 1024 || s.Threads%32 != 0 {
		return "", fmt.Errorf("matrix-vector matmul: schedule %s: it takes BM = M (at most %d rows), whole warps and 1 to 8 stages", s, cost.GEMVRows)
	}
	colMap := gemvColumns{bn: int64(s.BN), N: N}
	if gath != nil {
		colMap.m = gath.Map
	}
	var st gemvStream
	if q, ok := cost.GEMVQuantWeight(body, mm); ok {
		st, err = gemvQuantStream(body, g, q, s, colMap)
	} else {
		st, err = gemvPlainStream(body, mm, g, s, colMap, gath != nil)
	}
	if err != nil {
		return "", err
	}
	chunk, partials := st.chunk, st.partials
	if bytes := 4 * (M*chunk + int64(partials)*M*int64(s.BN)); bytes > cost.GEMVSharedLimit {
		return "", fmt.Errorf("matrix-vector matmul: schedule %s: A's chunk and the partials take %d bytes of shared memory, past the %d a block declares for them", s, bytes, cost.GEMVSharedLimit)
	}
	k.Schedule = s
	BN, threads := s.BN, s.Threads
	k.Block = [3]int{threads, 1, 1}
	k.Grid = [3]int{int((N + int64(BN) - 1) / int64(BN)), 1, int(g.batch)}

	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ __align__(16) float As[%d][%d];\n", M, chunk)
	fmt.Fprintf(&b, "  __shared__ float Part[%d][%d][%d];\n", partials, M, BN)
	b.WriteString("  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n")
	fmt.Fprintf(&b, "  const long long m0 = 0, n0 = (long long)blockIdx.x * %d;\n", BN)
	if g.r > 2 {
		b.WriteString("  long long bz = blockIdx.z;\n")
	}
	for d := g.r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "  long long b%d = bz %% %dLL; bz /= %dLL;\n", d, g.out[d], g.out[d])
	}
	st.decl(&b)
	// The first chunk's first group of weight loads is issued before the
	// prologue, which its latency overlaps.
	b.WriteString("  {\n    const long long k0 = 0;\n")
	fmt.Fprintf(&b, "    const int kc = %d;\n", min(K, chunk))
	st.first(&b, false)
	b.WriteString("  }\n")
	reducedAt, err := gemvNorm(&b, body, a.Shape, M, K, threads)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "  for (long long k0 = 0; k0 < %dLL; k0 += %d) {\n", K, chunk)
	fmt.Fprintf(&b, "    const int kc = (int)(%dLL - k0 < %dLL ? %dLL - k0 : %dLL);\n", K, chunk, K, chunk)
	b.WriteString("    if (k0 > 0) {\n      // The next chunk's first group, in flight while its A is computed.\n")
	st.first(&b, true)
	b.WriteString("    }\n")
	b.WriteString("    __syncthreads(); // the last chunk's readers are done with As\n")
	aIndex := func(k string) index { return g.opIndex(a.Shape, "m", k) }
	if err := gemvChunk(&b, body, mn.Inputs[0], aIndex, M, K, chunk, threads, st.slices, reducedAt); err != nil {
		return "", err
	}
	b.WriteString("    __syncthreads();\n")
	st.main(&b)
	b.WriteString("  }\n")
	st.reduce(&b)
	b.WriteString("  __syncthreads();\n")
	if gath != nil {
		if err := printGatheredEpilogue(&b, k, body, mm, gath, g, colMap, int(M), partials, threads); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	// The partials in a fixed order, and the epilogue.
	fmt.Fprintf(&b, "  for (int t = threadIdx.x; t < %d; t += %d) {\n", int(M)*BN, threads)
	fmt.Fprintf(&b, "    const int i = t / %d, cc = t %% %d;\n", BN, BN)
	b.WriteString("    const long long m = m0 + i, n = n0 + cc;\n")
	fmt.Fprintf(&b, "    if (n >= %dLL) continue;\n", N)
	if gemvRowsOnM(k, g) {
		fmt.Fprintf(&b, "    if (m >= %s) continue;\n", rowLimit(k, M, true))
	}
	b.WriteString("    float sum = Part[0][i][cc];\n")
	if partials > 1 {
		fmt.Fprintf(&b, "    for (int p = 1; p < %d; p++) sum += Part[p][i][cc];\n", partials)
	}
	if err := g.printEpilogue(&b, body, mm, "sum"); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	return b.String(), nil
}

// gemvStream is how a matrix-vector kernel's threads stream their weight
// through each chunk of K: decl declares their pointers, registers and
// accumulators; first prints a chunk's first group of loads (k0 and kc in
// scope; again for every chunk after the first, whose loads are issued
// while its A is computed); main the chunk's main loop and rest once A is
// in shared memory; reduce the lanes' sums into Part. The kernel computes
// A in chunks of chunk values of K laid out as gemvChunk's slices say,
// and a column has partials partial sums.
type gemvStream struct {
	decl, main, reduce func(b *strings.Builder)
	first              func(b *strings.Builder, again bool)
	chunk              int64
	partials, slices   int
}

// gemvPlainStream streams a plain f32, f16 or bf16 weight (cost.GEMVWeight):
// over a K-contiguous weight warp w owns columns col0.. (cols of them) and
// the part-th split of K; over a row-major one thread t owns the vec
// columns at (t % lanes) vec and every rows-th k from t / lanes.
func gemvPlainStream(body *ir.Graph, mm ir.Value, g matmulGeom, s cost.Schedule, colMap gemvColumns, gathered bool) (gemvStream, error) {
	bb := body.Node(body.Node(mm).Inputs[1])
	M, K := g.M, g.K
	op, kContiguous, direct := cost.GEMVWeight(body, mm)
	if !direct {
		return gemvStream{}, fmt.Errorf("matrix-vector matmul: schedule %s: the weight (right operand) is not a plain f32, f16 or bf16 buffer with K or N contiguous and a multiple of 8 long, or A has more than %d rows", s, cost.GEMVRows)
	}
	var unpack func(w string) []string
	switch bb.DType {
	case ir.BF16:
		unpack = func(w string) []string {
			return []string{fmt.Sprintf("__uint_as_float(%s << 16)", w), fmt.Sprintf("__uint_as_float(%s & 0xffff0000u)", w)}
		}
	case ir.F16:
		unpack = func(w string) []string {
			return []string{fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s & 0xffffu))", w), fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s >> 16))", w)}
		}
	case ir.F32:
		unpack = func(w string) []string { return []string{fmt.Sprintf("__uint_as_float(%s)", w)} }
	default:
		return gemvStream{}, fmt.Errorf("matrix-vector matmul: a %s weight (it takes f32, f16 and bf16)", bb.DType)
	}
	vec := 16 / bb.DType.Size() // weight values a 16-byte load brings
	var cols, split, lanes, rows, partials int
	if kContiguous {
		var ok bool
		if cols, split, ok = cost.GEMVLayout(s); !ok {
			return gemvStream{}, fmt.Errorf("matrix-vector matmul: schedule %s: warps and BN columns must divide one another", s)
		}
		partials = split
	} else {
		var ok bool
		if lanes, rows, ok = cost.GEMVRowLayout(s, bb.DType.Size()); !ok {
			return gemvStream{}, fmt.Errorf("matrix-vector matmul: schedule %s: a row-major weight takes BN of 8, 16 or 32 16-byte loads", s)
		}
		partials = s.Threads / 32
	}
	if gathered {
		v := 1
		if !kContiguous {
			v = vec
		}
		if !colMap.m.Fits(s.BN, v) {
			return gemvStream{}, fmt.Errorf("matrix-vector matmul: schedule %s: its blocks do not hold the column groups (%d x %d) its epilogue reads together", s, colMap.m.P, colMap.m.I)
		}
	}
	chunk := cost.GEMVChunk(M, K)
	U := s.Stages
	wt := storageType(body.Node(op.Buf).DType)
	// The A values a lane multiplies one 16-byte load by sit in two
	// halves of the chunk (gemvChunk) when they are eight.
	halves := kContiguous && vec == 8
	st := gemvStream{chunk: chunk, partials: partials, slices: 1}
	if halves {
		st.slices = 2
	}
	src := paramName(body, op.Buf)
	at := linear(op.BufShape, g.opIndex(op.BufShape, "n", "k"))
	if op.FoldK != 0 {
		// A split-K batch of a transposed weight: the batch is a
		// block of K'.
		bs := bb.Shape[:len(bb.Shape)-2]
		bix := g.opIndex(bb.Shape, "k", "n")[:len(bs)]
		at = fmt.Sprintf("n * %dLL + (%s) * %dLL + k", op.FoldK, linear(bs, bix), K)
	}
	if !kContiguous {
		at = linear(op.BufShape, g.opIndex(op.BufShape, "k", "n"))
	}
	// col declares the weight column n of local column lc and points dst
	// at its first element; a concatenated weight (op.Parts) picks the
	// column's part once here, outside the main loop.
	col := func(dst, lc string, clamp int64) string {
		if len(op.Parts) == 0 {
			return fmt.Sprintf("%s\n    const long long k = 0;\n    %s = %s + (%s);", colMap.decl("n", lc, clamp), dst, src, at)
		}
		var c strings.Builder
		fmt.Fprintf(&c, "%s\n    const long long k = 0;\n    ", colMap.decl("n_", lc, clamp))
		off := int64(0)
		for i, p := range op.Parts {
			pat := linear(p.BufShape, g.opIndex(p.BufShape, "n", "k"))
			if !kContiguous {
				pat = linear(p.BufShape, g.opIndex(p.BufShape, "k", "n"))
			}
			if i < len(op.Parts)-1 {
				fmt.Fprintf(&c, "if (n_ < %dLL) ", off+p.Cols)
			}
			fmt.Fprintf(&c, "{ const long long n = n_ - %dLL; %s = %s + (%s); }", off, dst, paramName(body, p.Buf), pat)
			if i < len(op.Parts)-1 {
				c.WriteString(" else ")
			}
			off += p.Cols
		}
		return c.String()
	}
	// Each thread's weight rows (K-contiguous) or columns (row-major),
	// their first element: a column past N reads the last one's, whose
	// sums are never stored, so that no load needs a guard.
	var step, full, start string // the main loop's step along K, whether a whole group of loads is in the chunk, a thread's first k
	var onePass int              // K one load of each thread covers
	var loadGroup, loadOne func(b *strings.Builder, w, kk string)
	var consume func(b *strings.Builder, w string, loads int, kk string)
	if kContiguous {
		pass := 32 * vec * split // K covered by one load of every lane of a column's warps
		st.decl = func(b *strings.Builder) {
			fmt.Fprintf(b, "  const int part = warp %% %d, col0 = warp / %d * %d, kl = (part * 32 + lane) * %d;\n", split, split, cols, vec)
			fmt.Fprintf(b, "  const %s* wp[%d];\n", wt, cols)
			fmt.Fprintf(b, "  for (int c = 0; c < %d; c++) {\n", cols)
			fmt.Fprintf(b, "    %s\n  }\n", col("wp[c]", "col0 + c", 1))
			fmt.Fprintf(b, "  uint4 w[%d][%d];\n  int kk = kl;\n", U, cols)
			fmt.Fprintf(b, "  float acc[%d][%d];\n", M, cols)
			fmt.Fprintf(b, "  for (int i = 0; i < %d; i++) for (int c = 0; c < %d; c++) acc[i][c] = 0.0f;\n", M, cols)
		}
		step, full, start, onePass = fmt.Sprint(U*pass), fmt.Sprintf("kk + %d < kc", (U-1)*pass), "kl", pass
		loadGroup = func(b *strings.Builder, w, kk string) {
			fmt.Fprintf(b, "      #pragma unroll\n      for (int c = 0; c < %d; c++) {\n", cols)
			fmt.Fprintf(b, "        const %s* p = wp[c] + k0 + %s;\n", wt, kk)
			fmt.Fprintf(b, "        #pragma unroll\n        for (int u = 0; u < %d; u++) %s[u][c] = lum_ld16(p + u * %d);\n      }\n", U, w, pass)
		}
		loadOne = func(b *strings.Builder, w, kk string) {
			fmt.Fprintf(b, "      #pragma unroll\n      for (int c = 0; c < %d; c++) %s[0][c] = lum_ld16(wp[c] + k0 + %s);\n", cols, w, kk)
		}
		consume = func(b *strings.Builder, w string, loads int, kk string) {
			fmt.Fprintf(b, "      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n", loads)
			fmt.Fprintf(b, "        const int kx = %s + u * %d;\n", kk, pass)
			fmt.Fprintf(b, "        float f[%d][%d];\n", cols, vec)
			fmt.Fprintf(b, "        #pragma unroll\n        for (int c = 0; c < %d; c++) {\n", cols)
			unpackAll(b, unpack, w+"[u][c]", "f[c]")
			b.WriteString("        }\n")
			fmt.Fprintf(b, "        #pragma unroll\n        for (int i = 0; i < %d; i++) {\n", M)
			if halves {
				fmt.Fprintf(b, "          const float4 a0 = lum_ld4(&As[i][kx / 2]), a1 = lum_ld4(&As[i][%d + kx / 2]);\n", chunk/2)
			} else {
				b.WriteString("          const float4 a0 = lum_ld4(&As[i][kx]);\n")
			}
			fmt.Fprintf(b, "          #pragma unroll\n          for (int c = 0; c < %d; c++) {\n", cols)
			b.WriteString("            acc[i][c] += a0.x * f[c][0] + a0.y * f[c][1] + a0.z * f[c][2] + a0.w * f[c][3]")
			if halves {
				b.WriteString(" + a1.x * f[c][4] + a1.y * f[c][5] + a1.z * f[c][6] + a1.w * f[c][7]")
			}
			b.WriteString(";\n          }\n        }\n      }\n")
		}
		st.reduce = func(b *strings.Builder) {
			// Reduce: lanes by shuffles, into the split's partials.
			fmt.Fprintf(b, "  for (int i = 0; i < %d; i++) for (int c = 0; c < %d; c++) {\n", M, cols)
			b.WriteString("    float v = acc[i][c];\n")
			b.WriteString("    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n")
			b.WriteString("    if (lane == 0) Part[part][i][col0 + c] = v;\n  }\n")
		}
	} else {
		stride := int64(op.BufShape[len(op.BufShape)-1]) // along K, in elements
		st.decl = func(b *strings.Builder) {
			fmt.Fprintf(b, "  const int cg = threadIdx.x %% %d, kr = threadIdx.x / %d;\n", lanes, lanes)
			fmt.Fprintf(b, "  const %s* wp;\n  {\n", wt)
			fmt.Fprintf(b, "    %s\n  }\n", col("wp", fmt.Sprintf("cg * %d", vec), int64(vec)))
			fmt.Fprintf(b, "  uint4 w[%d][1];\n  int kk = kr;\n", U)
			fmt.Fprintf(b, "  float acc[%d][%d];\n", M, vec)
			fmt.Fprintf(b, "  for (int i = 0; i < %d; i++) for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;\n", M, vec)
		}
		step, full, start, onePass = fmt.Sprint(U*rows), fmt.Sprintf("kk + %d < kc", (U-1)*rows), "kr", rows
		loadGroup = func(b *strings.Builder, w, kk string) {
			fmt.Fprintf(b, "      const %s* p = wp + (k0 + %s) * %dLL;\n", wt, kk, stride)
			fmt.Fprintf(b, "      #pragma unroll\n      for (int u = 0; u < %d; u++) %s[u][0] = lum_ld16(p + u * %dLL);\n", U, w, int64(rows)*stride)
		}
		loadOne = func(b *strings.Builder, w, kk string) {
			fmt.Fprintf(b, "      %s[0][0] = lum_ld16(wp + (k0 + %s) * %dLL);\n", w, kk, stride)
		}
		consume = func(b *strings.Builder, w string, loads int, kk string) {
			fmt.Fprintf(b, "      #pragma unroll\n      for (int u = 0; u < %d; u++) {\n", loads)
			fmt.Fprintf(b, "        const int kx = %s + u * %d;\n", kk, rows)
			fmt.Fprintf(b, "        float f[%d];\n", vec)
			unpackAll(b, unpack, w+"[u][0]", "f")
			fmt.Fprintf(b, "        #pragma unroll\n        for (int i = 0; i < %d; i++) {\n", M)
			b.WriteString("          const float av = As[i][kx];\n")
			fmt.Fprintf(b, "          #pragma unroll\n          for (int j = 0; j < %d; j++) acc[i][j] += av * f[j];\n        }\n      }\n", vec)
		}
		st.reduce = func(b *strings.Builder) {
			// Reduce: the lanes of a warp that share columns by
			// shuffles, then a partial per warp.
			fmt.Fprintf(b, "  for (int i = 0; i < %d; i++) for (int j = 0; j < %d; j++) {\n", M, vec)
			b.WriteString("    float v = acc[i][j];\n")
			if lanes < 32 {
				fmt.Fprintf(b, "    for (int o = 16; o >= %d; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n", lanes)
			}
			fmt.Fprintf(b, "    if (lane < %d) Part[warp][i][cg * %d + j] = v;\n  }\n", lanes, vec)
		}
	}
	st.first = func(b *strings.Builder, again bool) {
		if again {
			fmt.Fprintf(b, "      kk = %s;\n      if (%s) {\n", start, full)
			loadGroup(b, "w", "kk")
			b.WriteString("      }\n")
			return
		}
		fmt.Fprintf(b, "    if (%s) {\n", full)
		loadGroup(b, "w", "kk")
		b.WriteString("    }\n")
	}
	st.main = func(b *strings.Builder) {
		// The main loop: a whole group of loads in flight, issued
		// together with no branch between them, consumed, and the next
		// group issued.
		fmt.Fprintf(b, "    for (; %s; kk += %s) {\n", full, step)
		consume(b, "w", U, "kk")
		fmt.Fprintf(b, "      if (%s) {\n", strings.Replace(full, "kk", fmt.Sprintf("(kk + %s)", step), 1))
		loadGroup(b, "w", "kk + "+step)
		b.WriteString("      }\n    }\n")
		// The chunk's rest, fewer passes than a group: one load a
		// column at a time, unrolled (no loop of its own, so that the
		// main loop is the kernel's innermost loop around its weight
		// loads).
		if U > 1 {
			fmt.Fprintf(b, "    #pragma unroll\n    for (int r = 0; r < %d; r++) {\n", U-1)
			if kContiguous {
				fmt.Fprintf(b, "      if (kk >= kc) break;\n      uint4 w1[1][%d];\n", cols)
			} else {
				b.WriteString("      if (kk >= kc) break;\n      uint4 w1[1][1];\n")
			}
			loadOne(b, "w1", "kk")
			consume(b, "w1", 1, "kk")
			fmt.Fprintf(b, "      kk += %d;\n", onePass)
			b.WriteString("    }\n")
		}
	}
	return st, nil
}

// unpackAll prints the unpacking of the 16-byte word w into the f32
// values f[0..] (unpack widens one 32-bit word).
func unpackAll(b *strings.Builder, unpack func(string) []string, w, f string) {
	per := len(unpack(""))
	for wi, word := range []string{"x", "y", "z", "w"} {
		for h, x := range unpack(w + "." + word) {
			fmt.Fprintf(b, "          %s[%d] = %s;\n", f, wi*per+h, x)
		}
	}
}

// gemvRowsOnM says whether a matrix-vector kernel's rows (its M, a
// step's rows present) are the rows its count follows: a plain [M, N]
// product of the rows at their maximum.
func gemvRowsOnM(k *Kernel, g matmulGeom) bool {
	return k.count != nil && g.r == 2 && g.M == k.count.Max && k.count.Axis == 0
}
