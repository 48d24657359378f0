package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
)

// DeviceLaunch is one launch of a kernel that CompareKernels asks a
// DeviceRunner to run on a device: the kernel's whole grid, on buffers
// whose initial contents it gives.
type DeviceLaunch struct {
	// Kernel is the kernel's name: its extern "C" name in a module
	// compiled from Source (or the one a host library embeds).
	Kernel string
	// Grid and Block are the launch's shape, the kernel's: every block of
	// its grid runs.
	Grid, Block [3]int
	// Args are the initial contents of the kernel's parameters, a buffer
	// each in parameter order: its inputs (with a row count's parameters,
	// saying that every row is present), then its outputs, filled with
	// the emulation's fill pattern (emu.NaNPattern), so that an element
	// the kernel does not write is seen.
	Args [][]byte
	// Outputs is how many of the last Args the kernel writes: the buffers
	// the runner reads back.
	Outputs int
}

// DeviceRunner runs a launch on a device and returns the contents of its
// output buffers afterwards (the last l.Outputs of l.Args), in order, each
// of the size it was given.
type DeviceRunner func(ctx context.Context, l DeviceLaunch) ([][]byte, error)

// EmulatedDevice is a DeviceRunner that runs each launch, its whole grid,
// under the CPU emulation with options opt: a device that computes what
// the emulation does, which tests and dry runs put in a GPU's place. ks
// are the kernels CompareKernels is given, distinct and in its order, so
// that the emulation compiles the source the verification compiles (once,
// with its cache).
func EmulatedDevice(ks []*Kernel, opt emu.Options) DeviceRunner {
	var eks []emu.Kernel
	for _, k := range ks {
		ek := emu.Kernel{Name: k.Name}
		for _, p := range k.Params {
			ek.Params = append(ek.Params, emu.Param{Name: p.Name, Type: p.Type})
		}
		eks = append(eks, ek)
	}
	src := source(ks)
	return func(ctx context.Context, l DeviceLaunch) ([][]byte, error) {
		if l.Outputs < 0 || l.Outputs > len(l.Args) {
			return nil, fmt.Errorf("launch %s: %d outputs of %d arguments", l.Kernel, l.Outputs, len(l.Args))
		}
		launch := emu.Launch{Kernel: l.Kernel, Grid: l.Grid, Block: l.Block}
		bufs := make([]emu.Buffer, len(l.Args))
		o := opt
		o.Discard = nil
		for i, a := range l.Args {
			launch.Args = append(launch.Args, emu.Arg{Buffer: i})
			bufs[i] = emu.Buffer{Bytes: len(a), Data: a}
			if i < len(l.Args)-l.Outputs {
				o.Discard = append(o.Discard, i)
			}
		}
		got, err := emu.Run(ctx, src, eks, bufs, []emu.Launch{launch}, o)
		if err != nil {
			return nil, err
		}
		return got[len(got)-l.Outputs:], nil
	}
}

// KernelComparison is what CompareKernels found for one kernel: its runs
// under the CPU emulation and on a device, on the same inputs, each
// compared with the reference and with the other.
type KernelComparison struct {
	Kernel string
	// Schedule is the schedule the kernel was printed with.
	Schedule string
	// Runs counts the runs compared, of Planned: one, or three for a
	// kernel that reads a runtime position (at a random position and at
	// each end of its range). Runs is below Planned when the context
	// ended first.
	Runs, Planned int
	// Sampled says the emulation ran a sample of the grid's blocks (the
	// device runs them all): the elements compared are those the sample
	// wrote, or a seeded sample of them, as VerifyKernel compares.
	Sampled bool
	// Elements counts the output elements compared over the runs, on
	// each side.
	Elements int64
	// EmulationRatio and DeviceRatio are the largest |got - want| /
	// allowed over those elements of the emulation's outputs and of the
	// device's, against the reference, within ir.Tolerance's allowance
	// as VerifyKernel computes it: at most 1 when the side passes, +Inf
	// for a NaN, an infinity or an exact dtype that differs, and for the
	// device an element never written. Difference is the largest
	// |device - emulation| / allowed, the same allowance: at most 2
	// when both pass, near 0 when the kernel computes on the device as
	// under the emulation (the order of rounding aside), and
	// DifferenceAt its element (nil when every element is equal).
	EmulationRatio, DeviceRatio, Difference float64
	DifferenceAt                            *OutputElement
	// Emulation and Device say why each side fails: a *KernelMismatch
	// (whose Where tells the device's apart), or a kernel that could not
	// run (an *emu.KernelError under the emulation, the runner's error on
	// the device); several runs' failures are joined. Both are nil when
	// the kernel passes.
	Emulation, Device error
}

// OK reports whether every planned run was compared and passed on both
// sides.
func (c *KernelComparison) OK() bool {
	return c.Runs == c.Planned && c.Emulation == nil && c.Device == nil
}

// OutputElement is an element of a kernel's output: its name, its
// row-major index and the same as an index per axis.
type OutputElement struct {
	Output string
	Index  int64
	At     []int64
}

func (e *OutputElement) String() string {
	return fmt.Sprintf("output %s element %d %s", e.Output, e.Index, indexString(e.At))
}

// CompareKernels verifies each distinct kernel of ks as VerifyKernels does
// (bodies[i] is ks[i]'s body, opt the same options): under the CPU
// emulation at its real shapes, on seeded random inputs, against the
// reference. Each run is also given to dev on the same inputs (its whole
// grid), and the device's outputs are compared with the reference at the
// elements the verification compares (an element the device left holding
// the fill pattern, anywhere in an output, fails it; so does one it wrote
// outside an output's window) and with the emulation's. It returns a
// comparison per distinct kernel, in the order of ks. A kernel that fails
// on either side fails in its comparison, not in the error, which says
// why the comparison stopped: when the context ends, the kernels not
// reached have Runs below Planned, and the comparisons come back with
// the error.
func CompareKernels(ctx context.Context, ks []*Kernel, bodies []*ir.Graph, opt VerifyOptions, dev DeviceRunner) ([]*KernelComparison, error) {
	if dev == nil {
		return nil, fmt.Errorf("compare kernels: no device to run them on")
	}
	r, err := verifyKernels(ctx, ks, bodies, opt, dev)
	if r == nil {
		return nil, err
	}
	if err != nil {
		err = fmt.Errorf("compare kernels: %w", err)
	}
	byKernel := map[*Kernel]*KernelComparison{}
	var out []*KernelComparison
	for _, k := range ks {
		if byKernel[k] == nil {
			byKernel[k] = &KernelComparison{Kernel: k.Name, Schedule: k.Schedule.String()}
			out = append(out, byKernel[k])
		}
	}
	// A run the context's end cut short (under the emulation, in the
	// reference or on the device) was not compared.
	cut := func(err error) bool { return err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) }
	for i, p := range r.plans {
		c := byKernel[p.k]
		c.Planned++
		if i >= r.done || cut(r.errs[i]) || p.device != nil && cut(p.device.err) {
			if err == nil {
				err = ctx.Err()
			}
			continue
		}
		c.Runs++
		if chk := r.checks[i]; chk != nil {
			c.Sampled = c.Sampled || chk.Sampled
			c.EmulationRatio = math.Max(c.EmulationRatio, chk.WorstRatio)
		}
		c.Emulation = errors.Join(c.Emulation, r.errs[i])
		d := p.device
		if d == nil {
			continue
		}
		c.Elements += d.elements
		c.EmulationRatio = math.Max(c.EmulationRatio, d.emuRatio)
		c.DeviceRatio = math.Max(c.DeviceRatio, d.devRatio)
		if d.diffAt != nil && (c.DifferenceAt == nil || d.diff > c.Difference) {
			c.Difference, c.DifferenceAt = d.diff, d.diffAt
		}
		if d.err != nil {
			e := d.err
			if p.edge != 0 {
				e = fmt.Errorf("%w (%s)", e, p.edgeString())
			}
			c.Device = errors.Join(c.Device, e)
		}
	}
	return out, err
}

// deviceCheck is what a plan's run on a device found.
type deviceCheck struct {
	elements                 int64
	devRatio, emuRatio, diff float64
	diffAt                   *OutputElement
	// err is why the device fails: a *KernelMismatch, or the run's error.
	err error
}

// onDevice runs the plan's launch through dev on the plan's inputs and
// compares the outputs with the reference the check kept (p.ref) and with
// the emulation's (p.got). A plan whose emulation could not run, or whose
// check computed no reference, is not run.
func (p *verifyPlan) onDevice(ctx context.Context, dev DeviceRunner) *deviceCheck {
	d := &deviceCheck{}
	what := "verify kernel " + p.k.Name + " on the device"
	if p.err != nil || p.ref == nil || len(p.got) != len(p.outs) {
		d.err = fmt.Errorf("%s: not run, as its run under the emulation failed", what)
		return d
	}
	l := DeviceLaunch{Kernel: p.k.Name, Grid: p.k.Grid, Block: p.k.Block, Outputs: len(p.outs)}
	for _, v := range p.body.Inputs() {
		l.Args = append(l.Args, TensorBytes(p.feeds[p.body.Node(v).Name]))
	}
	l.Args = append(l.Args, p.rowCount...)
	sizes := make([]int, len(p.outs))
	for j, o := range p.outs {
		elems := o.Shape.NumElements()
		if w := p.windows[j]; w != nil {
			elems = w.Shape.NumElements()
		}
		sizes[j] = int(elems) * o.DType.Size()
		l.Args = append(l.Args, filled(sizes[j]))
	}
	raw, err := dev(ctx, l)
	if err != nil {
		d.err = fmt.Errorf("%s: %w", what, err)
		return d
	}
	if len(raw) != len(p.outs) {
		d.err = fmt.Errorf("%s: the device gave %d outputs, the kernel has %d", what, len(raw), len(p.outs))
		return d
	}
	got := make([][]byte, len(p.outs))
	for j := range p.outs {
		if len(raw[j]) != sizes[j] {
			d.err = fmt.Errorf("%s: the device gave %d bytes of output %d, not %d", what, len(raw[j]), j, sizes[j])
			return d
		}
		if got[j], _, err = p.windowed(j, raw[j], what); err != nil {
			d.err = err
			return d
		}
	}
	d.err = p.compareDevice(got, d)
	return d
}

// compareDevice compares a device's outputs (got, unwindowed) with the
// reference at the elements the check compared and with the emulation's,
// filling d in; it returns the device's worst mismatch, or the first of
// the elements it never wrote.
func (p *verifyPlan) compareDevice(got [][]byte, d *deviceCheck) error {
	var never, firstNever int64 = 0, -1
	neverOut := -1
	skipped := make([]map[int64]bool, len(p.outs))
	for j, o := range p.outs {
		skipped[j] = map[int64]bool{}
		if j < len(p.skipped) {
			for _, i := range p.skipped[j] {
				skipped[j][i] = true
			}
		}
		size := o.DType.Size()
		for i := range o.Shape.NumElements() {
			if !skipped[j][i] && emu.Unwritten(got[j], int(i)*size, size) {
				if never == 0 {
					firstNever, neverOut = i, j
				}
				never++
			}
		}
	}
	var worst *KernelMismatch
	visit := func(j int, i int64, want, mag, tol float64) {
		dt, size := p.outs[j].DType, p.outs[j].DType.Size()
		g, e := element(dt, got[j][int(i)*size:]), element(dt, p.got[j][int(i)*size:])
		d.elements++
		d.emuRatio = math.Max(d.emuRatio, errorRatio(dt, e, want, mag, tol))
		if r := errorRatio(dt, g, want, mag, tol); r > d.devRatio {
			d.devRatio = r
			if r > 1 {
				worst = p.mismatch(j, i, g, want, mag, allowance(dt, want, mag, tol))
			}
		}
		if r := diffRatio(dt, g, e, want, mag, tol); r > d.diff {
			d.diff = r
			d.diffAt = &OutputElement{Output: p.body.Outputs[j].Name, Index: i, At: unravel(i, p.outs[j].Shape)}
		}
	}
	for j, o := range p.body.Outputs {
		tol := p.tolerance(j)
		if p.ref.want != nil {
			w, m := p.ref.want[o.Name], p.ref.mag[o.Name]
			for i := range w.Len() {
				if !skipped[j][i] {
					visit(j, i, w.At(i), m.At(i), tol)
				}
			}
			continue
		}
		vals, mags := p.ref.vals[o.Name], p.ref.mags[o.Name]
		for n, i := range p.ref.idx[o.Name] {
			visit(j, i, vals[n], mags[n], tol)
		}
	}
	if never > 0 {
		want, mag := math.NaN(), math.NaN()
		if p.ref.want != nil {
			name := p.body.Outputs[neverOut].Name
			want, mag = p.ref.want[name].At(firstNever), p.ref.mag[name].At(firstNever)
		}
		m := p.mismatch(neverOut, firstNever, math.NaN(), want, mag, 0)
		m.NeverWritten, m.Where = never, "device"
		d.devRatio = math.Inf(1)
		return m
	}
	if worst != nil {
		worst.Where = "device"
		return worst
	}
	return nil
}

// allowance is the error ir.CompareWithin allows an element of dtype dt
// whose reference is want, of magnitude mag, at tolerance tol.
func allowance(dt ir.DType, want, mag, tol float64) float64 {
	return math.Max(tol*math.Max(math.Abs(ir.OverflowTo(dt, want)), mag), ir.AbsoluteFloor(dt, tol))
}

// diffRatio is |a - b| over the error allowed the element (whose
// reference is want, of magnitude mag): 0 when equal, both NaN or the
// same infinity, +Inf when one is NaN or an infinity the other is not,
// or where no error is allowed.
func diffRatio(dt ir.DType, a, b, want, mag, tol float64) float64 {
	switch {
	case math.IsNaN(a) || math.IsNaN(b):
		if math.IsNaN(a) == math.IsNaN(b) {
			return 0
		}
		return math.Inf(1)
	case math.IsInf(a, 0) || math.IsInf(b, 0):
		if a == b {
			return 0
		}
		return math.Inf(1)
	}
	diff := math.Abs(a - b)
	if diff == 0 {
		return 0
	}
	if tol <= 0 {
		return math.Inf(1)
	}
	return diff / allowance(dt, want, mag, tol)
}
