package gpu

import (
	"errors"
	"fmt"

	"github.com/lumsearch/lumsearch/internal/timing"
)

// attrL2CacheSize is CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE.
const attrL2CacheSize = 38

// L2Flush is a buffer of at least twice the device's L2 cache whose
// memset evicts whatever a previous run left there, so that a timed run
// reads its operands from DRAM, as in a model's run where each layer's
// weights are read once.
type L2Flush struct {
	buf *Buffer
	n   int
}

// NewL2Flush allocates the flush buffer: twice the L2 cache the device
// reports, and at least 2 MiB.
func (c *Context) NewL2Flush() (*L2Flush, error) {
	l2, err := c.dev.Attribute(attrL2CacheSize)
	if err != nil {
		return nil, fmt.Errorf("gpu: L2 cache size: %w", err)
	}
	buf, err := c.Alloc(2 * max(l2, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("gpu: L2 flush buffer: %w", err)
	}
	return &L2Flush{buf: buf}, nil
}

// Flush overwrites the whole buffer (on the legacy default stream, which
// blocking streams wait for), each time with another byte.
func (f *L2Flush) Flush() error {
	f.n++
	return f.buf.Memset(0, f.buf.Size(), byte(f.n))
}

// Free frees the buffer.
func (f *L2Flush) Free() error { return f.buf.Free() }

// Capture records one run of the program (its launches, reading the
// inputs and states already on the device) on stream as a CUDA graph and
// instantiates it, so that a run can be replayed as one graph launch:
// the launch overhead of a model's many small kernels is then paid once.
// Stream must not be the default stream, which cannot be captured.
func (p *Program) Capture(stream *Stream) (*GraphExec, error) {
	if stream == nil {
		return nil, fmt.Errorf("capture %s: the default stream cannot be captured", p.name)
	}
	if !p.prepared {
		return nil, fmt.Errorf("capture %s: not prepared", p.name)
	}
	if err := stream.BeginCapture(); err != nil {
		return nil, fmt.Errorf("capture %s: %w", p.name, err)
	}
	lerr := p.launchRun(stream)
	// The capture ends whether or not a launch failed, or the stream
	// stays in capture mode.
	g, err := stream.EndCapture()
	if err := errors.Join(lerr, err); err != nil {
		if g != nil {
			err = errors.Join(err, g.Destroy())
		}
		return nil, fmt.Errorf("capture %s: %w", p.name, err)
	}
	x, err := g.Instantiate()
	err = errors.Join(err, g.Destroy())
	if err != nil {
		if x != nil {
			err = errors.Join(err, x.Destroy())
		}
		return nil, fmt.Errorf("capture %s: %w", p.name, err)
	}
	return x, nil
}

// TimeOptions say how [Program.Time] and [Program.TimeLaunches] repeat.
type TimeOptions struct {
	// Warmup is the untimed runs first (0: 2), which load the module's
	// code and let the clocks rise.
	Warmup int
	// Rule says when the timed runs are enough.
	Rule timing.Rule
	// NoGraph times plain launches even where the driver has graphs.
	NoGraph bool
}

// Timing is a repeated measurement, in seconds.
type Timing struct {
	Median, IQR float64
	// Samples are the times in the order taken.
	Samples []float64
	// Graph says the run was replayed as a CUDA graph.
	Graph bool
}

func newTiming(samples []float64, graph bool) Timing {
	med, iqr := timing.MedianIQR(samples)
	return Timing{Median: med, IQR: iqr, Samples: samples, Graph: graph}
}

// timer is what a timed loop needs: a blocking stream (so that the flush,
// a memset on the legacy default stream, comes before the timed work),
// the flush buffer and events.
type timer struct {
	stream *Stream
	flush  *L2Flush
	events []*Event
}

func (p *Program) newTimer(events int) (t *timer, err error) {
	t = &timer{}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.close())
			t = nil
		}
	}()
	if t.stream, err = p.ctx.NewStream(false); err != nil {
		return nil, err
	}
	if t.flush, err = p.ctx.NewL2Flush(); err != nil {
		return nil, err
	}
	for range events {
		e, err := p.ctx.NewEvent()
		if err != nil {
			return nil, err
		}
		t.events = append(t.events, e)
	}
	return t, nil
}

func (t *timer) close() error {
	var errs []error
	for _, e := range t.events {
		errs = append(errs, e.Destroy())
	}
	if t.flush != nil {
		errs = append(errs, t.flush.Free())
	}
	if t.stream != nil {
		errs = append(errs, t.stream.Destroy())
	}
	return errors.Join(errs...)
}

// Time times whole runs of the prepared program on the inputs and states
// the last [Program.Run] left on the device: a CUDA graph of the run is
// captured when the driver has graphs (else the launches are issued one by
// one), Warmup untimed runs go first, then each timed run is preceded by
// an L2 flush and timed by a pair of CUDA events, until opt.Rule is met.
// A program that updates a state in place updates it at every run.
func (p *Program) Time(opt TimeOptions) (res Timing, err error) {
	if !p.prepared {
		return Timing{}, fmt.Errorf("time %s: not prepared", p.name)
	}
	t, err := p.newTimer(2)
	if err != nil {
		return Timing{}, fmt.Errorf("time %s: %w", p.name, err)
	}
	defer func() { err = errors.Join(err, t.close()) }()
	run := func() error { return p.launchRun(t.stream) }
	graph := !opt.NoGraph && p.ctx.drv.HasGraphs()
	if graph {
		x, err := p.Capture(t.stream)
		if err != nil {
			return Timing{}, fmt.Errorf("time %s: %w", p.name, err)
		}
		defer func() { err = errors.Join(err, x.Destroy()) }()
		run = func() error { return x.Launch(t.stream) }
	}
	if err := p.warmup(opt, t, run); err != nil {
		return Timing{}, fmt.Errorf("time %s: %w", p.name, err)
	}
	start, end := t.events[0], t.events[1]
	samples, err := opt.Rule.Repeat(func() (float64, error) {
		if err := t.flush.Flush(); err != nil {
			return 0, err
		}
		if err := start.Record(t.stream); err != nil {
			return 0, err
		}
		if err := run(); err != nil {
			return 0, err
		}
		if err := end.Record(t.stream); err != nil {
			return 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, err
		}
		ms, err := Elapsed(start, end)
		return float64(ms) / 1e3, err
	})
	if err != nil {
		return Timing{}, fmt.Errorf("time %s: %w", p.name, err)
	}
	return newTiming(samples, graph), nil
}

// TimeLaunches times each launch of a run on its own, in the run's order:
// the launches are issued one by one with an event recorded between each
// two, so launch i's time is from event i to event i+1. The L2 is flushed
// once before each run, not before each launch, so that a launch sees the
// cache its predecessors left, as in the whole run. Runs repeat until
// every launch's times meet opt.Rule (or its time cap); the result has one
// Timing per launch of the run (the plan's Run order).
func (p *Program) TimeLaunches(opt TimeOptions) (res []Timing, err error) {
	if !p.prepared {
		return nil, fmt.Errorf("time %s: not prepared", p.name)
	}
	n := len(p.plan.Run)
	if n == 0 {
		return nil, nil
	}
	t, err := p.newTimer(n + 1)
	if err != nil {
		return nil, fmt.Errorf("time %s: %w", p.name, err)
	}
	defer func() { err = errors.Join(err, t.close()) }()
	if err := p.warmup(opt, t, func() error { return p.launchRun(t.stream) }); err != nil {
		return nil, fmt.Errorf("time %s: %w", p.name, err)
	}
	series, err := opt.Rule.RepeatEach(n, func() ([]float64, error) {
		if err := t.flush.Flush(); err != nil {
			return nil, err
		}
		if err := t.events[0].Record(t.stream); err != nil {
			return nil, err
		}
		for i := range n {
			if err := p.launch(p.plan.Run[i:i+1], t.stream); err != nil {
				return nil, err
			}
			if err := t.events[i+1].Record(t.stream); err != nil {
				return nil, err
			}
		}
		if err := t.events[n].Synchronize(); err != nil {
			return nil, err
		}
		xs := make([]float64, n)
		for i := range n {
			ms, err := Elapsed(t.events[i], t.events[i+1])
			if err != nil {
				return nil, err
			}
			xs[i] = float64(ms) / 1e3
		}
		return xs, nil
	})
	if err != nil {
		return nil, fmt.Errorf("time %s: %w", p.name, err)
	}
	res = make([]Timing, n)
	for i, s := range series {
		res[i] = newTiming(s, false)
	}
	return res, nil
}

// warmup issues opt.Warmup untimed runs and waits for them.
func (p *Program) warmup(opt TimeOptions, t *timer, run func() error) error {
	w := opt.Warmup
	if w <= 0 {
		w = 2
	}
	for range w {
		if err := run(); err != nil {
			return err
		}
	}
	return t.stream.Synchronize()
}
