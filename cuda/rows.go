package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The row kernel form: reductions along the last axis of one row shape
// (sum, max; softmax, RMS and layer norm decomposed into them), with
// elementwise prologues feeding them and an elementwise epilogue using
// them. By default a block owns a row at a time: each reduction is a
// strided pass of its threads over the row, a warp-shuffle tree and a pass
// through shared memory across warps; then the outputs are written in a
// last pass. Under a schedule with Rows set, each warp of the block owns a
// row instead and reduces with shuffles alone (short rows would leave most
// of a block idle). The
// values after the reductions may only be elementwise ops, casts, reshapes
// and broadcasts of the row statistics, so that output element i belongs to
// row i / L.

// blockReduceHelpers are the helper functions row kernels call, printed
// once per source. They use only CUDA built-ins.
var blockReduceHelpers = map[string]string{
	"lum_block_sum": `__device__ __forceinline__ float lum_block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
`,
	"lum_warp_sum": `__device__ __forceinline__ float lum_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
`,
	"lum_warp_max": `__device__ __forceinline__ float lum_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) { float t = __shfl_xor_sync(0xffffffffu, v, o); v = (v != v || v > t) ? v : t; }
  return v;
}
`,
	"lum_block_max": `__device__ __forceinline__ float lum_max_nan(float a, float b) {
  return (a != a || a > b) ? a : b;
}
__device__ __forceinline__ float lum_block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = lum_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = lum_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
`,
}

// rowReduction reports whether n reduces along its input's last axis: a
// row kernel's (or a norm prologue's) reduction, not a sum across rows.
// Integer reductions are not: they loop per output element, exactly
// (cost.RowReduces, the one answer Legal and the cost model share).
func rowReduction(body *ir.Graph, n *ir.Node) bool {
	return cost.RowReduction(body, n)
}

// printRow prints a row kernel.
func printRow(k *Kernel, body *ir.Graph, s cost.Schedule) ([]string, string, error) {
	var reds []ir.Value
	for i, n := range body.Nodes {
		if rowReduction(body, n) {
			reds = append(reds, ir.Value(i))
		}
	}
	// The structure the form relies on is the one rules.Legal checks
	// (cost.RowStructure): one row shape, the row structure kept past
	// the reductions, outputs of a row or an element per row.
	if err := cost.RowStructure(body); err != nil {
		return nil, "", err
	}
	rowShape := body.Node(body.Node(reds[0]).Inputs[0]).Shape
	L := int64(rowShape[len(rowShape)-1])
	rows := rowShape.NumElements() / max(L, 1)
	if s == (cost.Schedule{}) {
		s.Threads = 256
		if L < 256 {
			s.Threads = int(max(32, (L+31)/32*32))
		}
	}
	warpRows := s.Rows > 0
	if s.Threads%32 != 0 || s.Threads > 1024 || s.BM != 0 || s.BN != 0 || s.Tensor || (warpRows && s.Threads != 32*s.Rows) {
		return nil, "", fmt.Errorf("row kernel: schedule %s: a row kernel takes a block of 32 to 1024 threads (a multiple of 32), with rows= a warp per row", s)
	}
	k.Schedule = s
	k.Block = [3]int{s.Threads, 1, 1}
	lane, stride := "threadIdx.x", "blockDim.x"
	var b strings.Builder
	bound := fmt.Sprintf("%dLL", rows)
	perRowElems, scaled := rowsOf(k.count, body, rowShape, rowShape.NumElements())
	perToken := perRowElems / max(L, 1) // the rows of the form a token (or sequence) holds
	scaled = scaled && perToken*max(L, 1) == perRowElems
	if scaled {
		b.WriteString(k.count.line())
		bound = fmt.Sprintf("lum_t * %dLL", perToken)
	}
	if warpRows {
		k.Grid = [3]int{int(min(max((rows+int64(s.Rows)-1)/int64(s.Rows), 1), maxGrid)), 1, 1}
		lane, stride = "(threadIdx.x & 31)", "32"
		fmt.Fprintf(&b, "  for (long long r = (long long)blockIdx.x * %d + (threadIdx.x >> 5); r < %s; r += (long long)gridDim.x * %d) {\n", s.Rows, bound, s.Rows)
		if scaled {
			k.Rows = &RowGrid{Dim: 0, Num: perToken, Den: int64(s.Rows)}
		}
	} else {
		k.Grid = [3]int{int(min(max(rows, 1), maxGrid)), 1, 1}
		fmt.Fprintf(&b, "  __shared__ float lum_scratch[32];\n")
		fmt.Fprintf(&b, "  for (long long r = blockIdx.x; r < %s; r += gridDim.x) {\n", bound)
		if scaled {
			k.Rows = &RowGrid{Dim: 0, Num: perToken, Den: 1}
		}
	}
	redVars := map[ir.Value]string{}
	var helpers []string
	// pass emits a strided loop over the row's elements with a fresh
	// emitter, its index variables for element i = r*L + j of shape.
	pass := func(shape ir.Shape, bodyFn func(e *elementwise, ix index) error) error {
		e := &elementwise{body: body, temps: map[string]string{}, reduced: redVars}
		e.emit("long long i = r * %dLL + j;", L)
		ix := make(index, len(shape))
		for d, x := range split(shape, "i") {
			if x == "0" {
				ix[d] = "0"
				continue
			}
			ix[d] = fmt.Sprintf("i%d", d)
			e.emit("long long i%d = %s;", d, x)
		}
		if err := bodyFn(e, ix); err != nil {
			return err
		}
		fmt.Fprintf(&b, "    for (long long j = %s; j < %dLL; j += %s) {\n", lane, L, stride)
		for _, l := range e.lines {
			b.WriteString("    " + l + "\n")
		}
		b.WriteString("    }\n")
		return nil
	}
	for ri, r := range reds {
		n := body.Node(r)
		acc := fmt.Sprintf("acc%d", ri)
		init, combine, helper := "0.0f", "%s = %s + %s;", "lum_block_sum"
		if n.Op == ir.OpMaxReduce {
			init, combine, helper = "-INFINITY", "%s = lum_max_nan(%s, %s);", "lum_block_max"
			if warpRows {
				// lum_max_nan comes with lum_block_max; a warp's max
				// keeps NaNs the same way inline.
				combine = "{ float x_ = %[3]s; %[1]s = (%[2]s != %[2]s || %[2]s > x_) ? %[2]s : x_; }"
			}
		}
		fmt.Fprintf(&b, "    float %s = %s;\n", acc, init)
		err := pass(rowShape, func(e *elementwise, ix index) error {
			v, err := e.value(n.Inputs[0], ix, false)
			if err != nil {
				return err
			}
			e.emit(combine, acc, acc, v)
			return nil
		})
		if err != nil {
			return nil, "", err
		}
		red := fmt.Sprintf("red%d", ri)
		if warpRows {
			helper = strings.Replace(helper, "block", "warp", 1)
			fmt.Fprintf(&b, "    float %s = %s(%s);\n", red, helper, acc)
		} else {
			fmt.Fprintf(&b, "    float %s = %s(%s, lum_scratch);\n", red, helper, acc)
		}
		if n.DType != ir.F32 {
			// The reduction's result is stored as its dtype would be.
			fmt.Fprintf(&b, "    %s = %s;\n", red, castExpr(ir.F32, n.DType, red))
		}
		redVars[r] = red
		helpers = append(helpers, helper)
	}
	var rowOuts, scalarOuts []int
	for j, o := range body.Outputs {
		if body.Node(o.Value).Shape.NumElements() == rows*L {
			rowOuts = append(rowOuts, j)
		} else {
			scalarOuts = append(scalarOuts, j)
		}
	}
	if len(rowOuts) > 0 {
		err := pass(rowShape, func(e *elementwise, _ index) error {
			for _, j := range rowOuts {
				o := body.Outputs[j].Value
				on := body.Node(o)
				oix := make(index, len(on.Shape))
				for d, x := range split(on.Shape, "i") {
					oix[d] = x
				}
				v, err := e.value(o, oix, false)
				if err != nil {
					return err
				}
				e.emit("out%d[i] = %s;", j, store(on.DType, v))
			}
			return nil
		})
		if err != nil {
			return nil, "", err
		}
	}
	if len(scalarOuts) > 0 {
		e := &elementwise{body: body, temps: map[string]string{}, reduced: redVars}
		for _, j := range scalarOuts {
			o := body.Outputs[j].Value
			on := body.Node(o)
			v, err := e.value(o, split(on.Shape, "r"), false)
			if err != nil {
				return nil, "", err
			}
			e.emit("if (%s == 0) out%d[r] = %s;", lane, j, store(on.DType, v))
		}
		for _, l := range e.lines {
			b.WriteString("  " + l + "\n")
		}
	}
	if warpRows {
		b.WriteString("  }\n")
	} else {
		b.WriteString("    __syncthreads();\n  }\n")
	}
	return helpers, b.String(), nil
}
