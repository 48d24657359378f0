package cost

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// AttentionParts name the nodes of an attention body in its eager form
// (Decompose writes the attention op that way): Probs x V, where Probs is
// softmax(Scores) along the keys and Scores is computed elementwise from
// QK = Q x KT.
type AttentionParts struct {
	QK, PV   ir.Value // the two matmuls
	Q, KT, V ir.Value // QK's operands and PV's right operand
	Scores   ir.Value // the softmax's input
	Probs    ir.Value // PV's left operand past its casts: the softmax's division
}

// Attention finds the parts of an eager attention body (two matmuls, no
// composite ops: Decompose first) and checks what the attention form
// computes: the second matmul's left operand is, up to casts,
// exp(s - max(s)) / sum(exp(s - max(s))) along the last axis (casts are
// skipped: the kernel keeps the probabilities in f32), and the scores s
// are QK's elements through elementwise ops and casts, whose other
// operands (a mask, a bias) do not depend on QK.
func Attention(body *ir.Graph) (AttentionParts, error) {
	var mms []ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			mms = append(mms, ir.Value(i))
		}
	}
	if len(mms) != 2 {
		return AttentionParts{}, fmt.Errorf("attention with %d matmuls", len(mms))
	}
	p := AttentionParts{QK: mms[0], PV: mms[1]}
	qk, pv := body.Node(p.QK), body.Node(p.PV)
	p.Q, p.KT, p.V, p.Probs = qk.Inputs[0], qk.Inputs[1], pv.Inputs[1], pv.Inputs[0]
	for body.Node(p.Probs).Op == ir.OpCast {
		p.Probs = body.Node(p.Probs).Inputs[0]
	}
	// softmax(s) = exp(s - expand(max(s))) / expand(sum(exp(...))).
	noSoftmax := func(n *ir.Node) error {
		return fmt.Errorf("attention whose probabilities are no softmax (a %s where the softmax's division, exponential or reductions should be)", n.Op)
	}
	div := body.Node(p.Probs)
	if div.Op != ir.OpDiv {
		return p, noSoftmax(div)
	}
	ex, den := body.Node(div.Inputs[0]), body.Node(div.Inputs[1])
	if ex.Op != ir.OpExp {
		return p, noSoftmax(ex)
	}
	if den.Op != ir.OpExpand || body.Node(den.Inputs[0]).Op != ir.OpSum || body.Node(den.Inputs[0]).Inputs[0] != div.Inputs[0] {
		return p, noSoftmax(den)
	}
	sub := body.Node(ex.Inputs[0])
	if sub.Op != ir.OpSub || body.Node(sub.Inputs[1]).Op != ir.OpExpand {
		return p, noSoftmax(sub)
	}
	mx := body.Node(body.Node(sub.Inputs[1]).Inputs[0])
	if mx.Op != ir.OpMaxReduce || mx.Inputs[0] != sub.Inputs[0] {
		return p, noSoftmax(mx)
	}
	for _, red := range []*ir.Node{mx, body.Node(den.Inputs[0])} {
		in := body.Node(red.Inputs[0]).Shape
		if ax := red.Attrs.Axis; ax != -1 && ax != len(in)-1 {
			return p, fmt.Errorf("attention with a softmax across axis %d, not the keys", ax)
		}
	}
	p.Scores = sub.Inputs[0]
	if !body.Node(p.Scores).Shape.Equal(qk.Shape) {
		return p, fmt.Errorf("attention whose scores %v are not the first matmul's %v elementwise", body.Node(p.Scores).Shape, qk.Shape)
	}
	fromQK := make([]bool, len(body.Nodes))
	for i, n := range body.Nodes {
		fromQK[i] = ir.Value(i) == p.QK
		for _, in := range n.Inputs {
			fromQK[i] = fromQK[i] || fromQK[in]
		}
	}
	// The scores come from QK through elementwise ops and casts; any other
	// op on the way is a leaf of the score expression (a mask read through
	// its views), which must not need QK.
	seen := map[ir.Value]bool{}
	var check func(v ir.Value) error
	check = func(v ir.Value) error {
		if v == p.QK || seen[v] {
			return nil
		}
		seen[v] = true
		n := body.Node(v)
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpCast {
				if fromQK[v] {
					return fmt.Errorf("attention whose scores pass through a %s of the first matmul's result (they are computed elementwise, a key at a time)", n.Op)
				}
				return nil
			}
		}
		for _, in := range n.Inputs {
			if err := check(in); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check(p.Scores); err != nil {
		return p, err
	}
	return p, nil
}

// attentionStructure checks an eager attention body (Attention) with one
// output, written through an epilogue that keeps the elements in place.
func attentionStructure(body *ir.Graph) error {
	p, err := Attention(body)
	if err != nil {
		return err
	}
	if len(body.Outputs) != 1 {
		return fmt.Errorf("attention with %d outputs (it writes its result only)", len(body.Outputs))
	}
	return epilogueStructure(body, p.PV, "attention")
}

// attentionFeatures prices the printed flash forms (package cuda,
// attention.go and attention_tc.go): a block owns BM query rows of one
// batch and head and streams every key and value past them BN at a time
// with an online softmax, so the query side is read once, the key and
// value sides once per block of rows (from L2 when it keeps them: the
// blocks of a wave share them) and the scores never reach memory. Key and
// value prologues (rotary) run once per block of rows. By layout:
//   - BM 1: one warp computes the BN scores of a step while the others
//     wait, so the score arithmetic costs the whole block's lanes;
//   - BM 1 with SplitKeys: each warp scores and accumulates its own tiles
//     (no lane waits but past the keys' end), and the block combines the
//     warps' partial results, one more pass over a row of values per
//     warp;
//   - BM > 1, f32: every lane computes scores (a lane a key, a warp
//     BM/warps rows) and owns value columns 32 apart, so value rows short
//     of a multiple of 32 idle the rest, as keys past T in the last tile
//     and rows past S in the last block do;
//   - tensor cores: Q K^T and P V on mma.sync in the operand dtype, over
//     head dims padded to 16 (192 at most: the accumulators and query
//     fragments live in registers), keys to BN and rows to BM; the
//     softmax on FMA.
//
// A mask that bounds the keys (causal at a static offset, or at a runtime
// position: a decode step over a KV cache) makes each block loop over the
// keys its rows see, not all T (cuda's keyLoop skips the fully masked
// tiles): such a body is priced at the keys its blocks see, on average
// over the geometric buckets of a runtime position's range (runtimeKeys;
// at one position with Model.AtPosition), in the reads of keys and
// values, their prologues and the arithmetic on them.
//
// Shared memory is what the printer declares, which a block declares
// statically (48 KiB at most: larger tiles are refused); registers are a
// guess from the accumulators and fragments a thread keeps. Tiles of
// twice the rows (or keys) there are compute padding and are refused.
func (k *kernelForm) attentionFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	if s.KeySplits > 0 {
		return k.decodeFeatures(s, d, out)
	}
	body := k.body
	qk, pv := body.Node(k.matmuls[0]), body.Node(k.matmuls[1])
	q, kt := body.Node(qk.Inputs[0]).Shape, body.Node(qk.Inputs[1]).Shape
	v := body.Node(pv.Inputs[1]).Shape
	S, D, T, Dv := int(q[len(q)-2]), int(q[len(q)-1]), int(kt[len(kt)-1]), int(v[len(v)-1])
	batch := max(1, int(numel(pv.Shape))/(S*Dv))
	pad := func(n, m int) int { return ceilDiv(n, m) * m }
	if s.BM < 1 || s.BN < 1 {
		return Features{}, false
	}
	tiles := ceilDiv(S, s.BM)
	rows := tiles * s.BM // the query rows computed, the last block's padding included
	// The keys a block loops over, on average over the blocks: exact
	// (what it loads) and in whole tiles (what it computes).
	keys, keysPad := float64(T), float64(pad(T, s.BN))
	if k.keys != nil {
		keys, keysPad = k.keys.perBlock(int64(S), int64(T), s.BM, s.BN)
	}
	var shared, regs int
	var work []Work
	switch {
	case s.Tensor:
		dt := body.Node(qk.Inputs[0]).DType
		Dp, Dvp := pad(D, 16), pad(Dv, 16)
		if dt != ir.F16 && dt != ir.BF16 || s.BM%16 != 0 || s.BN%16 != 0 || s.Threads != 2*s.BM || Dp > 192 || Dvp > 192 ||
			s.BM > 16 && s.BM/2 >= S || s.BN > 32 && s.BN/2 >= T {
			return Features{}, false
		}
		kw, vw := Dp/2+4, Dvp/2+4
		shared = 4 * max(s.BM*kw, s.BN*(kw+vw))
		// Output accumulators, query fragments, score accumulators and
		// the probabilities' fragments, and addressing.
		regs = 40 + Dvp/2 + Dp/4 + s.BN/2 + s.BN/8
		class, cdt := tensorDType(dt, true)
		work = []Work{{class, cdt, 2 * float64(batch) * float64(rows) * keysPad * float64(Dp+Dvp)}}
	case s.BM == 1 && s.SplitKeys:
		warps, cols := s.Threads/32, ceilDiv(Dv, 32)
		if s.BN != 32 || warps == 0 || s.Threads%32 != 0 || cols > attnSplitColumns {
			return Features{}, false
		}
		shared = 4 * (D + warps*s.BN + warps*Dv + 2*warps)
		regs = 40 + cols
		work = []Work{{FMA, "f32", 2 * float64(batch) * float64(S) * (keysPad*float64(D) + keys*float64(32*cols) + float64(warps*Dv))}}
	case s.BM == 1:
		if Dv > 4*s.Threads {
			return Features{}, false
		}
		shared, regs = (D+s.BN+3)*4, 40
		idle := float64(s.Threads) / float64(s.BN)
		work = []Work{{FMA, "f32", 2 * float64(batch) * float64(S) * keys * (float64(D)*idle + float64(Dv))}}
	default:
		warps := s.Threads / 32
		if s.BN != 32 || warps == 0 || s.BM%warps != 0 || s.BM/2 >= S {
			return Features{}, false
		}
		perWarp, cols := s.BM/warps, ceilDiv(Dv, 32)
		if perWarp*cols > 32 {
			return Features{}, false // the printer keeps at most 32 accumulators a thread
		}
		shared = 4 * (s.BM*D + s.BN*(D+1) + s.BN*Dv + s.BM*s.BN)
		regs = 36 + perWarp*(cols+5) // the output accumulators, scores, max and sum of each row, a value row
		work = []Work{{FMA, "f32", 2 * float64(batch) * float64(rows) * (keysPad*float64(D) + keys*float64(32*cols))}}
	}
	if shared > StaticShared {
		return Features{}, false
	}
	per := k.occupancy(d, s.Threads, shared, regs)
	if per == 0 {
		return Features{}, false
	}
	const kSide, vSide = 2, 8 // slots: the first matmul's right operand, the second's
	var bytes float64
	for _, in := range body.Inputs() {
		times, b := 1, k.bytesOf(in)
		if k.slots[in]&(kSide|vSide) != 0 {
			times = tiles
			if slices.Contains(body.Node(in).Shape, ir.Dim(T)) {
				b *= keys / float64(T) // the keys (or their rotary tables) read
			}
		}
		bytes += rereads(b, times, d.SMs, d)
	}
	var flops float64
	for i, n := range body.Nodes {
		f := opFLOPs(body, n)
		if k.slots[i]&(kSide|vSide) != 0 {
			f *= float64(tiles) // key and value prologues (rotary) run per block of query rows
			if slices.Contains(n.Shape, ir.Dim(T)) {
				f *= keys / float64(T) // on the keys the block sees
			}
		}
		flops += f
	}
	if work[0].Class == FMA {
		work[0].FLOPs += flops
	} else {
		work = append([]Work{{FMA, "f32", flops}}, work...)
	}
	// Every block streams the keys and values it sees through shared
	// memory.
	tileBytes := float64(batch*tiles) * keys * float64(D+Dv) * float64(body.Node(qk.Inputs[1]).DType.Size())
	f := Features{Bytes: bytes + out, Work: work, Blocks: batch * tiles, PerSM: per, WarpsPerBlock: s.Threads / 32, Launches: 1, TileBytes: tileBytes}
	if s.BM == 1 && !s.Tensor {
		k.scalarKeyLoop(&f, s, batch*S, keys, D, Dv)
	}
	return f, true
}

// scalarKeyLoop says what the one-row layouts (BM 1, with or without
// SplitKeys) keep in flight and issue: a lane scores a key by reading its
// D elements one scalar load at a time (the loop unrolled about
// scalarUnroll deep, so that many loads are outstanding), and a lane
// reads its value columns a key at a time; every element's address is
// computed from the view's index expression (viewIndexCost integer
// instructions, the 64-bit divisions and remainders of its reshapes
// included), and is multiplied in once (an FMA). In the plain BM 1
// layout one warp scores while the others wait.
func (k *kernelForm) scalarKeyLoop(f *Features, s Schedule, rows int, keys float64, D, Dv int) {
	qk, pv := k.body.Node(k.matmuls[0]), k.body.Node(k.matmuls[1])
	size := float64(k.body.Node(qk.Inputs[1]).DType.Size())
	kInt, vInt := viewIndexCost(k.body, qk.Inputs[1]), viewIndexCost(k.body, pv.Inputs[1])
	perKey := IssueMix{
		Load:  float64(D) + float64(Dv),
		Int:   float64(D)*kInt + float64(Dv)*vInt,
		FP:    float64(D) + float64(Dv) + 20, // the dot, the accumulation, the softmax's share
		Other: 10,
	}
	// Per key of a row, in warp instructions: a warp scores 32 keys at
	// once and its lanes share a value row's columns.
	f.Issue = perKey.Scale(float64(rows) * keys / 32)
	f.InFlight = 32 * scalarUnroll * size
	// The position and the query row before the key loop, the loop's
	// first loads.
	f.Trips = 2
}

// scalarUnroll is the scalar loads NVRTC keeps outstanding a lane in a
// one-row attention layout's dot-product loop (its unrolling of the loop
// over the head dim; an estimate from the PTX of llama's decode kernels).
const scalarUnroll = 4

// viewIndexCost estimates the integer instructions of one element's
// address when operand v is read through its views as the printer
// writes them: a 64-bit multiply-add for the address, and for each
// reshape or expand on the way a 64-bit division and remainder by a
// constant (about five 64-bit instructions each, ten 32-bit ones).
func viewIndexCost(body *ir.Graph, v ir.Value) float64 {
	cost := 4.0
	for {
		n := body.Node(v)
		switch n.Op {
		case ir.OpReshape, ir.OpExpand:
			cost += 10
		case ir.OpPermute, ir.OpSlice, ir.OpCast:
		default:
			return cost
		}
		v = n.Inputs[0]
	}
}

// attnSplitColumns bounds the value columns a lane of the split-keys
// layout accumulates (32 apart), so that they stay in registers: value
// rows of up to 256.
const attnSplitColumns = 8
