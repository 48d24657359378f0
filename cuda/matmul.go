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
	out := mn.Shape
	r := len(out)
	M, N, K := int64(out[r-2]), int64(out[r-1]), int64(a.Shape[len(a.Shape)-1])
	batch := out.NumElements() / (M * N)
	after := make([]bool, len(body.Nodes))
	for i, n := range body.Nodes {
		for _, in := range n.Inputs {
			after[i] = after[i] || after[in] || in == mm
		}
		if !after[i] {
			continue
		}
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpReshape && n.Op != ir.OpPermute && n.Op != ir.OpCast {
				return "", fmt.Errorf("matmul kernel with a %s after its matmul", n.Op)
			}
		}
	}
	for _, o := range body.Outputs {
		if body.Node(o.Value).Shape.NumElements() != out.NumElements() {
			return "", fmt.Errorf("matmul kernel output of another size than its matmul")
		}
	}
	k.Block = [3]int{mmThreads, 1, 1}
	k.Grid = [3]int{int((N + mmBN - 1) / mmBN), int((M + mmBM - 1) / mmBM), int(batch)}

	// operand index: batch dims of an operand follow the output's, a
	// broadcast (size 1) batch dim reading index 0.
	opIndex := func(shape ir.Shape, row, col string) index {
		ix := make(index, len(shape))
		off := r - len(shape)
		for d := 0; d < len(shape)-2; d++ {
			if shape[d] == 1 {
				ix[d] = "0"
			} else {
				ix[d] = fmt.Sprintf("b%d", d+off)
			}
		}
		ix[len(shape)-2], ix[len(shape)-1] = row, col
		return ix
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float As[%d][%d];\n  __shared__ float Bs[%d][%d];\n", mmBK, mmBM+4, mmBK, mmBN+4)
	b.WriteString("  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;\n")
	fmt.Fprintf(&b, "  const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d;\n", mmBM, mmBN)
	b.WriteString("  long long bz = blockIdx.z;\n")
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "  long long b%d = bz %% %dLL; bz /= %dLL;\n", d, out[d], out[d])
	}
	// A norm prologue: the row statistics of the block's rows of A, each
	// reduction a pass of a warp along a row (lanes strided over K, a
	// shuffle tree), kept in shared memory for the tile loads.
	var reds []ir.Value
	for i, n := range body.Nodes {
		if n.Op.Class() == ir.ClassReduce {
			reds = append(reds, ir.Value(i))
		}
	}
	redIndex := map[ir.Value]int{}
	for ri, rv := range reds {
		redIndex[rv] = ri
	}
	var rowShape ir.Shape
	if len(reds) > 0 {
		rowShape = body.Node(body.Node(reds[0]).Inputs[0]).Shape
		for _, rv := range reds {
			rn := body.Node(rv)
			in := body.Node(rn.Inputs[0]).Shape
			if !in.Equal(rowShape) || (rn.Attrs.Axis != len(in)-1 && rn.Attrs.Axis != -1) || rn.DType != ir.F32 {
				return "", fmt.Errorf("matmul prologue with a reduction that is not an f32 row reduction of one row shape")
			}
		}
		if int64(rowShape[len(rowShape)-1]) != K || rowShape.NumElements() != a.Shape.NumElements() {
			return "", fmt.Errorf("matmul prologue reducing rows of %v, not the left operand's %v", rowShape, a.Shape)
		}
		fmt.Fprintf(&b, "  __shared__ float Red[%d][%d];\n", len(reds), mmBM)
	}
	// rowOf places a reduction's value: its linear index is the row of A
	// counted over the batch; the block holds rows bz*M+m0 ...+BM.
	reducedAt := func(v ir.Value, ix index) (string, bool) {
		ri, ok := redIndex[v]
		if !ok {
			return "", false
		}
		return fmt.Sprintf("Red[%d][(%s) - ((long long)blockIdx.z * %dLL + m0)]", ri, linear(body.Node(v).Shape, ix), M), true
	}
	for ri, rv := range reds {
		rn := body.Node(rv)
		e := &elementwise{body: body, temps: map[string]string{}, reducedAt: reducedAt}
		fmt.Fprintf(&b, "  for (int mm = threadIdx.x / 32; mm < %d; mm += %d) {\n", mmBM, mmWarps)
		fmt.Fprintf(&b, "    long long row = (long long)blockIdx.z * %dLL + m0 + mm;\n", M)
		init, combine := "0.0f", "acc = acc + %s;"
		if rn.Op == ir.OpMaxReduce {
			init, combine = "-INFINITY", "acc = (acc != acc || acc > %[1]s) ? acc : %[1]s;"
		}
		fmt.Fprintf(&b, "    float acc = %s;\n", init)
		fmt.Fprintf(&b, "    if (m0 + mm < %dLL) for (long long k = threadIdx.x %% 32; k < %dLL; k += 32) {\n", M, K)
		e.emit("long long i = row * %dLL + k;", K)
		ix := make(index, len(rowShape))
		for d, x := range split(rowShape, "i") {
			if x == "0" {
				ix[d] = "0"
				continue
			}
			ix[d] = fmt.Sprintf("i%d", d)
			e.emit("long long i%d = %s;", d, x)
		}
		v, err := e.value(rn.Inputs[0], ix, false)
		if err != nil {
			return "", err
		}
		e.emit(combine, v)
		for _, l := range e.lines {
			b.WriteString("  " + l + "\n")
		}
		b.WriteString("    }\n")
		if rn.Op == ir.OpMaxReduce {
			b.WriteString("    for (int o = 16; o > 0; o >>= 1) { float t = __shfl_xor_sync(0xffffffffu, acc, o); acc = (acc != acc || acc > t) ? acc : t; }\n")
		} else {
			b.WriteString("    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n")
		}
		fmt.Fprintf(&b, "    if (threadIdx.x %% 32 == 0) Red[%d][mm] = acc;\n  }\n  __syncthreads();\n", ri)
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
	e := &elementwise{body: body, temps: map[string]string{}, reduced: map[ir.Value]string{mm: "acc[ii][jj]"}}
	mix := make(index, r)
	for d := 0; d < r-2; d++ {
		mix[d] = fmt.Sprintf("b%d", d)
	}
	mix[r-2], mix[r-1] = "m", "n"
	for j, o := range body.Outputs {
		on := body.Node(o.Value)
		oix, err := forward(body, mm, o.Value, mix)
		if err != nil {
			return "", fmt.Errorf("matmul kernel output %d: %w", j, err)
		}
		v, err := e.value(o.Value, oix, false)
		if err != nil {
			return "", err
		}
		e.emit("out%d[%s] = %s;", j, linear(on.Shape, oix), store(on.DType, v))
	}
	for _, l := range e.lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("  }\n")
	return b.String(), nil
}
