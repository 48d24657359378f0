package search

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// onGPU runs and times both programs on device 0.
func (b bench) onGPU(ctx context.Context, s *benchSetup, feeds map[string]*ir.Tensor) (_ *benchTimes, err error) {
	d, err := gpu.Open()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w (--measure emulated runs both programs under the CPU emulation instead)", err)
	}
	dev, err := d.Device(0)
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w", err)
	}
	c, err := dev.PrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu: %w", err)
	}
	defer func() { err = errors.Join(err, c.Release()) }()
	lib, err := nvrtc.Load()
	if err != nil {
		return nil, fmt.Errorf("--measure gpu needs NVRTC: %w", err)
	}
	major, minor := lib.Version()
	t := &benchTimes{where: measure.WhereGPU, device: dev.Name, compiler: fmt.Sprintf("nvrtc %d.%d", major, minor),
		driver: fmt.Sprintf("%d.%d", d.Version()/1000, d.Version()%1000/10)}
	load := func(name string, bp benchProgram) (*gpu.Program, map[string]*ir.Tensor, error) {
		res, err := lib.Compile(ctx, cuda.NVRTCPrelude+"\n"+cuda.Source(bp.ks), name+".cu", nvrtc.Options{Arch: dev.Arch()})
		if err != nil {
			return nil, nil, fmt.Errorf("%s program: nvrtc: %w", name, err)
		}
		p, err := gpu.LoadProgram(c, bp.lp, bp.ks, res.CUBIN)
		if err != nil {
			return nil, nil, fmt.Errorf("%s program: %w", name, err)
		}
		outs, err := func() (map[string]*ir.Tensor, error) {
			if err := p.Prepare(ctx, feeds); err != nil {
				return nil, err
			}
			for _, v := range s.g.States() {
				if err := p.SetState(s.g.Node(v).Name, feeds[s.g.Node(v).Name]); err != nil {
					return nil, err
				}
			}
			outs, err := p.Run(feeds, nil)
			if err != nil {
				return nil, err
			}
			for _, v := range s.g.States() {
				name := s.g.Node(v).Name
				st, err := p.State(name)
				if err != nil {
					return nil, err
				}
				outs["state "+name] = st
			}
			return outs, nil
		}()
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("%s program: %w", name, err), p.Close())
		}
		return p, outs, nil
	}
	naive, want, err := load("naive", s.naive)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, naive.Close()) }()
	opt, got, err := load("compiled", s.opt)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, opt.Close()) }()
	if t.relError, t.relLimit, t.checkedAt, err = compareWithNaive(got, want); err != nil {
		return nil, err
	}
	t.outputs = got
	topt := gpu.TimeOptions{Rule: b.rule}
	if t.opt, err = opt.Time(topt); err != nil {
		return nil, err
	}
	if t.naive, err = naive.Time(topt); err != nil {
		return nil, err
	}
	if t.launches, err = opt.TimeLaunches(topt); err != nil {
		return nil, err
	}
	return t, nil
}

// emulated runs both programs under the CPU emulation and times them by
// wall clock: the whole run, and each launch of the compiled program run
// alone on the buffers a whole run left (the runner's start and the
// buffers' transfer included, so these are no GPU times).
func (b bench) emulated(ctx context.Context, s *benchSetup, feeds map[string]*ir.Tensor) (*benchTimes, error) {
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("--measure emulated needs g++: %w", err)
	}
	t := &benchTimes{where: measure.WhereEmulated, device: tunedb.WhereEmulated, compiler: "g++"}
	run := func(bp benchProgram) (map[string]*ir.Tensor, error) {
		outs, states, err := cuda.EmulateProgram(ctx, bp.lp, bp.ks, feeds, emu.Options{})
		if err != nil {
			return nil, err
		}
		for name, st := range states {
			outs["state "+name] = st
		}
		return outs, nil
	}
	want, err := run(s.naive)
	if err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	got, err := run(s.opt)
	if err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	if t.relError, t.relLimit, t.checkedAt, err = compareWithNaive(got, want); err != nil {
		return nil, err
	}
	t.outputs = got
	whole := func(bp benchProgram) (gpu.Timing, error) {
		xs, err := b.rule.Repeat(func() (float64, error) {
			start := time.Now()
			_, err := run(bp)
			return time.Since(start).Seconds(), err
		})
		if err != nil {
			return gpu.Timing{}, err
		}
		med, iqr := timing.MedianIQR(xs)
		return gpu.Timing{Median: med, IQR: iqr, Samples: xs}, nil
	}
	if t.opt, err = whole(s.opt); err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	if t.naive, err = whole(s.naive); err != nil {
		return nil, fmt.Errorf("naive program: %w", err)
	}
	if t.launches, err = b.emulatedLaunches(ctx, s.opt, feeds); err != nil {
		return nil, fmt.Errorf("compiled program: %w", err)
	}
	return t, nil
}

// emulatedLaunches times each run launch of a program under the
// emulation on its own: one whole run first (preparation included) gives
// every buffer its content, then each launch runs alone on those buffers.
func (b bench) emulatedLaunches(ctx context.Context, bp benchProgram, feeds map[string]*ir.Tensor) ([]gpu.Timing, error) {
	e, err := cuda.NewEmulation(ctx, bp.lp, bp.ks, feeds)
	if err != nil {
		return nil, err
	}
	final, err := e.Run(ctx, e.Launches, emu.Options{})
	if err != nil {
		return nil, err
	}
	for i := range e.Buffers {
		e.Buffers[i].Data = final[i]
	}
	run := e.Launches[e.Prep:]
	series, err := b.rule.RepeatEach(len(run), func() ([]float64, error) {
		xs := make([]float64, len(run))
		for i, l := range run {
			start := time.Now()
			if _, err := e.Run(ctx, []emu.Launch{l}, emu.Options{}); err != nil {
				return nil, err
			}
			xs[i] = time.Since(start).Seconds()
		}
		return xs, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]gpu.Timing, len(series))
	for i, xs := range series {
		med, iqr := timing.MedianIQR(xs)
		out[i] = gpu.Timing{Median: med, IQR: iqr, Samples: xs}
	}
	return out, nil
}
