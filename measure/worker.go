package measure

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
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
// (cuda.VerifyKernel), then run Repeats times; the times are the
// emulation's wall times, labelled WhereEmulated.
type Emulated struct {
	Emu emu.Options
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
	repeats := req.Repeats
	if repeats <= 0 {
		repeats = DefaultRepeats
	}
	var times []float64
	for range repeats {
		start := time.Now()
		if _, err := cuda.Emulate(ctx, []*cuda.Kernel{k}, [][]*ir.Tensor{args}, [][]ir.ValueType{outs}, e.Emu); err != nil {
			return failed(req.ID, "run: %v", err)
		}
		times = append(times, time.Since(start).Seconds())
	}
	med, iqr := medianIQR(times)
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

// medianIQR is the median and interquartile range of times.
func medianIQR(times []float64) (median, iqr float64) {
	s := slices.Clone(times)
	slices.Sort(s)
	q := func(p float64) float64 {
		x := p * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return q(0.5), q(0.75) - q(0.25)
}
