package cost

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/ir"
)

// Schedule is how a kernel runs: its tiles and threads. It is not part of
// a kernel's identity; a kernel costs its best schedule. The schedules a
// form offers (Model.Ranked) are exactly the ones the CUDA printer
// implements for it, so that the schedule priced is the schedule printed.
type Schedule struct {
	// BM and BN are a matmul's output tile (rows, columns), BK its step
	// along the reduction; for attention BM is the query rows of a block
	// and BN the keys it takes per step. Elementwise and row kernels use
	// neither.
	BM, BN, BK int
	// Threads per block.
	Threads int
	// Stages of the shared-memory pipeline (operand tiles in flight).
	Stages int
	// Tensor says matmuls run on tensor cores (mma.sync); it is offered
	// for f16 and bf16 operands only, so that f32 results keep f32
	// arithmetic.
	Tensor bool
	// Rows is a row kernel's rows per block, a warp each; 0 means a block
	// per row. Short rows leave most of a block idle, so they go a warp
	// each.
	Rows int
	// TM is the rows of C each thread of an f32 matmul accumulates (4
	// columns each); 0 means 4. With 1, a small tile has four times the
	// threads streaming its operands.
	TM int
	// Warp is a tensor-core matmul's warp tile side: 0 for the default
	// 32x32 (16x32 with BM 16), 64 for 64x64 patches (half the fragment
	// loads from shared memory per mma, four times the accumulators).
	Warp int
	// GEMV says a matmul of few rows (a decode step's) runs as a
	// matrix-vector kernel: BM is all of its rows, BN the columns a block
	// owns, each warp streaming weight rows with 16-byte loads, Stages of
	// them in flight per lane and column (gemv.go).
	GEMV bool
	// SplitKeys says a one-query-row attention block (BM 1) shares the
	// keys among its warps: each warp takes its own tiles of BN keys with
	// its own running softmax, and the block combines the warps' partial
	// results at the end, so that no warp waits while another scores a
	// tile (a decode step has one query row a head and few heads).
	SplitKeys bool
	// KeySplits, when set, selects attention's flash-decoding layout
	// (attention_decode.go): a block per key head of a batch and per
	// KeySplits-th of the keys, every query row of the head's group in
	// it, the blocks' partial softmaxes combined in the same launch. BN is
	// then the keys a warp takes a step. A decode step has one query row a
	// head: splitting the keys is what fills the multiprocessors.
	KeySplits int
	// Grouped says an experts kernel's blocks each take an expert and a
	// group of BM of the rows choosing it (experts.go), in a grid sized
	// for the worst case; without it a block takes a row's slot.
	Grouped bool
}

// String is the schedule's canonical text, the tuning database's key.
func (s Schedule) String() string {
	var b strings.Builder
	if s.BM > 0 {
		fmt.Fprintf(&b, "bm=%d,bn=%d,", s.BM, s.BN)
		if s.BK > 0 {
			fmt.Fprintf(&b, "bk=%d,", s.BK)
		}
	}
	fmt.Fprintf(&b, "threads=%d", s.Threads)
	if s.Stages > 0 {
		fmt.Fprintf(&b, ",stages=%d", s.Stages)
	}
	if s.Rows > 0 {
		fmt.Fprintf(&b, ",rows=%d", s.Rows)
	}
	if s.Warp > 0 {
		fmt.Fprintf(&b, ",warp=%d", s.Warp)
	}
	if s.TM > 0 {
		fmt.Fprintf(&b, ",tm=%d", s.TM)
	}
	if s.Tensor {
		b.WriteString(",mma")
	}
	if s.GEMV {
		b.WriteString(",gemv")
	}
	if s.SplitKeys {
		b.WriteString(",splitkeys")
	}
	if s.KeySplits > 0 {
		fmt.Fprintf(&b, ",keysplits=%d", s.KeySplits)
	}
	if s.Grouped {
		b.WriteString(",grouped")
	}
	return b.String()
}

// Estimate is a kernel's cost: its best schedule, that schedule's features
// and time, and whether the time was measured rather than predicted.
type Estimate struct {
	Seconds  float64
	Schedule Schedule
	Features Features
	Measured bool
	// Bound names what bounds a predicted time (Bounds.Bound); "" for a
	// measured one.
	Bound string
}

// Measurements are measured kernel times, the tuning database's: a time
// for a kernel body (its canonical text), a schedule and a device, when one
// was measured on a GPU.
type Measurements interface {
	Measured(spec, schedule, device string) (seconds float64, ok bool)
}

// Model is the kernel cost model for one device: the features each
// schedule of a kernel implies, predicted with the device's factors, the
// best schedule winning; measured times override predictions. It caches
// by kernel body (bodies are interned, so a pointer is the body's
// identity) and is safe for concurrent use.
type Model struct {
	Device  *Device
	Factors Factors
	// Measurements, when set, override the prediction of every schedule
	// they have a time for.
	Measurements Measurements

	// at, when set, is the value every runtime position (a kernel's
	// position input: a decode step's past) is priced at, in place of the
	// average over the buckets of its range (AtPosition).
	at *int64
	// expect, when set, is the range the runtime positions are expected
	// in: they are priced on average over its geometric buckets (held to
	// each position's own range) rather than over their whole range.
	expect *[2]int64

	mu    sync.RWMutex
	cache map[*ir.Graph][]Estimate
}

// AtPosition returns a model like m that prices kernels whose work
// follows a runtime position (attention over a decode step's cache) at
// position p: the time of a program at one bucket of its symbol's range.
// It has its own cache; m is unchanged. A position outside the range a
// kernel's position can take is held to the range's ends.
func (m *Model) AtPosition(p int64) *Model {
	v := m.variant()
	v.at = &p
	return v
}

// InGraph returns a model like m that prices each launch as a node of a
// replayed CUDA graph (Device.LaunchCost(true)) rather than as a launch
// of its own: a serving step's run on the GPU runner, which replays a
// graph per bucket. A calibrated launch factor below the device's graph
// figure stands. It has its own cache; m is unchanged.
func (m *Model) InGraph() *Model {
	v := m.variant()
	v.Factors.Launch = min(v.Factors.Launch, m.Device.LaunchCost(true))
	return v
}

// variant is a model like m with a cache of its own, for a model that
// prices the same kernels differently.
func (m *Model) variant() *Model {
	return &Model{Device: m.Device, Factors: m.Factors, Measurements: m.Measurements, at: m.at, expect: m.expect, cache: map[*ir.Graph][]Estimate{}}
}

// Expecting returns a model like m that prices kernels whose work follows
// a runtime position as if the position ran over [lo, hi] (the user's
// expectation of a deployment, --expect past=LO..HI): on average over
// that range's geometric buckets. It has its own cache; m is unchanged.
func (m *Model) Expecting(lo, hi int64) *Model {
	v := m.variant()
	v.expect = &[2]int64{lo, hi}
	return v
}

// Expected is the range Expecting set, if any.
func (m *Model) Expected() (lo, hi int64, ok bool) {
	if m.expect == nil {
		return 0, 0, false
	}
	return m.expect[0], m.expect[1], true
}

// analyze is the package's analyze with the model's position applied.
func (m *Model) analyze(body *ir.Graph) (*kernelForm, error) {
	k, err := analyze(body)
	if err != nil {
		return k, err
	}
	if k.form == FormPagedAttention {
		// A step's cached contexts stand where a decode step's position
		// does.
		switch {
		case m.at != nil:
			k.pagedCtx = float64(max(*m.at, 0))
		case m.expect != nil:
			k.pagedCtx = float64(max(m.expect[0]+m.expect[1], 0)) / 2
		}
	}
	if k.keys == nil {
		return k, nil
	}
	switch {
	case m.at != nil:
		k.keys.pin(*m.at)
	case m.expect != nil:
		k.keys.expectIn(m.expect[0], m.expect[1])
	}
	return k, nil
}

// NewModel is the model of device d with factors f.
func NewModel(d *Device, f Factors) *Model {
	return &Model{Device: d, Factors: f, cache: map[*ir.Graph][]Estimate{}}
}

// Kernel returns the cost of a kernel body (a canonical kernel SPEC: an ir
// graph over inputs $0..$n-1) at its best schedule.
func (m *Model) Kernel(body *ir.Graph) (Estimate, error) {
	r, err := m.Ranked(body)
	if err != nil {
		return Estimate{}, err
	}
	return r[0], nil
}

// Ranked returns every schedule of a kernel body that fits the device,
// fastest first (ties broken by the schedule's text, so the order is
// deterministic): the first is the one lowering prints, the next few are
// the candidates worth measuring. The slice is shared; callers must not
// modify it.
func (m *Model) Ranked(body *ir.Graph) ([]Estimate, error) {
	m.mu.RLock()
	r, ok := m.cache[body]
	m.mu.RUnlock()
	if ok {
		return r, nil
	}
	r, err := m.rank(body)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.cache[body] = r
	m.mu.Unlock()
	return r, nil
}

func (m *Model) rank(body *ir.Graph) ([]Estimate, error) {
	k, err := m.analyze(body)
	if err != nil {
		return nil, err
	}
	var spec string
	if m.Measurements != nil {
		spec = body.String()
	}
	var out []Estimate
	for _, s := range k.schedules(m.Device) {
		x, ok := k.features(s, m.Device)
		if !ok {
			continue
		}
		e := Estimate{Schedule: s, Features: x}
		if t, ok := m.measured(spec, s); ok {
			e.Seconds, e.Measured = t, true
		} else if err = m.predict(&e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cost of kernel %s on %s: no schedule fits the device", k.describe(), m.Device.Name)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Seconds != out[j].Seconds {
			return out[i].Seconds < out[j].Seconds
		}
		return out[i].Schedule.String() < out[j].Schedule.String()
	})
	return out, nil
}

// predict sets e's predicted time and bound from its features.
func (m *Model) predict(e *Estimate) error {
	b, err := Explain(m.Device, m.Factors, e.Features)
	if err != nil {
		return err
	}
	e.Seconds, e.Bound = b.Seconds(), b.Bound()
	return nil
}

func (m *Model) measured(spec string, s Schedule) (float64, bool) {
	if m.Measurements == nil {
		return 0, false
	}
	return m.Measurements.Measured(spec, s.String(), m.Device.Name)
}

// kernelForm is what the model needs of a body: its matmuls, and for every
// value which matmul operands it flows into.
type kernelForm struct {
	body    *ir.Graph
	form    Form
	matmuls []ir.Value
	// slots[v] has bit 2i+j set when value v flows into operand j of
	// matmul i (before reaching any other matmul's output).
	slots []uint8
	// rowLen is the longest row a last-axis reduction, softmax or norm
	// runs along (0 when none does: reductions along other axes are
	// printed as loops per output element).
	rowLen int
	// valueLen is attention's value row length (its output columns).
	valueLen int
	// keys is what an attention's mask says about the keys each block
	// sees, at a static bound or averaged over a runtime position's range
	// (nil when the mask bounds none: every key is priced).
	keys *expectedKeys
	// pagedCtx is the cached context length per sequence a paged
	// attention is priced at, or -1 for the form's assumption
	// (pagedContext).
	pagedCtx float64
	// res, when set, is the compiler's report for the schedule priced,
	// used in place of the model's register and shared-memory guesses.
	res *Resources
	// need is what the outputs demand of every value (demands), traced
	// when readBytes first asks.
	need []box
	// stats is TensorRowStats of body, -1 until rowStats counts it.
	stats int
	// gather is a matmul's gathered epilogue (gather.go), nil when the
	// epilogue keeps every element in place and writes no window: only
	// matrix-vector schedules whose blocks hold its column groups print
	// it.
	gather *Gathered
}

// Resources are what the compiler reports of one compiled kernel: its
// registers per thread and static shared memory per block, and the
// instructions one iteration of its main loop issues per warp (read from
// the PTX; 0 when unknown), which bound the kernel by instruction issue.
type Resources struct {
	Registers, Shared int
	LoopInstructions  int
	// Loop is one iteration of the main loop's instructions per warp by
	// pipe (cuda.LoopMix; zero when unknown): integer addressing in it
	// bounds the kernel by the integer pipe's rate.
	Loop IssueMix
}

// Resourced prices one schedule of a kernel body with the compiler's
// report of the kernel printed in it, so occupancy follows the registers
// and shared memory it really uses rather than the model's guesses. A
// measured time still overrides the prediction.
func (m *Model) Resourced(body *ir.Graph, s Schedule, r Resources) (Estimate, error) {
	k, err := m.analyze(body)
	if err != nil {
		return Estimate{}, err
	}
	k.res = &r
	x, ok := k.features(s, m.Device)
	if !ok {
		return Estimate{}, fmt.Errorf("cost of kernel %s on %s: schedule %s with %d registers and %d bytes of shared memory does not fit", k.describe(), m.Device.Name, s, r.Registers, r.Shared)
	}
	e := Estimate{Schedule: s, Features: x}
	var spec string
	if m.Measurements != nil {
		spec = body.String()
	}
	if t, ok := m.measured(spec, s); ok {
		e.Seconds, e.Measured = t, true
	} else if err = m.predict(&e); err != nil {
		return Estimate{}, err
	}
	return e, nil
}

// occupancy is the blocks of this kernel one multiprocessor holds under a
// schedule of threads whose blocks take shared bytes and regs registers a
// thread by the model's reckoning, or by the compiler's when it reported.
func (k *kernelForm) occupancy(d *Device, threads, shared, regs int) int {
	if k.res != nil {
		shared, regs = k.res.Shared, k.res.Registers
	}
	return occupancy(d, threads, shared, regs)
}

// analyze reads what the model needs of a body in the form the printer
// prints it in (FormOf, which refuses a body no form prints): an attention
// op is priced as its eager form, two matmuls, which the printer prints.
func analyze(body *ir.Graph) (*kernelForm, error) {
	form, err := FormOf(body)
	if err != nil {
		return nil, fmt.Errorf("cost: kernel body %s: no kernel form computes it: %w", body.Name, err)
	}
	raw := body
	for _, n := range body.Nodes {
		if n.Op == ir.OpAttention {
			if body, err = Decompose(body); err != nil {
				return nil, fmt.Errorf("cost: %w", err)
			}
			break
		}
	}
	k := &kernelForm{body: body, form: form, slots: make([]uint8, len(body.Nodes)), pagedCtx: -1, stats: -1}
	for i, n := range body.Nodes {
		switch {
		case n.Op == ir.OpMatMul:
			k.matmuls = append(k.matmuls, ir.Value(i))
		case form == FormRow && rowOp(body, n):
			// A reduction the row form does not compute (RowReduces), or
			// a softmax along another axis, is a loop per output element.
			in := body.Node(n.Inputs[0]).Shape
			k.rowLen = max(k.rowLen, int(in[len(in)-1]))
		}
	}
	if form == FormMatMul && len(k.matmuls) == 1 && (epilogueStructure(body, k.matmuls[0], "matmul") != nil || WritesWindows(body)) {
		if k.gather, err = GatheredEpilogue(body, k.matmuls[0]); err != nil {
			return nil, fmt.Errorf("cost: kernel body %s: %w", body.Name, err)
		}
	}
	if len(k.matmuls) == 2 {
		v := body.Node(body.Node(k.matmuls[1]).Inputs[1]).Shape
		k.valueLen = int(v[len(v)-1])
	}
	if form == FormAttention {
		k.keys = runtimeKeys(raw, body)
	}
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		n := body.Nodes[i]
		for j, in := range n.Inputs {
			k.slots[in] |= k.slots[i]
			for mi, mm := range k.matmuls {
				if mm == ir.Value(i) {
					k.slots[in] |= 1 << (2*mi + j)
				}
			}
		}
	}
	return k, nil
}

// describe names the form in messages.
func (k *kernelForm) describe() string { return k.form.String() }

func numel(s ir.Shape) float64 { return float64(s.NumElements()) }

func (k *kernelForm) bytesOf(v ir.Value) float64 {
	n := k.body.Node(v)
	return numel(n.Shape) * float64(n.DType.Size())
}

// readBytes is the DRAM traffic of reading input v once: what the
// kernel's outputs demand of it (demands: an input read through a slice
// is read where the slice looks), and for a table read only through
// gathers (an embedding) just the rows they take, since a decode step's
// gather reads one row of a table of gigabytes.
func (k *kernelForm) readBytes(v ir.Value) float64 {
	if k.need == nil {
		k.need = demands(k.body)
	}
	return math.Min(k.gatheredBytes(v), k.need[v].volume()*float64(k.body.Node(v).DType.Size()))
}

// gatheredBytes is readBytes' gather rule alone.
func (k *kernelForm) gatheredBytes(v ir.Value) float64 {
	full := k.bytesOf(v)
	size := float64(k.body.Node(v).DType.Size())
	gathered := 0.0
	for _, n := range k.body.Nodes {
		for j, in := range n.Inputs {
			if in != v {
				continue
			}
			if n.Op != ir.OpGather || j != 0 {
				return full
			}
			gathered += numel(n.Shape) * size
		}
	}
	if gathered == 0 {
		return full
	}
	return math.Min(full, gathered)
}

// opFLOPs is the arithmetic of one non-matmul node, in FMA-class
// operations: one per element for simple ops, more for the ones the
// special function unit or several instructions compute.
func opFLOPs(body *ir.Graph, n *ir.Node) float64 {
	switch c := n.Op.Class(); {
	case n.Op == ir.OpScatter:
		// An element finds its update slice, if any, by a pass over the
		// index vector (the naive form; a state written in place is
		// priced as its rows alone, rules.inPlaceRows).
		return numel(n.Shape) * float64(body.Node(n.Inputs[2]).Shape.NumElements())
	case c == ir.ClassLeaf, c == ir.ClassView, c == ir.ClassMove, n.Op == ir.OpMatMul:
		return 0
	case n.Op == ir.OpAttention:
		q, k := body.Node(n.Inputs[0]).Shape, body.Node(n.Inputs[1]).Shape
		return 4 * numel(q) * float64(k[len(k)-2])
	case c == ir.ClassReduce:
		return numel(body.Node(n.Inputs[0]).Shape)
	case n.Op == ir.OpSoftmax, n.Op == ir.OpRMSNorm, n.Op == ir.OpLayerNorm:
		return 8 * numel(n.Shape)
	case n.Op == ir.OpDequant:
		return dequantOps * numel(n.Shape)
	}
	switch n.Op {
	case ir.OpExp, ir.OpLog, ir.OpSqrt, ir.OpRsqrt, ir.OpRecip, ir.OpDiv, ir.OpSigmoid, ir.OpTanh, ir.OpErf:
		return 4 * numel(n.Shape)
	case ir.OpPow:
		return 8 * numel(n.Shape)
	}
	return numel(n.Shape)
}

// tensorDType is the peak a matmul's operands use: f16 and bf16 on tensor
// cores when the schedule asks, everything else on FMA in f32.
func tensorDType(dt ir.DType, tensor bool) (InstrClass, string) {
	if tensor && (dt == ir.F16 || dt == ir.BF16) {
		return MMA, dt.String()
	}
	return FMA, "f32"
}

// schedules lists a kernel's schedules: the ones the CUDA printer
// implements for its form (package cuda prints each of them; its tests
// print and emulate every schedule listed here).
//   - elementwise: a grid-stride loop, 128, 256 or 512 threads a block;
//   - row: a block per row of 64 to 512 threads (no more than the row's
//     length rounds up to), or for rows up to 1024 long a warp per row,
//     4 or 8 rows a block;
//   - matmul, f32: BMxBN tiles (16 to 128 by 32 to 128, up to 512
//     threads) of 4x4 outputs a thread, or for tiles of 16 or 32 rows
//     1x4, K steps of 16, single or double buffered;
//   - matmul, f16 and bf16: tensor-core tiles, a warp per 32x32
//     (or 16x32) patch, 1 to 16 warps, or per 64x64 patch, K steps of
//     32, two or three stages (as many as static shared memory holds);
//   - matmul of at most GEMVRows rows against a plain weight: the
//     matrix-vector kernel (gemv.go), 16-byte weight loads, 1 to 8 in
//     flight a thread;
//   - attention: a block per query row, keys 32 at a time, 64 to 256
//     threads sharing the value columns, or 128 to 1024 threads whose
//     warps share the keys (SplitKeys); or 4 to 16 query rows a block
//     in f32, a warp per 1 to 4 of them; or for f16 and bf16 tensor cores,
//     a warp per 16 query rows, keys 32 or 64 a tile; or, where keys and
//     values are inputs read in 16-byte rows, flash-decoding: a block
//     per key head and split of the keys, 1 to 32 splits;
//   - paged attention: a block per token and key head, 2 to 32 warps
//     sharing its keys (paged.go).
func (k *kernelForm) schedules(d *Device) []Schedule {
	var out []Schedule
	switch k.form {
	case FormElementwise:
		for _, t := range []int{128, 256, 512} {
			out = append(out, Schedule{Threads: t})
		}
	case FormRow:
		for _, t := range []int{64, 128, 256, 512} {
			if t == 64 || t <= (k.rowLen+31)/32*32 {
				out = append(out, Schedule{Threads: t})
			}
		}
		if k.rowLen <= 1024 {
			out = append(out, Schedule{Threads: 128, Rows: 4}, Schedule{Threads: 256, Rows: 8})
		}
	case FormMatMul:
		mm := k.body.Node(k.matmuls[0])
		if k.gather != nil {
			out = append(out, k.gatheredSchedules(k.gather)...)
			break
		}
		if dt := k.body.Node(mm.Inputs[0]).DType; dt == ir.F32 {
			for _, bm := range []int{16, 32, 64, 128} {
				for _, bn := range []int{32, 64, 128} {
					for _, stages := range []int{1, 2} {
						if t := bm / 4 * bn / 4; t <= 512 {
							out = append(out, Schedule{BM: bm, BN: bn, BK: 16, Threads: t, Stages: stages})
						}
						if t := bm * bn / 4; bm <= 32 && t <= 512 {
							out = append(out, Schedule{BM: bm, BN: bn, BK: 16, Threads: t, Stages: stages, TM: 1})
						}
					}
				}
			}
		} else if dt == ir.F16 || dt == ir.BF16 {
			for _, bm := range []int{16, 32, 64, 128} {
				for _, bn := range []int{32, 64, 128, 256} {
					warps := max(bm/32, 1) * bn / 32
					for _, stages := range []int{2, 3, 4} {
						s := Schedule{BM: bm, BN: bn, BK: 32, Threads: 32 * warps, Stages: stages, Tensor: true}
						// 32x32 warp patches up to 128 columns (256 would
						// take 16 warps of a 64-row tile, 32 of a 128-row
						// one).
						if bn <= 128 && tensorShared(k.rowStats(), s) <= StaticShared {
							out = append(out, s)
						}
						// 64x64 warp patches where the tile holds them:
						// 128x256 is 8 warps.
						if bm%64 == 0 && bn%64 == 0 {
							s.Warp, s.Threads = 64, 32*(bm/64)*(bn/64)
							if tensorShared(k.rowStats(), s) <= StaticShared {
								out = append(out, s)
							}
						}
					}
				}
			}
		}
		out = append(out, k.gemvSchedules()...)
	case FormAttention:
		// A block per query row (the default, and decode's layout).
		for _, t := range []int{64, 128, 256} {
			if k.valueLen <= 4*t {
				out = append(out, Schedule{BM: 1, BN: 32, Threads: t})
			}
		}
		// A block per query row with the keys shared among its warps;
		// attentionFeatures refuses what does not fit.
		for _, t := range []int{128, 256, 512, 1024} {
			out = append(out, Schedule{BM: 1, BN: 32, Threads: t, SplitKeys: true})
		}
		// Flash-decoding (attention_decode.go), where the keys and values
		// are inputs read in 16-byte rows.
		out = append(out, k.decodeSchedules()...)
		// BM query rows a block in f32, BM/warps of them a warp;
		// attentionFeatures refuses those the shapes do not fit.
		for _, r := range [][2]int{{4, 128}, {8, 128}, {8, 256}, {16, 128}, {16, 256}} {
			out = append(out, Schedule{BM: r[0], BN: 32, Threads: r[1]})
		}
		// Tensor cores, a warp per 16 query rows, when q, k, v and the
		// probabilities are all f16 or all bf16 (the printer rounds
		// nothing the graph keeps wider but a computed q or k).
		qk, pv := k.body.Node(k.matmuls[0]), k.body.Node(k.matmuls[1])
		dt := k.body.Node(qk.Inputs[0]).DType
		half := dt == ir.F16 || dt == ir.BF16
		for _, v := range []ir.Value{qk.Inputs[1], pv.Inputs[0], pv.Inputs[1]} {
			half = half && k.body.Node(v).DType == dt
		}
		if half {
			for _, r := range [][2]int{{16, 32}, {64, 32}, {64, 64}, {128, 64}} {
				out = append(out, Schedule{BM: r[0], BN: r[1], Threads: 2 * r[0], Tensor: true})
			}
		}
	case FormPagedAttention:
		out = pagedSchedules()
	case FormRoute:
		out = routeSchedules()
	case FormExperts:
		out = k.expertsSchedules()
	}
	return out
}

// rereads is the DRAM traffic of an operand of size bytes that times
// tiles read, when concurrent of them run in one wave and share what they
// read through L2: once if L2 keeps the operand (half of L2, the rest
// being the kernel's other traffic), else once per group of tiles a wave
// runs together.
func rereads(bytes float64, times, concurrent int, d *Device) float64 {
	if times <= 1 || bytes <= float64(d.L2Bytes)/2 {
		return bytes
	}
	return bytes * float64(ceilDiv(times, max(concurrent, 1)))
}

// waveTiles is the rectangle of output tiles that run together and share
// operand tiles through L2, as a grid rasterized in square groups does:
// about sqrt(SMs) tiles each way (one block per multiprocessor, the least
// a wave holds), bounded by the grid. It depends on the tile counts only,
// so that larger tiles never predict more re-reads.
func waveTiles(tilesM, tilesN int, d *Device) (wM, wN int) {
	side := int(math.Ceil(math.Sqrt(float64(d.SMs))))
	wN = max(1, min(tilesN, side))
	wM = max(1, min(tilesM, ceilDiv(d.SMs, wN)))
	return wM, wN
}

// occupancy is the blocks one multiprocessor holds, or 0 when one block
// does not fit.
func occupancy(d *Device, threads int, shared, regsPerThread int) int {
	regs := regsPerThread * threads
	if shared > d.SharedPerBlock || regs > d.RegistersPerBlock || threads > d.MaxThreadsPerSM {
		return 0
	}
	per := min(d.MaxBlocksPerSM, d.MaxThreadsPerSM/threads)
	if shared > 0 {
		per = min(per, d.SharedPerSM/shared)
	}
	if regs > 0 {
		per = min(per, d.RegistersPerSM/regs)
	}
	return per
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// features derives a kernel's features under a schedule; false when the
// schedule does not fit the device or the kernel.
func (k *kernelForm) features(s Schedule, d *Device) (Features, bool) {
	body := k.body
	var out float64
	for _, o := range body.Outputs {
		out += k.bytesOf(o.Value)
	}
	switch k.form {
	case FormElementwise, FormRow:
		var in, flops, elems float64
		for _, v := range body.Inputs() {
			in += k.readBytes(v)
		}
		for _, n := range body.Nodes {
			flops += opFLOPs(body, n)
			elems = math.Max(elems, numel(n.Shape))
		}
		per := k.occupancy(d, s.Threads, 0, 32)
		if per == 0 {
			return Features{}, false
		}
		blocks := max(1, int(math.Ceil(elems/float64(s.Threads*4))))
		if k.form == FormRow {
			// A row goes to a block or a warp; lanes past the row's end
			// idle through every pass, which the arithmetic pays for.
			rowLen := max(k.rowLen, 1)
			rows := int(math.Ceil(elems / float64(rowLen)))
			lanes := s.Threads
			if s.Rows > 0 {
				lanes = s.Threads / s.Rows
				blocks = ceilDiv(rows, s.Rows)
			} else {
				blocks = min(rows, maxRowBlocks)
			}
			passes := ceilDiv(rowLen, lanes)
			flops *= float64(passes*lanes) / float64(rowLen)
			blocks = max(blocks, 1)
		}
		return Features{Bytes: in + out, Work: []Work{{FMA, "f32", flops}}, Blocks: blocks, PerSM: per, WarpsPerBlock: s.Threads / 32, Launches: 1}, true
	case FormMatMul:
		if s.GEMV {
			if k.gather != nil && !k.gather.Map.Fits(s.BN, k.gemvVec()) {
				return Features{}, false
			}
			return k.gemvFeatures(s, d, out)
		}
		if k.gather != nil {
			return Features{}, false // only the matrix-vector kernel gathers
		}
		return k.matmulFeatures(s, d, out)
	case FormPagedAttention:
		return k.pagedFeatures(s, d, out)
	case FormRoute:
		return k.routeFeatures(s, d, out)
	case FormExperts:
		return k.expertsFeatures(s, d, out)
	}
	return k.attentionFeatures(s, d, out)
}

// maxRowBlocks is the grid of a block-per-row kernel: more rows loop.
const maxRowBlocks = 4096
