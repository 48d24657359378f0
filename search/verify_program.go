package search

import (
	"context"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// verifyKernels runs every distinct kernel of the program under the CPU
// emulation at its real shapes on random inputs, the large ones on a
// seeded sample of thread blocks with the reference computing only the
// elements they wrote (cuda.VerifyKernels: one compilation, the kernels
// run a group at a time to bound memory), and reports what it compared.
func verifyKernels(ctx context.Context, model string, lp *lower.Program, ks []*cuda.Kernel, stdout io.Writer) error {
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: kernels not run: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	start := time.Now()
	launches := append(append([]*lower.Launch(nil), lp.Prep...), lp.Run...)
	bodyOf := map[*cuda.Kernel]*ir.Graph{}
	var distinct []*cuda.Kernel
	for i, k := range ks {
		if _, ok := bodyOf[k]; !ok {
			bodyOf[k] = launches[i].Body
			distinct = append(distinct, k)
		}
	}
	bodies := make([]*ir.Graph, len(distinct))
	for i, k := range distinct {
		bodies[i] = bodyOf[k]
	}
	checks, err := cuda.VerifyKernels(ctx, distinct, bodies, cuda.VerifyOptions{Seed: 1})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("verify %s: stopped before the kernels were checked: %w", model, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("verify %s: a kernel at its real shapes differs from the reference: %w", model, err)
	}
	var whole, sampled, blocksRun, blocks int
	var elements int64
	worst := 0.0
	for _, c := range checks {
		if c.Sampled {
			sampled++
		} else {
			whole++
		}
		blocksRun, blocks, elements = blocksRun+c.BlocksRun, blocks+c.GridBlocks, elements+c.Elements
		worst = math.Max(worst, c.WorstRatio)
	}
	fmt.Fprintf(stdout, "  verify: %d distinct kernels at their real shapes under the CPU emulation match the reference (%d whole, %d on a sample of thread blocks; %d of %d blocks run, %d elements compared, worst error %.2g of the tolerance; %v)\n",
		len(distinct), whole, sampled, blocksRun, blocks, elements, worst, time.Since(start).Round(time.Millisecond))
	return nil
}

// verifyReduced runs the pipeline on the model's architecture at the
// reduced size and checks its CUDA under emulation against the reference.
func verifyReduced(ctx context.Context, md *Model, sat rules.SaturateOptions, m *cost.Model, stdout io.Writer) error {
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: skipped: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	model, opt := md.Name, md.Options.Build
	i := strings.LastIndexByte(model, ':')
	if i < 0 {
		return fmt.Errorf("verify %s: the model is not MODEL:KIND, so it has no reduced size", model)
	}
	var cfg *corpus.Config
	var err error
	if strings.HasSuffix(model[:i], ".json") {
		cfg, err = corpus.LoadConfig(model[:i])
	} else {
		cfg, err = corpus.EmbeddedConfig(model[:i])
	}
	if err != nil {
		return err
	}
	small := opt
	small.Seq, small.Past = min(opt.Seq, 8), min(opt.Seq, 8)-1
	g, err := corpus.BuildConfig(model+" (reduced)", corpus.Reduced(cfg), model[i+1:], small)
	if err != nil {
		return fmt.Errorf("verify %s: %w", model, err)
	}
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return fmt.Errorf("verify %s at the reduced size: %w", model, err)
	}
	feeds, err := ir.RandomFeeds(g, 1, ir.Typical)
	if err != nil {
		return err
	}
	rel, err := emulateAgainstReference(ctx, model, g, c, feeds, opt.DType)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the reduced configuration (%d launches, hidden 64, 2 layers at most) matches the reference interpreter under the CPU emulation (relative error %.2g)\n",
		len(c.kernels), rel)
	return nil
}

// emulateAgainstReference runs c's CUDA under the CPU emulation with feeds
// and compares it with the reference interpreter: element by element
// within ir.Tolerance, and, because the reference's first-order magnitudes
// can grow large through norms and masked softmax, the whole result in the
// relative L2 sense (how far from the reference in units of its own size).
func emulateAgainstReference(ctx context.Context, model string, g *ir.Graph, c *compiled, feeds map[string]*ir.Tensor, dt ir.DType) (float64, error) {
	want, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return 0, err
	}
	outs, states, err := cuda.EmulateProgram(ctx, c.lowered, c.kernels, feeds, emu.Options{})
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", model, err)
	}
	var diff2, norm2 float64
	check := func(name string, got, w, mag *ir.Tensor) error {
		mm, err := ir.Compare(got, w, mag, 1024)
		if err != nil {
			return err
		}
		if mm != nil {
			return fmt.Errorf("verify %s: %s differs from the reference: %v", model, name, mm)
		}
		for k := range w.Len() {
			if g, x := got.At(k), w.At(k); g == g && x == x && !math.IsInf(x, 0) {
				diff2 += (g - x) * (g - x)
				norm2 += x * x
			}
		}
		return nil
	}
	for name, w := range want.Outputs {
		if err := check("output "+name, outs[name], w, want.Magnitudes[name]); err != nil {
			return 0, err
		}
	}
	for name, w := range want.States {
		if err := check("state "+name, states[name], w, want.Magnitudes[name]); err != nil {
			return 0, err
		}
	}
	rel := math.Sqrt(diff2 / math.Max(norm2, math.SmallestNonzeroFloat64))
	if limit := relativeLimit(dt); rel > limit {
		return rel, fmt.Errorf("verify %s: the results are %.3g away from the reference relative to their size (at most %.3g for %s)", model, rel, limit, dt)
	}
	return rel, nil
}

// verifyWhole runs an imported model's program whole under the emulation,
// with its own weights and random inputs, when it is small enough.
func verifyWhole(ctx context.Context, md *Model, c *compiled, stdout io.Writer) error {
	model, g, weights := md.Name, md.Graph, md.Weights
	if _, err := exec.LookPath("g++"); err != nil {
		fmt.Fprintf(stdout, "  verify: skipped: the CPU emulation needs g++ (%v)\n", err)
		return nil
	}
	const maxElements = 16 << 20
	if c.lowered.TempBytes/4 > maxElements {
		fmt.Fprintf(stdout, "  verify: skipped: %d bytes of intermediates are too many for the CPU emulation (at most %d elements)\n", c.lowered.TempBytes, maxElements)
		return nil
	}
	feeds, err := ir.RandomLeaves(g, 1, ir.Typical, ir.OpInput, ir.OpState)
	if err != nil {
		return err
	}
	for name, w := range weights {
		feeds[name] = w
	}
	dt := ir.F32
	for _, o := range g.Outputs {
		if d := g.Node(o.Value).DType; d.IsFloat() && d.Eps() > dt.Eps() {
			dt = d
		}
	}
	rel, err := emulateAgainstReference(ctx, model, g, c, feeds, dt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the whole program matches the reference interpreter under the CPU emulation (relative error %.2g)\n", rel)
	return nil
}

// relativeLimit is the relative L2 error a verified program may have in
// dtype dt: a few thousand roundings of the dtype's precision.
func relativeLimit(dt ir.DType) float64 {
	if dt == ir.F32 || dt == ir.InvalidDType {
		return 1e-4
	}
	return 64 * dt.Eps()
}
