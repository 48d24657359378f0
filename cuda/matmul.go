package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The matmul kernel form, f32 path: C[b] = A[b] x B[b] tiled BMxBN per
// block (the schedule's; 64x64 by default) with BK-deep steps through
// shared memory, each of the (BM/4)x(BN/4) threads accumulating a 4x4
// patch in registers. The operands are computed as the
// tiles are loaded (a fused elementwise prologue over the kernel's
// arguments, through any views), and the epilogue is applied as C is
// written. The values after the matmul may only be elementwise ops, casts,
// reshapes and broadcasts, so that output element i is C's element i.
// f16 and bf16 operands take the tensor-core path (tensorcore.go).

const (
	mmBM, mmBN, mmBK = 64, 64, 16 // the default tile
)

func printMatmul(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	var mm ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			mm = ir.Value(i)
		}
	}
	mn := body.Node(mm)
	a, bb := body.Node(mn.Inputs[0]), body.Node(mn.Inputs[1])
	if len(a.Shape) < 2 || len(bb.Shape) < 2 {
		return "", fmt.Errorf("matmul of a vector: lowering handles matrices")
	}
	if s == (cost.Schedule{}) {
		// A gathered epilogue, or cache rows written through windows,
		// is the matrix-vector kernel's alone.
		if _, err := matmulGeometry(body, mm); err != nil || cost.WritesWindows(body) {
			if g, ok := cost.GatheredSchedule(body, mm); ok {
				s = g
			}
		}
	}
	if s.GEMV {
		return printGEMV(k, body, mm, s)
	}
	if a.DType != ir.F32 || bb.DType != ir.F32 {
		return printTensorCore(k, body, mm, s)
	}
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: mmBM, BN: mmBN, BK: mmBK, Threads: mmBM / 4 * mmBN / 4, Stages: 1}
	}
	// TM is the rows of C a thread accumulates (4 columns each): 4 by
	// default; 1 gives small tiles (a decode step's few rows) more
	// threads to stream the weights with.
	TM := 4
	if s.TM != 0 {
		TM = s.TM
	}
	if s.Tensor || s.BK != mmBK || s.BM%16 != 0 || s.BN%32 != 0 || (s.Stages != 1 && s.Stages != 2) || s.Rows != 0 || (TM != 4 && TM != 1) || s.Threads != s.BM/TM*s.BN/4 || s.Threads > 1024 {
		return "", fmt.Errorf("f32 matmul: schedule %s: the f32 path takes BM a multiple of 16, BN of 32, BK 16, one or two stages, tm 4 or 1 and (BM/tm)x(BN/4) threads", s)
	}
	// Two stages double-buffer the tiles: step kt loads K tile kt into one
	// buffer while the threads multiply tile kt - 1 from the other, one
	// barrier a step instead of two.
	double := s.Stages == 2
	k.Schedule = s
	BM, BN, BK, threads := s.BM, s.BN, s.BK, s.Threads
	g, err := matmulGeometry(body, mm)
	if err != nil {
		return "", err
	}
	out, r, M, N, K, batch := g.out, g.r, g.M, g.N, g.K, g.batch
	k.Block = [3]int{threads, 1, 1}
	k.Grid = [3]int{int((N + int64(BN) - 1) / int64(BN)), int((M + int64(BM) - 1) / int64(BM)), int(batch)}
	setMatmulRows(k, body, mm, g, BM)
	opIndex := g.opIndex
	var b strings.Builder
	buf := "" // the shared buffer a step uses: [s] when double-buffered
	if double {
		buf = "[s]"
		fmt.Fprintf(&b, "  __shared__ float As[2][%d][%d];\n  __shared__ float Bs[2][%d][%d];\n", BK, BM+4, BK, BN+4)
	} else {
		fmt.Fprintf(&b, "  __shared__ float As[%d][%d];\n  __shared__ float Bs[%d][%d];\n", BK, BM+4, BK, BN+4)
	}
	fmt.Fprintf(&b, "  const int tx = threadIdx.x %% %d, ty = threadIdx.x / %d;\n", BN/4, BN/4)
	fmt.Fprintf(&b, "  const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d;\n", BM, BN)
	b.WriteString("  long long bz = blockIdx.z;\n")
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "  long long b%d = bz %% %dLL; bz /= %dLL;\n", d, out[d], out[d])
	}
	// A norm prologue: the row statistics of the block's rows of A in
	// shared memory, for the tile loads.
	reducedAt, err := normPrologue(&b, body, a.Shape, M, K, BM, threads/32)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "  float acc[%d][4];\n  for (int i = 0; i < %d; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;\n", TM, TM)
	steps := (K + int64(BK) - 1) / int64(BK)
	if double {
		fmt.Fprintf(&b, "  for (long long kt = 0; kt <= %dLL; kt++) {\n", steps)
		fmt.Fprintf(&b, "    if (kt < %dLL) {\n", steps)
		fmt.Fprintf(&b, "    const int s = (int)(kt %% 2);\n    const long long k0 = kt * %d;\n", BK)
	} else {
		fmt.Fprintf(&b, "  for (long long k0 = 0; k0 < %dLL; k0 += %d) {\n", K, BK)
	}
	// Each thread loads 4 elements of each tile, computing the prologue.
	loadTile := func(operand ir.Value, shape ir.Shape, rowsA bool) error {
		e := &elementwise{body: body, temps: map[string]string{}, reducedAt: reducedAt}
		var row, col, guard, dst string
		if rowsA {
			// As[kk][mm] = A[m0+mm][k0+kk]
			row, col = "(m0 + mm)", "(k0 + kk)"
			guard = fmt.Sprintf("m0 + mm < %dLL && k0 + kk < %dLL", M, K)
			dst = "As" + buf + "[kk][mm]"
		} else {
			// Bs[kk][nn] = B[k0+kk][n0+nn]
			row, col = "(k0 + kk)", "(n0 + nn)"
			guard = fmt.Sprintf("k0 + kk < %dLL && n0 + nn < %dLL", K, N)
			dst = "Bs" + buf + "[kk][nn]"
		}
		v, err := e.value(operand, opIndex(shape, row, col), true)
		if err != nil {
			return err
		}
		if rowsA {
			fmt.Fprintf(&b, "    for (int t = threadIdx.x; t < %d; t += %d) {\n", BK*BM, threads)
			fmt.Fprintf(&b, "      int kk = t %% %d, mm = t / %d;\n", BK, BK)
		} else {
			fmt.Fprintf(&b, "    for (int t = threadIdx.x; t < %d; t += %d) {\n", BK*BN, threads)
			fmt.Fprintf(&b, "      int nn = t %% %d, kk = t / %d;\n", BN, BN)
		}
		for _, l := range e.lines {
			b.WriteString("    " + l + "\n")
		}
		fmt.Fprintf(&b, "      %s = (%s) ? %s : 0.0f;\n    }\n", dst, guard, v)
		return nil
	}
	if err := loadTile(mn.Inputs[0], a.Shape, true); err != nil {
		return "", err
	}
	if err := loadTile(mn.Inputs[1], bb.Shape, false); err != nil {
		return "", err
	}
	if double {
		b.WriteString("    }\n    if (kt > 0) {\n    const int s = (int)((kt - 1) % 2);\n")
	} else {
		b.WriteString("    __syncthreads();\n")
	}
	fmt.Fprintf(&b, "    for (int kk = 0; kk < %d; kk++) {\n", BK)
	if TM == 4 {
		b.WriteString("      float av[4], bv[4];\n")
		fmt.Fprintf(&b, "      for (int i = 0; i < 4; i++) { av[i] = As%[1]s[kk][ty * 4 + i]; bv[i] = Bs%[1]s[kk][tx * 4 + i]; }\n", buf)
	} else {
		fmt.Fprintf(&b, "      float av[%d], bv[4];\n", TM)
		fmt.Fprintf(&b, "      for (int i = 0; i < %d; i++) av[i] = As%s[kk][ty * %d + i];\n", TM, buf, TM)
		fmt.Fprintf(&b, "      for (int j = 0; j < 4; j++) bv[j] = Bs%s[kk][tx * 4 + j];\n", buf)
	}
	fmt.Fprintf(&b, "      for (int i = 0; i < %d; i++) for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];\n", TM)
	if double {
		b.WriteString("    }\n    }\n    __syncthreads();\n  }\n")
	} else {
		b.WriteString("    }\n    __syncthreads();\n  }\n")
	}
	// Epilogue: C's element (m, n) of batch b is linear index i.
	fmt.Fprintf(&b, "  for (int ii = 0; ii < %d; ii++) for (int jj = 0; jj < 4; jj++) {\n", TM)
	fmt.Fprintf(&b, "    long long m = m0 + ty * %d + ii, n = n0 + tx * 4 + jj;\n", TM)
	fmt.Fprintf(&b, "    if (m >= %s || n >= %dLL) continue;\n", rowLimit(k, M, k.Rows != nil && k.Rows.Dim == 1), N)
	if err := g.printEpilogue(&b, body, mm, "acc[ii][jj]"); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	return b.String(), nil
}
