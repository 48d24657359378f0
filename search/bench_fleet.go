package search

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// onFleet benches on a fleet: every distinct kernel (body and schedule)
// of the compiled and the naive program is one job for the tune-workers of
// the cost model's device, measured as a search's candidates are (checked
// against the reference at its real shapes, then timed) or answered from
// the fleet's bucket. A program's time is the sum of its launches'
// medians: the fleet times kernels, not whole runs, so there is no CUDA
// graph, no launch overhead between kernels and no whole-program check
// against the naive one (each kernel was checked on its own). A kernel
// that fails, or a fleet that cannot measure, fails the bench.
func (b bench) onFleet(ctx context.Context, s *benchSetup) (*BenchReport, error) {
	mode := fleet.ModeGPU
	if b.mode == MeasureEmulated {
		mode = fleet.ModeEmulated
	}
	kind, err := fleet.ResolveKind(s.device)
	if err != nil {
		return nil, optionErrorf("--workers: the target %s: %v", s.device, err)
	}
	fm := dialFleet(ctx, b.workers, kind, mode, b.fleet, newEmitter(nil))
	defer fm.Close()
	opt, naive := s.opt, s.naive
	plan, launchOf := []plannedMeasurement{}, map[string]int{}
	add := func(bp benchProgram) []int {
		ks := bp.ks[len(bp.lp.Prep):]
		var idx []int
		for i, l := range bp.lp.Run {
			key := measuredKey(l.Body, ks[i].Schedule.String())
			j, ok := launchOf[key]
			if !ok {
				j = len(plan)
				launchOf[key] = j
				p := plannedMeasurement{kernel: ks[i].Name, body: l.Body, schedule: ks[i].Schedule.String()}
				if ks[i].Estimate != nil {
					p.predicted = ks[i].Estimate.Seconds
				}
				plan = append(plan, p)
			}
			idx = append(idx, j)
		}
		return idx
	}
	optIdx, naiveIdx := add(opt), add(naive)
	got := make([]*measuredBy, len(plan))
	var failed error
	err = fm.measure(ctx, plan, b.seed, func(i int, resp measure.Response, by *measuredBy) error {
		if !resp.OK && failed == nil {
			failed = fmt.Errorf("kernel %s (%s) on the fleet: %s", plan[i].kernel, plan[i].schedule, resp.Error)
		}
		got[i] = by
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench %s --workers: %w", s.model, err)
	}
	if failed != nil {
		return nil, fmt.Errorf("bench %s: %w", s.model, failed)
	}
	t := &benchTimes{where: measure.WhereGPU, device: kind}
	if mode == fleet.ModeEmulated {
		t.where = measure.WhereEmulated
	}
	sum := func(idx []int) (gpu.Timing, []gpu.Timing) {
		var total gpu.Timing
		var each []gpu.Timing
		for _, j := range idx {
			r := got[j].rec
			total.Median += r.Median
			each = append(each, gpu.Timing{Median: r.Median, IQR: r.Spread, Samples: make([]float64, r.Samples)})
		}
		return total, each
	}
	t.opt, t.launches = sum(optIdx)
	t.naive, _ = sum(naiveIdx)
	rec0 := got[optIdx[0]].rec
	t.driver, t.compiler = rec0.Key.Driver, rec0.Key.Compiler
	path, err := tuneDBPath(b.dbPath)
	if err != nil {
		return nil, err
	}
	db, err := tunedb.Open(path)
	if err != nil {
		return nil, err
	}
	var recs []tunedb.Record
	for _, by := range got {
		if !hasRecord(db, *by.rec) {
			recs = append(recs, *by.rec)
		}
	}
	if err := db.Append(recs...); err != nil {
		return nil, fmt.Errorf("tuning database %s: %w", path, err)
	}
	rep := buildBenchReport(s, t, path, len(recs))
	rep.TuneDBWarning = db.Warning()
	rep.Fleet = fleetURL(b.workers)
	return rep, nil
}
