package measure

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
)

// Measurer checks and times one candidate.
type Measurer interface {
	Measure(ctx context.Context, req Request) Response
}

// Serve is the worker loop: it reads requests from in, one JSON object per
// line, and writes one response line to out for each, until in ends or ctx
// is done. A request that cannot be parsed gets an error response; only a
// failure to write ends the loop with an error.
func Serve(ctx context.Context, in io.Reader, out io.Writer, m Measurer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = failed(req.ID, "bad request: %v", err)
		} else {
			resp = m.Measure(ctx, req)
			resp.ID = req.ID
		}
		if err := enc.Encode(resp); err != nil {
			return fmt.Errorf("worker: write response %d: %w", req.ID, err)
		}
	}
	return sc.Err()
}

// Emulated measures candidates under the CPU emulation: the kernel is
// printed, checked at its real shapes against the reference
// (cuda.VerifyKernel), then run at least Repeats times and until the
// times settle or MaxTime (the same rule as on a GPU, rule); the times
// are the emulation's wall times, labelled WhereEmulated.
type Emulated struct {
	Emu     emu.Options
	MaxTime time.Duration // bound on the timed runs once Repeats are done (0: 2 s)
}

// Measure checks and times one candidate.
func (e Emulated) Measure(ctx context.Context, req Request) Response {
	body, k, err := candidate(req, fmt.Sprintf("candidate%d", max(req.ID, 0)))
	if err != nil {
		return failed(req.ID, "%v", err)
	}
	check, err := cuda.VerifyKernel(ctx, k, body, cuda.VerifyOptions{Seed: req.Seed, Emu: e.Emu})
	if err != nil {
		return failed(req.ID, "check: %v", err)
	}
	feeds, err := cuda.KernelInputs(body, req.Seed)
	if err != nil {
		return failed(req.ID, "inputs: %v", err)
	}
	var args []*ir.Tensor
	for _, v := range body.Inputs() {
		args = append(args, feeds[body.Node(v).Name])
	}
	var outs []ir.ValueType
	for _, o := range body.Outputs {
		n := body.Node(o.Value)
		outs = append(outs, ir.ValueType{Shape: n.Shape, DType: n.DType})
	}
	times, err := rule(req, e.MaxTime).Repeat(func() (float64, error) {
		start := time.Now()
		if _, err := cuda.Emulate(ctx, []*cuda.Kernel{k}, [][]*ir.Tensor{args}, [][]ir.ValueType{outs}, e.Emu); err != nil {
			return 0, err
		}
		return time.Since(start).Seconds(), nil
	})
	if err != nil {
		return failed(req.ID, "run: %v", err)
	}
	med, iqr := timing.MedianIQR(times)
	return Response{OK: true, Where: WhereEmulated, Median: med, IQR: iqr, Samples: len(times), Checked: check.Elements, Schedule: k.Schedule.String()}
}

// candidate parses a request's body and schedule and prints its kernel
// under name.
func candidate(req Request, name string) (*ir.Graph, *cuda.Kernel, error) {
	body, err := ir.Parse(req.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("body: %w", err)
	}
	var s cost.Schedule
	if req.Schedule != "" {
		if s, err = cost.ParseSchedule(req.Schedule); err != nil {
			return nil, nil, err
		}
	}
	k, err := cuda.PrintKernelWith(name, "measured candidate", body, s)
	if err != nil {
		return nil, nil, err
	}
	return body, k, nil
}

// rule is when a request's timed runs stop: at least its Repeats
// (DefaultRepeats if none), then once their spread is small or maxTime
// (0: timing's default) has passed.
func rule(req Request, maxTime time.Duration) timing.Rule {
	least := req.Repeats
	if least <= 0 {
		least = DefaultRepeats
	}
	return timing.Rule{Min: least, MaxTime: maxTime}
}
