package cost

import (
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The tensor-core matmul's quantized right operand (package cuda,
// tensorcore_quant.go): a weight that is a dequant of packed kernel
// arguments is not computed element by element through the scalar
// prologue (an index, a division per view axis and a one-byte load per
// value, scalarLoadOps) but decoded from whole loads of its codes: every
// thread loads its share of a B tile's packed codes into registers one
// tile ahead (while the warps multiply the current tile), then decodes
// them, two K-adjacent values a shared-memory word, as the tile is
// stored. The model prices that as dequantOps (the decode, counted with
// the prologue's operations) and tileQuantOps per value, with the
// pipeline one register stage deep on that side.

// tileQuantOps is what the quantized tile path costs per value it stores
// besides the decode itself, in FMA-class operations: the packing of two
// values into a word (a conversion each), the shared-memory store of the
// word, the scale's decode shared by 8 to 32 values, and the loads'
// share (one 8- or 16-byte load of 16 codes for mxfp4 and fp8, two words
// of 8 for awq and gptq with their scales and zero points). An
// assumption, uncalibrated, as scalarLoadOps is: measurements are to fit
// it.
const tileQuantOps = 4

// TileQuantOperand reports whether the right operand v of a tensor-core
// matmul (of operand dtype dt, K its reduced length) is a quantized weight
// its B tiles decode from whole loads of codes: a two-dimensional dequant
// to dt of kernel arguments (GEMVQuantWeight's one part: mxfp4 and fp8
// through the transposing permute, awq and gptq directly), with K a
// multiple of the tile's 32 and every tile within one group of scales:
// fp8's Group a multiple of 32 or the whole of K, awq's and gptq's a
// multiple of 32 with N a multiple of 8 (a word of zero points).
func TileQuantOperand(body *ir.Graph, v ir.Value, dt ir.DType, K int64) (GEMVQuant, bool) {
	q, ok := gemvQuantPart(body, v)
	if !ok || q.DType != dt || q.K != K || K%32 != 0 {
		return GEMVQuant{}, false
	}
	switch q.Format {
	case quant.MXFP4:
		return q, true
	case quant.FP8:
		return q, q.Group%32 == 0 || q.Group >= K
	case quant.AWQ, quant.GPTQ:
		return q, q.Group%32 == 0 && q.N%8 == 0
	}
	return GEMVQuant{}, false
}

// TileQuantTasks is how many tasks of a B tile a thread of schedule s
// loads and stores: every format has two a row of the tile (package cuda:
// half a row of mxfp4 or fp8, a word column of two k's for awq, 16 of
// them a column's 8 rows, two words of one column for gptq).
func TileQuantTasks(s Schedule) int {
	return (2*s.BN + s.Threads - 1) / max(s.Threads, 1)
}

// TileQuantMaxTasks bounds TileQuantTasks: a thread's tasks wait in
// registers (awq's eight scales a task among them) beside the
// accumulators, and past two a task NVRTC spills them under the 64x64
// warp patch. A schedule past it reads the weight through the scalar
// prologue.
const TileQuantMaxTasks = 2

// TileQuantSchedule is TileQuantOperand under schedule s: the operand's
// tiles are decoded from whole loads when s gives a thread at most
// TileQuantMaxTasks tasks.
func TileQuantSchedule(body *ir.Graph, v ir.Value, dt ir.DType, K int64, s Schedule) (GEMVQuant, bool) {
	q, ok := TileQuantOperand(body, v, dt, K)
	if !ok || TileQuantTasks(s) > TileQuantMaxTasks {
		return GEMVQuant{}, false
	}
	return q, true
}

// tileQuantOperand is TileQuantSchedule of matmul mm's right operand.
func (k *kernelForm) tileQuantOperand(mm *ir.Node, s Schedule) bool {
	a := k.body.Node(mm.Inputs[0])
	_, ok := TileQuantSchedule(k.body, mm.Inputs[1], a.DType, int64(a.Shape[len(a.Shape)-1]), s)
	return ok
}
