package cost

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// The tiled matmul forms' features (package cuda, matmul.go and
// tensorcore.go): tiles, how each operand is loaded, shared memory.

// scalarLoadOps is what the scalar operand path costs per element it
// loads into a tile, in FMA-class operations (the FMA peak counts two per
// instruction): the element's index, a 64-bit division and remainder per
// axis of each view (a few 32-bit multiply-adds each), the load, the
// prologue's conversions, the packing and the shared store, about 32
// instructions for a two-view operand. An assumption, uncalibrated:
// measurements are to fit it.
const scalarLoadOps = 64

// directOperand reports whether operand side (0 left, 1 right) of matmul
// mm is a buffer the tensor-core path copies with cp.async: a plain one
// (DirectOperand) or one read through views in 16-byte runs
// (StridedOperand).
func (k *kernelForm) directOperand(mm *ir.Node, side int, right bool) bool {
	a := k.body.Node(mm.Inputs[0]).Shape
	v, K := mm.Inputs[side], int64(a[len(a)-1])
	dt := k.body.Node(v).DType
	if _, ok := DirectOperand(k.body, v, dt, K, right); ok {
		return true
	}
	_, ok := StridedOperand(k.body, v, dt, K, right)
	return ok
}

// WarpPatch is a tensor-core matmul schedule's warp patch in mma tiles:
// mi of 16 rows by nj of 8 columns (package cuda prints the same).
func WarpPatch(s Schedule) (mi, nj int) {
	switch {
	case s.Warp == 64:
		return 4, 8
	case s.BM == 16:
		return 1, 4
	}
	return 2, 4
}

// StaticShared is the most shared memory a kernel declares statically
// (48 KiB); the printers declare no dynamic shared memory.
const StaticShared = 48 << 10

// TensorTileShared is the shared memory of a tensor-core matmul's tiles:
// Stages buffers of BM rows of A and BN columns of B, BK values of 2 bytes
// a row, swizzled rather than padded (package cuda, tensorcore.go), so
// that three stages of 128x128 tiles fit the static 48 KiB.
func TensorTileShared(s Schedule) int {
	return (s.BM + s.BN) * (s.BK / 2) * 4 * max(s.Stages, 1)
}

// TensorShared is the shared memory a tensor-core matmul kernel of body
// declares under s: its tiles, and a norm prologue's row statistics (a
// float per row of the block for each row reduction of the body the
// printer prints, TensorRowStats).
func TensorShared(body *ir.Graph, s Schedule) int {
	return tensorShared(TensorRowStats(body), s)
}

func tensorShared(rowStats int, s Schedule) int {
	return TensorTileShared(s) + 4*rowStats*s.BM
}

// TensorRowStats is the row reductions a matmul kernel's norm prologue
// keeps in shared memory: those of the decomposed body (Decompose: a
// composite RMS norm is one, a layer norm two), which is the body the
// printer prints. A body Decompose refuses counts two a composite.
func TensorRowStats(body *ir.Graph) int {
	d, err := Decompose(body)
	if err != nil {
		d = body
	}
	n := 0
	for _, x := range d.Nodes {
		switch {
		case RowReduction(d, x):
			n++
		case x.Op == ir.OpRMSNorm || x.Op == ir.OpLayerNorm || x.Op == ir.OpSoftmax:
			n += 2
		}
	}
	return n
}

// rowStats is TensorRowStats of the kernel's body, counted once.
func (k *kernelForm) rowStats() int {
	if k.stats < 0 {
		k.stats = TensorRowStats(k.body)
	}
	return k.stats
}

func (k *kernelForm) matmulFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	body := k.body
	mm := body.Node(k.matmuls[0])
	a, b := body.Node(mm.Inputs[0]).Shape, body.Node(mm.Inputs[1]).Shape
	M, K, N := int(a[len(a)-2]), int(a[len(a)-1]), int(b[len(b)-1])
	batch := max(1, int(numel(mm.Shape))/(M*N))
	if s.BM > 16 && s.BM/2 >= M || s.BN > 32 && s.BN/2 >= N {
		return Features{}, false // a tile twice the extent computes padding
	}
	tilesM, tilesN := ceilDiv(M, s.BM), ceilDiv(N, s.BN)
	dt := body.Node(mm.Inputs[0]).DType
	size := dt.Size()
	shared := (s.BM*s.BK + s.BK*s.BN) * size * max(s.Stages, 1)
	if s.Tensor {
		if shared = tensorShared(k.rowStats(), s); shared > StaticShared {
			return Features{}, false
		}
	}
	per := k.occupancy(d, s.Threads, shared, s.BM*s.BN/s.Threads+32)
	if per == 0 {
		return Features{}, false
	}
	// An input on the left operand's side is read by every column of
	// tiles, one on the right's by every row (the tiles of one wave
	// sharing through L2); one only the epilogue reads, once.
	wM, wN := waveTiles(tilesM, tilesN, d)
	var bytes float64
	for _, v := range body.Inputs() {
		var b float64
		if k.slots[v]&1 != 0 {
			b = rereads(k.bytesOf(v), tilesN, wN, d)
		}
		if k.slots[v]&2 != 0 {
			b = math.Max(b, rereads(k.bytesOf(v), tilesM, wM, d))
		}
		bytes += math.Max(b, k.bytesOf(v))
	}
	// A prologue runs once per tile that reads it.
	var flops float64
	for i, n := range body.Nodes {
		f := opFLOPs(body, n)
		switch sl := k.slots[i]; {
		case sl&1 != 0:
			f *= float64(tilesN)
		case sl&2 != 0:
			f *= float64(tilesM)
		}
		flops += f
	}
	// Every block loads a BMxK strip of A and a KxBN strip of B into
	// shared memory, in the operand dtype (f32 for the f32 path).
	steps := ceilDiv(K, s.BK) * s.BK
	tileBytes := float64(batch*tilesM*tilesN) * float64(steps) * float64(s.BM+s.BN) * float64(size)
	// An operand the kernel cannot copy with 16-byte cp.async (every f32
	// operand; a computed or viewed half one) goes element by element
	// through the scalar path: index arithmetic and a synchronous load
	// per element of every tile that reads it.
	// Its loads are waited for before the tile's barrier, so the
	// pipeline keeps none of them in flight past it: one stage.
	stages := s.Stages
	for side, right := range []bool{false, true} {
		if s.Tensor && right && k.tileQuantOperand(mm, s) {
			// Decoded from whole loads of codes, fetched one tile ahead
			// into registers (tile_quant.go).
			flops += float64(batch*tilesM*tilesN) * float64(steps) * float64(s.BN) * tileQuantOps
			stages = min(stages, 2)
			continue
		}
		if !s.Tensor || !k.directOperand(mm, side, right) {
			rows := s.BM
			if right {
				rows = s.BN
			}
			flops += float64(batch*tilesM*tilesN) * float64(steps) * float64(rows) * scalarLoadOps
			stages = 1
		}
	}
	class, cdt := tensorDType(dt, s.Tensor)
	work := []Work{{FMA, "f32", flops}, {class, cdt, 2 * float64(batch) * float64(M) * float64(N) * float64(K)}}
	// Shared memory serves the tiles' stores and, on tensor cores, every
	// warp's fragments: per k16 step mi A fragments (16x16) and nj B
	// fragments (16x8) of 2-byte values for mi x nj mma, so a larger warp
	// patch reads less per mma.
	var sharedBytes float64
	if s.Tensor {
		mi, nj := WarpPatch(s)
		frag := float64(batch*tilesM*tilesN*(s.Threads/32)) * float64(steps/16) * float64(mi*512+nj*256)
		sharedBytes = frag + tileBytes
	}

	// With the compiler's count of the main loop's instructions, every
	// warp issues them once per K step.
	var instructions float64
	var issue IssueMix
	warpSteps := float64(batch*tilesM*tilesN*(s.Threads/32)) * float64(ceilDiv(K, s.BK))
	if k.res != nil && k.res.LoopInstructions > 0 {
		instructions = warpSteps * float64(k.res.LoopInstructions)
	}
	if k.res != nil {
		issue = k.res.Loop.Scale(warpSteps)
	}
	// A block keeps the operand tiles of its pipeline's stages in flight
	// but the one it multiplies (the scalar path: one step's, waited for
	// before its barrier), shared among its warps.
	step := float64((s.BM*s.BK + s.BK*s.BN) * size)
	inFlight := step * float64(max(stages-1, 1)) / float64(max(s.Threads/32, 1))
	return Features{Bytes: bytes + out, Work: work, Blocks: batch * tilesM * tilesN, PerSM: per, WarpsPerBlock: s.Threads / 32, Launches: 1, Stages: stages,
		TileBytes: tileBytes, SharedBytes: sharedBytes, Instructions: instructions, InFlight: inFlight, Issue: issue}, true
}
