package cuda

import (
	"context"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// LaunchBytes is one launch of a program with its DRAM bytes twice: as
// the cost model prices its kernel's schedule, and as the emulation
// counts them through a model of L2 (emu.Count).
type LaunchBytes struct {
	// Launch is the lowered launch's name, Kernel its printed kernel's;
	// Prep says it is a preparation launch.
	Launch, Kernel string
	Prep           bool
	// Schedule is the kernel's schedule; Model is the cost model's bytes
	// for it (cost.Features.Bytes), HasModel false when the model lists
	// no such schedule for the body (a kernel printed in a schedule the
	// model was not asked about).
	Schedule cost.Schedule
	Model    float64
	HasModel bool
	// Counted is what the emulation counted.
	Counted emu.Traffic
}

// Ratio is the counted DRAM bytes over the model's (NaN without a
// model's figure, +Inf when the model says none and some were counted).
func (b LaunchBytes) Ratio() float64 {
	if !b.HasModel {
		return math.NaN()
	}
	if b.Model == 0 {
		if b.Counted.DRAM() == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return float64(b.Counted.DRAM()) / b.Model
}

// CountBytes runs a lowered program's printed kernels (PrintProgram's, in
// its order) under the counting emulation, laid out as NewEmulation lays
// them out, with L2 holding l2 bytes, and returns every launch's counted
// bytes beside m's bytes for its kernel's schedule (m nil: no model's
// figures). feeds are as for EmulateProgram; a runtime position in them
// prices m at that position (Model.AtPosition), so that attention over a
// decode step's cache is priced over the keys the run reads.
func CountBytes(ctx context.Context, prog *lower.Program, kernels []*Kernel, feeds map[string]*ir.Tensor, m *cost.Model, l2 int64, opt emu.Options) ([]LaunchBytes, error) {
	e, err := NewEmulation(ctx, prog, kernels, feeds)
	if err != nil {
		return nil, err
	}
	// Nothing is read back: only the counts are wanted.
	opt.Discard = opt.Discard[:0:0]
	for i := range e.Buffers {
		opt.Discard = append(opt.Discard, i)
	}
	_, traffic, err := emu.Count(ctx, e.Source, e.Kernels, e.Buffers, e.Launches, opt, l2)
	if err != nil {
		return nil, fmt.Errorf("count the bytes of %s: %w", prog.Name, err)
	}
	if m != nil {
		if p, ok := positionOf(prog, feeds); ok {
			m = m.AtPosition(p)
		}
	}
	launches := append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...)
	out := make([]LaunchBytes, len(launches))
	for i, l := range launches {
		k := kernels[i]
		out[i] = LaunchBytes{Launch: l.Name, Kernel: k.Name, Prep: i < len(prog.Prep), Schedule: k.Schedule, Counted: traffic[i]}
		if m == nil {
			continue
		}
		ranked, err := m.Ranked(l.Body)
		if err != nil {
			return nil, fmt.Errorf("count the bytes of %s: launch %s: %w", prog.Name, l.Name, err)
		}
		for _, est := range ranked {
			if est.Schedule == k.Schedule {
				out[i].Model, out[i].HasModel = est.Features.Bytes, true
				break
			}
		}
	}
	return out, nil
}

// positionOf is the value feeds give the program's runtime position (a
// decode step's past), when it has one symbol and feeds hold it.
func positionOf(prog *lower.Program, feeds map[string]*ir.Tensor) (int64, bool) {
	if len(prog.Symbols) != 1 {
		return 0, false
	}
	t, ok := feeds[prog.Symbols[0].Name]
	if !ok || t.Len() != 1 {
		return 0, false
	}
	return t.Int(0), true
}
