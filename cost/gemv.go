package cost

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// The matrix-vector form of a matmul (package cuda, gemv.go): a decode
// step multiplies a few rows of activations by a weight matrix that is
// read once and dwarfs everything else, so the kernel is built to stream
// the weight at the memory's rate rather than to reuse tiles: each lane
// keeps a group of 4 or 8 independent 16-byte weight loads in flight, a
// warp cols (TM) columns of Stages loads each, and a block enough columns
// to stream at least gemvBlockBytes, so that its prologue (A computed
// once for the block into shared memory in f32, through a norm from its
// row statistics) and its reductions are a small part of its time. With
// few columns, a block's warps split K (split-K within the block, reduced
// in shared memory). The model prices what the printer prints (GEMVLoop,
// gemvFeatures): the loads in flight, the round trips outside the main
// loop, the instructions by pipe. The weight must be a direct right
// operand (DirectOperand), or a dequant of the kernel's packed arguments
// (gemv_quant.go): a weight the kernel would compute element by element
// is not streamed.

// GEMVRows is the most rows of A the matrix-vector kernel takes.
const GEMVRows = 8

// gemvChunkBytes is the shared memory holding a chunk of A in f32.
const gemvChunkBytes = 32 << 10

// GEMVSharedLimit is the most shared memory a matrix-vector kernel's
// chunk of A and partial sums take: static shared memory stops at 48 KiB,
// and a norm's row statistics take the rest.
const GEMVSharedLimit = 46 << 10

// GEMVShared is the shared memory of a matrix-vector kernel's chunk of A
// (M rows of K) and its partial sums (partials sets of M x bn); a norm's
// statistics take at most 2 KiB more (GEMVSharedLimit).
func GEMVShared(M, K int64, bn, partials int) int64 {
	return 4 * (M*GEMVChunk(M, K) + int64(partials)*M*int64(bn))
}

// GEMVChunk is the length of the chunks of K the matrix-vector kernel
// computes A in: as much as gemvChunkBytes holds for M rows, a multiple of
// 8 (whole 16-byte weight loads), no longer than K rounded up to 8.
func GEMVChunk(M, K int64) int64 { return gemvChunkUnit(M, K, 8) }

// gemvChunkUnit is GEMVChunk in multiples of unit.
func gemvChunkUnit(M, K, unit int64) int64 {
	c := int64(gemvChunkBytes/4) / max(M, 1) / unit * unit
	return max(unit, min(c, (K+unit-1)/unit*unit))
}

// GEMVLayout is how a matrix-vector schedule over a K-contiguous weight
// shares its BN columns among its warps: cols columns a warp (TM, or when
// TM is 0 as many as spread BN over the warps, at least 1), and split
// warps a group of cols columns, each streaming a split of K (split-K
// within the block, reduced in shared memory); false when the warps, the
// columns and TM do not divide.
func GEMVLayout(s Schedule) (cols, split int, ok bool) {
	w := s.Threads / 32
	if w == 0 || s.Threads%32 != 0 || s.BN <= 0 || s.TM < 0 {
		return 0, 0, false
	}
	cols = s.TM
	if cols == 0 {
		cols = max(1, s.BN/w)
	}
	if s.BN%cols != 0 || (w*cols)%s.BN != 0 {
		return 0, 0, false
	}
	return cols, w * cols / s.BN, true
}

// GEMVWeight is the weight of a matmul the matrix-vector kernel can run:
// at most GEMVRows rows of A, and a right operand of f32, f16 or bf16 that
// is a plain buffer, either read transposed with K contiguous (an
// nn.Linear weight [N, K]: kContiguous) or row-major with N contiguous
// (a weight stored [K, N], or a split-K batch of one), the contiguous
// length a multiple of 8 so that 16-byte loads are aligned and whole.
func GEMVWeight(body *ir.Graph, mm ir.Value) (w DirectLoad, kContiguous, ok bool) {
	n := body.Node(mm)
	a, b := body.Node(n.Inputs[0]), body.Node(n.Inputs[1])
	if n.Op != ir.OpMatMul || len(a.Shape) < 2 || len(b.Shape) < 2 {
		return DirectLoad{}, false, false
	}
	M, K, N := int64(a.Shape[len(a.Shape)-2]), int64(a.Shape[len(a.Shape)-1]), int64(b.Shape[len(b.Shape)-1])
	if M > GEMVRows || M < 1 || N < 1 || K < 1 {
		return DirectLoad{}, false, false
	}
	switch b.DType {
	case ir.F32, ir.F16, ir.BF16:
	default:
		return DirectLoad{}, false, false
	}
	if w, kc, ok := concatWeight(body, n.Inputs[1], b.DType, K); ok {
		return w, kc, true
	}
	if w, ok := DirectFoldedOperand(body, n.Inputs[1], b.DType, K); ok {
		return w, true, true
	}
	if w, ok := DirectOperand(body, n.Inputs[1], b.DType, N, false); ok {
		return w, false, true
	}
	return DirectLoad{}, false, false
}

// concatWeight reads a matrix-vector weight that is a concatenation along
// its columns of direct operands of one layout (each K-contiguous, or
// each row-major with one row length): the weights of a merged
// projection, read in place from their own buffers, each column from its
// part's (the kernel picks a column's part once, outside its main loop).
func concatWeight(body *ir.Graph, v ir.Value, dt ir.DType, K int64) (DirectLoad, bool, bool) {
	n := body.Node(v)
	if n.Op != ir.OpConcat || len(n.Shape) != 2 || (n.Attrs.Axis != 1 && n.Attrs.Axis != -1) || len(n.Inputs) < 2 {
		return DirectLoad{}, false, false
	}
	var parts []DirectLoad
	kContiguous := false
	for i, p := range n.Inputs {
		cols := int64(body.Node(p).Shape[1])
		w, kc := DirectOperand(body, p, dt, K, true)
		if !kc {
			var ok bool
			if w, ok = DirectOperand(body, p, dt, cols, false); !ok {
				return DirectLoad{}, false, false
			}
			if i > 0 && (kContiguous || !w.BufShape.Equal(parts[0].BufShape)) {
				return DirectLoad{}, false, false
			}
		} else if i > 0 && !kContiguous {
			return DirectLoad{}, false, false
		}
		kContiguous = kc
		w.Cols = cols
		parts = append(parts, w)
	}
	return DirectLoad{Buf: parts[0].Buf, BufShape: parts[0].BufShape, Parts: parts}, kContiguous, true
}

// gemvShape is the matmul a matrix-vector schedule would run: its rows,
// columns, reduced length, batch, the weight's element size and layout;
// false when GEMVWeight refuses it.
func (k *kernelForm) gemvShape() (M, N, K, batch, size int, kContiguous, ok bool) {
	if k.form != FormMatMul || len(k.matmuls) != 1 {
		return 0, 0, 0, 0, 0, false, false
	}
	_, kContiguous, ok = GEMVWeight(k.body, k.matmuls[0])
	if !ok {
		return 0, 0, 0, 0, 0, false, false
	}
	mm := k.body.Node(k.matmuls[0])
	a, b := k.body.Node(mm.Inputs[0]), k.body.Node(mm.Inputs[1])
	M, K, N = int(a.Shape[len(a.Shape)-2]), int(a.Shape[len(a.Shape)-1]), int(b.Shape[len(b.Shape)-1])
	batch = max(1, int(numel(mm.Shape))/(M*N))
	return M, N, K, batch, b.DType.Size(), kContiguous, true
}

// gemvVec is the columns one 16-byte weight load of a matrix-vector
// kernel covers: vec over a row-major weight (a quantized one's lane
// columns), 1 over a K-contiguous one (a lane's load runs along K).
func (k *kernelForm) gemvVec() int {
	if len(k.matmuls) == 1 {
		if q, ok := GEMVQuantWeight(k.body, k.matmuls[0]); ok {
			return q.LaneColumns() // a thread's columns, one load's
		}
	}
	_, _, _, _, size, kContiguous, ok := k.gemvShape()
	if !ok || kContiguous {
		return 1
	}
	return 16 / size
}

// GEMVRowLayout is how a matrix-vector schedule over a row-major weight
// (N contiguous) spreads its threads: lanes threads side by side cover
// the block's BN columns, vec (16 bytes) each, and rows groups of them
// take every rows-th k; false unless lanes is 8, 16 or 32 (a warp's loads
// stay whole 128-byte lines) and divides the threads.
func GEMVRowLayout(s Schedule, size int) (lanes, rows int, ok bool) {
	vec := 16 / size
	if size <= 0 || s.BN%vec != 0 || s.Threads%32 != 0 || s.Threads == 0 {
		return 0, 0, false
	}
	lanes = s.BN / vec
	if lanes != 8 && lanes != 16 && lanes != 32 {
		return 0, 0, false
	}
	return lanes, s.Threads / lanes, true
}

// gemvBlockBytes is the weight a matrix-vector block should stream at
// least, so that what every block pays once (its prologue's loads of A
// from L2, its reduction, its first round trip to DRAM) is a small part
// of its time.
const gemvBlockBytes = 16 << 10

// gemvSchedules lists the matrix-vector schedules of a kernel that is one.
// Over a K-contiguous weight: 4 or 8 warps, cols (TM) columns a warp with
// Stages loads in flight per lane and column, cols x Stages 4 or 8 (at
// most 32 accumulators a lane), and split warps a group of columns (BN =
// warps x cols / split): split-K within the block for few columns. Over a
// row-major one: 8 to 32 lanes across the columns, 2 to 8 loads in flight
// a thread. Either way a block streams at least gemvBlockBytes of weight
// (an eighth of the whole for small ones), no pass along K leaves lanes
// idle, and no group of loads is longer than K.
func (k *kernelForm) gemvSchedules() []Schedule {
	if k.form == FormMatMul && len(k.matmuls) == 1 {
		if q, ok := GEMVQuantWeight(k.body, k.matmuls[0]); ok {
			return k.gemvQuantSchedules(q)
		}
	}
	M, N, K, _, size, kContiguous, ok := k.gemvShape()
	if !ok {
		return nil
	}
	vec := 16 / size
	minBlock := min(gemvBlockBytes, N*K*size/8)
	var out []Schedule
	if !kContiguous {
		for _, lanes := range []int{8, 16, 32} {
			for _, threads := range []int{128, 256} {
				for _, stages := range []int{2, 4, 8} {
					bn, rows := lanes*vec, threads/lanes
					s := Schedule{BM: M, BN: bn, Threads: threads, Stages: stages, GEMV: true}
					if M*vec+4*stages <= 96 && (stages == 2 || rows*stages <= K) && (bn*K*size >= minBlock || bn >= N) {
						out = append(out, s)
					}
				}
			}
		}
		return out
	}
	for _, threads := range []int{128, 256} {
		warps := threads / 32
		for _, cu := range [][2]int{{1, 4}, {1, 8}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}} {
			cols, stages := cu[0], cu[1]
			if cols*M > 32 {
				continue
			}
			for _, split := range []int{1, 2, 4, 8} {
				bn, pass := warps/split*cols, 32*vec*split
				if warps%split != 0 || split > 1 && pass > K || stages > 1 && pass*stages > K || bn*K*size < minBlock && bn < N {
					continue
				}
				out = append(out, Schedule{BM: M, BN: bn, Threads: threads, Stages: stages, TM: cols, GEMV: true})
			}
		}
	}
	return out
}

// sharedBandwidthPerSM is what one multiprocessor's shared memory serves
// a clock (32 banks of 4 bytes), on every architecture the model knows.
const sharedBandwidthPerSM = 128

// GEMVLoop is what one iteration of a matrix-vector schedule's main loop
// does, as cuda's printGEMV prints it: loads is the independent 16-byte
// weight loads each lane issues together before the first is used (cols
// x Stages over a K-contiguous weight, Stages over a row-major one), step
// the K it advances a lane, and mix its warp instructions by pipe as
// NVRTC's PTX of it counts them (cuda's TestGEMVLoopMixMatchesPTX holds
// the two together): per 16-byte load, the unpacking of its values
// (integer shifts and masks, moves and conversions),
// A's values from shared memory (two float4 a row over a K-contiguous
// weight of half types, one otherwise; a scalar a row over a row-major
// one), an FMA a value and row (and the add into the accumulator over a
// K-contiguous weight), and the loop's pointer arithmetic and branch.
// False when the schedule is none the printer takes for body.
func GEMVLoop(body *ir.Graph, mm ir.Value, s Schedule) (loads, step int, mix IssueMix, ok bool) {
	if q, quantized := GEMVQuantWeight(body, mm); quantized {
		if !s.GEMV || s.Stages < 1 {
			return 0, 0, IssueMix{}, false
		}
		return gemvQuantLoop(body, mm, q, s)
	}
	_, kContiguous, direct := GEMVWeight(body, mm)
	if !direct || !s.GEMV || s.Stages < 1 {
		return 0, 0, IssueMix{}, false
	}
	n := body.Node(mm)
	a, b := body.Node(n.Inputs[0]), body.Node(n.Inputs[1])
	M := float64(a.Shape[len(a.Shape)-2])
	size := b.DType.Size()
	vec := 16 / size
	// Per value: the integer ops that widen it and the moves or
	// conversions after (bf16: a shift or a mask, then a move to a float
	// register; f16: a shift for one half of a word, a narrowing move and
	// the conversion; f32: a move).
	intPer, otherPer := 1.0, 1.0
	switch b.DType {
	case ir.F32:
		intPer = 0
	case ir.F16:
		intPer, otherPer = 0.5, 2
	}
	var cols int
	if kContiguous {
		c, split, ok := GEMVLayout(s)
		if !ok {
			return 0, 0, IssueMix{}, false
		}
		cols, loads, step = c, c*s.Stages, 32*vec*split*s.Stages
		lds := 1.0
		if vec == 8 {
			lds = 2
		}
		L := float64(loads)
		mix = IssueMix{
			Load:   L,
			Shared: float64(s.Stages) * M * lds,
			FP:     L * M * float64(vec+1),
			Int:    L*float64(vec)*intPer + 6 + 2*float64(cols),
			Other:  L*float64(vec)*otherPer + 4,
		}
		return loads, step, mix, true
	}
	_, rows, ok := GEMVRowLayout(s, size)
	if !ok {
		return 0, 0, IssueMix{}, false
	}
	loads, step = s.Stages, rows*s.Stages
	L := float64(loads)
	mix = IssueMix{
		Load:   L,
		Shared: L * M,
		FP:     L * M * float64(vec),
		Int:    L*float64(vec)*intPer + 8,
		Other:  L*float64(vec)*otherPer + 4,
	}
	return loads, step, mix, true
}

// gemvPlan is what pricing a matrix-vector schedule needs of its layout:
// the matmul's extents, GEMVLoop's group of loads, its step along K and
// its mix, the partial sums a column has (the warps of a split, or every
// warp of a row-major layout), the K and N its passes cover (padding
// included), the registers a thread takes, the shared memory of A's chunk
// and the partials, the bytes of one shared read of A by a warp, the
// weight bytes every block streams, what a block issues outside its
// main loop beyond the prologue (a quantized weight's scales decoded once
// a slab), and the bytes of one of the loads in flight.
type gemvPlan struct {
	M, N, K, batch int
	loads, step    int
	iterations     float64
	loop           IssueMix
	partials       int
	padN, padK     float64
	regs           int
	shared         int64
	ldsBytes       float64
	weight         float64
	outside        IssueMix
	loadBytes      int
}

// gemvPlanOf is a plain f32, f16 or bf16 weight's plan, or a quantized
// one's (gemvQuantPlan).
func (k *kernelForm) gemvPlanOf(s Schedule) (gemvPlan, bool) {
	if q, ok := GEMVQuantWeight(k.body, k.matmuls[0]); ok && len(k.matmuls) == 1 && k.form == FormMatMul {
		return k.gemvQuantPlan(q, s)
	}
	M, N, K, batch, size, kContiguous, ok := k.gemvShape()
	if !ok {
		return gemvPlan{}, false
	}
	loads, step, loop, ok := GEMVLoop(k.body, k.matmuls[0], s)
	if !ok {
		return gemvPlan{}, false
	}
	vec := 16 / size
	// A warp's main loop runs over each chunk's whole groups; the rest
	// of a chunk (fewer passes than a group) costs a fraction of one.
	p := gemvPlan{M: M, N: N, K: K, batch: batch, loads: loads, step: step, iterations: float64(K) / float64(step), loop: loop, loadBytes: 16}
	var passStep int
	if kContiguous {
		_, split, _ := GEMVLayout(s)
		p.partials, passStep = split, 32*vec*split
		p.ldsBytes = 512
	} else {
		_, rows, _ := GEMVRowLayout(s, size)
		p.partials, passStep = s.Threads/32, rows
		p.ldsBytes = 128
	}
	p.padN = float64(ceilDiv(N, s.BN) * s.BN)
	p.padK = float64(ceilDiv(K, passStep) * passStep)
	p.regs = 24 + 4*loads + M*max(loads/s.Stages, vec) + vec
	p.shared = GEMVShared(int64(M), int64(K), s.BN, p.partials)
	p.weight = float64(batch) * float64(N) * float64(K) * float64(size)
	return p, true
}

// gemvFeatures prices a matrix-vector schedule as printGEMV prints it.
// DRAM: the weight once (each element by one thread; a quantized one's
// packed codes, scales and zero points), A's inputs once (every block
// re-reads them from L2: TileBytes), C. Latency: each warp keeps
// GEMVLoop's loads in flight (InFlight), and a block makes Trips round
// trips its main loop does not overlap: a norm's pass over A and the
// chunk computed from its statistics after it (the first group of weight
// loads is issued before the prologue, so a prologue without a norm hides
// under that first trip), and an epilogue's loads of its own inputs.
// Issue: the main loop's mix (the PTX's when compiled, else GEMVLoop's)
// over every warp's iterations, plus the prologue, a warp instruction per
// 32 of its values' operations in every block, plus what the layout
// issues outside its main loop. Shared memory: A's reads in the main
// loop, a 512-byte float4 read a warp (conflict-free) or a broadcast
// 128-byte wavefront.
func (k *kernelForm) gemvFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	if !s.GEMV || s.BM > GEMVRows || s.Stages < 1 || s.Stages > 8 || s.Tensor || s.Threads > 1024 {
		return Features{}, false
	}
	p, ok := k.gemvPlanOf(s)
	if !ok || s.BM != p.M {
		return Features{}, false
	}
	M, N, K, batch := p.M, p.N, p.K, p.batch
	warps := s.Threads / 32
	reductions, norms := 0, 0
	for _, n := range k.body.Nodes {
		if n.Op.Class() == ir.ClassReduce {
			reductions++
		}
		if RowReduction(k.body, n) {
			norms++
		}
	}
	if p.shared > GEMVSharedLimit {
		return Features{}, false
	}
	shared := int(p.shared) + 4*reductions*M*(warps+1)
	per := k.occupancy(d, s.Threads, shared, p.regs)
	if per == 0 {
		return Features{}, false
	}
	tilesN := ceilDiv(N, s.BN)
	blocks := batch * tilesN
	var bytes, aBytes float64
	epilogueLoads := false
	for _, v := range k.body.Inputs() {
		b := k.bytesOf(v)
		switch {
		case k.slots[v]&1 != 0:
			aBytes += b
			b = rereads(b, tilesN, d.SMs, d)
		case k.slots[v] == 0:
			epilogueLoads = true
		}
		bytes += b
	}
	var flops, prologueFLOPs float64
	for i, n := range k.body.Nodes {
		f := opFLOPs(k.body, n)
		if k.slots[i]&1 != 0 {
			prologueFLOPs += f
			f *= float64(tilesN)
		}
		flops += f
	}
	// Threads past the end of K or N in their last pass still issue; the
	// arithmetic pays for them.
	flops += 2 * float64(batch) * float64(M) * p.padN * p.padK
	warpIterations := float64(blocks*warps) * p.iterations
	mix := p.loop
	if k.res != nil && k.res.Loop.Total() > 0 {
		mix = k.res.Loop
	}
	issue := mix.Scale(warpIterations).Add(p.outside.Scale(float64(blocks)))
	// The prologue: its operations on A's M x K values in every block,
	// and about two integer ops a value for unpacking and indices.
	prologue := float64(blocks) / 32
	issue.FP += prologue * prologueFLOPs
	issue.Int += prologue * 2 * float64(M*K)
	var instructions float64
	if k.res != nil && k.res.LoopInstructions > 0 {
		instructions = warpIterations * float64(k.res.LoopInstructions)
	}
	trips := 0.0
	if norms > 0 {
		trips += 2
	}
	if epilogueLoads {
		trips++
	}
	return Features{
		Bytes:         bytes + out,
		Work:          []Work{{FMA, "f32", flops}},
		Blocks:        blocks,
		PerSM:         per,
		WarpsPerBlock: warps,
		Launches:      1,
		Stages:        p.loads,
		TileBytes:     p.weight + float64(tilesN)*aBytes,
		SharedBytes:   warpIterations * p.loop.Shared * p.ldsBytes,
		Instructions:  instructions,
		InFlight:      float64(32 * p.loads * p.loadBytes),
		Trips:         trips,
		Issue:         issue,
	}, true
}

// sharedTime is how long the device's shared memory takes to serve b
// bytes at its peak (every multiprocessor's banks busy every clock).
func sharedTime(d *Device, b float64) float64 {
	if b <= 0 {
		return 0
	}
	rate := float64(d.SMs) * sharedBandwidthPerSM * d.BoostClockMHz * 1e6
	if rate <= 0 {
		return math.Inf(1)
	}
	return b / rate
}
