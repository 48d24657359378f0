package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
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
	// Emu tunes the emulation (workers, cache). Unless FixedModes is set,
	// its Vary is turned on: every block that runs takes its own thread
	// order and cp.async landing from the seeds (emu.Options.Vary, with
	// the kernel's seed as the launch's), so that a sample of blocks
	// tries them all and a kernel gets the same modes whether it is
	// verified alone or with others.
	Emu emu.Options
	// FixedModes keeps Emu's Shuffle and Landing for every block instead.
	FixedModes bool
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
	// holding the fill pattern (emu.NaNPattern, a NaN no kernel
	// computes, so a NaN the kernel wrote is told apart); when it is not
	// 0 the element is the first of them (and Want NaN where the
	// reference was not computed there).
	NeverWritten int64
	// Where is "" for the kernel's run under the emulation, "device" for
	// its run on a device (CompareKernels).
	Where string
}

func (m *KernelMismatch) Error() string {
	on := ""
	if m.Where != "" {
		on = " on the " + m.Where
	}
	where := fmt.Sprintf("verify kernel %s%s: output %s (parameter %s, %s%v) element %d %s",
		m.Kernel, on, m.Output, m.Param, m.DType, m.Shape, m.Index, indexString(m.At))
	if m.NeverWritten > 0 {
		if m.Where != "" && math.IsNaN(m.Want) {
			return fmt.Sprintf("%s never written (%d elements of the output never written)", where, m.NeverWritten)
		}
		return fmt.Sprintf("%s never written (want %v; %d elements of the output never written)", where, m.Want, m.NeverWritten)
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
// Every block that runs starts with its shared memory poisoned and, unless
// opt.FixedModes, takes its own thread order and cp.async landing
// (emu.Options.Vary), so that a missing barrier or a wait that does not
// cover its copies shows in some block of the sample.
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
	r, err := verifyKernels(ctx, ks, bodies, opt, nil)
	if err != nil {
		return nil, err
	}
	out := make([]*KernelCheck, len(ks))
	for i := range ks {
		out[i] = r.checks[r.at[i]]
	}
	return out, errors.Join(r.errs...)
}

// verifyResult is what a verification found: its plans (each distinct
// kernel's, then the runs of those that read a runtime position at the
// edges of its range), and by plan the check and the error.
type verifyResult struct {
	plans  []*verifyPlan
	checks []*KernelCheck
	errs   []error
	// at maps the kernels given to their plans: ks[i] is plans[at[i]].
	at []int
	// done counts the plans that ran, in order: all of them unless the
	// context ended.
	done int
}

// verifyKernels is VerifyKernels, each plan also run through dev when it
// is not nil (CompareKernels), while its inputs and the emulation's
// outputs are at hand. When the context ends, or a run fails as a whole,
// it returns what the plans before it found with the error.
func verifyKernels(ctx context.Context, ks []*Kernel, bodies []*ir.Graph, opt VerifyOptions, dev DeviceRunner) (*verifyResult, error) {
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
		pk, body := k, bodies[i]
		if sk, small, ok, err := fewerExperts(k, body); err != nil {
			return nil, err
		} else if ok {
			pk, body = sk, small
		}
		p, err := planVerify(pk, body, opt)
		if err != nil {
			return nil, err
		}
		first[k] = len(plans)
		at[i] = len(plans)
		plans = append(plans, p)
	}
	// A kernel whose work follows a runtime position (a decode step's
	// past) runs also with the position at each end of its range: the
	// cache's first row and its last, where a tile is cut.
	for _, p := range plans[:len(plans):len(plans)] {
		if len(positionInputs(p.body)) > 0 {
			plans = append(plans, p.atEdge(positionLow), p.atEdge(positionHigh))
		}
	}
	var eks []emu.Kernel
	var distinct []*Kernel
	for _, p := range plans {
		if p.edge != 0 {
			continue // the same kernel, run again
		}
		ek := emu.Kernel{Name: p.k.Name}
		for _, prm := range p.k.Params {
			ek.Params = append(ek.Params, emu.Param{Name: prm.Name, Type: prm.Type})
		}
		eks, distinct = append(eks, ek), append(distinct, p.k)
	}
	src := source(distinct)
	// The groups' large inputs are drawn into the storage of the groups
	// before them, whose pages are in place.
	var pool floatPool
	r := &verifyResult{plans: plans, errs: make([]error, len(plans)), checks: make([]*KernelCheck, len(plans)), at: at}
	for start := 0; start < len(plans); {
		end, bytes := start, int64(0)
		for end < len(plans) && (end == start || bytes+plans[end].bytes <= opt.MaxBytes) {
			bytes += plans[end].bytes
			end++
		}
		group := plans[start:end]
		// A group's plans share the large inputs they draw alike (a
		// launch's kernel and its row buckets' read the same weights):
		// drawn once, sent to the emulation once, and given back to the
		// pool once when the group is done.
		shared := ir.LargeLeaves{}
		for _, p := range group {
			// Drawing gigabytes of inputs takes seconds: a context
			// that ended stops the verification before it.
			if err := ctx.Err(); err != nil {
				return r, fmt.Errorf("verify kernels: %w", err)
			}
			if err := p.draw(&pool, shared); err != nil {
				return r, err
			}
		}
		if err := runVerify(ctx, group, src, eks, opt); err != nil {
			return r, err
		}
		given := map[*ir.Tensor]bool{}
		for i, p := range group {
			if p.err != nil {
				r.errs[start+i] = p.err
			} else {
				r.checks[start+i], r.errs[start+i] = p.check(ctx)
			}
			if dev != nil {
				p.device = p.onDevice(ctx, dev)
			}
			if r.errs[start+i] != nil && p.edge != 0 {
				r.errs[start+i] = fmt.Errorf("%w (%s)", r.errs[start+i], p.edgeString())
			}
			for _, t := range p.feeds {
				if !given[t] {
					given[t] = true
					pool.give(t.F32)
				}
			}
			p.feeds, p.got, p.ref = nil, nil, nil
		}
		start = end
		r.done = end
	}
	return r, nil
}
