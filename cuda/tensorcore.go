package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The matmul kernel form, tensor-core path: f16 x f16 or bf16 x bf16
// operands, f32 accumulators, through mma.sync.m16n8k16 (the helpers
// lum_mma_m16n8k16_f16/_bf16 of the preludes).
//
// A block of warps computes a BMxBN tile of C (the schedule's; by default
// 64x64 with 4 warps, 2x2); each warp a 32x32 patch as 2x4 mma tiles of
// 16x8 (32 f32 accumulators per thread), or with BM 16 a 16x32 patch as
// 1x4 tiles. K advances 32 at a time through two shared-memory buffers: while
// the warps multiply one, the next is filled. Shared memory holds the
// operands rounded to the operand dtype, two K-adjacent values per 32-bit
// word, the lower k in the low half, which is exactly a fragment register
// (A: [64 rows][16 words] row-major; B: [64 columns][16 words],
// K-contiguous per column, the "col" layout mma takes). Rows are swizzled
// rather than padded (tcSwizzle): the 16-byte chunk w / 4 of row r is
// stored at chunk (w / 4) ^ ((r / 2) % 4), so that the eight rows an
// ldmatrix phase reads at one chunk, and the eight 16-byte copies a
// quarter-warp of cp.async lands, fall in eight distinct groups of four
// banks, and no shared memory goes to padding.
//
// An operand that is a plain buffer with K contiguous in memory and K a
// multiple of 8 (a row-major A, an nn.Linear weight [N, K] used
// transposed) is copied with 16-byte cp.async; any other operand is
// computed as the tile is loaded, in f32 through the kernel's elementwise
// prologue (views, casts, a norm's row statistics in shared memory as in
// the f32 path), and rounded to the operand dtype once, when it is packed
// (lum_pack_f16x2/_bf16x2). Tiles past M, N or K are zero-filled. The
// epilogue is applied to the accumulators as C is written, as in the f32
// path.
const tcBM, tcBN, tcBK = 64, 64, 32 // the default tile

// tcSwizzle is the word at which a tile stores logical word w of row r
// (16 words a row): the 16-byte chunk w / 4 XORed with (r / 2) % 4, the
// word within the chunk kept. Rows are 64 bytes, so rows r and r + 1 share
// a 128-byte line of banks and r + 2 starts the next; the XOR gives each
// of 8 consecutive rows its own 16-byte group of banks.
func tcSwizzle(r, w int) int { return ((w>>2)^((r>>1)&3))<<2 | w&3 }

// tcSwz prints tcSwizzle of the C expressions r and w.
func tcSwz(r, w string) string {
	return fmt.Sprintf("((((%s) >> 2) ^ (((%s) >> 1) & 3)) << 2 | ((%s) & 3))", w, r, w)
}

// printTensorCore prints the body of a matmul kernel whose operands are
// both f16 or both bf16.
func printTensorCore(k *Kernel, body *ir.Graph, mm ir.Value, s cost.Schedule) (string, error) {
	mn := body.Node(mm)
	a, bb := body.Node(mn.Inputs[0]), body.Node(mn.Inputs[1])
	dt := a.DType
	if bb.DType != dt || (dt != ir.F16 && dt != ir.BF16) {
		return "", fmt.Errorf("a %s x %s matmul: the tensor-core path takes f16 x f16 and bf16 x bf16", a.DType, bb.DType)
	}
	suffix := map[ir.DType]string{ir.F16: "f16", ir.BF16: "bf16"}[dt]
	g, err := matmulGeometry(body, mm)
	if err != nil {
		return "", err
	}
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: tcBM, BN: tcBN, BK: tcBK, Threads: 128, Stages: 2, Tensor: true}
	}
	// A warp owns a (16 mi) x (8 nj) patch of C: 32x32 by default (mi 2,
	// nj 4), 16x32 with BM 16, 64x64 with warp=64 (mi 4, nj 8: half the
	// fragment loads from shared memory per mma); the warps form a wM x
	// wN grid of patches.
	mi, nj := cost.WarpPatch(s)
	wM, wN := s.BM/(16*mi), s.BN/(8*nj)
	if !s.Tensor || s.BK != tcBK || s.Stages < 2 || s.Stages > 4 || s.Rows != 0 || (s.Warp != 0 && s.Warp != 64) || s.BM%(16*mi) != 0 || s.BN%(8*nj) != 0 || s.BN == 0 || s.Threads != 32*wM*wN || s.Threads > 1024 {
		return "", fmt.Errorf("tensor-core matmul: schedule %s: the tensor-core path takes BM 16 or a multiple of 32, BN a multiple of 32, BK 32, two to four stages, mma and a warp per 32x32 (16x32) patch, or per 64x64 with warp=64 and BM, BN multiples of 64", s)
	}
	if bytes := cost.TensorShared(body, s); bytes > cost.StaticShared {
		return "", fmt.Errorf("tensor-core matmul: schedule %s: its %d stages of tiles take %d bytes of shared memory, past the %d a block declares", s, s.Stages, bytes, cost.StaticShared)
	}
	k.Schedule = s
	BM, BN, threads := s.BM, s.BN, s.Threads
	out, r, M, N, K, batch := g.out, g.r, g.M, g.N, g.K, g.batch
	k.Block = [3]int{threads, 1, 1}
	k.Grid = [3]int{int((N + int64(BN) - 1) / int64(BN)), int((M + int64(BM) - 1) / int64(BM)), int(batch)}
	setMatmulRows(k, body, mm, g, BM)
	opIndex := g.opIndex
	var b strings.Builder
	words := tcBK / 2
	S := s.Stages
	fmt.Fprintf(&b, "  __shared__ __align__(16) unsigned As[%d][%d][%d];\n", S, BM, words)
	fmt.Fprintf(&b, "  __shared__ __align__(16) unsigned Bs[%d][%d][%d];\n", S, BN, words)
	b.WriteString("  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;\n")
	fmt.Fprintf(&b, "  const int wm = threadIdx.x / %d * %d, wn = threadIdx.x / 32 %% %d * %d;\n", 32*wN, 16*mi, wN, 8*nj)
	fmt.Fprintf(&b, "  const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d;\n", BM, BN)
	if r > 2 {
		b.WriteString("  long long bz = blockIdx.z;\n")
	}
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "  long long b%d = bz %% %dLL; bz /= %dLL;\n", d, out[d], out[d])
	}
	reducedAt, err := normPrologue(&b, body, a.Shape, M, K, BM, threads/32)
	if err != nil {
		return "", err
	}

	fmt.Fprintf(&b, "  float acc[%d][%d][4];\n", mi, nj)
	fmt.Fprintf(&b, "  for (int i = 0; i < %d; i++) for (int j = 0; j < %d; j++) for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;\n", mi, nj)
	steps := (K + tcBK - 1) / tcBK
	// loadTile prints the loads of one operand's tile k0 into buffer s,
	// and into setup what they compute once, before the pipeline.
	var load, setupText strings.Builder
	w, setup := &load, &setupText
	var qt *quantTile // a quantized B, fetched a tile ahead (tensorcore_quant.go)
	loadTile := func(operand ir.Value, shape ir.Shape, right bool) error {
		dst, rows, rowVar, rowLimit, tileRows := "As", "m0", "m", M, BM
		if right {
			dst, rows, rowVar, rowLimit, tileRows = "Bs", "n0", "n", N, BN
			if q, ok := cost.TileQuantSchedule(body, operand, dt, K, s); ok {
				t := newQuantTile(body, q, s, suffix)
				t.decl(setup)
				qt = &t
				return nil
			}
		}
		if op, ok := cost.DirectOperand(body, operand, dt, K, right); ok {
			// 16-byte chunks: the tile's rows x 4 chunks of 8 values.
			// Thread t copies chunk t %% 4 of rows t / 4 + j R (R =
			// threads / 4), so its source pointer, K offset and row
			// bound are computed once, before the pipeline: a step adds
			// k0 and a constant per chunk (a row's stride is K).
			x := strings.ToLower(dst[:1])
			R := threads / 4
			n := (tileRows + R - 1) / R
			// (For B the source is transposed: B(k, n) = src(n, k),
			// rows n.)
			pix := opIndex(op.BufShape, fmt.Sprintf("(%s + %sr0)", rows, x), fmt.Sprintf("(long long)%skc", x))
			fmt.Fprintf(setup, "  const int %[1]sr0 = threadIdx.x / 4, %[1]skc = threadIdx.x %% 4 * 8;\n", x)
			fmt.Fprintf(setup, "  const long long %[1]srows = %[2]dLL - %[3]s < %[4]dLL ? %[2]dLL - %[3]s : %[4]dLL;\n", x, rowLimit, rows, tileRows)
			fmt.Fprintf(setup, "  const %s* const %ssrc = %s + %s;\n", storageType(dt), x, paramName(body, op.Buf), linear(op.BufShape, pix))
			fmt.Fprintf(w, "      #pragma unroll\n      for (int j = 0; j < %d; j++) {\n", n)
			fmt.Fprintf(w, "        const int rr = %sr0 + j * %d;\n", x, R)
			if n*R > tileRows {
				fmt.Fprintf(w, "        if (rr >= %d) break;\n", tileRows)
			}
			fmt.Fprintf(w, "        const int sw = %s;\n", tcSwz("rr", x+"kc / 2"))
			fmt.Fprintf(w, "        if (rr < %[1]srows && k0 + %[1]skc < %[2]dLL) lum_cp_async16(&%[3]s[s][rr][sw], %[1]ssrc + (long long)j * %[4]dLL + k0);\n", x, K, dst, int64(R)*K)
			fmt.Fprintf(w, "        else for (int w = 0; w < 4; w++) %s[s][rr][sw + w] = 0u;\n", dst)
			w.WriteString("      }\n")
			return nil
		}
		if op, ok := cost.StridedOperand(body, operand, dt, K, right); ok {
			printStridedTile(w, setup, body, op, opIndex(shape, "0", "0"), stridedTile{
				x: strings.ToLower(dst[:1]), dst: dst, rows: rows, rowLimit: int64(rowLimit), tileRows: int64(tileRows), K: K, threads: threads, dt: dt,
			})
			return nil
		}
		// Computed: each thread computes pairs of K-adjacent values in
		// f32 and packs them. A walks K fastest (rows are K-contiguous
		// in a row-major A); B walks N fastest (a row-major [K, N] B).
		pairs := tileRows * tcBK / 2
		fmt.Fprintf(w, "      for (int p = threadIdx.x; p < %d; p += %d) {\n", pairs, threads)
		if right {
			fmt.Fprintf(w, "        const int rr = p %% %d, kp = p / %d;\n", BN, BN)
		} else {
			fmt.Fprintf(w, "        const int rr = p / %d, kp = p %% %d;\n", tcBK/2, tcBK/2)
		}
		fmt.Fprintf(w, "        const long long %s = %s + rr, k = k0 + 2 * kp;\n", rowVar, rows)
		var vals [2]string
		for h, kx := range []string{"k", "(k + 1LL)"} {
			e := &elementwise{body: body, temps: map[string]string{}, reducedAt: reducedAt, next: h * 1000}
			var ix index
			if right {
				ix = opIndex(shape, kx, "n")
			} else {
				ix = opIndex(shape, "m", kx)
			}
			v, err := e.value(operand, ix, true)
			if err != nil {
				return err
			}
			for _, l := range e.lines {
				w.WriteString("    " + l + "\n")
			}
			guard := fmt.Sprintf("%s < %dLL && %s < %dLL", rowVar, rowLimit, kx, K)
			vals[h] = fmt.Sprintf("(%s) ? %s : 0.0f", guard, v)
		}
		fmt.Fprintf(w, "        const float lo = %s;\n", vals[0])
		fmt.Fprintf(w, "        const float hi = %s;\n", vals[1])
		fmt.Fprintf(w, "        %s[s][rr][%s] = lum_pack_%sx2(lo, hi);\n      }\n", dst, tcSwz("rr", "kp"), suffix)
		return nil
	}
	// The pipeline: tiles 0 .. S-2 are in flight before the loop; step kt
	// waits for tile kt (its own copies: wait_group S-2 leaves the S-2
	// younger groups pending; then the barrier, everyone's), refills the
	// buffer every warp finished with at step kt-1 with tile kt+S-1, and
	// multiplies tile kt. One commit a step, empty past the end, keeps the
	// group count uniform. A computed operand's stores land synchronously
	// in a buffer no warp reads before the barrier of its own step.
	if err := loadTile(mn.Inputs[0], a.Shape, false); err != nil {
		return "", err
	}
	if err := loadTile(mn.Inputs[1], bb.Shape, true); err != nil {
		return "", err
	}
	b.WriteString(setupText.String())
	// A quantized B's tile is fetched with the copies and, in the
	// pipeline, stored after the multiply of the step (late): its buffer
	// is the one every warp finished with at the step before, and the
	// next barrier publishes it before its own step reads it.
	printLoad := func(tile string, late bool) {
		fmt.Fprintf(&b, "    if (%s < %dLL) {\n", tile, steps)
		fmt.Fprintf(&b, "      const int s = (int)(%s %% %d);\n      const long long k0 = %s * %d;\n", tile, S, tile, tcBK)
		b.WriteString(load.String())
		if qt != nil {
			qt.fetch(&b, "      ")
			if !late {
				qt.store(&b, "      ")
			}
		}
		b.WriteString("    }\n    lum_cp_async_commit();\n")
	}
	fmt.Fprintf(&b, "  for (long long kt = 0; kt < %d; kt++) {\n", S-1)
	printLoad("kt", false)
	b.WriteString("  }\n")
	fmt.Fprintf(&b, "  for (long long kt = 0; kt < %dLL; kt++) {\n", steps)
	fmt.Fprintf(&b, "    lum_cp_async_wait_group<%d>();\n    __syncthreads();\n", S-2)
	fmt.Fprintf(&b, "    const long long nt = kt + %d;\n", S-1)
	printLoad("nt", true)
	fmt.Fprintf(&b, "    const int s = (int)(kt %% %d);\n", S)
	// Fragments through ldmatrix: lane l gives the address of row l %% 8
	// of matrix l / 8. A's four 8x8 matrices are (rows 0-7, k 0-7), (rows
	// 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15): registers
	// a0..a3 of m16n8k16's A fragment. B's rows are columns n (K
	// contiguous): (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n
	// 8-15, k 8-15) are b0, b1 of two n8 tiles.
	fmt.Fprintf(&b, "    for (int ks = 0; ks < %d; ks += 8) {\n", tcBK/2)
	fmt.Fprintf(&b, "      unsigned af[%d][4], bf[%d][2];\n", mi, nj)
	fmt.Fprintf(&b, "      for (int i = 0; i < %d; i++)\n", mi)
	fmt.Fprintf(&b, "        { const int ar = wm + i * 16 + lane / 8 %% 2 * 8 + lane %% 8; lum_ldmatrix_x4(af[i], &As[s][ar][%s]); }\n", tcSwz("ar", "ks + lane / 16 * 4"))
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j += 2) {\n", nj)
	b.WriteString("        unsigned r[4];\n")
	fmt.Fprintf(&b, "        const int br = wn + j * 8 + lane / 16 * 8 + lane %% 8;\n        lum_ldmatrix_x4(r, &Bs[s][br][%s]);\n", tcSwz("br", "ks + lane / 8 % 2 * 4"))
	b.WriteString("        bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];\n")
	b.WriteString("      }\n")
	fmt.Fprintf(&b, "      for (int i = 0; i < %d; i++) for (int j = 0; j < %d; j++) lum_mma_m16n8k16_%s(acc[i][j], af[i], bf[j]);\n", mi, nj, suffix)
	b.WriteString("    }\n")
	if qt != nil {
		fmt.Fprintf(&b, "    if (nt < %dLL) {\n", steps)
		fmt.Fprintf(&b, "      const int s = (int)(nt %% %d);\n", S)
		qt.store(&b, "      ")
		b.WriteString("    }\n")
	}
	b.WriteString("  }\n")
	b.WriteString("  lum_cp_async_wait_group<0>();\n")

	// Epilogue: accumulator q of tile (i, j) is C's element (m, n).
	// Unrolled, so that the accumulators stay in registers (an indexed
	// array the compiler cannot resolve goes to a stack frame).
	fmt.Fprintf(&b, "  #pragma unroll\n  for (int i = 0; i < %d; i++)\n  #pragma unroll\n  for (int j = 0; j < %d; j++)\n  #pragma unroll\n  for (int q = 0; q < 4; q++) {\n", mi, nj)
	b.WriteString("    long long m = m0 + wm + i * 16 + g + (q >= 2 ? 8 : 0), n = n0 + wn + j * 8 + t * 2 + (q & 1);\n")
	fmt.Fprintf(&b, "    if (m >= %s || n >= %dLL) continue;\n", rowLimit(k, M, k.Rows != nil && k.Rows.Dim == 1), N)
	if err := g.printEpilogue(&b, body, mm, "acc[i][j][q]"); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	return b.String(), nil
}
