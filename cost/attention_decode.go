package cost

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// DecodeParts is what attention's flash-decoding layout (package cuda,
// attention_decode.go) reads of an attention body: keys and values read
// straight from kernel inputs through views, in rows of the head dim that
// whole 16-byte loads cover, and the group of consecutive query heads
// (GQA) that read the same key and value rows.
type DecodeParts struct {
	AttentionParts
	// K and V are the kernel inputs the keys and values are read from,
	// KLayout and VLayout their addressing over KT's axes [..., D, T]
	// and V's [..., T, D] (ViewLayout).
	K, V             ir.Value
	KLayout, VLayout Layout
	// S query rows a head, D the head dim (of q, k and v alike), T the
	// keys, Batch the product of the output's batch dims (batch times
	// query heads).
	S, D, T, Batch int64
	// Group is the consecutive batch indices (query heads) that read the
	// same key and value rows; a block takes all of them.
	Group int64
	// KStride and VStride are the elements between consecutive keys'
	// rows.
	KStride, VStride int64
	// DType is the keys' and values' dtype.
	DType ir.DType
}

// Vec is the elements one 16-byte load reads.
func (p DecodeParts) Vec() int64 { return 16 / int64(p.DType.Size()) }

// Lanes is the lanes that read one key row, a 16-byte piece each.
func (p DecodeParts) Lanes() int64 { return p.D / p.Vec() }

// KeysPerLoad is the keys a warp reads with one 16-byte load a lane.
func (p DecodeParts) KeysPerLoad() int64 { return 32 / p.Lanes() }

// Rows is the query rows a block computes: the group's heads times S.
func (p DecodeParts) Rows() int64 { return p.Group * p.S }

// Heads is the blocks' key heads: the batch's groups.
func (p DecodeParts) Heads() int64 { return p.Batch / p.Group }

// decodeRegisters bounds the f32 values a lane keeps for its query rows
// (a 16-byte piece of each query row, and of each output accumulator), so
// that they stay in registers.
const decodeRegisters = 64

// DecodeAttention reads an eager attention body (Attention's parts p) for
// the flash-decoding layout, or says why the layout cannot run it: keys
// and values must be kernel inputs read through views (a computed key, a
// rotary prologue on the cache, is printed by the other layouts), their
// head dim contiguous and of one length D whose rows split into 16-byte
// pieces over a power of two of lanes (D of 64 or 128 in f16 and bf16,
// 32 to 128 in f32), every other stride and the offset whole pieces.
func DecodeAttention(body *ir.Graph, p AttentionParts) (DecodeParts, error) {
	pv := body.Node(p.PV).Shape
	q, kt, v := body.Node(p.Q).Shape, body.Node(p.KT).Shape, body.Node(p.V).Shape
	r := len(pv)
	d := DecodeParts{AttentionParts: p, S: int64(pv[r-2]), D: int64(q[len(q)-1]), T: int64(kt[len(kt)-1])}
	if dv := int64(pv[r-1]); dv != d.D {
		return d, fmt.Errorf("flash-decoding attention: value rows of %d for keys of %d (the layout reads both with the same lanes)", dv, d.D)
	}
	d.Batch = pv.NumElements() / (d.S * d.D)
	var err error
	var kBatch, vBatch [][]Mode
	if d.K, d.KLayout, kBatch, d.KStride, err = decodeOperand(body, p.KT, pv, r-2, r-1, "keys"); err != nil {
		return d, err
	}
	if d.V, d.VLayout, vBatch, d.VStride, err = decodeOperand(body, p.V, pv, r-1, r-2, "values"); err != nil {
		return d, err
	}
	d.DType = body.Node(d.K).DType
	if vt := body.Node(d.V).DType; vt != d.DType {
		return d, fmt.Errorf("flash-decoding attention: keys in %s, values in %s", d.DType, vt)
	}
	if len(kt) != r || len(v) != r {
		return d, fmt.Errorf("flash-decoding attention: keys or values of another rank than the output's")
	}
	vec := d.Vec()
	lanes := d.D / vec
	if d.D%vec != 0 || lanes > 32 || lanes&(lanes-1) != 0 {
		return d, fmt.Errorf("flash-decoding attention: a head dim of %d in %s is not a power of two of 16-byte pieces up to 32", d.D, d.DType)
	}
	for _, l := range []Layout{d.KLayout, d.VLayout} {
		if l.Offset%vec != 0 {
			return d, fmt.Errorf("flash-decoding attention: an operand at offset %d, not a whole 16-byte piece", l.Offset)
		}
		for _, modes := range l.Axes {
			for _, m := range modes {
				if m.Size > 1 && m.Stride%vec != 0 && m.Stride != 1 {
					return d, fmt.Errorf("flash-decoding attention: a stride of %d elements, not whole 16-byte pieces", m.Stride)
				}
			}
		}
	}
	if d.KStride%vec != 0 || d.VStride%vec != 0 {
		return d, fmt.Errorf("flash-decoding attention: keys %d and values %d elements apart, not whole 16-byte pieces", d.KStride, d.VStride)
	}
	d.Group = gcd(trailingBroadcast(kBatch), trailingBroadcast(vBatch))
	if d.Rows()*vec > decodeRegisters {
		return d, fmt.Errorf("flash-decoding attention: %d query rows a key head keep %d values a lane, more than %d", d.Rows(), d.Rows()*vec, decodeRegisters)
	}
	if d.T >= 1<<31 || d.Heads() > 65535 {
		return d, fmt.Errorf("flash-decoding attention: %d keys, %d key heads: past the layout's 32-bit key index and grid", d.T, d.Heads())
	}
	return d, nil
}

// decodeOperand checks operand x of an attention read by the
// flash-decoding layout: a view of a kernel input whose head-dim axis
// (dAxis) is contiguous and whose key axis (tAxis) is one stride; it
// returns the input, the layout, the modes of pv's batch dims (stride 0
// where the operand broadcasts) and the key stride.
func decodeOperand(body *ir.Graph, x ir.Value, pv ir.Shape, dAxis, tAxis int, what string) (ir.Value, Layout, [][]Mode, int64, error) {
	buf, l, ok := ViewLayout(body, x)
	if !ok {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s are computed, not a kernel input read through views", what)
	}
	if len(l.Axes) != len(pv) {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: %s of rank %d for an output of rank %d", what, len(l.Axes), len(pv))
	}
	if s, ok := oneStride(l.Axes[dAxis]); !ok || s != 1 {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s' head dim is not contiguous", what)
	}
	ts, ok := oneStride(l.Axes[tAxis])
	if !ok {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s' rows are not one stride apart", what)
	}
	batch := make([][]Mode, len(pv)-2)
	for i := range batch {
		batch[i] = l.Axes[i]
		if axisSize(l.Axes[i]) == 1 && pv[i] != 1 {
			batch[i] = []Mode{{int64(pv[i]), 0}} // a size-1 batch dim the matmul broadcasts
		}
	}
	return buf, l, batch, ts, nil
}

// oneStride is the stride of an axis whose modes make one arithmetic
// progression (1 for an axis of one element).
func oneStride(modes []Mode) (int64, bool) {
	stride, inner := int64(0), int64(1)
	for i := len(modes) - 1; i >= 0; i-- {
		m := modes[i]
		if m.Size == 1 {
			continue
		}
		if inner == 1 {
			stride = m.Stride
		} else if m.Stride != stride*inner {
			return 0, false
		}
		inner *= m.Size
	}
	if inner == 1 {
		return 1, true
	}
	return stride, true
}

// trailingBroadcast is how many consecutive batch indices, from the
// innermost batch mode out, read the same address (their modes' strides
// are 0): the query heads of one key head.
func trailingBroadcast(batch [][]Mode) int64 {
	g := int64(1)
	for i := len(batch) - 1; i >= 0; i-- {
		for j := len(batch[i]) - 1; j >= 0; j-- {
			m := batch[i][j]
			if m.Size == 1 {
				continue
			}
			if m.Stride != 0 {
				return g
			}
			g *= m.Size
		}
	}
	return g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// decodeMaxWarps and decodeMaxWorkspace bound the flash-decoding layout
// as package cuda prints it: the warps whose partials meet in shared
// memory, and the workspace of the splits' partials.
const (
	decodeMaxWarps     = 8
	decodeMaxWorkspace = 16 << 20
)

// DecodeLoads is the 16-byte loads of keys (and as many of values) a lane
// of the flash-decoding layout issues a warp step under schedule s, all
// before the first is used.
func DecodeLoads(p DecodeParts, s Schedule) int64 { return int64(s.BN) / p.KeysPerLoad() }

// decodeFits says whether schedule s is one the flash-decoding layout
// prints for p (cuda's printAttentionDecode refuses the same).
func decodeFits(p DecodeParts, s Schedule) bool {
	P, W := p.KeysPerLoad(), s.Threads/32
	ni := int64(s.BN) / P
	if s.BM != 1 || int64(s.BN)%P != 0 || ni < 1 || ni > 8 || s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Tensor || s.GEMV || s.SplitKeys ||
		s.TM != 0 || s.Warp != 0 || s.Threads%32 != 0 || W < 1 || W > decodeMaxWarps || s.KeySplits < 1 || s.KeySplits > 256 {
		return false
	}
	if decodeShared(p, W) > StaticShared {
		return false
	}
	ws := int64(0)
	if s.KeySplits > 1 {
		ws = p.Heads()*int64(s.KeySplits)*p.Rows()*(p.D+2)*4 + p.Heads()*4
	}
	return ws <= decodeMaxWorkspace
}

// decodeShared is the flash-decoding block's static shared memory: the
// query rows, and each warp's partial (accumulators, max and sum).
func decodeShared(p DecodeParts, warps int) int64 {
	return 4 * (p.Rows()*p.D + int64(warps)*p.Rows()*(p.D+2))
}

// DecodeScores is the instructions of a score's epilogue in the
// flash-decoding loop: Key once a key (the mask's integer work, the same
// for every row of the block, which the compiler computes once), KeyRow
// once a key and row (the scale, an additive mask).
type DecodeScores struct {
	Key, KeyRow IssueMix
}

// DecodeStepMix is the warp instructions one step of the flash-decoding
// layout's main loop issues (BN keys of every row of the block), by pipe,
// as NVRTC's PTX counts them (cuda.LoopMix; a test holds the two
// together on three shapes). With keyRows the keys a lane scores a step
// times the rows, h the halvings that reduce a key row's partial dot
// products across its lanes, and exps the exponentials (one a key and
// row, one a row for the rescaling), it counts:
//   - loads: a key and a value load a lane and key load;
//   - the widening to f32: a shift or mask (bf16) or a shift a pair
//     (f16) on the integer pipe, a move (bf16, f32) or two conversions
//     (f16) an element;
//   - FP: the dot products' and the accumulation's FMAs (vec a key row
//     and lane each), the reduction's adds, the scores' epilogue, the
//     NaN-aware running max (two compares a key), the sum, the rescaling
//     of the accumulators, and about nine a CUDA expf (its range
//     reduction and ex2, the -inf guard);
//   - integer: an expf's exponent shift and guard select, the max's
//     predicate or, the mask's work a key, and about twenty for the
//     loop's pointers, bound and branch;
//   - other: a shuffle and two moves a halving, two moves an expf, nine
//     moves a key and row (PTX's copies of the scores and running values,
//     which ptxas mostly folds away), a branch and a saturating convert
//     an expf, the key index's widening.
func DecodeStepMix(p DecodeParts, s Schedule, sc DecodeScores) IssueMix {
	ni := float64(DecodeLoads(p, s))
	R, vec := float64(p.Rows()), float64(p.Vec())
	h := 0.0
	for l := p.Lanes(); l > 1; l /= 2 {
		h++
	}
	keyRows := ni * R
	exps := keyRows + R
	elems := 2 * ni * vec // key and value elements a lane widens
	var m IssueMix
	m.Load = 2 * ni
	switch p.DType {
	case ir.BF16:
		m.Int += elems
		m.Other += elems
	case ir.F16:
		m.Int += elems / 2
		m.Other += 2 * elems
	default:
		m.Other += elems
	}
	m.FP += 2*keyRows*vec + R*vec + keyRows*(h+3) + 9*exps + 2*R
	m.Int += 2*exps + keyRows + 20
	m.Other += 3*keyRows*h + 2*exps + 9*keyRows + 2*exps + 1 + 7 + ni
	return m.Add(sc.Key.Scale(ni)).Add(sc.KeyRow.Scale(keyRows))
}

// DecodeMaskMix estimates the instructions of the scores' epilogue of
// attention parts p: float ops that read the dot product one a key and
// row; the rest (a mask's integer positions and comparisons) once a key,
// two for a 64-bit integer op or compare, the key index's remainder by
// the keys four (a shift and a mask) or, for keys not a power of two, six
// (a multiply-high sequence).
func DecodeMaskMix(body *ir.Graph, p AttentionParts) DecodeScores {
	fromQK := make([]bool, len(body.Nodes))
	var m DecodeScores
	seen := make([]bool, len(body.Nodes))
	var walk func(v ir.Value)
	walk = func(v ir.Value) {
		if seen[v] {
			return
		}
		seen[v] = true
		if v == p.QK {
			fromQK[v] = true
			return
		}
		n := body.Node(v)
		for _, in := range n.Inputs {
			walk(in)
			fromQK[v] = fromQK[v] || fromQK[in]
		}
		class := n.Op.Class()
		arith := (class == ir.ClassBinary || class == ir.ClassUnary) && n.Op != ir.OpCast
		switch {
		case fromQK[v]:
			if arith && n.DType.IsFloat() {
				m.KeyRow.FP++
			}
		case n.Op == ir.OpIota:
			if e := n.Shape[n.Attrs.Axis]; e&(e-1) == 0 {
				m.Key.Int += 4
			} else {
				m.Key.Int += 6
			}
		case arith && !n.DType.IsFloat(), class == ir.ClassCompare:
			m.Key.Int += 2
		}
	}
	walk(p.Scores)
	return m
}

// decodeFeatures prices the flash-decoding layout (cuda's
// printAttentionDecode) under schedule s: Heads x KeySplits blocks of
// s.Threads/32 warps, each warp keeping BN/(keys a load) key loads and as
// many value loads of 16 bytes a lane in flight. DRAM reads every key
// and value row the rows see once (a key head's query heads share it),
// the query side once per split from L2, and writes the output; the
// splits' partials go through L2. The main loop's instructions are
// DecodeStepMix a warp step (or the compiler's count, when rerank passes
// it) over every step the grid takes, plus the prologue and the combine.
// A block makes its round trips serially: the position and query rows
// before its loop, the partials before the combine.
func (k *kernelForm) decodeFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	p, err := Attention(k.body)
	if err != nil {
		return Features{}, false
	}
	dp, err := DecodeAttention(k.body, p)
	if err != nil || !decodeFits(dp, s) {
		return Features{}, false
	}
	W, n := s.Threads/32, s.KeySplits
	R, D, H, vec := dp.Rows(), dp.D, dp.Heads(), dp.Vec()
	ni := DecodeLoads(dp, s)
	shared := int(decodeShared(dp, W))
	// Registers: the query pieces and accumulators, the loads in
	// flight, the scores of a step, addressing.
	regs := int(2*R*vec+8*ni+ni*R) + 40
	per := k.occupancy(d, s.Threads, shared, regs)
	if per == 0 {
		return Features{}, false
	}
	keys := float64(dp.T)
	if k.keys != nil {
		keys, _ = k.keys.perBlock(dp.S, dp.T, int(dp.S), 1)
	}
	size := float64(dp.DType.Size())
	// Every split's chunk is whole warp steps but the last one's.
	steps := math.Ceil(keys / float64(s.BN))
	var bytes float64
	for _, in := range k.body.Inputs() {
		b := k.bytesOf(in)
		switch in {
		case dp.K, dp.V:
			b *= keys / float64(dp.T) // the rows the position reaches
			bytes += b
		default:
			bytes += rereads(b, n, d.SMs, d) // the query side, read by every split
		}
	}
	kvBytes := float64(H) * keys * 2 * float64(D) * size
	partials := 0.0
	if n > 1 {
		partials = 2 * float64(H) * float64(n) * float64(R) * float64(D+2) * 4
	}
	mix := DecodeStepMix(dp, s, DecodeMaskMix(k.body, p))
	if k.res != nil && k.res.Loop.Total() > 0 {
		mix = k.res.Loop
	}
	issue := mix.Scale(float64(H) * steps)
	// The prologue (the query rows, their pieces into registers) and the
	// combines (lanes, warps, splits) a block: small beside the loop at
	// long contexts, what a split costs at short ones.
	// Every block combines its warps (about four instructions an
	// accumulator and warp, over the block's threads) and its lanes'
	// rows (shuffles); the last block of a head combines the splits.
	blocks := float64(H) * float64(n)
	perBlock := IssueMix{FP: float64(R*D) * 4 / 32, Shared: float64(R*D) * float64(W+1) / float64(32*W), Other: float64(R*vec) * 4}
	issue = issue.Add(perBlock.Scale(blocks * float64(W)))
	if n > 1 {
		perHead := IssueMix{FP: float64(R*D) * float64(n) * 4 / 32, Load: float64(R*D) * float64(n) * 2 / 32}
		issue = issue.Add(perHead.Scale(float64(H)))
	}
	flops := 2 * float64(H) * float64(R) * steps * float64(s.BN) * 2 * float64(D)
	for i, n := range k.body.Nodes {
		if k.slots[i]&1 != 0 { // the query rows' prologue, once per split
			flops += opFLOPs(k.body, n) * float64(s.KeySplits)
		}
	}
	// The position and the query rows before the key loop, its first
	// loads, and with splits the partials' round trip through L2 (about
	// half DRAM's latency) before the combine.
	trips := 2.0
	if n > 1 {
		trips += 0.5
	}
	return Features{
		Bytes: bytes + out, Work: []Work{{FMA, "f32", flops}},
		Blocks: int(H) * n, PerSM: per, WarpsPerBlock: W, Launches: 1,
		TileBytes: kvBytes + partials,
		// Each lane's key and value loads of a step are independent
		// chains the warp keeps going at once.
		Stages:   int(ni),
		InFlight: 32 * float64(2*ni) * 16,
		Trips:    trips,
		Issue:    issue,
	}, true
}

// decodeSchedules are the flash-decoding layout's schedules for a body it
// prints: 4 warps, 4 key and 4 value loads a lane in flight, and 1 to
// 32 splits of the keys (the grid is key heads x splits); none for a body
// it does not. (Few, as every listed schedule is printed and emulated
// in the tests: the split count is what fills the device.)
func (k *kernelForm) decodeSchedules() []Schedule {
	p, err := Attention(k.body)
	if err != nil {
		return nil
	}
	dp, err := DecodeAttention(k.body, p)
	if err != nil {
		return nil
	}
	var out []Schedule
	for _, n := range []int{1, 2, 4, 8, 16, 32} {
		s := Schedule{BM: 1, BN: int(4 * dp.KeysPerLoad()), Threads: 128, KeySplits: n}
		if decodeFits(dp, s) {
			out = append(out, s)
		}
	}
	return out
}
