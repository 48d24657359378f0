package cuda

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// verifyPlan is one kernel's verification: its inputs, the blocks to run,
// and, after the run, its output bytes or the error that stopped it.
type verifyPlan struct {
	k     *Kernel
	body  *ir.Graph
	feeds map[string]*ir.Tensor
	outs  []ir.ValueType
	// windows[j], when set, says output j is written into a larger buffer
	// (a state updated in place, lower.Window): the run gets the whole
	// buffer, and the window's elements are what is compared.
	windows []*lower.Window
	// skipped[j] lists the elements of output j its window does not
	// write (a Slots window's slices at slot -1): left as they were, and
	// compared with nothing.
	skipped   [][]int64
	blocks    []int // nil: every block
	grid      int
	reduction int
	seed      uint64
	// maxCompare bounds the elements a sampled run compares.
	maxCompare int
	bytes      int64 // of its inputs and outputs
	// rowCount is the content of a row count's parameters (allTokens).
	rowCount [][]byte
	got      [][]byte
	err      error
	// edge, for a kernel that reads a runtime position, says where the
	// plan puts it: 0 random within its range, positionLow its lowest,
	// positionHigh its highest. The edges run as plans of their own.
	edge int
	// ref is the reference the check compared the emulation's outputs
	// with, kept for a device's outputs (CompareKernels); device is what
	// the device's run found.
	ref    *planRef
	device *deviceCheck
}

// planRef is the reference at the elements a plan's check compared: every
// element of each output (want and mag hold whole tensors by output
// name), or for a sampled run those idx lists by output name, with the
// values and magnitudes in vals and mags, in the same order.
type planRef struct {
	want, mag  map[string]*ir.Tensor
	idx        map[string][]int64
	vals, mags map[string][]float64
}

// The edges of a runtime position's range a kernel is also verified at.
const (
	positionLow = iota + 1
	positionHigh
)

// positionInputs are a body's runtime positions: the inputs an op reads
// as its runtime position operand (ir.Node.DynamicOffset), and those a
// windowed output starts at.
func positionInputs(body *ir.Graph) []ir.Value {
	var out []ir.Value
	add := func(v ir.Value) {
		if body.Node(v).Op == ir.OpInput && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, n := range body.Nodes {
		if v, ok := n.DynamicOffset(); ok {
			add(v)
		}
	}
	for j := range body.Outputs {
		if w, ok, err := lower.OutputWindow(body, j); err == nil && ok && w.Runtime {
			add(body.Inputs()[w.Pos])
		}
	}
	return out
}

// edgeString says where an edge plan puts its runtime position.
func (p *verifyPlan) edgeString() string {
	end := map[int]string{positionLow: "lowest", positionHigh: "highest"}[p.edge]
	return "its runtime position at the " + end + " of its range"
}

// atEdge is a copy of plan p that verifies its kernel with every runtime
// position at one edge of its range.
func (p *verifyPlan) atEdge(edge int) *verifyPlan {
	q := *p
	q.edge = edge
	q.seed = p.seed ^ uint64(edge)*0x9e3779b97f4a7c15
	return &q
}

func planVerify(k *Kernel, body *ir.Graph, opt VerifyOptions) (*verifyPlan, error) {
	inputs := body.Inputs()
	counted := 0
	if k.count != nil {
		counted = len(rowCountParams(k.count))
	}
	if len(inputs)+counted != k.Inputs || k.Inputs+len(body.Outputs) != len(k.Params) {
		return nil, fmt.Errorf("verify kernel %s: the body has %d inputs and %d outputs, the kernel %d inputs and %d parameters",
			k.Name, len(inputs), len(body.Outputs), k.Inputs, len(k.Params))
	}
	if len(body.Updates) > 0 || len(body.Weights()) > 0 || len(body.States()) > 0 {
		return nil, fmt.Errorf("verify kernel %s: a kernel body has inputs and outputs only", k.Name)
	}
	seed := kernelSeed(opt.Seed, seedName(k))
	p := &verifyPlan{k: k, body: body, seed: seed, reduction: ReductionLength(body), maxCompare: opt.MaxCompare}
	if k.count != nil {
		var err error
		if p.rowCount, err = allTokens(k.count); err != nil {
			return nil, fmt.Errorf("verify kernel %s: %w", k.Name, err)
		}
	}
	var elems int64
	for _, v := range inputs {
		n := body.Node(v)
		p.bytes += n.Shape.NumElements() * int64(n.DType.Size())
	}
	for j, o := range body.Outputs {
		n := body.Node(o.Value)
		p.outs = append(p.outs, ir.ValueType{Shape: n.Shape, DType: n.DType})
		elems += n.Shape.NumElements()
		w, ok, err := lower.OutputWindow(body, j)
		if err != nil {
			return nil, fmt.Errorf("verify kernel %s: %w", k.Name, err)
		}
		size := n.Shape.NumElements()
		if ok {
			p.windows = append(p.windows, &w)
			size = w.Shape.NumElements()
		} else {
			p.windows = append(p.windows, nil)
		}
		p.bytes += size * int64(n.DType.Size())
	}
	p.grid = k.Grid[0] * k.Grid[1] * k.Grid[2]
	work := elems * int64(p.reduction)
	if (elems > opt.MaxElements || work > opt.MaxWork) && p.grid > opt.MaxBlocks {
		// Blocks whose every element is a long dot product (a large
		// matmul's tiles) cost the emulation most: fewer of them, never
		// fewer than the first, the last and one more.
		n := opt.MaxBlocks
		if perBlock := work / int64(p.grid); perBlock > 0 {
			n = int(min(int64(n), max(3, opt.MaxBlockWork/perBlock)))
		}
		p.blocks = sampleBlocks(p.grid, n, seed)
		if g := k.BlockGroup; g > 1 && p.grid%g == 0 {
			// Blocks that combine their work at the end run whole
			// groups: a group missing a block never finishes (its
			// output unwritten, its counter left for the next launch).
			p.blocks = nil
			for _, grp := range sampleBlocks(p.grid/g, max(1, n/g), seed) {
				for b := range g {
					p.blocks = append(p.blocks, grp*g+b)
				}
			}
		}
	}
	return p, nil
}

// draw makes the plan's random inputs, the large ones in storage from
// pool.
func (p *verifyPlan) draw(pool *floatPool, shared ir.LargeLeaves) error {
	feeds, err := kernelInputs(p.body, p.seed, pool, shared)
	if err != nil {
		return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
	}
	// A Slots window's slots are read by the kernel alone too: distinct
	// slots of its buffer, some of them -1 (slices the kernel must not
	// write anywhere).
	for _, w := range p.windows {
		if w == nil || !w.Slots {
			continue
		}
		n := p.body.Node(p.body.Inputs()[w.Pos])
		rng := rand.New(rand.NewPCG(p.seed, 0x5107))
		t, err := ir.TensorOfInts(n.DType, n.Shape, ir.RandomSlots(rng, int(n.Shape.NumElements()), int64(w.Shape[w.Axis]), true)...)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		feeds[n.Name] = t
	}
	// A window's runtime position is read by the kernel alone, so no op
	// of the body says its range: it is where the rows fit (the tightest
	// of the windows that start at it).
	positions := positionInputs(p.body)
	if len(positions) == 0 {
		p.feeds = feeds
		return nil
	}
	ranges := ir.InputRanges(p.body)
	room := map[ir.Value]int64{}
	for j, w := range p.windows {
		if w == nil || !w.Runtime {
			continue
		}
		v := p.body.Inputs()[w.Pos]
		r := int64(w.Shape[w.Axis]) - int64(p.outs[j].Shape[w.Axis]) - w.Offset
		if r < 0 {
			return fmt.Errorf("verify kernel %s: output %d does not fit its window %s", p.k.Name, j, w.OutputName(j))
		}
		if old, ok := room[v]; !ok || r < old {
			room[v] = r
		}
	}
	rng := rand.New(rand.NewPCG(p.seed, 0x90517))
	for _, v := range positions {
		n := p.body.Node(v)
		lo, hi := int64(0), int64(-1)
		if r, ok := ranges[n.Name]; ok {
			lo, hi = int64(r.Lo), int64(r.Hi)
		}
		if r, ok := room[v]; ok {
			if hi < lo {
				hi = r
			}
			hi = min(hi, r)
		}
		if hi < lo {
			continue // no range known: the drawn value stands
		}
		at := lo + rng.Int64N(hi-lo+1)
		switch p.edge {
		case positionLow:
			at = lo
		case positionHigh:
			at = hi
		}
		t, err := ir.TensorOfInts(n.DType, ir.Shape{}, at)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		feeds[n.Name] = t
	}
	p.feeds = feeds
	return nil
}

// kernelSeed mixes the caller's seed with a kernel's name.
// seedName is the name a kernel's inputs are drawn by: a row bucket's
// kernel (printed for fewer rows than its launch's) draws as its launch's
// kernel does, so that the two share the weights they read alike.
func seedName(k *Kernel) string {
	if k.Body != nil {
		if m := bucketName.FindStringSubmatch(k.Name); m != nil {
			return m[1]
		}
	}
	return k.Name
}

// bucketName is a row bucket kernel's name: its launch kernel's, then _r
// and its rows (printBuckets).
var bucketName = regexp.MustCompile(`^(.+)_r\d+$`)

func kernelSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

// sampleBlocks draws n of a grid's blocks, the first and the last among
// them, in increasing order.
func sampleBlocks(grid, n int, seed uint64) []int {
	n = max(min(n, grid), 1)
	pick := map[int]bool{0: true, grid - 1: true}
	rng := rand.New(rand.NewPCG(seed, 0xb10c5))
	for len(pick) < n {
		pick[rng.IntN(grid)] = true
	}
	out := make([]int, 0, len(pick))
	for b := range pick {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// runVerify runs every plan's launch in one emulation run of src (the
// text of every kernel being verified, so that every group of plans runs
// the same compiled runner). A kernel that fails under the emulation stops
// the runner; its plan keeps the error and the others run again without
// it (the runner binary is the same, so nothing compiles again).
func runVerify(ctx context.Context, plans []*verifyPlan, src string, eks []emu.Kernel, opt VerifyOptions) error {
	var bufs []emu.Buffer
	var discard []int // the inputs: only outputs come back
	launches := make([]emu.Launch, len(plans))
	outAt := make([][]int, len(plans))
	// An input the plans share (ir.LargeLeaves) is one buffer: the
	// kernels only read their inputs.
	sent := map[*ir.Tensor]int{}
	for i, p := range plans {
		l := emu.Launch{Kernel: p.k.Name, Grid: p.k.Grid, Block: p.k.Block, Blocks: p.blocks, Seed: p.seed}
		for _, v := range p.body.Inputs() {
			t := p.feeds[p.body.Node(v).Name]
			if b, ok := sent[t]; ok && t != nil {
				l.Args = append(l.Args, emu.Arg{Buffer: b})
				continue
			}
			data := TensorBytes(t)
			sent[t] = len(bufs)
			l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
			discard = append(discard, len(bufs))
			bufs = append(bufs, emu.Buffer{Bytes: len(data), Data: data})
		}
		if p.rowCount != nil {
			// Every row present: the kernel computes what its body
			// does, row for row (a step's run computes fewer).
			for _, data := range p.rowCount {
				l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
				discard = append(discard, len(bufs))
				bufs = append(bufs, emu.Buffer{Bytes: len(data), Data: data})
			}
		}
		for j, o := range p.outs {
			outAt[i] = append(outAt[i], len(bufs))
			l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
			elems := o.Shape.NumElements()
			if w := p.windows[j]; w != nil {
				elems = w.Shape.NumElements()
			}
			bufs = append(bufs, emu.Buffer{Bytes: int(elems) * o.DType.Size()})
		}
		launches[i] = l
	}
	pending := make([]int, len(plans)) // the plans still to run
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		ls := make([]emu.Launch, len(pending))
		for j, i := range pending {
			ls[j] = launches[i]
		}
		eo := opt.Emu
		eo.Discard = discard
		eo.Vary = eo.Vary || !opt.FixedModes
		got, err := emu.Run(ctx, src, eks, bufs, ls, eo)
		if err == nil {
			for _, i := range pending {
				for j, b := range outAt[i] {
					data, err := plans[i].unwindow(j, got[b])
					if err != nil {
						plans[i].err = err
						break
					}
					plans[i].got = append(plans[i].got, data)
				}
			}
			return nil
		}
		var ke *emu.KernelError
		if !errors.As(err, &ke) || ke.Launch < 0 || ke.Launch >= len(pending) {
			if len(plans) == 1 {
				return fmt.Errorf("verify kernel %s: %w", plans[0].k.Name, err)
			}
			return fmt.Errorf("verify kernels: %w", err)
		}
		failed := pending[ke.Launch]
		plans[failed].err = fmt.Errorf("verify kernel %s: %w", plans[failed].k.Name, err)
		pending = slices.Delete(pending, ke.Launch, ke.Launch+1)
	}
	return nil
}

// unwindow takes output j's elements out of the buffer the kernel wrote:
// the whole buffer, or for a windowed output its window's elements, in
// order (those it does not write, listed in p.skipped, as the fill
// pattern); a windowed kernel must leave every element outside its window
// as it found it (the fill pattern).
func (p *verifyPlan) unwindow(j int, buf []byte) ([]byte, error) {
	out, skipped, err := p.windowed(j, buf, "verify kernel "+p.k.Name)
	if err != nil {
		return nil, err
	}
	for len(p.skipped) <= j {
		p.skipped = append(p.skipped, nil)
	}
	p.skipped[j] = skipped
	return out, nil
}

// windowed is unwindow without keeping the skipped elements, which it
// returns; what names the run in its error.
func (p *verifyPlan) windowed(j int, buf []byte, what string) (out []byte, skipped []int64, err error) {
	w := p.windows[j]
	if w == nil {
		return buf, nil, nil
	}
	size := p.outs[j].DType.Size()
	if want := int(w.Shape.NumElements()) * size; len(buf) != want {
		return nil, nil, fmt.Errorf("%s: output %d's buffer %s holds %d bytes, not %d", what, j, w.Shape, len(buf), want)
	}
	var vals []int64
	if w.Runtime || w.Slots {
		t := p.feeds[p.body.Node(p.body.Inputs()[w.Pos]).Name]
		for i := range t.Len() {
			vals = append(vals, t.Int(i))
		}
	}
	offsets := w.Offsets(p.outs[j].Shape, vals)
	inside := make([]bool, w.Shape.NumElements())
	out = make([]byte, len(offsets)*size)
	for e, at := range offsets {
		if at < 0 {
			// Not written (a slot of -1): the fill pattern.
			for i := e * size; i < (e+1)*size; i++ {
				out[i] = byte(emu.NaNPattern >> (8 * (i & 3)))
			}
			skipped = append(skipped, int64(e))
			continue
		}
		inside[at] = true
		copy(out[e*size:], buf[int(at)*size:int(at+1)*size])
	}
	for at, in := range inside {
		if !in && !emu.Unwritten(buf, at*size, size) {
			return nil, nil, fmt.Errorf("%s: output %d writes element %d of its buffer %s, outside its window %s",
				what, j, at, w.Shape, w.OutputName(j))
		}
	}
	return out, skipped, nil
}

// filled is n bytes of the fill pattern (emu.NaNPattern), what a buffer
// given to the emulation without data holds.
func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(emu.NaNPattern >> (8 * (i & 3)))
	}
	return b
}
