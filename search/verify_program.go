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
	distinct, bodies := distinctKernels(lp, ks)
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

// distinctKernels are the distinct kernels of a program's launches
// (ks[i] is the kernel of its preparation's launches, then its run's,
// in order), in order of first launch, with the body each is first
// launched with, each followed by its row buckets' kernels with the
// bodies they were printed for.
func distinctKernels(lp *lower.Program, ks []*cuda.Kernel) ([]*cuda.Kernel, []*ir.Graph) {
	launches := append(append([]*lower.Launch(nil), lp.Prep...), lp.Run...)
	seen := map[*cuda.Kernel]bool{}
	var distinct []*cuda.Kernel
	var bodies []*ir.Graph
	for i, k := range ks {
		if !seen[k] {
			seen[k] = true
			distinct, bodies = append(distinct, k), append(bodies, launches[i].Body)
			for _, b := range k.Buckets {
				// A row bucket's kernel, printed for its rows.
				if bk := b.Kernel; !seen[bk] && bk.Body != nil {
					seen[bk] = true
					distinct, bodies = append(distinct, bk), append(bodies, bk.Body)
				}
			}
		}
	}
	return distinct, bodies
}

// verifyReduced runs the pipeline on the model's architecture at the
// reduced size and checks its CUDA under emulation against the reference,
// on random inputs drawn as feeds say (Feeds.reduced).
func verifyReduced(ctx context.Context, md *Model, sat rules.SaturateOptions, m *cost.Model, feeds Feeds, stdout io.Writer) error {
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
	// The reduced cache is the reduced Seq's: --max-seq and a prefill's
	// capacity name the full size.
	small.Seq, small.MaxSeq, small.Cache = min(max(opt.Seq, opt.MaxSeq), 8), 0, 0
	if opt.Past >= 0 {
		small.Past = small.Seq - 1
	} else {
		// A runtime position keeps its symbol, over the reduced cache.
		small.PastMin, small.PastMax = 0, 0
	}
	g, err := corpus.BuildConfig(model+" (reduced)", corpus.Reduced(cfg), model[i+1:], small)
	if err != nil {
		return fmt.Errorf("verify %s: %w", model, err)
	}
	c, err := pipeline(ctx, g, sat, m)
	if err != nil {
		return fmt.Errorf("verify %s at the reduced size: %w", model, err)
	}
	if m != nil {
		if err := cuda.PrintBuckets(c.lowered, c.kernels, m.Ranked); err != nil {
			return fmt.Errorf("verify %s at the reduced size: %w", model, err)
		}
	}
	in, err := feeds.reduced(g).feed(g, 1, nil, ir.OpInput, ir.OpState, ir.OpWeight)
	if err != nil {
		return err
	}
	worst, where, err := runAtSymbols(g, in, nil, bucketEdges(c.lowered, c.kernels), func() (float64, error) {
		return emulateAgainstReference(ctx, model, g, c, in, nil)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the reduced configuration (%d launches, hidden 64, 2 layers at most) matches the reference interpreter under the CPU emulation%s (relative error %.2g)\n",
		len(c.kernels), where, worst)
	return nil
}

// emulateAgainstReference runs c's CUDA under the CPU emulation with feeds
// and compares it with the reference interpreter: element by element
// within each output's allowance (ir.Graph.Allowance: the precisions on
// its path in g, the model as given, so a rounding a rewrite introduces
// is not allowed for), and, because the reference's first-order
// magnitudes can grow large through norms and masked softmax, the whole
// result in the relative L2 sense (how far from the reference in units of
// its own size). With expect, the program's results are also compared
// with an outputs file's (compareOutputs), within the same allowances.
func emulateAgainstReference(ctx context.Context, model string, g *ir.Graph, c *compiled, feeds map[string]*ir.Tensor, expect *expectation) (float64, error) {
	opt := ir.EvalOptions{Magnitude: true}
	if ties := newRouteTies(ctx, g, c, feeds); ties != nil {
		opt.RouteChoice = ties.choose
	}
	want, err := ir.Eval(ctx, g, feeds, opt)
	if err != nil {
		return 0, fmt.Errorf("verify %s: the reference: %w", model, err)
	}
	outs, states, err := cuda.EmulateProgram(ctx, c.lowered, c.kernels, feeds, emu.Options{})
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", model, err)
	}
	if l := c.lowered.Step; l != nil {
		// A step's results are the rows of the sequences present.
		b, err := l.Unpad(feeds)
		if err != nil {
			return 0, fmt.Errorf("verify %s: %w", model, err)
		}
		present := func(m map[string]*ir.Tensor) map[string]*ir.Tensor {
			if err == nil {
				m, err = l.Present(m, b)
			}
			return m
		}
		outs, want.Outputs, want.Magnitudes = present(outs), present(want.Outputs), present(want.Magnitudes)
		if err != nil {
			return 0, fmt.Errorf("verify %s: %w", model, err)
		}
	}
	eps := ir.PathEps(g)
	var diff2, norm2, widest float64
	check := func(name string, v ir.Value, got, w, mag *ir.Tensor) error {
		widest = max(widest, eps[v], g.Node(v).DType.Eps())
		mm, err := ir.CompareWithin(got, w, mag, g.Allowance(v, eps, 1024))
		if err != nil {
			return err
		}
		if mm != nil {
			return fmt.Errorf("verify %s: %s differs from the reference: %v", model, name, mm)
		}
		for k := range w.Len() {
			if g, x := got.At(k), ir.OverflowTo(got.DType, w.At(k)); g == g && x == x && !math.IsInf(x, 0) && !math.IsInf(g, 0) {
				diff2 += (g - x) * (g - x)
				norm2 += x * x
			}
		}
		return nil
	}
	for _, o := range g.Outputs {
		if err := check("output "+o.Name, o.Value, outs[o.Name], want.Outputs[o.Name], want.Magnitudes[o.Name]); err != nil {
			return 0, err
		}
	}
	for _, u := range g.Updates {
		name := g.Node(u.State).Name
		if err := check("state "+name, u.Value, states[name], want.States[name], want.Magnitudes[name]); err != nil {
			return 0, err
		}
	}
	rel := math.Sqrt(diff2 / math.Max(norm2, math.SmallestNonzeroFloat64))
	if limit := relativeLimit(widest); rel > limit {
		return rel, fmt.Errorf("verify %s: the results are %.3g away from the reference relative to their size (at most %.3g for roundings of unit %.3g on their path)", model, rel, limit, widest)
	}
	if expect != nil {
		if err := expect.compare(g, outs, states, want.Magnitudes); err != nil {
			return rel, fmt.Errorf("verify %s: %w", model, err)
		}
	}
	return rel, nil
}

// verifyWhole runs an imported model's program whole under the emulation,
// with its own weights and random inputs drawn as feeds say, when it is
// small enough.
func verifyWhole(ctx context.Context, md *Model, c *compiled, feeds Feeds, stdout io.Writer) error {
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
	in, err := feeds.feed(g, 1, weights, ir.OpInput, ir.OpState)
	if err != nil {
		return err
	}
	rel, err := emulateAgainstReference(ctx, model, g, c, in, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  verify: the whole program matches the reference interpreter under the CPU emulation (relative error %.2g)\n", rel)
	return nil
}

// relativeLimit is the relative L2 error a verified program may have when
// the narrowest rounding on its outputs' paths has unit roundoff eps: a
// few thousand roundings of f32, 64 of anything narrower.
func relativeLimit(eps float64) float64 {
	if eps <= ir.F32.Eps() {
		return 1e-4
	}
	return 64 * eps
}
