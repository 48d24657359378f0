// Package cuda owns generated CUDA C: the printer from a lowered kernel to
// readable, deterministic CUDA source (named extern "C" entry points, a
// comment with the term each computes, no #include and no asm: every
// operation below C, such as half-precision conversion, is a call to a
// named helper that the NVRTC prelude defines with CUDA built-ins and
// inline PTX and the emulation header in plain C++).
//
// A kernel body is printed in the form cost.FormOf names for it (the
// legality oracle rules.Legal and the cost model share), in any schedule
// the cost model lists: elementwise (fused chains of elementwise ops,
// views, concats, casts, gathers and slice updates, with 16-byte vector
// loads where every operand is read at the output's element; other
// reductions loop per element), row (rows.go), matmul (matmul.go,
// tensorcore.go), attention (attention.go, attention_tc.go) and paged
// attention (attention_paged.go). A body no
// form computes is refused with an error saying why, never printed wrong.
package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// Param is one parameter of a generated kernel: a pointer to a buffer.
type Param struct {
	Name string
	Type string // "const float*", "lum_f16*", ...
}

// Kernel is one printed kernel.
type Kernel struct {
	Name string
	// Text is its CUDA source (no prelude).
	Text string
	// Params are the body's inputs in order, then (with a RowCount) the
	// two that carry the tokens present, then its outputs; Inputs counts
	// all but the outputs.
	Params []Param
	Inputs int
	// Grid and Block are the launch shape, Grid for every row the body
	// has; Rows, when set, sizes Grid for the tokens present instead.
	Grid, Block [3]int
	Rows        *RowGrid
	// Vector says the kernel moves 16 bytes per load and store.
	Vector bool
	// Helpers names the helper functions it calls, which Source prints
	// once.
	Helpers []string
	// Schedule is the schedule it was printed with, the form's default
	// filled in.
	Schedule cost.Schedule
	// Estimate is the cost model's estimate of Schedule when the cost
	// model chose it (PrintProgramWith), and Alternatives the next best
	// schedules, the candidates to measure.
	Estimate     *cost.Estimate
	Alternatives []cost.Estimate
	// Workspace is the bytes of device memory the kernel keeps for itself
	// across its blocks (attention's flash-decoding partials and
	// counters: static arrays in its body, initialized when the module
	// loads); 0 for most kernels.
	Workspace int64
	// BlockGroup, when above 1, says the blocks cooperate in groups of
	// that many consecutive linear block ids (the last of a group to
	// finish combines the group's work): a run of some of the grid's
	// blocks must run whole groups.
	BlockGroup int
	// Buckets, for a kernel that follows the rows present, are the
	// kernels its launch runs by the rows present (ForRows), ascending;
	// nil where one kernel serves every count.
	Buckets []RowBucket
	// Body is the body a bucket's kernel computes (its launch's body at
	// the bucket's rows); nil for a launch's own kernel.
	Body *ir.Graph

	comment string    // without the schedule line, for reprinting
	count   *RowCount // what it was printed with, for reprinting
}

// paramName is the parameter a body value is read from or written to.
func paramName(body *ir.Graph, v ir.Value) string {
	return fmt.Sprintf("in%d", slices.Index(body.Inputs(), v))
}

// maxGrid bounds the blocks of a grid-stride kernel.
const maxGrid = 4096

// PrintKernel prints the kernel named name computing body (a lowered
// kernel body over whole buffers) with its form's default schedule;
// comment says what it implements. A body of a form the printer does not
// know yet is an error naming the form.
func PrintKernel(name, comment string, body *ir.Graph) (*Kernel, error) {
	return PrintKernelWith(name, comment, body, cost.Schedule{})
}

// PrintKernelWith prints a kernel under schedule s, one of the schedules
// the cost model lists for the body (cost.Model.Ranked); the zero schedule
// is the form's default. A schedule the form cannot run is an error naming
// it, never a kernel that ignores it.
func PrintKernelWith(name, comment string, body *ir.Graph, s cost.Schedule) (*Kernel, error) {
	return PrintKernelRows(name, comment, body, s, nil)
}

// PrintKernelRows prints a kernel as PrintKernelWith does, for a serving
// step's row-wise launch when rc is not nil: the kernel takes the tokens
// present through rc's parameters and, where its form can, works on them
// alone (Kernel.Rows). Every row it computes is computed as without rc.
func PrintKernelRows(name, comment string, body *ir.Graph, s cost.Schedule, rc *RowCount) (*Kernel, error) {
	k, err := printKernel(name, comment, body, s, rc)
	if err != nil {
		return nil, fmt.Errorf("print kernel %s: %w", name, err)
	}
	return k, nil
}

// printKernel prints body in the form cost.FormOf names, the one the cost
// model priced and rules.Legal admitted, its composite ops decomposed as
// cost.Decompose writes them.
func printKernel(name, comment string, body *ir.Graph, s cost.Schedule, rc *RowCount) (*Kernel, error) {
	form, err := cost.FormOf(body)
	if err != nil {
		return nil, fmt.Errorf("no kernel form computes this body: %w", err)
	}
	if body, err = cost.Decompose(body); err != nil {
		return nil, err
	}
	k := &Kernel{Name: name, count: rc}
	setParams(k, body, rc)
	var text string
	switch form {
	case cost.FormAttention:
		text, err = printAttention(k, body, s)
	case cost.FormPagedAttention:
		text, err = printPagedAttention(k, body, s)
	case cost.FormRoute:
		text, err = printRoute(k, body, s)
	case cost.FormExperts:
		text, err = printExperts(k, body, s)
	case cost.FormMatMul:
		text, err = printMatmul(k, body, s)
	case cost.FormRow:
		k.Helpers, text, err = printRow(k, body, s)
	default:
		text, err = printElementwise(k, body, s)
	}
	if err != nil {
		return nil, err
	}
	k.Text = header(name, comment, k) + rowsPrologue(k, text) + text + "}\n"
	return k, nil
}

// rowsPrologue is what a kernel of a step's rows present runs first when
// its form's text does not declare the rows present itself (a
// grid-stride loop bounds its own): lum_t, read from the metadata, and,
// for a grid that follows the rows (Kernel.Rows), a return for a block
// whose rows all lie past them. A CUDA graph replays a bucket's launches
// with the grid of the bucket's top, so the blocks past the rows of a
// smaller step run, and must write nothing; the stores of the rows past
// them in a block that holds some are guarded by lum_t too (rowLimit).
func rowsPrologue(k *Kernel, text string) string {
	rc := k.count
	if rc == nil || strings.Contains(text, "const long long lum_t") {
		return ""
	}
	r := k.Rows
	exit := r != nil && k.BlockGroup <= 1 && r.Dim >= 0 && r.Dim <= 2 && r.Num > 0 && r.Den > 0
	if !exit && !strings.Contains(text, "lum_t") {
		return ""
	}
	out := rc.line()
	if exit {
		out += fmt.Sprintf("  if ((long long)blockIdx.%c * %dLL >= lum_t * %dLL) return;\n", "xyz"[r.Dim], r.Den, r.Num)
	}
	return out
}

// rowLimit is the bound of a matmul's rows (of M) in its stores: M, or
// for a kernel of a step's rows present whose M axis holds them, the rows
// present (at most M), so that the rows past them are never written.
func rowLimit(k *Kernel, M int64, rowsOnM bool) string {
	if k.count == nil || !rowsOnM {
		return fmt.Sprintf("%dLL", M)
	}
	return fmt.Sprintf("(lum_t < %dLL ? lum_t : %dLL)", M, M)
}

// printElementwise prints the grid-stride loop of an elementwise kernel,
// four elements a thread at a time when every operand is read at the
// output's own element. An output written through a window
// (lower.OutputWindow) is stored at its element's place in the buffer;
// the 16-byte stores stay only where every quad is contiguous and aligned
// there.
func printElementwise(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	threads := s.Threads
	if threads == 0 {
		threads = elementwiseThreads
	}
	if threads%32 != 0 || threads > 1024 || s.BM != 0 || s.BN != 0 || s.Rows != 0 || s.Tensor {
		return "", fmt.Errorf("elementwise kernel: schedule %s: a block of 32 to 1024 threads (a multiple of 32) is all it takes", s)
	}
	k.Block = [3]int{threads, 1, 1}
	k.Schedule = cost.Schedule{Threads: threads}
	outShape := body.Node(body.Outputs[0].Value).Shape
	elems := outShape.NumElements()
	windows, err := outputWindows(body)
	if err != nil {
		return "", err
	}
	e := &elementwise{body: body, temps: map[string]string{}}
	var loop string
	perRow, rows := rowsOf(k.count, body, outShape, elems)
	// Of rows present, the quads must hold whole rows: a quad straddling
	// row T would write the rows past it, which a graph replaying a
	// bucket's grid for more rows must leave alone.
	if vectorizable(body) && len(body.Outputs) == 1 && windowVectorizable(outShape, windows[0]) && (!rows || perRow%4 == 0) {
		k.Vector = true
		quads := elems / 4
		bound := fmt.Sprintf("%dLL", quads)
		if rows {
			bound, k.Rows = fmt.Sprintf("lum_t * %dLL", perRow/4), &RowGrid{Dim: 0, Num: perRow, Den: 4 * int64(threads)}
		}
		loop = fmt.Sprintf("for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < %s; q += (long long)gridDim.x * blockDim.x)", bound)
		if err := e.vector(); err != nil {
			return "", err
		}
		if windows[0] != nil {
			if err := e.storeVectorAt(storeIndex(body, outShape, split(outShape, "4 * q"), windows[0])); err != nil {
				return "", err
			}
		}
		k.Grid = [3]int{int(min(max((quads+int64(threads)-1)/int64(threads), 1), maxGrid)), 1, 1}
	} else {
		bound := fmt.Sprintf("%dLL", elems)
		if rows {
			bound, k.Rows = fmt.Sprintf("lum_t * %dLL", perRow), &RowGrid{Dim: 0, Num: perRow, Den: int64(threads)}
		}
		loop = fmt.Sprintf("for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %s; i += (long long)gridDim.x * blockDim.x)", bound)
		ix := make(index, len(outShape))
		for d, x := range split(outShape, "i") {
			if x == "0" {
				ix[d] = "0"
				continue
			}
			ix[d] = fmt.Sprintf("i%d", d)
			e.emit("long long i%d = %s;", d, x)
		}
		for j, o := range body.Outputs {
			v, err := e.value(o.Value, ix, false)
			if err != nil {
				return "", err
			}
			at := "i"
			if windows[j] != nil {
				at = storeIndex(body, outShape, ix, windows[j])
			}
			if g := storeGuard(body, ix, windows[j]); g != "" {
				e.emit("if (%s) out%d[%s] = %s;", g, j, at, store(body.Node(o.Value).DType, v))
				continue
			}
			e.emit("out%d[%s] = %s;", j, at, store(body.Node(o.Value).DType, v))
		}
		k.Grid = [3]int{int(min(max((elems+int64(threads)-1)/int64(threads), 1), maxGrid)), 1, 1}
	}
	var b strings.Builder
	if k.Rows != nil {
		b.WriteString(k.count.line())
	}
	fmt.Fprintf(&b, "  %s {\n", loop)
	for _, l := range e.lines {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("  }\n")
	return b.String(), nil
}

// setParams declares a kernel's parameters: the body's inputs, the row
// count's, then its outputs.
func setParams(k *Kernel, body *ir.Graph, rc *RowCount) {
	for i, v := range body.Inputs() {
		n := body.Node(v)
		k.Params = append(k.Params, Param{Name: fmt.Sprintf("in%d", i), Type: "const " + storageType(n.DType) + "*"})
	}
	if rc != nil {
		k.Params = append(k.Params, rowCountParams(rc)...)
	}
	k.Inputs = len(k.Params)
	for i, o := range body.Outputs {
		n := body.Node(o.Value)
		k.Params = append(k.Params, Param{Name: fmt.Sprintf("out%d", i), Type: storageType(n.DType) + "*"})
	}
}

// header prints a kernel's comment and signature, up to its opening brace.
func header(name, comment string, k *Kernel) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(comment), "\n") {
		fmt.Fprintf(&b, "// %s\n", line)
	}
	params := make([]string, len(k.Params))
	for i, p := range k.Params {
		params[i] = p.Type + " __restrict__ " + p.Name
	}
	fmt.Fprintf(&b, "extern \"C\" __global__ void %s(%s) {\n", name, strings.Join(params, ", "))
	return b.String()
}

// vector emits the four-lane body of a vectorizable kernel: one vector
// load of each input at quad q (16 bytes of f32, 8 of f16 or bf16,
// widened to f32), the chain per lane, one vector store (rounded once to
// the output's dtype).
func (e *elementwise) vector() error {
	lanes := []string{"x", "y", "z", "w"}
	for i, v := range e.body.Inputs() {
		e.emit("float4 a%d = lum_ld4%s(in%d + 4 * q);", i, vectorSuffix(e.body.Node(v).DType), i)
	}
	out := e.body.Outputs[0].Value
	res := make([]string, 4)
	for l, lane := range lanes {
		vals := map[ir.Value]string{}
		for _, v := range e.body.Inputs() {
			vals[v] = fmt.Sprintf("a%d.%s", slices.Index(e.body.Inputs(), v), lane)
		}
		for i, n := range e.body.Nodes {
			v := ir.Value(i)
			switch {
			case n.Op == ir.OpInput:
				continue
			case n.Op == ir.OpConst:
				vals[v] = constLiteral(n)
				continue
			}
			var expr string
			var err error
			switch {
			case n.Op == ir.OpCast:
				expr = castExpr(e.body.Node(n.Inputs[0]).DType, n.DType, vals[n.Inputs[0]])
			case n.Op.Class() == ir.ClassUnary:
				expr, err = unary(n.Op, vals[n.Inputs[0]], n.DType)
			default:
				expr, err = binaryExpr(n.Op, vals[n.Inputs[0]], vals[n.Inputs[1]], n.DType)
			}
			if err != nil {
				return err
			}
			vals[v] = e.temp("float", expr)
		}
		res[l] = vals[out]
	}
	e.emit("lum_st4%s(out0 + 4 * q, make_float4(%s));", vectorSuffix(e.body.Node(out).DType), strings.Join(res, ", "))
	return nil
}
