package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// matmulGeom is what both matmul paths need of a body's matmul: its output
// shape and rank, M, N and K, and the batch count.
type matmulGeom struct {
	out            ir.Shape
	r              int
	M, N, K, batch int64
}

// matmulGeometry reads the matmul mm of body and checks its epilogue: the
// values after the matmul may only be elementwise ops, casts, reshapes and
// permutes, and every output has the matmul's size, so that each output
// element is one of the matmul's (forward finds which).
func matmulGeometry(body *ir.Graph, mm ir.Value) (matmulGeom, error) {
	g := matmulShape(body, mm)
	out := g.out
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
				return g, fmt.Errorf("matmul kernel with a %s after its matmul", n.Op)
			}
		}
	}
	for _, o := range body.Outputs {
		if body.Node(o.Value).Shape.NumElements() != out.NumElements() {
			return g, fmt.Errorf("matmul kernel output of another size than its matmul")
		}
	}
	if cost.WritesWindows(body) {
		// Only the matrix-vector kernel's gathered epilogue stores
		// through windows (gemv_gather.go).
		return g, fmt.Errorf("matmul kernel output written through a window")
	}
	return g, nil
}

// matmulShape is the geometry of body's matmul mm, its epilogue unchecked.
func matmulShape(body *ir.Graph, mm ir.Value) matmulGeom {
	mn := body.Node(mm)
	a := body.Node(mn.Inputs[0])
	out := mn.Shape
	r := len(out)
	g := matmulGeom{out: out, r: r, M: int64(out[r-2]), N: int64(out[r-1]), K: int64(a.Shape[len(a.Shape)-1])}
	g.batch = out.NumElements() / (g.M * g.N)
	return g
}

// opIndex is an operand's index at (row, col): its batch dims follow the
// output's (the kernels name them b0, b1, ...), a broadcast (size 1) batch
// dim reading index 0.
func (g matmulGeom) opIndex(shape ir.Shape, row, col string) index {
	return batchedIndex(g.r, shape, row, col)
}

// batchedIndex is the index at (row, col) of an operand of shape in a
// batched product whose result has rank r: its batch dims are the
// result's (named b0, b1, ... by the kernels), a size-1 one (a broadcast)
// read at 0.
func batchedIndex(r int, shape ir.Shape, row, col string) index {
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

// printEpilogue prints the stores of one accumulator, acc (C's element at
// m, n of the batch b0, b1, ...): each output at the index its views give
// that element, its epilogue computed there.
func (g matmulGeom) printEpilogue(b *strings.Builder, body *ir.Graph, mm ir.Value, acc string) error {
	e := &elementwise{body: body, temps: map[string]string{}, reduced: map[ir.Value]string{mm: acc}}
	mix := make(index, g.r)
	for d := 0; d < g.r-2; d++ {
		mix[d] = fmt.Sprintf("b%d", d)
	}
	mix[g.r-2], mix[g.r-1] = "m", "n"
	for j, o := range body.Outputs {
		on := body.Node(o.Value)
		oix, err := forward(body, mm, o.Value, mix)
		if err != nil {
			return fmt.Errorf("matmul kernel output %d: %w", j, err)
		}
		v, err := e.value(o.Value, oix, false)
		if err != nil {
			return err
		}
		e.emit("out%d[%s] = %s;", j, linear(on.Shape, oix), store(on.DType, v))
	}
	for _, l := range e.lines {
		b.WriteString(l + "\n")
	}
	return nil
}

// prologueReductions is a matmul prologue's row reductions (a norm's
// statistics) with each one's index, checked to be f32 reductions of rows
// of the left operand (aShape, K long); none when the prologue has none.
// form names the kernel in errors.
func prologueReductions(body *ir.Graph, aShape ir.Shape, K int64, form string) ([]ir.Value, map[ir.Value]int, error) {
	var reds []ir.Value
	for i, n := range body.Nodes {
		if rowReduction(body, n) {
			reds = append(reds, ir.Value(i))
		}
	}
	if len(reds) == 0 {
		return nil, nil, nil
	}
	redIndex := map[ir.Value]int{}
	rowShape := body.Node(body.Node(reds[0]).Inputs[0]).Shape
	for ri, rv := range reds {
		redIndex[rv] = ri
		rn := body.Node(rv)
		in := body.Node(rn.Inputs[0]).Shape
		if !in.Equal(rowShape) || (rn.Attrs.Axis != len(in)-1 && rn.Attrs.Axis != -1) || rn.DType != ir.F32 {
			return nil, nil, fmt.Errorf("%s prologue with a reduction that is not an f32 row reduction of one row shape", form)
		}
	}
	if int64(rowShape[len(rowShape)-1]) != K || rowShape.NumElements() != aShape.NumElements() {
		return nil, nil, fmt.Errorf("%s prologue reducing rows of %v, not the left operand's %v", form, rowShape, aShape)
	}
	return reds, redIndex, nil
}

// normPrologue prints a norm prologue's row statistics: each reduction
// over the block's rows of A (blockRows of them, from m0), a warp per row
// with lanes strided over K and a shuffle tree, into Red in shared memory;
// it returns where the tile loads find them (nil without reductions).
func normPrologue(b *strings.Builder, body *ir.Graph, aShape ir.Shape, M, K int64, blockRows, warps int) (func(ir.Value, index) (string, bool), error) {
	reds, redIndex, err := prologueReductions(body, aShape, K, "matmul")
	if err != nil || len(reds) == 0 {
		return nil, err
	}
	rowShape := body.Node(body.Node(reds[0]).Inputs[0]).Shape // one row shape, checked
	fmt.Fprintf(b, "  __shared__ float Red[%d][%d];\n", len(reds), blockRows)
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
		fmt.Fprintf(b, "  for (int mm = threadIdx.x / 32; mm < %d; mm += %d) {\n", blockRows, warps)
		fmt.Fprintf(b, "    long long row = (long long)blockIdx.z * %dLL + m0 + mm;\n", M)
		init, combine := "0.0f", "acc = acc + %s;"
		if rn.Op == ir.OpMaxReduce {
			init, combine = "-INFINITY", "acc = (acc != acc || acc > %[1]s) ? acc : %[1]s;"
		}
		fmt.Fprintf(b, "    float acc = %s;\n", init)
		fmt.Fprintf(b, "    if (m0 + mm < %dLL) for (long long k = threadIdx.x %% 32; k < %dLL; k += 32) {\n", M, K)
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
			return nil, err
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
		fmt.Fprintf(b, "    if (threadIdx.x %% 32 == 0) Red[%d][mm] = acc;\n  }\n  __syncthreads();\n", ri)
	}
	return reducedAt, nil
}

// setMatmulRows sizes a matmul kernel's grid for the rows present when it
// was printed with a row count and its matmul's M or outermost batch axis
// holds them: the M tiles (grid y, BM rows a block; over every batch, as
// a split-K matmul's partials hold the tokens behind the splits), or the
// batches (grid z). The matmul's rows are the body's output's where the
// output is the matmul's shape; through an epilogue that reshapes it
// (never one that permutes), the outermost axes but for axes of 1. The
// rows of the last tile past T are computed from whatever the rows past T
// hold and land in rows past T, which nothing reads.
func setMatmulRows(k *Kernel, body *ir.Graph, mm ir.Value, g matmulGeom, BM int) {
	rc := k.count
	if rc == nil {
		return
	}
	a := -1
	if out := body.Node(body.Outputs[0].Value).Shape; out.Equal(g.out) {
		a = rc.Axis
	} else if _, ok := lower.Leading(g.out, rc.Max); ok && leadingAxis(out) == rc.Axis && !permutedAfter(body, mm) {
		a = leadingAxis(g.out)
	}
	switch {
	case a < 0 || int64(g.out[a]) != rc.Max:
	case a == g.r-2:
		k.Rows = &RowGrid{Dim: 1, Num: 1, Den: int64(BM)}
	case a < g.r-2 && a == leadingAxis(g.out) && g.batch%rc.Max == 0:
		k.Rows = &RowGrid{Dim: 2, Num: g.batch / rc.Max, Den: 1}
	}
}

// permutedAfter says whether a permute reads the matmul mm's result, on
// the way to an output.
func permutedAfter(body *ir.Graph, mm ir.Value) bool {
	after := make([]bool, len(body.Nodes))
	after[mm] = true
	for i, n := range body.Nodes {
		for _, in := range n.Inputs {
			if after[in] {
				after[i] = true
				if n.Op == ir.OpPermute {
					return true
				}
			}
		}
	}
	return false
}

// leadingAxis is the first axis of shape whose extent is not 1.
func leadingAxis(shape ir.Shape) int {
	for a, d := range shape {
		if d != 1 {
			return a
		}
	}
	return 0
}
