package cost

import (
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The matrix-vector kernel over a quantized weight (package cuda,
// gemv_quant.go). A decode projection whose weight is a dequant of the
// kernel's packed arguments is bound by those packed bytes, a quarter
// (4-bit codes) or a half (fp8) of a bf16 weight's, so the kernel streams
// them with 16-byte loads and decodes them in registers: each code to
// f32, times its scale (less its zero point) in f32, rounded to the
// weight's dtype as the reference rounds it, then multiplied by A's f32
// values as a plain weight's are. No dequantized copy is ever written.
// The layouts follow how each checkpoint stores its codes:
//
//   - mxfp4 and fp8 ([N, K] read transposed): the K-contiguous layout
//     (GEMVLayout: cols columns a warp, split warps a column group), a
//     lane's load running along K: 32 e2m1 codes (one whole block, whose
//     e8m0 scale byte is loaded in the same group) or 16 e4m3 codes (one
//     f32 scale a load, the block's: Group is a multiple of 16; loaded
//     once a column when the column has one).
//   - awq ([K, N/8] words, N contiguous): lanes side by side across the
//     columns, a load 4 words = 32 columns of one k (past two rows of A,
//     2 words, 8 bytes: gemvAWQWideRows); gptq ([K/8, N], 8 k's a word):
//     lanes across the columns, a load 4 columns × 8 k's. Either
//     way the block's rows of threads take slabs of consecutive k within
//     one quantization group (GEMVQuantSlab), so that a thread loads its
//     columns' scales and zero points once a slab, together with the
//     slab's first codes, and decodes them once.
//
// The model prices what the printer prints: the packed bytes (the kernel's
// u8 and i32 arguments, whose sizes are what bytesOf counts), the decode
// instructions by pipe in the main loop (GEMVLoop), the scales decoded
// once a slab, and the loads in flight.

// dequantOps is the arithmetic of decoding one element of a quantized
// weight, in FMA-class operations (opFLOPs): a code's shifts and masks,
// its exponent bias or zero point, its scale and its rounding to the
// weight's dtype, about four instructions where a kernel decodes whole
// words (the matrix-vector kernel's loop counts them by pipe instead:
// gemvQuantLoop).
const dequantOps = 4

// gemvAWQRows is the most rows of A an awq matrix-vector kernel takes,
// and gemvAWQWideRows the most whose lanes load 16 bytes (32 columns): a
// thread sums each of its columns for each row, and past two rows 32
// columns' accumulators, scales and zero points outgrow the registers
// (NVRTC spills them), so a lane takes 16 columns, an 8-byte load.
const (
	gemvAWQRows     = 4
	gemvAWQWideRows = 2
)

// GEMVQuant is a quantized weight a matrix-vector kernel streams packed:
// the dequant's format, the dtype its values round to, the matmul's M,
// the weight's N and K, its groups, the scales' dtype, and its parts: one
// weight, or the weights of a merged projection side by side (a
// concatenation along the columns, Q, K and V), each with its own kernel
// arguments, all of one format, K, groups and dtypes.
type GEMVQuant struct {
	Format        quant.Format
	DType         ir.DType
	M, N, K       int64
	Group, GroupN int64
	ScaleDType    ir.DType
	Parts         []GEMVQuantPart
}

// GEMVQuantPart is one weight of a GEMVQuant: its columns and the kernel
// arguments holding its codes, scales and zero points (Zeros is -1 for
// mxfp4 and fp8).
type GEMVQuantPart struct {
	N                    int64
	Codes, Scales, Zeros ir.Value
}

// Args is the kernel arguments of every part's packed operands.
func (q GEMVQuant) Args() []ir.Value {
	var out []ir.Value
	for _, p := range q.Parts {
		out = append(out, p.Codes, p.Scales)
		if p.Zeros >= 0 {
			out = append(out, p.Zeros)
		}
	}
	return out
}

// FusedDecode reports whether a row-major weight's values decode with one
// fused multiply-add each (gemvQuantLoop): awq and gptq with f16 or bf16
// scales, whose significands (11 and 8 bits) times a code's 8-bit biased
// zero point stay exact in f32. Past them (f32 scales) a value is its
// code less its zero point, times its scale.
func (q GEMVQuant) FusedDecode() bool {
	return !q.KContiguous() && (q.ScaleDType == ir.F16 || q.ScaleDType == ir.BF16)
}

// KContiguous reports whether a lane's loads run along K (mxfp4 and fp8,
// whose [N, K] weights are read transposed).
func (q GEMVQuant) KContiguous() bool { return q.Format == quant.MXFP4 || q.Format == quant.FP8 }

// Vec is the values one 16-byte load of codes brings.
func (q GEMVQuant) Vec() int {
	if q.Format == quant.FP8 {
		return 16
	}
	return 32
}

// LaneColumns is the columns one lane's loads cover: 1 along K, 32 for
// awq (four words of eight; 16, two words, past gemvAWQWideRows rows), 4
// for gptq (four words, one a column).
func (q GEMVQuant) LaneColumns() int {
	switch {
	case q.Format == quant.AWQ && q.M > gemvAWQWideRows:
		return 16
	case q.Format == quant.AWQ:
		return 32
	case q.Format == quant.GPTQ:
		return 4
	}
	return 1
}

// LoadBytes is the bytes of one load of codes: 16, but for awq's
// 16-column lanes (8).
func (q GEMVQuant) LoadBytes() int {
	if q.LaneColumns() == 16 {
		return 8
	}
	return 16
}

// LoadK is the K one load covers: Vec along K, one k for awq, a word's
// eight for gptq.
func (q GEMVQuant) LoadK() int {
	switch q.Format {
	case quant.AWQ:
		return 1
	case quant.GPTQ:
		return 8
	}
	return q.Vec()
}

// ScalePerColumn reports whether an fp8 weight has one scale a column
// (per channel or per tensor), which the kernel loads once a column.
func (q GEMVQuant) ScalePerColumn() bool {
	return q.Format == quant.FP8 && q.Group >= q.K
}

// GEMVQuantWeight is the quantized weight of a matmul the matrix-vector
// kernel streams packed: at most GEMVRows rows of A (gemvAWQRows for
// awq), no batch, and a right operand that is a two-dimensional dequant
// of kernel arguments, read through the transposing permute (mxfp4, fp8)
// or directly (awq, gptq), or a concatenation along the columns of such
// dequants of one format, dtype, K and groups (a merged projection,
// whose parts the kernel reads in place: each column's part is picked
// once, outside the main loop), whose 16-byte loads are aligned and
// whole: K a multiple of 16 and fp8's scale blocks whole loads (Group a
// multiple of 16, or the whole of K), each part's N a multiple of 32 for
// awq (a load's four words) and of 4 for gptq.
func GEMVQuantWeight(body *ir.Graph, mm ir.Value) (GEMVQuant, bool) {
	n := body.Node(mm)
	if n.Op != ir.OpMatMul || len(n.Inputs) != 2 {
		return GEMVQuant{}, false
	}
	a := body.Node(n.Inputs[0])
	if len(a.Shape) < 2 || len(n.Shape) < 2 {
		return GEMVQuant{}, false
	}
	M, K := int64(a.Shape[len(a.Shape)-2]), int64(a.Shape[len(a.Shape)-1])
	if M < 1 || M > GEMVRows || a.Shape.NumElements() != M*K || n.Shape.NumElements() != M*int64(n.Shape[len(n.Shape)-1]) {
		return GEMVQuant{}, false
	}
	parts := []ir.Value{n.Inputs[1]}
	if r := body.Node(n.Inputs[1]); r.Op == ir.OpConcat && len(r.Shape) == 2 && (r.Attrs.Axis == 1 || r.Attrs.Axis == -1) && len(r.Inputs) >= 2 {
		parts = r.Inputs
	}
	var q GEMVQuant
	for i, v := range parts {
		w, ok := gemvQuantPart(body, v)
		if !ok {
			return GEMVQuant{}, false
		}
		p := w.Parts[0]
		if i == 0 {
			q = w
		} else if w.Format != q.Format || w.DType != q.DType || w.K != q.K || w.Group != q.Group || w.GroupN != q.GroupN || w.ScaleDType != q.ScaleDType {
			return GEMVQuant{}, false
		} else {
			q.N += p.N
			q.Parts = append(q.Parts, p)
		}
		switch {
		case q.Format == quant.AWQ && p.N%32 != 0, q.Format == quant.GPTQ && p.N%4 != 0:
			return GEMVQuant{}, false
		}
	}
	q.M = M
	if q.K != K || q.K%16 != 0 || q.Format == quant.FP8 && q.Group%16 != 0 && q.Group < q.K || q.Format == quant.AWQ && M > gemvAWQRows {
		return GEMVQuant{}, false
	}
	return q, true
}

// gemvQuantPart is the quantized weight v reads, as a GEMVQuant of one
// part (its M unset): a dequant of kernel arguments, through the
// transposing permute when its layout is K-contiguous.
func gemvQuantPart(body *ir.Graph, v ir.Value) (GEMVQuant, bool) {
	transposed := false
	if r := body.Node(v); r.Op == ir.OpPermute && len(r.Attrs.Perm) == 2 && r.Attrs.Perm[0] == 1 && r.Attrs.Perm[1] == 0 {
		v, transposed = r.Inputs[0], true
	}
	d := body.Node(v)
	if d.Op != ir.OpDequant || len(d.Shape) != 2 {
		return GEMVQuant{}, false
	}
	// The packed operands are kernel arguments, through reshapes at
	// most (a checkpoint's [N, K/2] bytes viewed as blocks), which keep
	// their linear order.
	args := make([]ir.Value, len(d.Inputs))
	for i, in := range d.Inputs {
		a, ok := ir.DequantOperand(body, in)
		if !ok {
			return GEMVQuant{}, false
		}
		args[i] = a
	}
	q := GEMVQuant{Format: d.Format, DType: d.DType, Group: d.Group, GroupN: d.GroupN, ScaleDType: body.Node(args[1]).DType}
	p := GEMVQuantPart{Codes: args[0], Scales: args[1], Zeros: -1}
	if len(args) == 3 {
		p.Zeros = args[2]
	}
	if transposed != q.KContiguous() {
		return GEMVQuant{}, false
	}
	if q.KContiguous() {
		q.N, q.K = int64(d.Shape[0]), int64(d.Shape[1])
	} else {
		q.K, q.N = int64(d.Shape[0]), int64(d.Shape[1])
	}
	p.N = q.N
	q.Parts = []GEMVQuantPart{p}
	return q, true
}

// GEMVQuantChunk is the chunk of K a quantized matrix-vector kernel
// computes A in: GEMVChunk's, a multiple of the K a group of loads covers
// (a K-contiguous load's Vec, a row-major slab: GEMVQuantSlab) so that no
// load straddles two chunks.
func GEMVQuantChunk(q GEMVQuant, s Schedule) (int64, bool) {
	if !q.KContiguous() {
		_, _, _, chunk, ok := GEMVQuantSlab(q, s)
		return chunk, ok
	}
	return gemvChunkUnit(int64(s.BM), q.K, int64(q.Vec())), true
}

// GEMVQuantSlab is how a row-major quantized schedule (awq, gptq) spreads
// its threads: lanes threads side by side cover the block's BN columns
// (LaneColumns each), and its rows groups of them take slabs of slab
// consecutive k, each within one quantization group (the group, halved
// while a chunk of A has fewer slabs than rows, down to a group of
// loads: Stages × LoadK), slabs r, r + rows, ... of each chunk. The chunk
// is GEMVChunk's rounded down to whole slabs. False unless lanes divides
// a warp and the groups of loads divide the quantization group. One lane
// across (an awq block of 32 columns) gives every thread of a warp its own
// slab: the warp's loads are 16 bytes of 32 rows, half a 32-byte sector
// each, whose other half the next block reads (gemvQuantPlan prices the
// sectors).
func GEMVQuantSlab(q GEMVQuant, s Schedule) (lanes, rows int, slab, chunk int64, ok bool) {
	lc := q.LaneColumns()
	if q.KContiguous() || s.BN%lc != 0 || s.Threads%32 != 0 || s.Threads == 0 || s.Stages < 1 {
		return 0, 0, 0, 0, false
	}
	lanes = s.BN / lc
	if lanes < 1 || 32%lanes != 0 {
		return 0, 0, 0, 0, false
	}
	rows = s.Threads / lanes
	unit := int64(q.LoadK() * s.Stages)
	if q.Group%unit != 0 {
		return 0, 0, 0, 0, false
	}
	c := min(gemvChunkUnit(int64(s.BM), q.K, unit), q.K)
	slab = q.Group
	for slab > unit && slab%2 == 0 && (slab/2)%unit == 0 && c/slab < int64(rows) {
		slab /= 2
	}
	return lanes, rows, slab, max(slab, c/slab*slab), true
}

// gemvQuantSchedules lists the matrix-vector schedules of a quantized
// weight. K-contiguous (mxfp4, fp8): 4 or 8 warps, cols columns a warp
// with Stages loads in flight a column (2 to 8 in all, at most 8
// accumulators a lane: past them NVRTC's schedule of the decode spills),
// split warps a column group; row-major: awq with 1, 2, 4 or 8 lanes
// across the columns (32 to 256 of them, half as many past two rows), gptq
// with 2 to 32 (8 to 128), 2 or 4 loads in flight a thread. The narrow
// blocks are for few columns or a long K: a k/v projection's 1024 columns
// are 16 blocks of awq's 64, 32 of 32; gptq's 8 columns are a whole
// 32-byte sector of a row of words. Either way a block streams at least
// gemvBlockBytes of codes (an eighth of the whole for small weights) and
// no pass along K leaves lanes idle.
func (k *kernelForm) gemvQuantSchedules(q GEMVQuant) []Schedule {
	mm := k.body.Node(k.matmuls[0])
	a := k.body.Node(mm.Inputs[0]).Shape
	M := int(a[len(a)-2])
	bits := int64(q.Format.BitsPerElement())
	colBytes := q.K * bits / 8 // codes a column
	minBlock := min(gemvBlockBytes, q.N*colBytes/8)
	var out []Schedule
	if !q.KContiguous() {
		lanesOf, wide := []int{1, 2, 4, 8}, 2
		if q.Format == quant.GPTQ {
			lanesOf, wide = []int{2, 4, 8, 16, 32}, 8
		}
		for _, lanes := range lanesOf {
			for _, threads := range []int{128, 256} {
				for _, stages := range []int{2, 4} {
					s := Schedule{BM: M, BN: lanes * q.LaneColumns(), Threads: threads, Stages: stages, GEMV: true}
					// A narrow block's many rows of threads cut a short
					// K into slabs of one group of loads, which decode
					// their scales for every group: a wider block does
					// better there.
					_, _, slab, _, ok := GEMVQuantSlab(q, s)
					if lanes < wide && slab < int64(2*stages*q.LoadK()) {
						continue
					}
					if ok && (int64(s.BN)*colBytes >= minBlock || int64(s.BN) >= q.N) {
						out = append(out, s)
					}
				}
			}
		}
		return out
	}
	vec := q.Vec()
	for _, threads := range []int{128, 256} {
		warps := threads / 32
		for _, cu := range [][2]int{{1, 2}, {1, 4}, {2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}} {
			cols, stages := cu[0], cu[1]
			if cols*M > 8 {
				continue
			}
			for _, split := range []int{1, 2, 4} {
				bn, pass := warps/split*cols, int64(32*vec*split)
				if warps%split != 0 || split > 1 && pass > q.K || stages > 1 && pass*int64(stages) > q.K || int64(bn)*colBytes < minBlock && int64(bn) < q.N {
					continue
				}
				out = append(out, Schedule{BM: M, BN: bn, Threads: threads, Stages: stages, TM: cols, GEMV: true})
			}
		}
	}
	return out
}

// gemvQuantLoop is GEMVLoop for a quantized weight: the 16-byte code
// loads of a group (cols × Stages along K, Stages row-major), the K a
// group advances a warp, and the instructions of one iteration of the main
// loop by pipe as NVRTC's PTX counts them (cuda's
// TestGEMVQuantLoopMixMatchesPTX holds them together). Per value: its
// decode (mxfp4: two shifts and a mask; fp8 the same and a NaN test a
// word; awq and gptq: a byte permute into a float, after a word's masks
// and zero points), its scaling (two multiplies: the code's exponent
// bias, then the scale; awq and gptq: one multiply-add of the scale and
// the biased zero point with f16 or bf16 scales, FusedDecode, else the zero
// point's subtraction and the scale), its rounding to the weight's dtype (a conversion and back, the
// identity left out for mxfp4 into bf16 or f32, whose products are
// exact), and an FMA a row; per load its scale (mxfp4's byte and its
// decode, fp8's f32) and A's values from shared memory (a float4 a row
// and four values along K, a scalar a row for awq).
func gemvQuantLoop(body *ir.Graph, mm ir.Value, q GEMVQuant, s Schedule) (loads, step int, mix IssueMix, ok bool) {
	a := body.Node(body.Node(mm).Inputs[0]).Shape
	M := float64(a[len(a)-2])
	// The rounding to the weight's dtype, per value: bf16 two at a
	// time (a cvt.rn.bf16x2.f32, a shift or mask and a move back each),
	// f16 one at a time (a conversion to it and one back); none into
	// f32, nor for mxfp4 into bf16 (exact).
	var roundInt, roundOther float64
	switch {
	case q.DType == ir.F32, q.Format == quant.MXFP4 && q.DType == ir.BF16:
	case q.DType == ir.BF16:
		roundInt, roundOther = 1, 1.5
	default:
		roundOther = 2
	}
	if q.KContiguous() {
		cols, split, lok := GEMVLayout(s)
		if !lok {
			return 0, 0, IssueMix{}, false
		}
		vec := float64(q.Vec())
		loads, step = cols*s.Stages, 32*q.Vec()*split*s.Stages
		L := float64(loads)
		// Per value: two shifts and a mask into an f32's bits (the top
		// code one shift less) and the move to a float register; fp8
		// tests a word's codes for NaN (four ops a word). Per load:
		// its pointer, and its scale's load and decode (mxfp4: e8m0's
		// compares, selects and shift; fp8: its address), none for
		// an fp8 scale a column (loaded once).
		decodeInt, word := 3-1.0/8, 8.0
		scaleLoads, scaleInt, scaleOther := 1.0, 7.0, 1.0
		if q.Format == quant.FP8 {
			decodeInt, word = 3-1.0/4+1, 4
			scaleInt, scaleOther = 4, 0
			if q.ScalePerColumn() {
				scaleLoads, scaleInt = 0, 0
			}
		}
		// A: a float4 a row for every four values, read once for all
		// the columns; a word's values (8 e2m1, 4 e4m3) are summed
		// with a row's A (an FMA a value) and added to its
		// accumulator.
		mix = IssueMix{
			Load:   L * (1 + scaleLoads),
			Shared: float64(s.Stages) * M * vec / 4,
			FP:     L * vec * (2 + M*(1+1/word)),
			Int:    L*(vec*(decodeInt+roundInt)+scaleInt+2) + 6 + 2*float64(cols),
			Other:  L*(vec*(1+roundOther)+scaleOther) + 4,
		}
		return loads, step, mix, true
	}
	_, rows, _, _, lok := GEMVQuantSlab(q, s)
	if !lok {
		return 0, 0, IssueMix{}, false
	}
	loads, step = s.Stages, rows*s.Stages*q.LoadK()
	L := float64(loads)
	per := float64(q.LoadBytes() * 2) // values a load
	// Per word of eight values: two masks and a shift (and, unless the
	// decode is fused, the zero points' two adds); per value a byte
	// permute into a float's bits, the move to a float register, its
	// decode (fused: one multiply-add of the scale and the zero point's;
	// else the zero point's subtraction and the scale's multiply) and an
	// FMA a row (gptq: a word's values summed with a row's A and added to
	// its accumulator). A: awq's group of k's in one vector read a row,
	// gptq's eight k's in two float4 a row and load. Per load its
	// pointer.
	decodeFP, wordInt := 2.0, 5.0/8
	if q.FusedDecode() {
		decodeFP, wordInt = 1, 3.0/8
	}
	mix = IssueMix{
		Load:   L,
		Shared: M,
		FP:     L * per * (decodeFP + M),
		Int:    L*(per*(1+wordInt+roundInt)+2) + 6,
		Other:  L*per*(1+roundOther) + 4,
	}
	if q.Format == quant.GPTQ {
		mix.Shared = L * 2 * M
		mix.FP += L * 4 * M
	}
	return loads, step, mix, true
}

// gemvQuantPlan is a quantized weight's gemvPlan: the layout's partial
// sums, registers and shared memory, the packed bytes streamed, and for a
// row-major layout the scales and zero points decoded once a slab.
func (k *kernelForm) gemvQuantPlan(q GEMVQuant, s Schedule) (gemvPlan, bool) {
	mm := k.body.Node(k.matmuls[0])
	a := k.body.Node(mm.Inputs[0]).Shape
	M := int(a[len(a)-2])
	loads, step, loop, ok := gemvQuantLoop(k.body, k.matmuls[0], q, s)
	if !ok || s.BM != M {
		return gemvPlan{}, false
	}
	p := gemvPlan{M: M, N: int(q.N), K: int(q.K), batch: 1, loads: loads, step: step, loop: loop, ldsBytes: 128, loadBytes: q.LoadBytes()}
	for _, v := range q.Args() {
		p.weight += k.bytesOf(v)
	}
	p.padN = float64(ceilDiv(p.N, s.BN) * s.BN)
	chunk, ok := GEMVQuantChunk(q, s)
	if !ok {
		return gemvPlan{}, false
	}
	if q.KContiguous() {
		cols, split, _ := GEMVLayout(s)
		pass := 32 * q.Vec() * split
		p.partials, p.ldsBytes = split, 512
		p.padK = float64(ceilDiv(p.K, pass) * pass)
		p.iterations = float64(p.K) / float64(step)
		// The codes and scales of a group in flight, the
		// accumulators, a load's decoded values for every column (the
		// compiler decodes the group's loads together), A's float4.
		p.regs = 32 + 5*loads + M*cols + q.Vec()*loads/2 + 8
	} else {
		_, rows, slab, _, _ := GEMVQuantSlab(q, s)
		p.partials = s.Threads / 32
		// A chunk's slabs go to the rows of threads in turns; the last
		// turn may leave some idle, which the padding counts.
		slabs := ceilDiv(int(chunk/slab), rows)
		chunks := ceilDiv(p.K, int(chunk))
		p.padK = float64(chunks * slabs * rows * int(slab))
		p.iterations = float64(chunks*slabs) * float64(slab) / float64(s.Stages*q.LoadK())
		lc := q.LaneColumns()
		// The accumulators (a row of the lane's columns each), the
		// columns' scales and zero points (awq: 8 words of them, gptq
		// 4), their raw loads, the loads in flight and a word's
		// values. NVRTC allots at most 255: past it the schedule
		// would spill, and is none.
		raw := lc * int(q.ScaleDType.Size()) / 4
		p.regs = 56 + M*lc + lc + max(lc/4, 4) + raw + q.LoadBytes()/4*loads + 8
		// A warp decodes its columns' scales and zero points at
		// each slab: a conversion and a move a scale, a zero word's
		// masks and subtractions; the slab's loop set-up. The fused
		// decode's biased zero points take a register a column, and
		// a column's nibble, its conversion, its product and its test
		// a slab.
		per := IssueMix{Other: 2 * float64(lc), Int: float64(lc/2) + 12, Load: float64(lc/8 + 1)}
		if q.FusedDecode() {
			p.regs += lc
			per = per.Add(IssueMix{Int: 3 * float64(lc), FP: 2 * float64(lc), Other: float64(lc)})
		}
		if p.regs > 255 {
			return gemvPlan{}, false
		}
		p.outside = per.Scale(float64(s.Threads/32) * float64(chunks*slabs))
		// A slab's first group of codes is issued after the previous
		// slab's last is consumed: a round trip a slab (tens of
		// iterations), which the resident warps hide and the model
		// leaves out. Every row of threads that takes a slab of a
		// group loads its columns' scales and zero points again (from
		// L2). L2 serves whole 32-byte sectors: a block's row of codes,
		// scales or zero points narrower than one (awq's 32 columns are
		// 16 bytes of codes a k, gptq's 8 columns 4 bytes of zero
		// points a group) moves the sector, whose rest the next block
		// reads again (from L2: DRAM serves it once).
		bn := int64(s.BN)
		codeRow := bn / 2 // awq: a k's 4-bit codes
		if q.Format == quant.GPTQ {
			codeRow = 4 * bn // eight k's a word a column
		}
		p.weight = 0
		for _, w := range q.Parts {
			p.weight += k.bytesOf(w.Codes)*sectorShare(codeRow) +
				float64(ceilDiv(int(q.Group), int(slab)))*(k.bytesOf(w.Scales)*sectorShare(bn*int64(q.ScaleDType.Size()))+k.bytesOf(w.Zeros)*sectorShare(bn/2))
		}
	}
	p.shared = 4 * (int64(M)*chunk + int64(p.partials)*int64(M)*int64(s.BN))
	return p, true
}

// l2Sector is the bytes L2 moves to a multiprocessor at a time.
const l2Sector = 32

// sectorShare is what reading rows of b bytes, each at a sector's start,
// moves from L2 per byte read: whole sectors.
func sectorShare(b int64) float64 {
	if b <= 0 {
		return 1
	}
	return float64((b+l2Sector-1)/l2Sector*l2Sector) / float64(b)
}
