package measure

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
)

// maxChecked bounds the output elements a GPU measurement compares with
// the reference (ir.EvalAt computes only those).
const maxChecked = 4096

// GPU measures candidates on a device: the kernel is printed, compiled
// by NVRTC for the device's architecture and loaded; one run's outputs are
// checked: when they are large (more than maxChecked elements), all of
// them against the naive program of the same body run on the same device
// (the reference at real shapes, within a relative L2 bound), and always a
// seeded sample of elements against the reference interpreter. Then it is
// timed with CUDA events, each run after an L2 flush (a memset of a buffer
// twice the L2's size), after Warmup untimed runs, at least Repeats times
// and until the times settle or MaxTime (rule).
type GPU struct {
	Ctx     *gpu.Context
	NVRTC   *nvrtc.Library
	Warmup  int           // untimed runs first (0: 2)
	MaxTime time.Duration // bound on the timed runs once Repeats are done (0: 2 s)
}

// Measure checks and times one candidate.
func (g GPU) Measure(ctx context.Context, req Request) Response {
	body, k, err := candidate(req, "candidate")
	if err != nil {
		return failed(req.ID, "%v", err)
	}
	res, err := g.NVRTC.Compile(ctx, cuda.NVRTCPrelude+"\n"+cuda.Source([]*cuda.Kernel{k}), "candidate.cu", nvrtc.Options{Arch: g.Ctx.Device().Arch()})
	if err != nil {
		return failed(req.ID, "nvrtc: %v", err)
	}
	var resp Response
	err = g.Ctx.Do(func() error {
		var err error
		resp, err = g.run(ctx, req, k, body, res.CUBIN)
		return err
	})
	if err != nil {
		return failed(req.ID, "%v", err)
	}
	resp.Schedule = k.Schedule.String()
	return resp
}

// run loads, checks and times one compiled candidate.
func (g GPU) run(ctx context.Context, req Request, k *cuda.Kernel, body *ir.Graph, image []byte) (Response, error) {
	mod, err := g.Ctx.LoadModule(image)
	if err != nil {
		return Response{}, err
	}
	defer mod.Unload()
	fn, err := mod.Function(k.Name)
	if err != nil {
		return Response{}, err
	}
	feeds, err := cuda.KernelInputs(body, req.Seed)
	if err != nil {
		return Response{}, err
	}
	var bufs []*gpu.Buffer
	defer func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	}()
	alloc := func(n int) (*gpu.Buffer, error) {
		b, err := g.Ctx.Alloc(max(n, 1))
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	var args []any
	for _, v := range body.Inputs() {
		data := cuda.EncodeTensor(feeds[body.Node(v).Name])
		b, err := alloc(len(data))
		if err != nil {
			return Response{}, err
		}
		if err := b.Upload(data); err != nil {
			return Response{}, err
		}
		args = append(args, b)
	}
	var outs []*gpu.Buffer
	for _, o := range body.Outputs {
		n := body.Node(o.Value)
		b, err := alloc(int(n.Shape.NumElements()) * n.DType.Size())
		if err != nil {
			return Response{}, err
		}
		outs = append(outs, b)
		args = append(args, b)
	}
	launch := func() error { return fn.Launch(k.Grid, k.Block, 0, nil, args...) }
	if err := launch(); err != nil {
		return Response{}, err
	}
	if err := g.Ctx.Synchronize(); err != nil {
		return Response{}, err
	}
	got, err := download(body, outs)
	if err != nil {
		return Response{}, err
	}
	var large bool
	for _, o := range body.Outputs {
		large = large || body.Node(o.Value).Shape.NumElements() > maxChecked
	}
	if large {
		if err := g.checkNaive(ctx, body, feeds, got); err != nil {
			return Response{}, err
		}
	}
	checked, err := check(ctx, body, feeds, got, req.Seed)
	if err != nil {
		return Response{}, err
	}
	// Time it: an L2 flush before each run, so every run reads its
	// operands from DRAM as in a model's run.
	flush, err := g.Ctx.NewL2Flush()
	if err != nil {
		return Response{}, err
	}
	defer flush.Free()
	start, err := g.Ctx.NewEvent()
	if err != nil {
		return Response{}, err
	}
	defer start.Destroy()
	end, err := g.Ctx.NewEvent()
	if err != nil {
		return Response{}, err
	}
	defer end.Destroy()
	warmup := g.Warmup
	if warmup <= 0 {
		warmup = 2
	}
	for range warmup {
		if err := launch(); err != nil {
			return Response{}, err
		}
	}
	times, err := rule(req, g.MaxTime).Repeat(func() (float64, error) {
		if err := flush.Flush(); err != nil {
			return 0, err
		}
		if err := start.Record(nil); err != nil {
			return 0, err
		}
		if err := launch(); err != nil {
			return 0, err
		}
		if err := end.Record(nil); err != nil {
			return 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, err
		}
		ms, err := gpu.Elapsed(start, end)
		return float64(ms) / 1e3, err
	})
	if err != nil {
		return Response{}, err
	}
	med, iqr := timing.MedianIQR(times)
	return Response{OK: true, Where: WhereGPU, Median: med, IQR: iqr, Samples: len(times), Checked: checked}, nil
}

// download reads the kernel's outputs back, by output name.
func download(body *ir.Graph, outs []*gpu.Buffer) (map[string]*ir.Tensor, error) {
	got := map[string]*ir.Tensor{}
	for j, o := range body.Outputs {
		n := body.Node(o.Value)
		data := make([]byte, int(n.Shape.NumElements())*n.DType.Size())
		if err := outs[j].Download(data); err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		t, err := cuda.DecodeTensor(ir.ValueType{Shape: n.Shape, DType: n.DType}, data)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		got[o.Name] = t
	}
	return got, nil
}

// check compares a seeded sample of each output's elements (all of a
// small output) with the reference computed for just those elements.
func check(ctx context.Context, body *ir.Graph, feeds map[string]*ir.Tensor, got map[string]*ir.Tensor, seed uint64) (int64, error) {
	rng := rand.New(rand.NewPCG(seed, 0xc4ec))
	want := map[string][]int64{}
	for _, o := range body.Outputs {
		n := body.Node(o.Value)
		total := n.Shape.NumElements()
		var idx []int64
		if total <= maxChecked {
			for i := range total {
				idx = append(idx, i)
			}
		} else {
			seen := map[int64]bool{0: true, total - 1: true}
			for len(seen) < maxChecked {
				seen[rng.Int64N(total)] = true
			}
			for i := range seen {
				idx = append(idx, i)
			}
			slices.Sort(idx)
		}
		want[o.Name] = idx
	}
	vals, mags, err := ir.EvalAt(ctx, body, feeds, want, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return 0, err
	}
	var checked int64
	for _, o := range body.Outputs {
		idx := want[o.Name]
		dt := body.Node(o.Value).DType
		// Float64 storage for every dtype: the sampled reference values
		// come as float64, and integer outputs compare exactly up to 2^53.
		sampled := func(vals []float64) *ir.Tensor {
			return &ir.Tensor{DType: dt, Shape: ir.Shape{ir.Dim(len(idx))}, F64: vals}
		}
		gv := make([]float64, len(idx))
		for i, at := range idx {
			gv[i] = got[o.Name].At(at)
		}
		g, w, m := sampled(gv), sampled(vals[o.Name]), sampled(mags[o.Name])
		mm, err := ir.Compare(g, w, m, cuda.ReductionLength(body))
		if err != nil {
			return 0, err
		}
		if mm != nil {
			return 0, fmt.Errorf("output %s differs from the reference at sampled element %d (element %d): %v", o.Name, mm.Index, idx[mm.Index], mm)
		}
		checked += int64(len(idx))
	}
	return checked, nil
}
