package search

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/internal/bug"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
)

// source is what a program is compiled from: the model, how it is
// searched and priced, and the architecture NVRTC compiles for.
type source struct {
	model *Model
	sat   rules.SaturateOptions
	m     *cost.Model
	arch  string
	feeds Feeds // how the verification draws the whole program's inputs
}

// final is a program ready to write: lowered, printed, compiled by NVRTC
// when it is present, and verified unless verification was turned off.
type final struct {
	*compiled
	src, ptx  string
	cubin     []byte
	resources map[string]nvrtc.Resources
	// compiler is the NVRTC that compiled ptx and cubin (nil without).
	compiler *plan.Compiler
	// verified says what verification passed ("" when it was off).
	verified string
}

// rerank prices each kernel's best few schedules again with the
// registers and shared memory NVRTC reports for them (the cost model only
// guessed those) and the instructions their main loops issue (read from
// the PTX: a kernel whose loop is heavy with address arithmetic is bound
// by issue, not by its arithmetic), and reprints the kernels whose best
// schedule changed; it returns how many changed.
func rerank(ctx context.Context, lib *nvrtc.Library, c *compiled, m *cost.Model, arch string) (int, error) {
	compileUnit := func(unit string) (map[string]cost.Resources, error) {
		res, err := lib.Compile(ctx, cuda.NVRTCPrelude+"\n"+unit, "schedules.cu", nvrtc.Options{Arch: arch})
		if err != nil {
			return nil, err
		}
		out := map[string]cost.Resources{}
		for name, r := range res.Kernels {
			out[name] = cost.Resources{Registers: r.Registers, Shared: r.SharedBytes, LoopInstructions: cuda.MainLoopInstructions(res.PTX, name), Loop: cuda.LoopMix(res.PTX, name)}
		}
		return out, nil
	}
	ks, changed, err := cuda.Rerank(c.lowered, c.kernels, compileUnit, m.Resourced)
	if err != nil {
		return 0, err
	}
	c.kernels = ks
	return changed, nil
}

// loadNVRTC opens NVRTC for finalize (nvrtc.Load); a test that compiles
// hundreds of small models replaces it to leave NVRTC out.
var loadNVRTC = nvrtc.Load

// finalize makes a printed program ready to write: NVRTC (when present)
// re-ranks the schedules by the resources it reports (unless fast: an
// insurance program wants to be verified soon more than it wants its
// best schedules) and compiles the kernels, then the program is verified
// (when verify is set): every distinct kernel at its real shapes, and
// the whole program's wiring at a reduced size (a corpus or config
// model) or whole (any other). It reports on log as it goes.
func finalize(ctx context.Context, src *source, c *compiled, verify, fast bool, log io.Writer) (*final, error) {
	model, arch, m := src.model.Name, src.arch, src.m
	f := &final{compiled: c, resources: map[string]nvrtc.Resources{}}
	lib, libErr := loadNVRTC()
	if libErr == nil {
		if fast {
			fmt.Fprintf(log, "  schedules: the cost model's first (not priced again with NVRTC's registers and shared memory: this program is the insurance, verified first)\n")
		} else {
			changed, err := rerank(ctx, lib, c, m, arch)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("compile %s: NVRTC: %w", model, ctx.Err())
				}
				return nil, fmt.Errorf("compile %s: %w", model, err)
			}
			fmt.Fprintf(log, "  schedules: %d distinct kernels priced again with NVRTC's registers and shared memory for their best %d schedules; %d changed schedule\n",
				len(cuda.Distinct(c.kernels)), 1+cuda.Alternatives, changed)
		}
	}
	// The row buckets come after the reranking, which may change the
	// maximum's schedule that a bucket would share.
	if err := cuda.PrintBuckets(c.lowered, c.kernels, m.Ranked); err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	f.src = cuda.NVRTCPrelude + "\n" + cuda.Source(c.kernels)
	// NVRTC compiles the kernels while they are verified: the two share
	// nothing, NVRTC runs outside Go's scheduler and the verification
	// mostly waits on the emulation, so even a single Go thread on a busy
	// machine gets both done sooner. Their lines come in that order.
	vctx, stopVerify := context.WithCancel(ctx)
	defer stopVerify()
	cctx, stopCompile := context.WithCancel(ctx)
	defer stopCompile()
	var compileLog bytes.Buffer
	compiled := make(chan error, 1)
	go func() {
		err := compileKernels(cctx, lib, libErr, f, model, arch, &compileLog)
		if err != nil && cctx.Err() == nil {
			// Rejected: the verification is of no use. (Stopped
			// because the verification rejected the program: its
			// error is the one to report.)
			stopVerify()
		}
		compiled <- err
	}()
	var what bytes.Buffer
	var verr error
	if verify {
		if verr = verifyProgram(vctx, src, c, &what); verr != nil && vctx.Err() == nil {
			// Rejected: its PTX is of no use.
			stopCompile()
		}
	}
	cerr := <-compiled
	log.Write(compileLog.Bytes())
	if verr != nil && vctx.Err() == nil {
		return nil, verr
	}
	if cerr != nil {
		return nil, cerr
	}
	if verr != nil {
		return nil, verr
	}
	// A row bucket's schedule was the cost model's choice with guessed
	// registers and shared memory: one that does not fit as compiled
	// serves no step (its launch would fail); its bucket takes the next.
	if dropped := cuda.DropUnfit(c.kernels, func(k *cuda.Kernel) error {
		r, ok := f.resources[k.Name]
		if !ok || k.Body == nil {
			return nil
		}
		_, err := m.Resourced(k.Body, k.Schedule, cost.Resources{Registers: r.Registers, Shared: r.SharedBytes})
		return err
	}); len(dropped) > 0 {
		fmt.Fprintf(log, "  row buckets: %d kernels do not fit the device as compiled and give their buckets to the next: %s\n", len(dropped), strings.Join(dropped, "; "))
	}
	if !verify {
		return f, nil
	}
	log.Write(what.Bytes())
	f.verified = strings.TrimSpace(strings.ReplaceAll(what.String(), "\n  ", "; "))
	f.verified = strings.TrimPrefix(f.verified, "verify: ")
	// The record of what was verified is part of the output, which must
	// not change from run to run: drop the wall times.
	f.verified = verifyTime.ReplaceAllString(f.verified, ")")
	return f, nil
}

// compileKernels compiles f's source with NVRTC (lib, or libErr when it
// could not be loaded: then the folder embeds no kernels), setting f's
// PTX, CUBIN, resources and compiler, and reports on log.
func compileKernels(ctx context.Context, lib *nvrtc.Library, libErr error, f *final, model, arch string, log io.Writer) error {
	if libErr != nil {
		fmt.Fprintf(log, "  nvrtc: not compiled: %v\n", libErr)
		return nil
	}
	res, err := lib.Compile(ctx, f.src, KernelsFile, nvrtc.Options{Arch: arch})
	if err != nil {
		if ctx.Err() != nil {
			// Abandoned (the budget, Ctrl-C), not rejected.
			return fmt.Errorf("compile %s: NVRTC: %w", model, ctx.Err())
		}
		return bug.New(rejectedBodies(f.compiled, err), fmt.Errorf("compile %s: NVRTC rejected the generated CUDA (a printer bug): %w", model, err))
	}
	f.resources, f.ptx, f.cubin = res.Kernels, res.PTX, res.CUBIN
	regs, smem, spills, stack, framed := 0, 0, 0, 0, 0
	for _, r := range res.Kernels {
		regs, smem, spills, stack = max(regs, r.Registers), max(smem, r.SharedBytes), spills+r.SpillStores, max(stack, r.StackBytes)
		if r.StackBytes > 0 {
			framed++
		}
	}
	major, minor := lib.Version()
	f.compiler = &plan.Compiler{Version: fmt.Sprintf("%d.%d", major, minor), Options: res.Options}
	fmt.Fprintf(log, "  nvrtc %d.%d %s: %d distinct kernels compiled for %d launches; registers up to %d, shared memory up to %d bytes, %d bytes spilled, %d kernels with a stack frame (up to %d bytes)\n",
		major, minor, arch, len(res.Kernels), len(f.kernels), regs, smem, spills, framed, stack)
	return nil
}

// verifyProgram verifies a printed program, writing what it checked to
// out: every distinct kernel at its real shapes, and the whole program's
// wiring at a reduced size (a corpus or config model) or whole (any
// other).
func verifyProgram(ctx context.Context, src *source, c *compiled, out io.Writer) error {
	// The program's wiring is checked (whole or at the reduced size)
	// while its kernels run at their real shapes: the two share nothing
	// but the machine, and the kernels' check spends much of its time
	// waiting on the emulation. Its lines follow the kernels'.
	var wiring bytes.Buffer
	wiringErr := make(chan error, 1)
	wctx, stopWiring := context.WithCancel(ctx)
	defer stopWiring()
	go func() {
		if src.model.reducible() {
			wiringErr <- verifyReduced(wctx, src.model, src.sat, src.m, src.feeds, &wiring)
		} else {
			wiringErr <- verifyWhole(wctx, src.model, c, src.feeds, &wiring)
		}
	}()
	kernelsErr := verifyKernels(ctx, src.model.Name, c.lowered, c.kernels, out)
	if kernelsErr != nil {
		stopWiring()
	}
	werr := <-wiringErr
	if kernelsErr != nil {
		return kernelsErr
	}
	out.Write(wiring.Bytes())
	return werr
}

// verifyTime matches the wall time that ends a verify line's parenthesis.
var verifyTime = regexp.MustCompile(`; [0-9hms.µ]+\)`)

// rejectedBodies is the failing term of a program NVRTC rejected: the
// bodies of the kernels its message names (every kernel's when it names
// none), each after its kernel's name.
func rejectedBodies(c *compiled, err error) string {
	launches := append(append([]*lower.Launch(nil), c.lowered.Prep...), c.lowered.Run...)
	var named, all []string
	seen := map[*cuda.Kernel]bool{}
	for i, k := range c.kernels {
		if seen[k] || i >= len(launches) {
			continue
		}
		seen[k] = true
		term := k.Name + ": " + launches[i].Body.String()
		all = append(all, term)
		if strings.Contains(err.Error(), k.Name) {
			named = append(named, term)
		}
	}
	if len(named) == 0 {
		named = all
	}
	return strings.Join(named, "\n")
}
