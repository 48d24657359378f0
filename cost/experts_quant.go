package cost

import (
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The experts form over quantized weights. A checkpoint packs an expert's
// projection one output column after another, each column's reduction
// contiguous: MXFP4 (gpt-oss) as 32-element blocks of 16 bytes of e2m1
// codes with an e8m0 scale each, FP8 as one e4m3 byte an element with f32
// block scales. The experts op reads such a weight as [E, K, N], which the
// graph writes permute(dequant(codes, scales), [0, 2, 1]); the weight
// never exists decoded in memory. The plain form's lanes stream 16 bytes
// of an N-contiguous row across a block's columns; over K-contiguous
// columns that load would gather 16 columns' codes, so the quantized form
// turns the lanes around:
//
//   - a group of G lanes (BK = G × the elements of a 16-byte load) owns one
//     output column of a slot (its gate and up weight columns for
//     experts_up, L = 2; its one column for experts_down), lane g of the
//     group loading the column's 16-byte pieces g, g + G, g + 2G, ... of
//     the reduction, with each piece's scale, Stages of them in flight;
//   - a warp holds 32/G such groups, a block's warps 32/G columns each, so
//     BN = Threads/32 × 32/G output columns a block;
//   - each code is decoded to f32 and multiplied by its scale in f32 (the
//     dequant's one rounding to its dtype after, where it is not exact),
//     then multiplied into the row's value and accumulated in f32; the
//     group's lanes add their partial sums by a butterfly of shuffles.
//
// A block finds its work (by slot or by expert), stages its rows'
// vectors in shared memory and writes its outputs (bias, activation,
// slot weight) as the plain form's do; only the weight's loads differ.

// ExpertsQuant is an experts kernel's quantized weight: the dequant's
// format (quant.None for a plain weight), groups and dtype, its operands
// (kernel arguments), and the body's dequant and permute that read it.
type ExpertsQuant struct {
	Format        quant.Format
	Group, GroupN int64
	DType         ir.DType
	Codes, Scales ir.Value
	Dequant, View ir.Value
}

// Quantized reports whether the experts' weight is quantized.
func (q ExpertsQuant) Quantized() bool { return q.Format != quant.None }

// decoding is the body's values that decode the weight: none for a plain
// weight.
func (q ExpertsQuant) decoding() []ir.Value {
	if !q.Quantized() {
		return nil
	}
	return []ir.Value{q.Dequant, q.View}
}

// Elements is the elements one 16-byte load of the codes holds: 32 e2m1
// codes (an MXFP4 block), 16 e4m3 ones.
func (q ExpertsQuant) Elements() int {
	if q.Format == quant.MXFP4 {
		return 32
	}
	return 16
}

// expertsQuant reads an experts body's weight operand (operand 2 of op):
// a plain argument, or permute(dequant(codes, scales), [0, 2, 1]) over
// kernel arguments. Every other operand stays plain.
func expertsQuant(body *ir.Graph, op *ir.Node) (ExpertsQuant, error) {
	for i, in := range op.Inputs {
		if i != 2 && decodes(body, in) {
			return ExpertsQuant{}, fmt.Errorf("operand %d is quantized: only the experts' weight is read quantized (rows, routing weights and biases stay plain)", i)
		}
	}
	v := op.Inputs[2]
	dv, ok := ir.DequantUnder(body, v)
	if !ok {
		return ExpertsQuant{}, nil
	}
	dq := body.Node(dv)
	if dq.Format != quant.MXFP4 && dq.Format != quant.FP8 {
		return ExpertsQuant{}, fmt.Errorf("experts' weights in %s: the experts kernels decode mxfp4 and fp8", dq.Format)
	}
	view := body.Node(v)
	if view.Op != ir.OpPermute || !slices.Equal(view.Perm, []int{0, 2, 1}) || view.Inputs[0] != dv {
		return ExpertsQuant{}, fmt.Errorf("a quantized experts' weight read as %s: it is read as permute(dequant(codes, scales), [0, 2, 1]) (each output column's reduction contiguous, as checkpoints pack it)", describeChain(body, v))
	}
	args := make([]ir.Value, len(dq.Inputs))
	for k, in := range dq.Inputs {
		a, ok := ir.DequantOperand(body, in)
		if !ok {
			return ExpertsQuant{}, fmt.Errorf("dequant operand %d is a %s, not a kernel argument", k, body.Node(in).Op)
		}
		args[k] = a
	}
	return ExpertsQuant{Format: dq.Format, Group: dq.Group, GroupN: dq.GroupN, DType: dq.DType,
		Codes: args[0], Scales: args[1], Dequant: view.Inputs[0], View: v}, nil
}

// decodes reports whether v is a dequant or reads one (through views).
func decodes(body *ir.Graph, v ir.Value) bool {
	_, ok := ir.DequantUnder(body, v)
	return ok
}

// describeChain names the ops from v down to its dequant.
func describeChain(body *ir.Graph, v ir.Value) string {
	n := body.Node(v)
	if n.Op == ir.OpDequant || len(n.Inputs) == 0 {
		return n.Op.String()
	}
	return n.Op.String() + "(" + describeChain(body, n.Inputs[0]) + ")"
}

// check refuses a quantized weight whose 16-byte loads the form cannot
// take whole: fp8 needs the reduction in whole loads, each load within
// one scale group.
func (q ExpertsQuant) check(p ExpertsParts) error {
	if q.Format != quant.FP8 {
		return nil
	}
	if p.Kd%16 != 0 || (q.Group%16 != 0 && q.Group < p.Kd) {
		return fmt.Errorf("fp8 experts' weight with a reduction of %d and scale groups of %d: the kernel loads 16 codes at a time, each load within one group (a reduction and groups of multiples of 16)", p.Kd, q.Group)
	}
	return nil
}

// ExpertBytes is one expert's weight as memory holds it: its packed codes
// and scales when quantized.
func (p ExpertsParts) ExpertBytes() float64 {
	switch p.Quant.Format {
	case quant.MXFP4:
		return float64(p.Read*p.Kd)/2 + float64(p.Read*p.Kd/32)
	case quant.FP8:
		q := p.Quant
		scales := ((p.Read + q.GroupN - 1) / q.GroupN) * ((p.Kd + q.Group - 1) / q.Group)
		return float64(p.Read*p.Kd) + 4*float64(scales)
	}
	return float64(p.Kd*p.Read) * float64(p.DType.Size())
}

// ExpertsQuantLayout is the quantized form's lanes under a schedule:
// Elements a 16-byte load, G lanes along the reduction a column, C
// columns a warp, L weight columns an output column.
type ExpertsQuantLayout struct{ Elements, G, C, L int }

// QuantLayout is p's quantized lane layout under s; false when s names
// none (BK a group of 4 to 32 lanes' loads).
func (p ExpertsParts) QuantLayout(s Schedule) (ExpertsQuantLayout, bool) {
	e := p.Quant.Elements()
	g := s.BK / e
	if !p.Quant.Quantized() || s.BK%e != 0 || !slices.Contains([]int{4, 8, 16, 32}, g) {
		return ExpertsQuantLayout{}, false
	}
	l := ExpertsQuantLayout{Elements: e, G: g, C: 32 / g, L: 1}
	if p.Op == ir.OpExpertsUp {
		l.L = 2
	}
	return l, true
}

// ExpertsQuantStride is the floats of shared memory a load's span of a
// row's vector takes: its Elements and 4 of padding, so that the lanes of
// a group, a span apart, read 16 bytes each from different banks.
func ExpertsQuantStride(l ExpertsQuantLayout) int { return l.Elements + 4 }

// ExpertsQuantShared is the quantized form's static shared memory: the
// staged chunk of the rows' vectors (padded), each output column's sums,
// the rows' indices and slots, the threads' counts.
func ExpertsQuantShared(p ExpertsParts, s Schedule) int {
	l, ok := p.QuantLayout(s)
	if !ok {
		return math.MaxInt32
	}
	chunk := int(ExpertsChunk(p.Kd, s.BM))
	return chunk/l.Elements*ExpertsQuantStride(l)*s.BM*4 + s.BM*s.BN*l.L*4 + 16*s.BM + 4*s.Threads + 16
}

// expertsQuantFits is ExpertsFits for a quantized weight: a warp to 8,
// BK a group of 4 to 32 lanes, BN their columns, 1 to 8 loads in flight
// a lane, one row by slot or up to 8 by expert. A group's loads in flight
// stay within a staged chunk's (but for the least, 4 lanes' 2): a step
// that no lane of a group can use only costs registers (NVRTC 11.8 spills
// gpt-oss's 8-row blocks whose groups' steps overrun their chunk).
func expertsQuantFits(p ExpertsParts, s Schedule) bool {
	l, ok := p.QuantLayout(s)
	return ok && s.Threads%32 == 0 && s.Threads >= 32 && s.Threads <= 256 && s.BN == s.Threads/32*l.C &&
		s.Stages >= 1 && s.Stages <= 8 && s.BM >= 1 && s.BM <= 8 && (s.Grouped || s.BM == 1) &&
		l.G*s.Stages <= max(int(ExpertsChunk(p.Kd, s.BM))/l.Elements, 8) &&
		ExpertsChunk(p.Kd, s.BM)%int64(l.Elements) == 0 && ExpertsQuantShared(p, s) <= StaticShared &&
		ExpertsWorkBlocks(p, s) <= math.MaxInt32 && (p.N+int64(s.BN)-1)/int64(s.BN) <= 65535 &&
		s.Rows == 0 && !s.Tensor && !s.GEMV && s.TM == 0 && s.Warp == 0 && !s.SplitKeys && s.KeySplits == 0
}

// expertsQuantSchedules are the quantized form's: by slot and by expert
// (1 to 8 rows), 1 to 8 warps, groups of 4 to 32 lanes, 2 or 4 loads in
// flight a lane.
func expertsQuantSchedules(p ExpertsParts) []Schedule {
	e := p.Quant.Elements()
	var out []Schedule
	for _, grouped := range []bool{false, true} {
		for _, bm := range []int{1, 2, 4, 8} {
			for _, t := range []int{32, 64, 128, 256} {
				for _, g := range []int{4, 8, 16, 32} {
					for _, u := range []int{2, 4} {
						s := Schedule{BM: bm, BN: t / 32 * (32 / g), BK: g * e, Threads: t, Stages: u, Grouped: grouped}
						if expertsQuantFits(p, s) {
							out = append(out, s)
						}
					}
				}
			}
		}
	}
	return out
}

// ExpertsQuantLoop is one step of a warp of the quantized form's main
// loop, as the printer prints it and NVRTC's PTX counts it (cuda's
// TestExpertsQuantLoopMixMatchesPTX holds the two together): each lane's
// L 16-byte loads of codes and their scales, the codes' decoding (mxfp4:
// two shifts and a mask a code, the last of a word one shift less, and a
// multiply; fp8: the same with a test for its NaN, about seven integer
// operations), a move a code (the bits taken as a float, which costs
// nothing in SASS but counts in PTX), the scale (a multiply a code and
// the dequant's rounding, a conversion there and back, where that
// rounding is not exact; else a multiply of each row's sum), an FMA a
// code and row, the rows' values read as float4 from shared memory
// (shared by the L columns), the scales' decoding and the loop's
// addressing and branch.
func ExpertsQuantLoop(p ExpertsParts, s Schedule) IssueMix {
	l, _ := p.QuantLayout(s)
	codes := float64(l.L * l.Elements)
	intPer, otherPer := 23.0/8, 1.25
	if p.Quant.Format == quant.FP8 {
		intPer, otherPer = 7, 2.25
	}
	// A code taken as its value (times 2^126 or 2^120) and an FMA a row;
	// where the dequant rounds, times its scale and rounded, else each
	// row's sum of the load's codes times the scale.
	fp := codes*float64(1+s.BM) + float64(s.BM*l.L)
	if ExpertsQuantRounds(p.Quant) {
		fp = codes * float64(2+s.BM)
		if p.Quant.DType != ir.F32 {
			otherPer += 2
		}
	}
	return IssueMix{
		Load:   2 * float64(l.L),
		Int:    codes*intPer + float64(8+8*l.L+2*s.BM*l.L),
		FP:     fp,
		Shared: float64(s.BM * l.Elements / 4),
		Other:  codes*otherPer + 6,
	}
}

// ExpertsQuantRounds reports whether the kernel decodes each code to its
// weight one at a time, its scale multiplied and the product rounded to
// the dequant's dtype: an e2m1 code times a power of two is exact in f32
// and in bf16 (two significant bits, within both's exponent range,
// overflowing both alike), so that only mxfp4 into f16 and fp8 (an f32
// scale) need it.
func ExpertsQuantRounds(q ExpertsQuant) bool {
	return q.Format == quant.FP8 || q.DType == ir.F16
}

// expertsQuantFeatures prices the quantized form (see above): the plain
// form's work finding and traffic with the packed bytes of the experts
// chosen; each lane keeps Stages of its L loads in flight (fewer when a
// column has fewer loads a lane); the main loop's instructions
// (ExpertsQuantLoop, or the compiler's PTX of it) over every warp's steps,
// and the prologue's staging and the groups' shuffles besides; A's float4
// reads from shared memory.
func (k *kernelForm) expertsQuantFeatures(p ExpertsParts, s Schedule, d *Device, out float64) (Features, bool) {
	l, _ := p.QuantLayout(s)
	W := s.Threads / 32
	regs := 40 + 8*s.BM + 8*s.Stages*l.L
	per := k.occupancy(d, s.Threads, ExpertsQuantShared(p, s), regs)
	if per == 0 {
		return Features{}, false
	}
	t := p.traffic(s, d, per, p.ExpertBytes())
	chunk := ExpertsChunk(p.Kd, s.BM)
	// A warp's steps over the reduction and its main loop's iterations
	// (Stages steps each); a chunk's most steps a lane.
	steps, iterations, deepest := 0, 0, 0
	for k0 := int64(0); k0 < p.Kd; k0 += chunk {
		nb := int(min(chunk, p.Kd-k0)) / l.Elements
		steps += ceilDiv(nb, l.G)
		iterations += ceilDiv(nb, l.G*s.Stages)
		deepest = max(deepest, ceilDiv(nb, l.G))
	}
	inFlight := min(s.Stages, deepest) * l.L
	warps := float64(t.blocks * W)
	warpSteps := warps * float64(steps)
	loop := ExpertsQuantLoop(p, s)
	issue := loop.Scale(warpSteps)
	var instructions float64
	if k.res != nil && k.res.Loop.Total() > 0 {
		issue = k.res.Loop.Scale(warps * float64(iterations))
	}
	if k.res != nil && k.res.LoopInstructions > 0 {
		instructions = warps * float64(iterations) * float64(k.res.LoopInstructions)
	}
	// Every block stages its rows' vectors (a load, a conversion and a
	// store a value), and its groups add their sums by log2(G) shuffles.
	issue.Int += float64(t.blocks) * float64(s.BM) * float64(p.Kd) * 4 / 32
	issue.Other += float64(t.blocks*W*s.BM*l.L) * math.Log2(float64(l.G))
	return Features{
		Bytes: t.bytes + out, Work: []Work{{FMA, "f32", t.flops}}, Blocks: t.blocks, PerSM: per,
		WarpsPerBlock: W, Launches: 1, TileBytes: t.tile,
		SharedBytes:  warpSteps * loop.Shared * 512,
		Instructions: instructions,
		InFlight:     32 * float64(inFlight) * (16 + float64(p.Quant.scaleBytes())),
		Trips:        t.trips,
		Issue:        issue,
	}, true
}

// scaleBytes is the bytes of one load's scale.
func (q ExpertsQuant) scaleBytes() int {
	if q.Format == quant.MXFP4 {
		return 1
	}
	return 4
}
