package cost

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// PagedParts are the shapes of a paged attention kernel body (the
// paged_attention op alone over the kernel's arguments): T tokens of Hq
// query heads, Hkv key heads of head size D, a pool of Slots slots
// Block to a block, a block table of Seqs rows and Blocks columns, the
// attention's window (0: none) and scale, the operands' dtype; Node is
// the op, In its operands' kernel input positions.
type PagedParts struct {
	Node                       ir.Value
	T, Hq, Hkv, D              int64
	Slots, Block, Seqs, Blocks int64
	Window                     int64
	Scale                      float64
	DType                      ir.DType
	// MetaTypes are the dtypes of the table, lengths, starts and count.
	MetaTypes [4]ir.DType
	// Sinks, when valid, is the dtype of the sinks [Hq] (the op's tenth
	// operand, a kernel argument); InvalidDType: none.
	Sinks ir.DType
}

// Group is the query heads that share a key head.
func (p PagedParts) Group() int64 { return p.Hq / p.Hkv }

// Paged reads a paged attention body's parts; it fails on a body that is
// not one paged_attention op over inputs, written as the one output.
func Paged(body *ir.Graph) (PagedParts, error) {
	if err := pagedStructure(body); err != nil {
		return PagedParts{}, err
	}
	v := body.Outputs[0].Value
	n := body.Node(v)
	in := func(k int) *ir.Node { return body.Node(n.Inputs[k]) }
	q, kp, table := in(0).Shape, in(3).Shape, in(5).Shape
	p := PagedParts{
		Node: v, T: int64(q[0]), Hq: int64(q[1]), D: int64(q[2]), Hkv: int64(in(1).Shape[1]),
		Slots: int64(kp[0]), Block: n.Block, Seqs: int64(table[0]), Blocks: int64(table[1]),
		Window: n.Window, Scale: n.Scale, DType: n.DType,
	}
	for k := range p.MetaTypes {
		p.MetaTypes[k] = in(5 + k).DType
	}
	if sk, ok := ir.PagedSinks(n); ok {
		p.Sinks = body.Node(sk).DType
	}
	return p, nil
}

// pagedStructure checks what the paged attention form computes: the op
// alone, its result the one output; q, k and v read from the kernel's
// arguments in place or through views and casts (lowering folds a
// reshape of a projection, a slice of a fused one, into its reader); the
// pools, the metadata and the sinks (when present) kernel arguments
// themselves (the pools are read at the slots the table names, the
// metadata as the scheduler wrote it).
// Fusing a computing prologue into it (rotary on q, say) is not printed
// yet.
func pagedStructure(body *ir.Graph) error {
	var op *ir.Node
	var opV ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpPagedAttention {
			if op != nil {
				return fmt.Errorf("two paged_attention ops in one kernel body")
			}
			op, opV = n, ir.Value(i)
		}
	}
	if op == nil {
		return fmt.Errorf("a paged attention kernel without the paged_attention op")
	}
	if len(body.Outputs) != 1 || body.Outputs[0].Value != opV {
		return fmt.Errorf("a paged attention kernel with %d outputs, or an epilogue (it writes the attention's result only)", len(body.Outputs))
	}
	if len(op.Inputs) != 9 && len(op.Inputs) != 10 {
		return fmt.Errorf("paged attention with %d operands, not 9 or 10", len(op.Inputs))
	}
	for k := 3; k < len(op.Inputs); k++ {
		if n := body.Node(op.Inputs[k]); n.Op != ir.OpInput {
			return fmt.Errorf("paged attention whose operand %d is a %s (the pools, the metadata and the sinks are kernel arguments)", k, n.Op)
		}
	}
	// Every other node is a view or cast on the way from an argument to
	// q, k or v.
	feeds := make([]bool, len(body.Nodes))
	for k := range 3 {
		feeds[op.Inputs[k]] = true
	}
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		n := body.Nodes[i]
		if ir.Value(i) == opV || !feeds[i] {
			continue
		}
		for _, in := range n.Inputs {
			feeds[in] = true
		}
	}
	for i, n := range body.Nodes {
		switch {
		case ir.Value(i) == opV, n.Op == ir.OpInput:
		case !feeds[i]:
			return fmt.Errorf("a %s in a paged attention kernel that does not feed it", n.Op)
		case n.Op.Class() == ir.ClassView && n.Op != ir.OpPad, n.Op == ir.OpCast:
		default:
			return fmt.Errorf("a %s in a paged attention kernel (it reads q, k and v through views and casts only)", n.Op)
		}
	}
	return nil
}

// PagedTile is the keys a warp of the paged attention form takes a step:
// a lane each.
const PagedTile = 32

// pagedAccumulators bounds the output accumulators a lane of the paged
// form keeps (the group's query heads times the head size's 32-column
// strips), so that they stay in registers: a group of 4 heads of 256, or
// 8 of 128.
const pagedAccumulators = 32

// PagedShared is the static shared memory the paged form declares for a
// block of warps warps: the group's query rows, each warp's probabilities
// and key rows for a tile, and each warp's partial results to combine;
// with key splits, the flag that says a block is its pair's last.
func PagedShared(p PagedParts, warps, splits int) int {
	G, D, W := int(p.Group()), int(p.D), warps
	sh := 4*(G*D+W*G*PagedTile+W*G*D+2*W*G) + 8*W*PagedTile
	if splits > 1 {
		sh += 4
	}
	return sh
}

// PagedMaxWorkspace bounds the workspace of a paged form split across
// blocks: splits are for grids too small to fill the device, whose
// partials are few.
const PagedMaxWorkspace = 16 << 20

// PagedWorkspace is the bytes of device memory the paged form keeps for
// itself with splits blocks a (token, key head) pair: each block's
// partial (the group's running max and sum and its D accumulators a
// query head, f32) and each pair's count of finished blocks; 0 without a
// split.
func PagedWorkspace(p PagedParts, splits int) int64 {
	if splits <= 1 {
		return 0
	}
	pairs := p.T * p.Hkv
	return pairs*int64(splits)*p.Group()*(p.D+2)*4 + pairs*4
}

// PagedSplitChunk is the keys each of splits blocks takes of a token's
// keys keys: an equal share rounded up to whole tiles, so that every
// block's warps start on tile boundaries of the split (the last blocks
// of a short context may have none).
func PagedSplitChunk(keys int64, splits int) int64 {
	n := int64(max(splits, 1))
	return (keys + n*PagedTile - 1) / (n * PagedTile) * PagedTile
}

// pagedContext is the cached context length the paged form is priced at,
// per sequence: the model's position when one is pinned (AtPosition) or
// the middle of an expected range (Expecting); else the assumption that
// the pool is half full and shared evenly among the table's rows
// (Slots / (2 Seqs)), at most what a row of the table holds. Lengths are
// runtime values; this is the stated assumption the schedules are ranked
// at (their ranking does not depend on it much: every schedule reads the
// same keys).
func (k *kernelForm) pagedContext(p PagedParts) float64 {
	if k.pagedCtx >= 0 {
		return k.pagedCtx
	}
	return math.Min(float64(p.Slots)/float64(2*max(p.Seqs, 1)), float64(p.Blocks*p.Block))
}

// PagedMaxSplits bounds the blocks a (token, key head) pair's keys are
// split across.
const PagedMaxSplits = 32

// pagedTileTrips is the dependent round trips to memory a warp makes for
// a tile of keys: the block table entry (which its lanes wait for through
// a shuffle), then the key rows, then the value rows (which wait for the
// scores). Outside its loop a block waits for the sequence count, a
// binary search of the query starts (L2, about half DRAM's latency a
// step), its sequence's metadata and the query rows; a split block also
// for its partial's store and count, and the last for the partials (L2).
const (
	pagedTileTrips  = 3
	pagedBlockTrips = 3
	pagedSplitTrips = 1.5
)

// pagedFeatures prices the paged attention form (package cuda,
// attention_paged.go) under schedule s: a block per token and key head
// (and, with KeySplits n, per n-th of the token's keys), its warps taking
// the keys 32 at a time with running softmaxes for the group's query
// heads, combined at the end (across the splits by the last block of a
// pair, through the workspace). The keys a token sees are priced at the
// assumed context (pagedContext) plus its place in its sequence's chunk,
// the T tokens spread evenly over the table's rows, bounded by the
// window: bytes read are the query, the output, the step's own keys and
// values, and each sequence's cached keys and values (read by every
// token of its chunk, once from DRAM when L2 holds them or the chunk's
// blocks run in one wave) plus the table entries of the cached blocks;
// the arithmetic is two dot products of D per key and query head over
// whole tiles, an exponential per key and head, and the combines.
//
// A few tokens over long contexts are few blocks, each walking its keys
// tile after tile: the latency of those round trips, not the bandwidth,
// is their time (Features.InFlight and Trips: a warp keeps a tile's rows
// in flight over pagedTileTrips round trips). Splitting the keys runs
// more blocks at once, each with a shorter walk, for the price of the
// partials' traffic, the combine and its round trips; splits are listed
// only where the pairs leave the device's resident blocks unfilled (with
// half as many splits they do not fill them yet) and the workspace stays
// within PagedMaxWorkspace.
func (k *kernelForm) pagedFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	p, err := Paged(k.body)
	if err != nil || s.BM != 1 || s.BN != PagedTile || !s.SplitKeys || s.Threads%32 != 0 || s.Threads < 32 || s.Threads > 1024 ||
		s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Tensor || s.GEMV || s.TM != 0 || s.Warp != 0 || s.KeySplits < 0 || s.KeySplits > PagedMaxSplits {
		return Features{}, false
	}
	warps, n := s.Threads/32, max(s.KeySplits, 1)
	G, cols := p.Group(), ceilDiv(int(p.D), 32)
	if int(G)*cols > pagedAccumulators {
		return Features{}, false
	}
	shared := PagedShared(p, warps, n)
	if shared > StaticShared {
		return Features{}, false
	}
	per := k.occupancy(d, s.Threads, shared, 40+int(G)*(cols+2))
	if per == 0 {
		return Features{}, false
	}
	pairs := int(p.T * p.Hkv)
	ws := PagedWorkspace(p, n)
	if n > 1 && (ws > PagedMaxWorkspace || pairs*(n/2) >= d.SMs*per) {
		return Features{}, false
	}
	size := float64(p.DType.Size())
	ctx := k.pagedContext(p)
	chunk := math.Max(1, float64(p.T)/float64(max(p.Seqs, 1)))
	keys := ctx + (chunk+1)/2 // a token's keys on average
	cached := ctx             // a sequence's cached keys read
	if p.Window > 0 {
		keys = math.Min(keys, float64(p.Window))
		cached = math.Min(cached, float64(p.Window)+chunk-1)
	}
	seqs := math.Min(float64(p.Seqs), float64(p.T)) // sequences with a token
	row := float64(p.Hkv*p.D) * size                // one position's key (or value) row
	blocks := pairs * n
	concurrent := max(1, d.SMs*per/(int(p.Hkv)*n)) // tokens one wave runs
	poolBytes := rereads(2*seqs*cached*row, int(chunk), concurrent, d)
	metaSize := func(i int) float64 { return float64(p.MetaTypes[i].Size()) }
	meta := seqs*math.Ceil(cached/float64(p.Block))*metaSize(0) + float64(p.Seqs)*(metaSize(1)+metaSize(2)) + metaSize(2) + metaSize(3)
	if p.Sinks.Valid() {
		meta += float64(p.Hq * int64(p.Sinks.Size()))
	}
	step := 2 * float64(p.T) * row
	bytes := out + float64(p.T*p.Hq*p.D)*size + step + poolBytes + meta
	keysPad := math.Ceil(keys/PagedTile) * PagedTile // a split's share is whole tiles
	heads := float64(p.T * p.Hq)
	flops := 2*heads*(keysPad*float64(p.D)+keys*float64(32*cols)+float64(warps*n)*float64(p.D)) + 4*heads*keysPad
	tile := float64(p.T) * keys * 2 * row // every block streams its keys and values
	trips := float64(pagedBlockTrips)
	if n > 1 {
		// Each block's partial is written (to DRAM in the end, as L2
		// writes back what it evicts) and the last block of its pair reads
		// them all back (from L2 while the workspace fits half of it).
		partials := float64(blocks) * float64(G*(p.D+2)) * 4
		tile += 2 * partials
		bytes += partials
		if float64(ws) > float64(d.L2Bytes)/2 {
			bytes += partials
		}
		flops += 4 * heads * float64(n) * float64(p.D)
		trips += pagedSplitTrips
	}
	return Features{
		Bytes: bytes, Work: []Work{{FMA, "f32", flops}}, Blocks: max(blocks, 1), PerSM: per, WarpsPerBlock: warps, Launches: 1, TileBytes: tile,
		InFlight: 2 * PagedTile * float64(p.D) * size / pagedTileTrips,
		Trips:    trips,
	}, true
}

// pagedSchedules are the paged form's schedules: a block per token and
// key head of 2 to 32 warps sharing the keys, 32 a warp's step (the many
// warps for a step of few tokens over long contexts, whose blocks are
// few), and each of those with the keys split across 2 to 32 blocks
// (flash-decoding); pagedFeatures refuses those whose partials overflow
// static shared memory, and the splits where the pairs alone fill the
// device.
func pagedSchedules() []Schedule {
	var out []Schedule
	for _, t := range []int{64, 128, 256, 512, 1024} {
		out = append(out, Schedule{BM: 1, BN: PagedTile, Threads: t, SplitKeys: true})
		for n := 2; n <= PagedMaxSplits; n *= 2 {
			out = append(out, Schedule{BM: 1, BN: PagedTile, Threads: t, SplitKeys: true, KeySplits: n})
		}
	}
	return out
}
