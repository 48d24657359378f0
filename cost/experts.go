package cost

import (
	"fmt"
	"math"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// The mixture-of-experts forms. Route (a warp a row of router logits: its
// top k by k rounds of a warp's argmax, then their softmax) and the two
// halves of the experts (ir.OpExpertsUp, ir.OpExpertsDown), which one
// kernel prints: each (row, slot) multiplies a vector of the reduction's
// length (the row of x, or the slot's activations) by its expert's weight
// columns, 32 lanes of 16-byte loads across a block's columns (Layout),
// the block's warps splitting the reduction, Stages steps of loads in
// flight a lane. How many rows each expert gets is known only on the
// device, so a schedule says how blocks find their work:
//
//   - by slot (Grouped false, BM 1): a block per row and slot (and column
//     tile) looks its expert up in the row's weights; the grid follows the
//     rows present. An expert chosen by several rows is read once per row
//     from L2, once from DRAM when its rows run in one wave. Few rows, as
//     a decode step's, are this form's.
//   - by expert (Grouped): a block per expert and group of BM (up to 8) of the rows
//     choosing it, in the worst case's grid (every row choosing every
//     expert): a block scans its expert's column of the weights for its
//     group's rows and exits when the group is empty, so that the work and
//     bytes follow the experts chosen; each weight a block reads serves its
//     BM rows. A chunk's many tokens are this form's. The slots no expert
//     takes are written as zeros by BM-row blocks after the experts'.
//
// Both are priced at uniform routing: T rows choose E·(1 − (1 − k/E)^T)
// distinct experts on average (ExpectedExperts), each chosen by T·k over
// that many rows.

// RouteParts are a route kernel's shapes: R rows of E logits of dtype In,
// the top K chosen, Gating how they are weighted; Node is the op.
type RouteParts struct {
	Node    ir.Value
	R, E, K int64
	Gating  ir.Gating
	In      ir.DType
}

// RouteLane bounds the logits a lane of the route form keeps: E up to
// 32 · RouteLane.
const RouteLane = 16

// Route reads a route kernel body: the route op alone, over a kernel
// argument, its result the one output.
func Route(body *ir.Graph) (RouteParts, error) {
	v, n, err := loneOp(body, ir.OpRoute, "route")
	if err != nil {
		return RouteParts{}, err
	}
	in := body.Node(n.Inputs[0])
	p := RouteParts{Node: v, R: int64(in.Shape[0]), E: int64(in.Shape[1]), K: n.TopK, Gating: n.Gating, In: in.DType}
	if p.E > 32*RouteLane {
		return RouteParts{}, fmt.Errorf("a route over %d experts, more than %d", p.E, 32*RouteLane)
	}
	return p, nil
}

// loneOp checks that body is op alone over kernel arguments (and the
// values of also, a quantized weight's decoding), its result the one
// output, and returns it.
func loneOp(body *ir.Graph, op ir.Op, what string, also ...ir.Value) (ir.Value, *ir.Node, error) {
	if len(body.Outputs) != 1 {
		return 0, nil, fmt.Errorf("a %s kernel with %d outputs (it writes the op's result only)", what, len(body.Outputs))
	}
	v := body.Outputs[0].Value
	n := body.Node(v)
	if n.Op != op {
		return 0, nil, fmt.Errorf("a %s kernel whose output is a %s", what, n.Op)
	}
	for i, m := range body.Nodes {
		if ir.Value(i) != v && m.Op != ir.OpInput && m.Op != ir.OpReshape && !slices.Contains(also, ir.Value(i)) {
			return 0, nil, fmt.Errorf("a %s in a %s kernel (it reads its operands as arguments, or reshapes of them)", m.Op, what)
		}
	}
	return v, n, nil
}

// ArgumentOf is the kernel argument operand v of a route or experts body
// reads: v itself, or the input under its reshapes (which keep the
// elements' order, so that the argument is indexed as v is).
func ArgumentOf(body *ir.Graph, v ir.Value) ir.Value {
	for body.Node(v).Op == ir.OpReshape {
		v = body.Node(v).Inputs[0]
	}
	return v
}

// ExpertsParts are the shapes of an experts_up or experts_down kernel
// body: R rows of K slots over E experts; the reduction of length Kd (H
// for up, I for down) into N output columns a slot (I, H), reading Read
// weight columns for them (2I, H); DType the operands' (the result's for
// up, f32 for down). Quant is the experts' weight's packing when it is
// quantized (experts_quant.go).
type ExpertsParts struct {
	Node        ir.Value
	Op          ir.Op
	R, K, E     int64
	Kd, N, Read int64
	DType       ir.DType
	Gating      ir.Gating
	Limit       float64
	ResultDType ir.DType
	Quant       ExpertsQuant
}

// Experts reads an experts_up or experts_down kernel body: the op alone
// over kernel arguments, its result the one output; its experts' weight
// may be a quantized one decoded where it is read (ExpertsQuant).
func Experts(body *ir.Graph) (ExpertsParts, error) {
	if len(body.Outputs) != 1 {
		return ExpertsParts{}, fmt.Errorf("an experts kernel with %d outputs", len(body.Outputs))
	}
	on := body.Node(body.Outputs[0].Value)
	op := on.Op
	if op != ir.OpExpertsUp && op != ir.OpExpertsDown {
		return ExpertsParts{}, fmt.Errorf("an experts kernel whose output is a %s", op)
	}
	q, err := expertsQuant(body, on)
	if err != nil {
		return ExpertsParts{}, fmt.Errorf("%s: %w", op, err)
	}
	v, n, err := loneOp(body, op, op.String(), q.decoding()...)
	if err != nil {
		return ExpertsParts{}, err
	}
	in := func(k int) ir.Shape { return body.Node(n.Inputs[k]).Shape }
	p := ExpertsParts{Node: v, Op: op, R: int64(in(0)[0]), K: n.TopK, E: int64(in(1)[1]), DType: body.Node(n.Inputs[0]).DType,
		Gating: n.Gating, Limit: n.Limit, ResultDType: n.DType, Quant: q}
	if op == ir.OpExpertsUp {
		p.Kd, p.N, p.Read = int64(in(0)[1]), int64(in(2)[2])/2, int64(in(2)[2])
	} else {
		p.Kd, p.N, p.Read = int64(in(0)[2]), int64(in(2)[2]), int64(in(2)[2])
	}
	if err := p.Quant.check(p); err != nil {
		return ExpertsParts{}, fmt.Errorf("%s: %w", op, err)
	}
	return p, nil
}

// ExpectedExperts is the distinct experts rows rows choose, k each of e,
// under uniform routing: e · (1 − (1 − k/e)^rows).
func ExpectedExperts(e, k, rows int64) float64 {
	if e <= 0 || rows <= 0 {
		return 0
	}
	return float64(e) * (1 - math.Pow(1-float64(k)/float64(e), float64(rows)))
}

// ExpertsLayout is how a lane of the experts form reads its weight
// columns: L vectors of V elements a reduction step (16 bytes each where
// the columns allow, else single elements), giving P output columns; a
// block's warps split the reduction, so its output tile is 32 P columns.
type ExpertsLayout struct{ V, L, P int }

// Layout is the lane layout of the experts form for p: down reads V
// columns for V outputs; up with SwiGLU a gate and an up vector for V
// outputs; up with the clamped SwiGLU V interleaved columns for V/2
// outputs (a gate and an up element when V is 1).
func (p ExpertsParts) Layout() ExpertsLayout {
	V := 16 / p.DType.Size()
	if p.Read%int64(V) != 0 || (p.Op == ir.OpExpertsUp && p.Gating == ir.GatingSwiGLU && p.N%int64(V) != 0) {
		V = 1
	}
	switch {
	case p.Op == ir.OpExpertsDown:
		return ExpertsLayout{V: V, L: 1, P: V}
	case p.Gating == ir.GatingSwiGLU:
		return ExpertsLayout{V: V, L: 2, P: V}
	case V == 1:
		return ExpertsLayout{V: 1, L: 2, P: 1}
	}
	return ExpertsLayout{V: V, L: 1, P: V / 2}
}

// ExpertsChunk is the reduction's elements a block of the experts form
// stages in shared memory at a time for its bm rows (f32): the whole
// vector when 16 KiB hold it, else chunks of a multiple of 32.
func ExpertsChunk(kd int64, bm int) int64 {
	most := int64(16<<10) / (4 * int64(max(bm, 1)))
	if kd <= most {
		return kd
	}
	return max(32, most/32*32)
}

// ExpertsShared is the static shared memory of the experts form: the
// staged chunk of the rows' vectors, each warp's partial sums of its share
// of the reduction (which the block adds up at the end), the rows' indices
// and slots, and by expert the threads' counts of rows (bounded by 16
// bytes a row and 4 a thread, with 16 more for the scalars).
func ExpertsShared(p ExpertsParts, s Schedule) int {
	l := p.Layout()
	return int(ExpertsChunk(p.Kd, s.BM))*s.BM*4 + (s.Threads/32)*s.BM*32*l.L*l.V*4 + 16*s.BM + 4*s.Threads + 16
}

// expertsMaxAccumulators bounds a lane's accumulators (rows × vectors ×
// elements), so that they stay in registers.
const expertsMaxAccumulators = 64

// ExpertsFits says whether schedule s is one the experts form prints for
// p: a warp to 8 warps splitting the reduction, 1 to 8 steps of loads in
// flight (Stages), BN the layout's 32 P columns, one row by slot or up to
// 8 by expert, the accumulators in registers and the shared memory within
// StaticShared.
func ExpertsFits(p ExpertsParts, s Schedule) bool {
	if p.Quant.Quantized() {
		return expertsQuantFits(p, s)
	}
	l := p.Layout()
	return s.Threads%32 == 0 && s.Threads >= 32 && s.Threads <= 256 && s.Stages >= 1 && s.Stages <= 8 && s.BN == 32*l.P &&
		s.BM >= 1 && s.BM <= 8 && (s.Grouped || s.BM == 1) && s.BM*l.L*l.V <= expertsMaxAccumulators &&
		ExpertsShared(p, s) <= StaticShared && ExpertsWorkBlocks(p, s) <= math.MaxInt32 && (p.N+int64(s.BN)-1)/int64(s.BN) <= 65535 && s.BK == 0 && s.Rows == 0 && !s.Tensor && !s.GEMV && s.TM == 0 && s.Warp == 0 && !s.SplitKeys && s.KeySplits == 0
}

// expertsSchedules are the experts forms' schedules: by slot and by
// expert (1 to 8 rows), 1 to 8 warps, 2 to 8 steps of loads in flight;
// ExpertsFits keeps those that fit.
func (k *kernelForm) expertsSchedules() []Schedule {
	p, err := Experts(k.body)
	if err != nil {
		return nil
	}
	if p.Quant.Quantized() {
		return expertsQuantSchedules(p)
	}
	bn := 32 * p.Layout().P
	var out []Schedule
	for _, grouped := range []bool{false, true} {
		for _, bm := range []int{1, 2, 4, 8} {
			for _, t := range []int{32, 64, 128, 256} {
				for _, u := range []int{2, 4, 8} {
					s := Schedule{BM: bm, BN: bn, Threads: t, Stages: u, Grouped: grouped}
					if ExpertsFits(p, s) {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// ExpertsWorkBlocks is the experts form's grid along x (its column tiles
// go along y): a block a row's slot, or by expert a block for each
// expert's groups of BM rows and for the zero-filling of each BM rows.
func ExpertsWorkBlocks(p ExpertsParts, s Schedule) int64 {
	if s.Grouped {
		return (p.E + 1) * ExpertsGroupBlocks(p.R, s.BM)
	}
	return p.R * p.K
}

// ExpertsGroupBlocks is the rows of the zero-filling blocks of the by
// expert form: each writes the unused slots of this many rows.
func ExpertsGroupBlocks(r int64, bm int) int64 { return (r + int64(bm) - 1) / int64(bm) }

// expertsFeatures prices an experts form under schedule s (see the forms'
// comment above): each lane keeps Stages steps of its L 16-byte loads in
// flight.
func (k *kernelForm) expertsFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	p, err := Experts(k.body)
	if err != nil || !ExpertsFits(p, s) {
		return Features{}, false
	}
	if p.Quant.Quantized() {
		return k.expertsQuantFeatures(p, s, d, out)
	}
	l := p.Layout()
	per := k.occupancy(d, s.Threads, ExpertsShared(p, s), 40+s.BM*l.L*l.V+s.Stages*l.L*4)
	if per == 0 {
		return Features{}, false
	}
	size := float64(p.DType.Size())
	t := p.traffic(s, d, per, p.ExpertBytes())
	return Features{
		Bytes: t.bytes + out, Work: []Work{{FMA, "f32", t.flops}}, Blocks: t.blocks, PerSM: per,
		WarpsPerBlock: s.Threads / 32, Launches: 1, TileBytes: t.tile,
		InFlight: 32 * float64(s.Stages*l.L*l.V) * size,
		Trips:    t.trips,
	}, true
}

// expertsTraffic is what both lane layouts of the experts form move and
// compute under a schedule: the DRAM bytes but the output's (the chosen
// experts' weights and biases, the rows' vectors, the routing weights),
// the blocks that find work, the bytes they load from L2, the arithmetic
// (the dot products and the by-expert scans) and the round trips outside
// the main loop.
type expertsTraffic struct {
	bytes, tile, flops, trips float64
	blocks                    int
}

// traffic prices the experts form's work finding and memory for p under
// s, an expert's weight being expertBytes (packed, for a quantized one)
// and per blocks resident a multiprocessor.
func (p ExpertsParts) traffic(s Schedule, d *Device, per int, expertBytes float64) expertsTraffic {
	size := float64(p.DType.Size())
	slots := float64(p.R * p.K)
	experts := ExpectedExperts(p.E, p.K, p.R)
	perExpert := slots / math.Max(experts, 1) // rows each chosen expert serves
	tiles := ceilDiv(int(p.N), s.BN)
	vec := float64(p.Kd) * size // a row's (or slot's) vector
	in := float64(p.R*p.E)*4 + float64(p.R)*vec
	if p.Op == ir.OpExpertsDown {
		in = float64(p.R*p.E)*4 + slots*vec
	}
	bias := experts * float64(p.Read) * size // the chosen experts' biases
	t := expertsTraffic{flops: 2 * slots * float64(p.Kd*p.Read)}
	var weights float64
	t.trips = 3.0 + float64(ceilDiv(int(p.Kd), int(ExpertsChunk(p.Kd, s.BM)))) // the routing weights, the expert, each chunk's staging, the warps' sum
	if !s.Grouped {
		t.blocks = tiles * int(slots)
		t.tile = slots*expertBytes + float64(t.blocks)*(vec+float64(p.E)*4)
		// Each expert's rows read it once from DRAM when they run in one
		// wave, or L2 keeps it.
		concurrent := max(1, d.SMs*per/max(tiles, 1))
		weights = rereads(experts*expertBytes, int(math.Ceil(perExpert)), concurrent, d)
	} else {
		groups := math.Ceil(perExpert / float64(s.BM))
		t.blocks = tiles * int(math.Ceil(experts*groups))
		weights = experts * groups * expertBytes
		if experts*expertBytes <= float64(d.L2Bytes)/2 {
			weights = experts * expertBytes
		}
		// Every block of the worst case's grid scans its expert's column
		// of the routing weights, the empty ones too.
		grid := float64(tiles) * float64(p.E) * float64(ExpertsGroupBlocks(p.R, s.BM))
		t.tile = experts*groups*expertBytes + float64(t.blocks)*float64(s.BM)*vec + grid*float64(p.R)*4
		t.flops += grid * float64(p.R)
		t.trips++ // the scan's prefix over the block's threads
	}
	t.blocks = max(t.blocks, 1)
	t.bytes = in + bias + weights
	return t
}

// routeSchedules are the route form's: a warp a row, 1 to 8 rows a block.
func routeSchedules() []Schedule {
	var out []Schedule
	for _, r := range []int{1, 2, 4, 8} {
		out = append(out, Schedule{Threads: 32 * r, Rows: r})
	}
	return out
}

// routeFeatures prices the route form: each row's logits read once, its
// weights written, k rounds of a warp's argmax (a shuffle tree each) and
// an exponential a logit.
func (k *kernelForm) routeFeatures(s Schedule, d *Device, out float64) (Features, bool) {
	p, err := Route(k.body)
	if err != nil || s.Rows < 1 || s.Threads != 32*s.Rows || s.BM != 0 || s.BN != 0 || s.Grouped || s.Tensor || s.GEMV || s.SplitKeys || s.KeySplits != 0 {
		return Features{}, false
	}
	per := k.occupancy(d, s.Threads, 0, 32+2*RouteLane)
	if per == 0 {
		return Features{}, false
	}
	lane := float64(ceilDiv(int(p.E), 32))
	flops := float64(p.R) * 32 * (float64(p.K)*(lane+2*5) + 5*lane)
	return Features{
		Bytes: float64(p.R*p.E)*float64(p.In.Size()) + out, Work: []Work{{FMA, "f32", flops}},
		Blocks: max(1, ceilDiv(int(p.R), s.Rows)), PerSM: per, WarpsPerBlock: s.Rows, Launches: 1,
		Trips: 2,
	}, true
}
