package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// The matmul kernel form, f32 path: C[b] = A[b] x B[b] tiled BMxBN per
// block with BK-deep steps through shared memory, each of the 256 threads
// accumulating a 4x4 patch in registers. The operands are computed as the
// tiles are loaded (a fused elementwise prologue over the kernel's
// arguments, through any views), and the epilogue is applied as C is
// written. The values after the matmul may only be elementwise ops, casts,
// reshapes and broadcasts, so that output element i is C's element i.
// f16 and bf16 operands take the tensor-core path (tensorcore.go).

const (
	mmBM, mmBN, mmBK = 64, 64, 16
	mmThreads        = 256 // 16x16 threads, 4x4 outputs each
)

func isMatmulKernel(body *ir.Graph) bool {
	matmuls := 0
	for _, n := range body.Nodes {
		switch n.Op.Class() {
		case ir.ClassLeaf, ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect, ir.ClassView, ir.ClassMove, ir.ClassReduce:
		default:
			if n.Op != ir.OpMatMul {
				return false
			}
			matmuls++
		}
	}
	return matmuls == 1
}

// mmWarps is the warps of a matmul block, which share the rows of its
// norm prologue's statistics.
const mmWarps = mmThreads / 32

func printMatmul(k *Kernel, body *ir.Graph) (string, error) {
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
	if a.DType != ir.F32 || bb.DType != ir.F32 {
		return printTensorCore(k, body, mm)
	}
	g, err := matmulGeometry(body, mm)
	if err != nil {
		return "", err
	}
	out, r, M, N, K, batch := g.out, g.r, g.M, g.N, g.K, g.batch
	k.Block = [3]int{mmThreads, 1, 1}
	k.Grid = [3]int{int((N + mmBN - 1) / mmBN), int((M + mmBM - 1) / mmBM), int(batch)}
	opIndex := g.opIndex
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float As[%d][%d];\n  __shared__ float Bs[%d][%d];\n", mmBK, mmBM+4, mmBK, mmBN+4)
	b.WriteString("  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;\n")
	fmt.Fprintf(&b, "  const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d;\n", mmBM, mmBN)
	b.WriteString("  long long bz = blockIdx.z;\n")
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "  long long b%d = bz %% %dLL; bz /= %dLL;\n", d, out[d], out[d])
	}
	// A norm prologue: the row statistics of the block's rows of A in
	// shared memory, for the tile loads.
	reducedAt, err := normPrologue(&b, body, a.Shape, M, K, mmBM, mmWarps)
	if err != nil {
		return "", err
	}
	b.WriteString("  float acc[4][4];\n  for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;\n")
	fmt.Fprintf(&b, "  for (long long k0 = 0; k0 < %dLL; k0 += %d) {\n", K, mmBK)
	// Each thread loads 4 elements of each tile, computing the prologue.
	loadTile := func(operand ir.Value, shape ir.Shape, rowsA bool) error {
		e := &elementwise{body: body, temps: map[string]string{}, reducedAt: reducedAt}
		var row, col, guard, dst string
		if rowsA {
			// As[kk][mm] = A[m0+mm][k0+kk]
			row, col = "(m0 + mm)", "(k0 + kk)"
			guard = fmt.Sprintf("m0 + mm < %dLL && k0 + kk < %dLL", M, K)
			dst = "As[kk][mm]"
		} else {
			// Bs[kk][nn] = B[k0+kk][n0+nn]
			row, col = "(k0 + kk)", "(n0 + nn)"
			guard = fmt.Sprintf("k0 + kk < %dLL && n0 + nn < %dLL", K, N)
			dst = "Bs[kk][nn]"
		}
		v, err := e.value(operand, opIndex(shape, row, col), true)
		if err != nil {
			return err
		}
		b.WriteString("    for (int t = threadIdx.x; t < 1024; t += 256) {\n")
		if rowsA {
			fmt.Fprintf(&b, "      int kk = t %% %d, mm = t / %d;\n", mmBK, mmBK)
		} else {
			fmt.Fprintf(&b, "      int nn = t %% %d, kk = t / %d;\n", mmBN, mmBN)
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
	b.WriteString("    __syncthreads();\n")
	fmt.Fprintf(&b, "    for (int kk = 0; kk < %d; kk++) {\n", mmBK)
	b.WriteString("      float av[4], bv[4];\n")
	b.WriteString("      for (int i = 0; i < 4; i++) { av[i] = As[kk][ty * 4 + i]; bv[i] = Bs[kk][tx * 4 + i]; }\n")
	b.WriteString("      for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];\n")
	b.WriteString("    }\n    __syncthreads();\n  }\n")
	// Epilogue: C's element (m, n) of batch b is linear index i.
	b.WriteString("  for (int ii = 0; ii < 4; ii++) for (int jj = 0; jj < 4; jj++) {\n")
	b.WriteString("    long long m = m0 + ty * 4 + ii, n = n0 + tx * 4 + jj;\n")
	fmt.Fprintf(&b, "    if (m >= %dLL || n >= %dLL) continue;\n", M, N)
	if err := g.printEpilogue(&b, body, mm, "acc[ii][jj]"); err != nil {
		return "", err
	}
	b.WriteString("  }\n")
	return b.String(), nil
}
