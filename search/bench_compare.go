package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/plan"
)

// CompareOptions say how CompareKernels compares a folder's kernels.
type CompareOptions struct {
	// Seed draws each kernel's inputs, mixed with its name as the
	// verification does (0 means 1, the verification's seed).
	Seed uint64
	// Budget bounds the comparison's time (0: no bound): the kernels not
	// reached by then are reported as not compared.
	Budget time.Duration
	// Device, when set, runs the launches instead of device 0 through
	// the CUDA driver (a test's made-up device), and DeviceName names it.
	Device     cuda.DeviceRunner
	DeviceName string
}

// CompareReport is what CompareKernels found; its JSON form is what
// "lumsearch bench DIR --compare-kernels --json" prints.
type CompareReport struct {
	Dir   string `json:"dir"`
	Model string `json:"model"`
	// Device names the GPU, Module what ran on it (the CUBIN or PTX the
	// host library embeds, or kernels.cu compiled again for the device).
	Device string `json:"device"`
	Module string `json:"module"`
	Seed   uint64 `json:"seed"`
	// Budget is the time allowed (0: no bound), Elapsed the time taken.
	Budget  time.Duration `json:"-"`
	Elapsed time.Duration `json:"-"`
	// Kernels are the comparisons of the distinct kernels, in order of
	// first launch (preparation first).
	Kernels []*cuda.KernelComparison `json:"-"`
	// Stopped says why some kernels were not compared ("" when every one
	// was): the budget ran out.
	Stopped string `json:"stopped,omitempty"`
}

// Disagreeing are the kernels compared that failed, on the GPU, under the
// emulation or both.
func (r *CompareReport) Disagreeing() []*cuda.KernelComparison {
	var out []*cuda.KernelComparison
	for _, c := range r.Kernels {
		if c.Runs > 0 && (c.Emulation != nil || c.Device != nil) {
			out = append(out, c)
		}
	}
	return out
}

// NotCompared counts the kernels some of whose runs were not compared.
func (r *CompareReport) NotCompared() int {
	n := 0
	for _, c := range r.Kernels {
		if c.Runs < c.Planned {
			n++
		}
	}
	return n
}

// OK reports whether every kernel was compared and agreed: on the GPU and
// under the emulation with the reference, each within the verifier's
// allowance.
func (r *CompareReport) OK() bool {
	return len(r.Disagreeing()) == 0 && r.NotCompared() == 0
}

// Verdict is the report's last line, without "verdict: ": "agree", or
// "DISAGREE", or "incomplete", then what it rests on.
func (r *CompareReport) Verdict() string {
	if bad := r.Disagreeing(); len(bad) > 0 {
		names := make([]string, len(bad))
		for i, c := range bad {
			names[i] = c.Kernel
		}
		return fmt.Sprintf("DISAGREE: %d of %d kernels fail (%s)%s", len(bad), len(r.Kernels), strings.Join(names, ", "), r.notComparedText())
	}
	if n := r.NotCompared(); n == len(r.Kernels) {
		return "incomplete: no kernel compared" + r.notComparedText()
	} else if n > 0 {
		return fmt.Sprintf("incomplete: the %d kernels compared agree%s", len(r.Kernels)-n, r.notComparedText())
	}
	var gpuWorst, diff float64
	for _, c := range r.Kernels {
		gpuWorst, diff = math.Max(gpuWorst, c.DeviceRatio), math.Max(diff, c.Difference)
	}
	return fmt.Sprintf("agree: all %d kernels match the reference on the GPU and under the emulation (worst GPU error %s of the allowance, largest GPU-emulation difference %s)",
		len(r.Kernels), ratioText(gpuWorst), ratioText(diff))
}

func (r *CompareReport) notComparedText() string {
	n := r.NotCompared()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of %d kernels not compared: %s", n, len(r.Kernels), r.Stopped)
}

// ratioText prints a ratio to the allowance.
func ratioText(x float64) string {
	if math.IsInf(x, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.3g", x)
}

// compareKernelJSON is a kernel's line of the JSON report. A ratio is
// null when it is infinite (a NaN, an infinity or an exact value that
// differs, or an element never written) or was not computed.
type compareKernelJSON struct {
	Kernel     string   `json:"kernel"`
	Schedule   string   `json:"schedule"`
	Runs       int      `json:"runs"`
	Planned    int      `json:"planned_runs"`
	Sampled    bool     `json:"sampled"`
	Elements   int64    `json:"elements"`
	GPU        *float64 `json:"gpu_error_ratio"`
	Emulation  *float64 `json:"emulation_error_ratio"`
	Difference *float64 `json:"difference_ratio"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
}

// WriteJSON writes the report as one JSON object: the fields above, "ok",
// "verdict", "elapsed_s", "budget_s" and "kernels".
func (r *CompareReport) WriteJSON(w io.Writer) error {
	finite := func(x float64) *float64 {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil
		}
		return &x
	}
	var ks []compareKernelJSON
	for _, c := range r.Kernels {
		k := compareKernelJSON{Kernel: c.Kernel, Schedule: c.Schedule, Runs: c.Runs, Planned: c.Planned, Sampled: c.Sampled, Elements: c.Elements, OK: c.OK()}
		if c.Runs > 0 {
			k.GPU, k.Emulation, k.Difference = finite(c.DeviceRatio), finite(c.EmulationRatio), finite(c.Difference)
		}
		if err := errors.Join(c.Emulation, c.Device); err != nil {
			k.Error = err.Error()
		}
		ks = append(ks, k)
	}
	data, err := json.Marshal(struct {
		*CompareReport
		OK      bool                `json:"ok"`
		Verdict string              `json:"verdict"`
		Elapsed float64             `json:"elapsed_s"`
		Budget  float64             `json:"budget_s,omitempty"`
		Kernels []compareKernelJSON `json:"kernels"`
	}{r, r.OK(), r.Verdict(), r.Elapsed.Seconds(), r.Budget.Seconds(), ks})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// WriteText writes the report: a line on what ran where, a table with a
// row per distinct kernel (its schedule, the runs and elements compared,
// the worst error on the GPU and under the emulation in units of the
// verifier's allowance, the largest difference between the two in the
// same units, and whether it passes), the failures in full, and the
// verdict line.
func (r *CompareReport) WriteText(w io.Writer) error {
	module := ""
	if r.Module != "" {
		module = " (" + r.Module + ")"
	}
	fmt.Fprintf(w, "compare kernels of %s (%s) on %s%s with the CPU emulation, seed %d\n", r.Dir, r.Model, r.Device, module, r.Seed)
	fmt.Fprintf(w, "each distinct kernel on the same random inputs on both, against the reference at the elements verification compares; errors in units of the verifier's allowance\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KERNEL\tSCHEDULE\tRUNS\tELEMENTS\tGPU ERR\tEMU ERR\tGPU-EMU\tRESULT\n")
	for _, c := range r.Kernels {
		result := "ok"
		switch {
		case c.Device != nil && c.Emulation != nil:
			result = "FAIL (both)"
		case c.Device != nil:
			result = "FAIL (GPU)"
		case c.Emulation != nil:
			result = "FAIL (emulation)"
		case c.Runs == 0:
			result = "not compared"
		case c.Runs < c.Planned:
			result = "partly compared"
		}
		runs := fmt.Sprint(c.Runs)
		if c.Planned != c.Runs || c.Planned > 1 {
			runs = fmt.Sprintf("%d/%d", c.Runs, c.Planned)
		}
		elements := fmt.Sprint(c.Elements)
		if c.Sampled {
			elements += " (sampled)"
		}
		gpuErr, emuErr, diff := "-", "-", "-"
		if c.Runs > 0 {
			gpuErr, emuErr, diff = ratioText(c.DeviceRatio), ratioText(c.EmulationRatio), ratioText(c.Difference)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Kernel, c.Schedule, runs, elements, gpuErr, emuErr, diff, result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Disagreeing() {
		if c.Emulation != nil {
			fmt.Fprintf(w, "%s under the emulation: %s\n", c.Kernel, indentLines(c.Emulation.Error()))
		}
		if c.Device != nil {
			fmt.Fprintf(w, "%s on the GPU: %s\n", c.Kernel, indentLines(c.Device.Error()))
		}
		if c.DifferenceAt != nil && !math.IsInf(c.Difference, 0) {
			fmt.Fprintf(w, "%s: largest GPU-emulation difference at %v\n", c.Kernel, c.DifferenceAt)
		}
	}
	budget := ""
	if r.Budget > 0 {
		budget = fmt.Sprintf(" of a budget of %v", r.Budget)
	}
	fmt.Fprintf(w, "took %v%s\n", r.Elapsed.Round(time.Millisecond), budget)
	_, err := fmt.Fprintf(w, "verdict: %s\n", r.Verdict())
	return err
}

// indentLines indents the lines after the first of a joined error.
func indentLines(s string) string {
	return strings.ReplaceAll(s, "\n", "\n  ")
}

// CompareKernels runs each distinct kernel of an output folder's program
// (plan.json's launches, whose kernels must print DIR/kernels.cu exactly,
// as bench checks) on device 0 and under the CPU emulation, on the same
// inputs, drawn as the verification draws them (cuda.CompareKernels: the
// same seeded random inputs, runtime positions within their range and at
// both ends, every row present), and compares each side's outputs with
// the reference within the verifier's allowance, and the GPU's with the
// emulation's. The GPU runs the module the folder's host library embeds
// (its CUBIN when the device is the folder's architecture, else kernels.cu
// compiled by NVRTC for the device, else the embedded PTX). A kernel that
// disagrees is in the report (CompareReport.OK says whether all agree),
// not the error; an error says the comparison could not be made: no
// folder, no GPU (wrapping gpu.ErrNoDevice, a KindNoDevice error), no
// g++ for the emulation, or ctx ended. With o.Budget, the kernels not
// compared when it runs out are reported as such.
func CompareKernels(ctx context.Context, dir string, o CompareOptions) (_ *CompareReport, err error) {
	start := time.Now()
	seed := o.Seed
	if seed == 0 {
		seed = 1
	}
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("compare kernels of %s: the CPU emulation needs g++: %w", dir, err)
	}
	var dev *gpu.Device
	if o.Device == nil {
		// Say there is no GPU before reading the folder, not after.
		if dev, err = openDevice(); err != nil {
			return nil, fmt.Errorf("compare kernels of %s on a GPU: %w", dir, err)
		}
	}
	pl, err := readPlan(dir)
	if err != nil {
		return nil, fmt.Errorf("compare kernels of %s: %w", dir, err)
	}
	if err := checkFiles(dir, pl); err != nil {
		return nil, fmt.Errorf("compare kernels of %s: %w", dir, err)
	}
	src, srcPath, err := readKernelsFile(dir)
	if err != nil {
		return nil, fmt.Errorf("compare kernels of %s: %w", dir, err)
	}
	fp, err := loadFolderProgram(dir, pl, src, srcPath)
	if err != nil {
		return nil, fmt.Errorf("compare kernels of %s: %w", dir, err)
	}
	rep := &CompareReport{Dir: dir, Model: pl.Model, Seed: seed, Budget: o.Budget, Device: o.DeviceName}
	run := o.Device
	if run == nil {
		g, err := openGPURunner(ctx, dev, dir, pl, src)
		if err != nil {
			return nil, fmt.Errorf("compare kernels of %s on a GPU: %w", dir, err)
		}
		defer func() { err = errors.Join(err, g.close()) }()
		rep.Device, rep.Module, run = g.device, g.module, g.run
	}
	distinct, bodies := distinctKernels(fp.lp, fp.ks)
	cctx := ctx
	if o.Budget > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, o.Budget)
		defer cancel()
	}
	rep.Kernels, err = cuda.CompareKernels(cctx, distinct, bodies, cuda.VerifyOptions{Seed: seed}, run)
	rep.Elapsed = time.Since(start)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("compare kernels of %s: stopped: %w", dir, ctx.Err())
	case cctx.Err() != nil && rep.Kernels != nil:
		rep.Stopped = fmt.Sprintf("the budget of %v ran out", o.Budget)
	default:
		return nil, fmt.Errorf("compare kernels of %s: %w", dir, err)
	}
	return rep, nil
}

// gpuRunner runs kernels of a folder's module on device 0, one launch at a
// time, each on buffers of its own (cuda.DeviceRunner).
type gpuRunner struct {
	c      *gpu.Context
	mod    *gpu.Module
	funcs  map[string]*gpu.Function
	device string // the GPU's name
	module string // what the module is
}

// openDevice opens the CUDA driver and its device 0; without either, a
// KindNoDevice error.
func openDevice() (*gpu.Device, error) {
	d, err := gpu.Open()
	if err != nil {
		return nil, withKind(KindNoDevice, err)
	}
	dev, err := d.Device(0)
	if err != nil {
		return nil, withKind(KindNoDevice, err)
	}
	return dev, nil
}

// openGPURunner loads the folder's module on dev: the CUBIN the host
// library embeds when the device is the folder's architecture, else
// kernels.cu (src) compiled by NVRTC for the device, else the embedded
// PTX, which the driver compiles.
func openGPURunner(ctx context.Context, dev *gpu.Device, dir string, pl *plan.Plan, src []byte) (_ *gpuRunner, err error) {
	library, err := os.ReadFile(filepath.Join(dir, LibraryFile))
	if err != nil {
		return nil, withKind(KindInput, err)
	}
	ptx, cubin, err := cuda.EmbeddedModule(string(library))
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("%s: %w", LibraryFile, err))
	}
	g := &gpuRunner{funcs: map[string]*gpu.Function{}, device: dev.Name}
	var image []byte
	switch lib, libErr := loadNVRTC(); {
	case dev.Arch() == pl.Arch && len(cubin) > 0:
		image, g.module = cubin, fmt.Sprintf("the %s CUBIN %s embeds", pl.Arch, LibraryFile)
	case libErr == nil:
		major, minor := lib.Version()
		res, err := lib.Compile(ctx, string(src), KernelsFile, nvrtc.Options{Arch: dev.Arch()})
		if err != nil {
			return nil, fmt.Errorf("NVRTC %d.%d does not compile %s for %s: %w", major, minor, KernelsFile, dev.Arch(), err)
		}
		image, g.module = res.CUBIN, fmt.Sprintf("%s compiled by NVRTC %d.%d for %s", KernelsFile, major, minor, dev.Arch())
	case ptx != "":
		image, g.module = []byte(ptx), fmt.Sprintf("the PTX %s embeds, compiled by the driver for %s", LibraryFile, dev.Arch())
	default:
		return nil, fmt.Errorf("%s embeds no module for %s and NVRTC is missing (%v)", LibraryFile, dev.Arch(), libErr)
	}
	if g.c, err = dev.PrimaryContext(); err != nil {
		return nil, err
	}
	if g.mod, err = g.c.LoadModule(image); err != nil {
		return nil, errors.Join(err, g.c.Release())
	}
	return g, nil
}

// run runs one launch: a buffer per argument, uploaded, the launch, then
// the outputs read back and every buffer freed.
func (g *gpuRunner) run(ctx context.Context, l cuda.DeviceLaunch) (_ [][]byte, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.Outputs < 0 || l.Outputs > len(l.Args) {
		return nil, fmt.Errorf("launch %s: %d outputs of %d arguments", l.Kernel, l.Outputs, len(l.Args))
	}
	fn, ok := g.funcs[l.Kernel]
	if !ok {
		if fn, err = g.mod.Function(l.Kernel); err != nil {
			return nil, err
		}
		g.funcs[l.Kernel] = fn
	}
	bufs := make([]*gpu.Buffer, 0, len(l.Args))
	defer func() {
		for _, b := range bufs {
			err = errors.Join(err, b.Free())
		}
	}()
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		b, err := g.c.Alloc(max(len(a), 1))
		if err != nil {
			return nil, fmt.Errorf("launch %s: argument %d: %w", l.Kernel, i, err)
		}
		bufs = append(bufs, b)
		if len(a) > 0 {
			if err := b.Upload(a); err != nil {
				return nil, fmt.Errorf("launch %s: argument %d: %w", l.Kernel, i, err)
			}
		}
		args[i] = b
	}
	if err := fn.Launch(l.Grid, l.Block, 0, nil, args...); err != nil {
		return nil, err
	}
	if err := g.c.Synchronize(); err != nil {
		return nil, fmt.Errorf("launch %s: %w", l.Kernel, err)
	}
	first := len(l.Args) - l.Outputs
	outs := make([][]byte, l.Outputs)
	for j := range outs {
		outs[j] = make([]byte, len(l.Args[first+j]))
		if len(outs[j]) > 0 {
			if err := bufs[first+j].Download(outs[j]); err != nil {
				return nil, fmt.Errorf("launch %s: output %d: %w", l.Kernel, j, err)
			}
		}
	}
	return outs, nil
}

// close unloads the module and releases the context.
func (g *gpuRunner) close() error {
	return errors.Join(g.mod.Unload(), g.c.Release())
}
