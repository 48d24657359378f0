package measure

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// RelativeLimit is the relative L2 error (see RelativeError) a program may
// have in dtype dt against a reference: a few thousand roundings of the
// dtype's precision.
func RelativeLimit(dt ir.DType) float64 {
	if dt == ir.F32 || dt == ir.InvalidDType {
		return 1e-4
	}
	return 64 * dt.Eps()
}

// RelativeError is how far got is from want in units of want's size,
// sqrt(Σ(got-want)² / Σwant²), over the elements where want is finite. An
// element where want is finite and got is not (a NaN or an infinity the
// reference does not have) is an error, not a large number, since no
// bound should let it pass.
func RelativeError(got, want *ir.Tensor) (float64, error) {
	if got.Len() != want.Len() {
		return 0, fmt.Errorf("%d elements against %d", got.Len(), want.Len())
	}
	var diff2, norm2 float64
	for i := range want.Len() {
		g, w := got.At(i), want.At(i)
		if math.IsNaN(w) || math.IsInf(w, 0) {
			continue
		}
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return 0, fmt.Errorf("element %d is %v, the reference's %v", i, g, w)
		}
		diff2 += (g - w) * (g - w)
		norm2 += w * w
	}
	return math.Sqrt(diff2 / math.Max(norm2, math.SmallestNonzeroFloat64)), nil
}

// compareAll checks every output of got against want within the relative
// L2 bound of its dtype; ref names the reference in the error.
func compareAll(body *ir.Graph, got, want map[string]*ir.Tensor, ref string) error {
	for _, o := range body.Outputs {
		g, w := got[o.Name], want[o.Name]
		if g == nil || w == nil {
			return fmt.Errorf("output %s: missing from the candidate or %s", o.Name, ref)
		}
		rel, err := RelativeError(g, w)
		if err != nil {
			return fmt.Errorf("output %s differs from %s: %w", o.Name, ref, err)
		}
		dt := body.Node(o.Value).DType
		if limit := RelativeLimit(dt); rel > limit {
			return fmt.Errorf("output %s differs from %s: relative L2 error %.3g, at most %.3g for %s", o.Name, ref, rel, limit, dt)
		}
	}
	return nil
}

// checkNaive runs the naive program of body (every operation its own
// kernel, the same lowering and printer the compiler uses) on the same
// device with the same inputs, and compares every element of the
// candidate's outputs with its outputs: the reference at real shapes,
// where the reference interpreter would be too slow to compute them all.
func (g GPU) checkNaive(ctx context.Context, body *ir.Graph, feeds, got map[string]*ir.Tensor) error {
	want, err := RunNaive(ctx, g.Ctx, g.NVRTC, body, feeds)
	if err != nil {
		return fmt.Errorf("naive program: %w", err)
	}
	return compareAll(body, got, want, "the naive program on the device")
}

// RunNaive builds the naive program of graph g (rules.NaiveProgram,
// lowered and printed), compiles it with lib for the context's device,
// loads it, prepares it with feeds (weights by name) and runs it once on
// feeds (inputs by name), returning its outputs.
func RunNaive(ctx context.Context, c *gpu.Context, lib *nvrtc.Library, g *ir.Graph, feeds map[string]*ir.Tensor) (out map[string]*ir.Tensor, err error) {
	prog, err := rules.NaiveProgram(ctx, g, rules.SaturateOptions{})
	if err != nil {
		return nil, err
	}
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	if err != nil {
		return nil, err
	}
	ks, err := cuda.PrintProgram(lp)
	if err != nil {
		return nil, err
	}
	res, err := lib.Compile(ctx, cuda.NVRTCPrelude+"\n"+cuda.Source(ks), "naive.cu", nvrtc.Options{Arch: c.Device().Arch()})
	if err != nil {
		return nil, fmt.Errorf("nvrtc: %w", err)
	}
	p, err := gpu.LoadProgram(c, lp, ks, res.CUBIN)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	if err := p.Prepare(ctx, feeds); err != nil {
		return nil, err
	}
	return p.Run(feeds, nil)
}
