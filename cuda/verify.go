package cuda

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/internal/mmap"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// VerifyOptions tune VerifyKernel and VerifyKernels.
type VerifyOptions struct {
	// Seed draws the inputs and the sample of blocks (mixed with each
	// kernel's name, so that a kernel gets the same inputs and sample
	// whether it is verified alone or with others).
	Seed uint64
	// MaxBlocks is the number of blocks a sampled run executes; 0 means
	// 8. A grid of at most MaxBlocks blocks always runs whole.
	MaxBlocks int
	// MaxElements is the whole-run threshold: a kernel whose outputs
	// total at most this many elements runs every block and has every
	// output element compared; a larger one runs a sample of MaxBlocks
	// blocks. 0 means 1<<16.
	MaxElements int64
	// MaxWork is the other whole-run threshold: a kernel whose output
	// elements times its reduction length (ReductionLength) exceed it
	// runs a sample of MaxBlocks blocks even when its outputs are few, as
	// a decode step's or a short prefill's matmuls are: every element
	// costs the reference and the emulation a whole dot product. 0 means
	// 1<<24.
	MaxWork int64
	// MaxBlockWork bounds a sampled run's work (output elements times
	// reduction length) by running fewer than MaxBlocks blocks when each
	// is heavy, three at least. 0 means 1<<28.
	MaxBlockWork int64
	// MaxCompare bounds the elements a sampled run compares: when its
	// blocks wrote more, a seeded sample of them, spread over every
	// output, is compared (each element of a large matmul's tile costs the
	// reference a whole dot product). 0 means 1<<13.
	MaxCompare int
	// Emu tunes the emulation (shuffled threads, workers, cache).
	Emu emu.Options
	// MaxBytes bounds the input and output bytes of one emulation run
	// (0: 1 GiB): kernels at a large model's real shapes read gigabytes,
	// so they run a group at a time, their random inputs drawn for the
	// group and dropped after it. Every group runs the same compiled
	// source, so grouping costs no compilation.
	MaxBytes int64
}

// Defaults of VerifyOptions.
const (
	defaultVerifyBlocks   = 8
	defaultVerifyElements = 1 << 16
	defaultVerifyWork     = 1 << 24
	defaultVerifyCompare  = 1 << 13
	defaultVerifyBlockWk  = 1 << 28
	defaultVerifyBytes    = 1 << 30
)

// KernelCheck is what verifying one kernel found.
type KernelCheck struct {
	Kernel string
	// Sampled says only some of the grid's blocks ran: Blocks lists
	// their linear ids (x fastest), in increasing order. A whole run
	// leaves Blocks nil.
	Sampled bool
	Blocks  []int
	// BlocksRun of the GridBlocks blocks of the launch ran.
	BlocksRun, GridBlocks int
	// Elements is the number of output elements compared with the
	// reference: every element in a whole run, those the sampled blocks
	// wrote in a sampled one.
	Elements int64
	// Reduction is the reduction length given to ir.Tolerance: the
	// body's longest sum (a reduced axis, a matmul's inner extent, a
	// softmax or norm row).
	Reduction int
	// WorstRatio is the largest |got - want| / allowed over the compared
	// elements: at most 1 when the kernel passes (0 when every element
	// is exact), +Inf for a NaN, infinity or exact dtype that differs.
	WorstRatio float64
	// Mismatch is the worst element outside the tolerance, or the first
	// element never written; nil when the kernel passes.
	Mismatch *KernelMismatch
}

// KernelMismatch is a kernel's output element that disagrees with the
// reference. It is the error VerifyKernel returns for it.
type KernelMismatch struct {
	Kernel string
	// Output is the body's output name, Param the kernel parameter it is
	// written through ("out0", ...).
	Output, Param string
	// Index is the element's row-major index, At the same as an index
	// per axis of Shape, the output's shape (of dtype DType).
	Index int64
	At    []int64
	Shape ir.Shape
	DType ir.DType
	// Got, Want, Magnitude and Allowed are the kernel's value, the
	// reference's, the magnitude of the terms combined and the error
	// allowed (ir.Tolerance of the magnitude).
	Got, Want, Magnitude, Allowed float64
	// NeverWritten counts the output's elements that a whole run left
	// holding the fill pattern (emu.NaNPattern) where the reference is a
	// number; when it is not 0 the element is the first of them. For f16
	// and bf16 the pattern is also the NaN that conversions produce, so a
	// NaN written there reads as never written.
	NeverWritten int64
}

func (m *KernelMismatch) Error() string {
	where := fmt.Sprintf("verify kernel %s: output %s (parameter %s, %s%v) element %d %s",
		m.Kernel, m.Output, m.Param, m.DType, m.Shape, m.Index, indexString(m.At))
	if m.NeverWritten > 0 {
		what := "never written"
		if m.DType.Size() == 2 && m.DType.IsFloat() {
			what = "never written (or written as the NaN 0x7fff, which is the fill pattern)"
		}
		return fmt.Sprintf("%s %s (want %v; %d elements of the output never written)", where, what, m.Want, m.NeverWritten)
	}
	return fmt.Sprintf("%s: got %v, want %v (error %.3g, allowed %.3g of magnitude %.3g)",
		where, m.Got, m.Want, math.Abs(m.Got-m.Want), m.Allowed, m.Magnitude)
}

func indexString(at []int64) string {
	s := make([]string, len(at))
	for i, x := range at {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// VerifyKernel runs k's CUDA text under the CPU emulation at its real
// shapes on seeded random inputs and compares the outputs it produced with
// the reference interpreter, as DESIGN.md ("Numbers and correctness")
// requires before anything is written out. body is the lowered body k was
// printed from: its inputs in order are k.Params[:k.Inputs], its outputs
// the rest.
//
// A kernel whose outputs total at most opt.MaxElements elements, or whose
// grid has at most opt.MaxBlocks blocks, runs every block; every output
// element must have been written and every one is compared. A larger one
// runs a seeded sample of opt.MaxBlocks blocks (the first and last always
// among them); the output elements that differ from the fill pattern
// afterwards are the ones the sample produced, and the reference computes
// only those (ir.EvalAt), or a seeded sample of opt.MaxCompare of them
// when they are more. A sample that produced no element is an error.
// (An f16 or bf16 element written as the NaN 0x7fff is the fill pattern:
// a whole run calls it never written, a sampled one does not compare it.)
//
// The check is returned whenever the kernel ran; a mismatch is both
// check.Mismatch and the error. A kernel that fails under the emulation
// (out-of-bounds access, deadlock, ...) is an error wrapping the
// *emu.KernelError.
func VerifyKernel(ctx context.Context, k *Kernel, body *ir.Graph, opt VerifyOptions) (*KernelCheck, error) {
	checks, err := VerifyKernels(ctx, []*Kernel{k}, []*ir.Graph{body}, opt)
	if len(checks) == 1 {
		return checks[0], err
	}
	return nil, err
}

// VerifyKernels is VerifyKernel for many kernels at once: their text is
// compiled once, in one emulation run (compiling dominates the cost of
// verification). It returns one check per kernel (nil for a kernel that
// could not run) and, when any kernel failed, an error joining every
// kernel's error. A kernel listed more than once (the same *Kernel) is
// verified once, with the first body given for it.
func VerifyKernels(ctx context.Context, ks []*Kernel, bodies []*ir.Graph, opt VerifyOptions) ([]*KernelCheck, error) {
	if len(ks) != len(bodies) {
		return nil, fmt.Errorf("verify kernels: %d kernels and %d bodies", len(ks), len(bodies))
	}
	if opt.MaxBlocks <= 0 {
		opt.MaxBlocks = defaultVerifyBlocks
	}
	if opt.MaxElements <= 0 {
		opt.MaxElements = defaultVerifyElements
	}
	if opt.MaxWork <= 0 {
		opt.MaxWork = defaultVerifyWork
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = defaultVerifyBytes
	}
	if opt.MaxCompare <= 0 {
		opt.MaxCompare = defaultVerifyCompare
	}
	if opt.MaxBlockWork <= 0 {
		opt.MaxBlockWork = defaultVerifyBlockWk
	}
	// Distinct kernels, each with its plan.
	var plans []*verifyPlan
	first := map[*Kernel]int{}
	names := map[string]bool{}
	at := make([]int, len(ks)) // ks[i] is plans[at[i]]
	for i, k := range ks {
		if j, ok := first[k]; ok {
			at[i] = j
			continue
		}
		if names[k.Name] {
			return nil, fmt.Errorf("verify kernels: two different kernels are named %s", k.Name)
		}
		names[k.Name] = true
		p, err := planVerify(k, bodies[i], opt)
		if err != nil {
			return nil, err
		}
		first[k] = len(plans)
		at[i] = len(plans)
		plans = append(plans, p)
	}
	var eks []emu.Kernel
	var distinct []*Kernel
	for _, p := range plans {
		ek := emu.Kernel{Name: p.k.Name}
		for _, prm := range p.k.Params {
			ek.Params = append(ek.Params, emu.Param{Name: prm.Name, Type: prm.Type})
		}
		eks, distinct = append(eks, ek), append(distinct, p.k)
	}
	src := Source(distinct)
	// The groups' large inputs are drawn into the storage of the groups
	// before them, whose pages are in place.
	var pool floatPool
	errs := make([]error, len(plans))
	checks := make([]*KernelCheck, len(plans))
	for start := 0; start < len(plans); {
		end, bytes := start, int64(0)
		for end < len(plans) && (end == start || bytes+plans[end].bytes <= opt.MaxBytes) {
			bytes += plans[end].bytes
			end++
		}
		group := plans[start:end]
		for _, p := range group {
			if err := p.draw(&pool); err != nil {
				return nil, err
			}
		}
		if err := runVerify(ctx, group, src, eks, opt); err != nil {
			return nil, err
		}
		for i, p := range group {
			if p.err != nil {
				errs[start+i] = p.err
			} else {
				checks[start+i], errs[start+i] = p.check(ctx)
			}
			for _, t := range p.feeds {
				pool.give(t.F32)
			}
			p.feeds, p.got = nil, nil
		}
		start = end
	}
	out := make([]*KernelCheck, len(ks))
	for i := range ks {
		out[i] = checks[at[i]]
	}
	return out, errors.Join(errs...)
}

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
	windows   []*lower.Window
	blocks    []int // nil: every block
	grid      int
	reduction int
	seed      uint64
	// maxCompare bounds the elements a sampled run compares.
	maxCompare int
	bytes      int64 // of its inputs and outputs
	got        [][]byte
	err        error
}

func planVerify(k *Kernel, body *ir.Graph, opt VerifyOptions) (*verifyPlan, error) {
	inputs := body.Inputs()
	if len(inputs) != k.Inputs || len(inputs)+len(body.Outputs) != len(k.Params) {
		return nil, fmt.Errorf("verify kernel %s: the body has %d inputs and %d outputs, the kernel %d inputs and %d parameters",
			k.Name, len(inputs), len(body.Outputs), k.Inputs, len(k.Params))
	}
	if len(body.Updates) > 0 || len(body.Weights()) > 0 || len(body.States()) > 0 {
		return nil, fmt.Errorf("verify kernel %s: a kernel body has inputs and outputs only", k.Name)
	}
	seed := kernelSeed(opt.Seed, k.Name)
	p := &verifyPlan{k: k, body: body, seed: seed, reduction: ReductionLength(body), maxCompare: opt.MaxCompare}
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
	}
	return p, nil
}

// draw makes the plan's random inputs, the large ones in storage from
// pool.
func (p *verifyPlan) draw(pool *floatPool) error {
	feeds, err := kernelInputs(p.body, p.seed, pool)
	if err != nil {
		return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
	}
	p.feeds = feeds
	return nil
}

// floatPool keeps the float32 storage of a verification group's large
// inputs for the next groups' inputs: at a large model's real shapes they
// are gigabytes, and fresh memory costs a page fault per 4 KiB page
// touched, seconds per gigabyte on a virtual machine.
type floatPool struct {
	free [][]float32
}

// take returns n elements of storage, contents undefined: the smallest
// kept slice that holds them, or new memory.
func (p *floatPool) take(n int) []float32 {
	best := -1
	for i, s := range p.free {
		if cap(s) >= n && (best < 0 || cap(s) < cap(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		s := make([]float32, n)
		mmap.AdviseHugeFloat32(s)
		return s
	}
	s := p.free[best][:n]
	p.free = slices.Delete(p.free, best, best+1)
	return s
}

// give keeps s, which nothing reads any more, for later takes; small
// slices are left to the collector.
func (p *floatPool) give(s []float32) {
	if cap(s) >= 1<<20 {
		p.free = append(p.free, s[:cap(s)])
	}
}

// kernelSeed mixes the caller's seed with a kernel's name.
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
	for i, p := range plans {
		l := emu.Launch{Kernel: p.k.Name, Grid: p.k.Grid, Block: p.k.Block, Blocks: p.blocks}
		for _, v := range p.body.Inputs() {
			data := tensorBytes(p.feeds[p.body.Node(v).Name])
			l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
			discard = append(discard, len(bufs))
			bufs = append(bufs, emu.Buffer{Bytes: len(data), Data: data})
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
// order; a windowed kernel must leave every element outside its window
// as it found it (the fill pattern).
func (p *verifyPlan) unwindow(j int, buf []byte) ([]byte, error) {
	w := p.windows[j]
	if w == nil {
		return buf, nil
	}
	size := p.outs[j].DType.Size()
	offsets := w.Offsets(p.outs[j].Shape)
	inside := make([]bool, w.Shape.NumElements())
	out := make([]byte, len(offsets)*size)
	for e, at := range offsets {
		inside[at] = true
		copy(out[e*size:], buf[int(at)*size:int(at+1)*size])
	}
	for at, in := range inside {
		if !in && !emu.Unwritten(buf, at*size, size) {
			return nil, fmt.Errorf("verify kernel %s: output %d writes element %d of its buffer %s, outside its window (%d along axis %d from %d)",
				p.k.Name, j, at, w.Shape, p.outs[j].Shape[w.Axis], w.Axis, w.Offset)
		}
	}
	return out, nil
}

// check compares a plan's outputs with the reference.
func (p *verifyPlan) check(ctx context.Context) (*KernelCheck, error) {
	c := &KernelCheck{Kernel: p.k.Name, GridBlocks: p.grid, BlocksRun: p.grid, Reduction: p.reduction}
	if p.blocks != nil {
		c.Sampled, c.Blocks, c.BlocksRun = true, p.blocks, len(p.blocks)
		return c, p.checkSample(ctx, c)
	}
	return c, p.checkWhole(ctx, c)
}

// checkWhole compares every output element of a run of every block.
func (p *verifyPlan) checkWhole(ctx context.Context, c *KernelCheck) error {
	want, err := ir.Eval(ctx, p.body, p.feeds, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return fmt.Errorf("verify kernel %s: the reference: %w", p.k.Name, err)
	}
	for j, o := range p.body.Outputs {
		vt, raw := p.outs[j], p.got[j]
		w, mag := want.Outputs[o.Name], want.Magnitudes[o.Name]
		size := vt.DType.Size()
		var never, firstNever int64 = 0, -1
		for i := range w.Len() {
			if emu.Unwritten(raw, int(i)*size, size) && !math.IsNaN(w.At(i)) {
				if never == 0 {
					firstNever = i
				}
				never++
			}
		}
		if never > 0 {
			c.Mismatch = p.mismatch(j, firstNever, math.NaN(), w.At(firstNever), mag.At(firstNever), 0)
			c.Mismatch.NeverWritten = never
			c.WorstRatio = math.Inf(1)
			return c.Mismatch
		}
		got, err := DecodeTensor(vt, raw)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		c.Elements += w.Len()
		tol := ir.Tolerance(vt.DType, p.reduction)
		for i := range w.Len() {
			c.WorstRatio = math.Max(c.WorstRatio, errorRatio(got.DType, got.At(i), w.At(i), mag.At(i), tol))
		}
		mm, err := ir.Compare(got, w, mag, p.reduction)
		if err != nil {
			return fmt.Errorf("verify kernel %s: output %s: %w", p.k.Name, o.Name, err)
		}
		if mm != nil {
			c.Mismatch = p.mismatch(j, mm.Index, mm.Got, mm.Want, mm.Magnitude, mm.Allowed)
			return c.Mismatch
		}
	}
	return nil
}

// checkSample compares the output elements a sampled run wrote with the
// reference computed at those elements only.
func (p *verifyPlan) checkSample(ctx context.Context, c *KernelCheck) error {
	written := map[string][]int64{}
	var total int64
	for j, o := range p.body.Outputs {
		vt, raw := p.outs[j], p.got[j]
		size := vt.DType.Size()
		var idx []int64
		for i := range vt.Shape.NumElements() {
			if !emu.Unwritten(raw, int(i)*size, size) {
				idx = append(idx, i)
			}
		}
		if len(idx) > 0 {
			written[o.Name] = idx
			total += int64(len(idx))
		}
	}
	if total == 0 {
		return fmt.Errorf("verify kernel %s: the sampled blocks %v of %d wrote no output element", p.k.Name, p.blocks, p.grid)
	}
	if p.maxCompare > 0 && total > int64(p.maxCompare) {
		// Keep a seeded sample, each output in proportion to what it
		// wrote, its first and last written elements always in.
		rng := rand.New(rand.NewPCG(p.seed, 0xc0c0))
		for name, idx := range written {
			keep := max(2, int(int64(p.maxCompare)*int64(len(idx))/total))
			if keep >= len(idx) {
				continue
			}
			picked := map[int]bool{0: true, len(idx) - 1: true}
			for len(picked) < keep {
				picked[rng.IntN(len(idx))] = true
			}
			sub := make([]int64, 0, keep)
			for n, i := range idx {
				if picked[n] {
					sub = append(sub, i)
				}
			}
			written[name] = sub
		}
	}
	vals, mags, err := ir.EvalAt(ctx, p.body, p.feeds, written, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return fmt.Errorf("verify kernel %s: the reference at the sampled elements: %w", p.k.Name, err)
	}
	for j, o := range p.body.Outputs {
		idx := written[o.Name]
		if len(idx) == 0 {
			continue
		}
		vt := p.outs[j]
		wv, mv := vals[o.Name], mags[o.Name]
		if len(wv) != len(idx) || len(mv) != len(idx) {
			return fmt.Errorf("verify kernel %s: the reference gave %d values and %d magnitudes of output %s for %d elements",
				p.k.Name, len(wv), len(mv), o.Name, len(idx))
		}
		gv := make([]float64, len(idx))
		size := vt.DType.Size()
		for n, i := range idx {
			gv[n] = element(vt.DType, p.got[j][int(i)*size:])
		}
		shape := ir.Shape{ir.Dim(len(idx))}
		got, err := ir.TensorOf(vt.DType, shape, gv...)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		want := &ir.Tensor{DType: vt.DType, Shape: shape, F64: wv}
		mag := &ir.Tensor{DType: vt.DType, Shape: shape, F64: mv}
		c.Elements += int64(len(idx))
		tol := ir.Tolerance(vt.DType, p.reduction)
		for n := range idx {
			c.WorstRatio = math.Max(c.WorstRatio, errorRatio(vt.DType, gv[n], wv[n], mv[n], tol))
		}
		mm, err := ir.Compare(got, want, mag, p.reduction)
		if err != nil {
			return fmt.Errorf("verify kernel %s: output %s: %w", p.k.Name, o.Name, err)
		}
		if mm != nil {
			c.Mismatch = p.mismatch(j, idx[mm.Index], mm.Got, mm.Want, mm.Magnitude, mm.Allowed)
			return c.Mismatch
		}
	}
	return nil
}

func (p *verifyPlan) mismatch(out int, i int64, got, want, mag, allowed float64) *KernelMismatch {
	shape := p.outs[out].Shape
	return &KernelMismatch{
		Kernel: p.k.Name, Output: p.body.Outputs[out].Name, Param: p.k.Params[p.k.Inputs+out].Name,
		Index: i, At: unravel(i, shape), Shape: shape, DType: p.outs[out].DType,
		Got: got, Want: want, Magnitude: mag, Allowed: allowed,
	}
}

// errorRatio is |got - want| over the error ir.Compare allows for the
// element: 0 when equal, +Inf where no error is allowed.
func errorRatio(dt ir.DType, got, want, mag, tol float64) float64 {
	switch {
	case math.IsNaN(got) || math.IsNaN(want):
		if math.IsNaN(got) == math.IsNaN(want) {
			return 0
		}
		return math.Inf(1)
	case math.IsInf(got, 0) || math.IsInf(want, 0):
		if got == want {
			return 0
		}
		return math.Inf(1)
	}
	d := math.Abs(got - want)
	if d == 0 {
		return 0
	}
	if tol <= 0 {
		return math.Inf(1)
	}
	allowed := math.Max(tol*math.Max(math.Abs(want), mag), ir.AbsoluteFloor(dt, tol))
	return d / allowed
}

// element decodes the value at the start of b as a dt.
func element(dt ir.DType, b []byte) float64 {
	t, err := DecodeTensor(ir.ValueType{Shape: ir.Shape{1}, DType: dt}, b[:dt.Size()])
	if err != nil {
		return math.NaN()
	}
	return t.At(0)
}

// unravel turns a row-major index into an index per axis.
func unravel(i int64, shape ir.Shape) []int64 {
	at := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if n := int64(shape[d]); n > 0 {
			at[d] = i % n
			i /= n
		}
	}
	return at
}

// ReductionLength is the longest sum the body computes: a reduced axis, a
// matmul's inner extent, a softmax or norm row, an attention's keys or
// head dimension (max reductions are exact and do not count).
func ReductionLength(body *ir.Graph) int {
	r := 1
	for _, n := range body.Nodes {
		var l ir.Dim
		in := func(k int) ir.Shape { return body.Node(n.Inputs[k]).Shape }
		switch n.Op {
		case ir.OpSum, ir.OpSoftmax:
			s := in(0)
			ax := n.Axis
			if ax < 0 {
				ax += len(s)
			}
			if ax >= 0 && ax < len(s) {
				l = s[ax]
			}
		case ir.OpMatMul, ir.OpLayerNorm, ir.OpRMSNorm:
			if s := in(0); len(s) > 0 {
				l = s[len(s)-1]
			}
		case ir.OpAttention:
			if s := in(1); len(s) == 4 {
				l = max(s[2], s[3])
			}
		}
		r = max(r, int(l))
	}
	return r
}

// KernelInputs draws a kernel body's inputs: ir.RandomFeeds's typical
// values (floats of both signs and varied magnitude, positive where an op
// needs it, never all zeros), with gather indices drawn over their whole
// valid range, negative ones (counting from the end) included.
func KernelInputs(body *ir.Graph, seed uint64) (map[string]*ir.Tensor, error) {
	return kernelInputs(body, seed, nil)
}

// kernelInputs is KernelInputs, large float inputs drawn into storage from
// pool when it is not nil.
func kernelInputs(body *ir.Graph, seed uint64, pool *floatPool) (map[string]*ir.Tensor, error) {
	var take func(int) []float32
	if pool != nil {
		take = pool.take
	}
	feeds, err := ir.RandomFeedsInto(body, seed, ir.Typical, take)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9a7e))
	for v, extent := range gatherIndexLeaves(body) {
		t := feeds[body.Node(v).Name]
		if t == nil || t.F64 == nil || extent <= 0 {
			continue
		}
		for i := range t.F64 {
			t.F64[i] = float64(rng.Int64N(2*extent) - extent)
		}
		if len(t.F64) > 0 && !slices.ContainsFunc(t.F64, func(x float64) bool { return x != 0 }) {
			t.F64[0] = -1
		}
	}
	return feeds, nil
}

// gatherIndexLeaves maps each input that reaches a gather's indices
// through views, casts and concatenations only to the smallest extent it
// indexes.
func gatherIndexLeaves(body *ir.Graph) map[ir.Value]int64 {
	out := map[ir.Value]int64{}
	var walk func(v ir.Value, extent int64, seen map[ir.Value]bool)
	walk = func(v ir.Value, extent int64, seen map[ir.Value]bool) {
		if seen[v] {
			return
		}
		seen[v] = true
		n := body.Node(v)
		switch {
		case n.Op == ir.OpInput:
			if e, ok := out[v]; !ok || extent < e {
				out[v] = extent
			}
		case n.Op == ir.OpPad:
			// Padding adds its constant, which need not be an index.
		case n.Op.Class() == ir.ClassView, n.Op == ir.OpCast, n.Op == ir.OpConcat:
			for _, in := range n.Inputs {
				walk(in, extent, seen)
			}
		}
	}
	for _, n := range body.Nodes {
		if n.Op != ir.OpGather {
			continue
		}
		data := body.Node(n.Inputs[0]).Shape
		ax := n.Axis
		if ax < 0 {
			ax += len(data)
		}
		if ax < 0 || ax >= len(data) {
			continue
		}
		walk(n.Inputs[1], int64(data[ax]), map[ir.Value]bool{})
	}
	return out
}
