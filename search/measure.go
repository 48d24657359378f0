package search

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// kernelMeasurement is one measured kernel schedule, for the report.
type kernelMeasurement struct {
	kernel    string
	schedule  string
	predicted float64
	resp      measure.Response
}

// plannedMeasurement is a kernel schedule to measure.
type plannedMeasurement struct {
	kernel    string // the printed kernel's name
	body      *ir.Graph
	schedule  string
	predicted float64
}

// kernelMeasurer measures planned kernel schedules: a local worker
// process one at a time (localMeasurer), or a fleet all at once
// (fleetMeasurer). It calls each with a planned index and its response,
// and, when the measurer made the tuning database's record itself (the
// fleet), that record and where it came from. It returns when every plan
// is answered, or with the error that stopped it.
type kernelMeasurer interface {
	measure(ctx context.Context, plan []plannedMeasurement, seed uint64, each func(i int, resp measure.Response, by *measuredBy) error) error
	Close() error
}

// measuredBy is a record a measurer made, and where it came from in words.
type measuredBy struct {
	rec    *tunedb.Record
	source string
}

// localMeasurer measures through one worker process, in plan order.
type localMeasurer struct{ client *measure.Client }

func (l localMeasurer) measure(ctx context.Context, plan []plannedMeasurement, seed uint64, each func(int, measure.Response, *measuredBy) error) error {
	for i, p := range plan {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := l.client.Measure(ctx, measure.Request{ID: int64(i + 1), Body: p.body.String(), Schedule: p.schedule, Seed: seed})
		if err != nil {
			return err
		}
		if err := each(i, resp, nil); err != nil {
			return err
		}
	}
	return nil
}

func (l localMeasurer) Close() error { return l.client.Close() }

// measureKernels measures the most expensive distinct kernels of a
// printed program (by predicted time per run, n at most) in their best
// schedules through ms, skipping those done holds (and adding the ones
// measured), and records the measurements in the tuning database.
func measureKernels(ctx context.Context, c *compiled, m *cost.Model, ms kernelMeasurer, n int, seed uint64, dbPath string, done map[string]bool, em *emitter) ([]kernelMeasurement, error) {
	lp := c.lowered
	type item struct {
		k     *cuda.Kernel
		body  *ir.Graph
		total float64
	}
	byKernel := map[*cuda.Kernel]*item{}
	var items []*item
	for i, l := range lp.Run {
		k := c.kernels[len(lp.Prep)+i]
		it := byKernel[k]
		if it == nil {
			it = &item{k: k, body: l.Body}
			byKernel[k] = it
			items = append(items, it)
		}
		if k.Estimate != nil {
			it.total += k.Estimate.Seconds
		}
	}
	slices.SortStableFunc(items, func(a, b *item) int { return cmp.Compare(b.total, a.total) })
	items = items[:min(n, len(items))]
	var plan []plannedMeasurement
	planned := map[string]bool{}
	for _, it := range items {
		ranked, err := m.Ranked(it.body)
		if err != nil {
			return nil, err
		}
		for _, est := range ranked[:min(len(ranked), 1+cuda.Alternatives)] {
			key := measuredKey(it.body, est.Schedule.String())
			if done[key] || planned[key] {
				continue
			}
			planned[key] = true
			plan = append(plan, plannedMeasurement{kernel: it.k.Name, body: it.body, schedule: est.Schedule.String(), predicted: est.Seconds})
		}
	}
	if len(plan) == 0 {
		return nil, nil
	}
	db, err := openTuneDB(dbPath)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	got := make([]*kernelMeasurement, len(plan))
	err = ms.measure(ctx, plan, seed, func(i int, resp measure.Response, by *measuredBy) error {
		p := plan[i]
		done[measuredKey(p.body, p.schedule)] = true
		got[i] = &kernelMeasurement{kernel: p.kernel, schedule: p.schedule, predicted: p.predicted, resp: resp}
		if !resp.OK {
			em.log(fmt.Sprintf("  measure: %s %s failed: %s\n", p.kernel, p.schedule, resp.Error))
			return nil
		}
		from, rec := resp.Where, localRecord(p, resp, m.Device.Name, host)
		if by != nil {
			from, rec = from+", "+by.source, by.rec
		}
		em.log(fmt.Sprintf("  measure: %s %s: %s (%s), predicted %s\n", p.kernel, p.schedule, Seconds(resp.Median), from, Seconds(p.predicted)))
		if by != nil && hasRecord(db, *rec) {
			return nil // the fleet's record came to this database before
		}
		return db.Append(*rec)
	})
	var out []kernelMeasurement
	for _, km := range got {
		if km != nil {
			out = append(out, *km)
		}
	}
	return out, err
}

// measuredKey identifies a kernel schedule measured in one run.
func measuredKey(body *ir.Graph, schedule string) string { return body.String() + "\n" + schedule }

// localRecord is the tuning database's record of a local worker's
// measurement.
func localRecord(p plannedMeasurement, resp measure.Response, device, host string) *tunedb.Record {
	rec := &tunedb.Record{
		Key:       tunedb.Key{Spec: p.body.String(), Schedule: resp.Schedule, Shapes: shapesOf(p.body), DTypes: dtypesOf(p.body), Device: device},
		Median:    resp.Median,
		Spread:    resp.IQR,
		Samples:   resp.Samples,
		Where:     resp.Where,
		Host:      host,
		At:        time.Now().UTC(),
		Predicted: p.predicted,
	}
	switch resp.Where {
	case measure.WhereGPU:
		rec.Where = tunedb.WhereGPU
		rec.Key.Driver, rec.Key.Compiler = "unknown", "nvrtc"
	default:
		// Emulated times are stored apart from every device's.
		rec.Where, rec.Key.Device, rec.Key.Compiler = tunedb.WhereEmulated, tunedb.WhereEmulated, "g++"
	}
	return rec
}

// hasRecord says whether db holds rec already (the same key, place and
// moment of measurement).
func hasRecord(db *tunedb.DB, rec tunedb.Record) bool {
	look := db.Lookup
	if rec.Where == tunedb.WhereEmulated {
		look = db.LookupEmulated
	}
	r, ok := look(rec.Key)
	return ok && r.At.Equal(rec.At) && r.Median == rec.Median
}

// shapesOf and dtypesOf describe a kernel body's inputs for the tuning
// database's key.
func shapesOf(body *ir.Graph) string {
	var parts []string
	for _, v := range body.Inputs() {
		parts = append(parts, body.Node(v).Shape.String())
	}
	return strings.Join(parts, " ")
}

func dtypesOf(body *ir.Graph) string {
	var parts []string
	for _, v := range body.Inputs() {
		parts = append(parts, body.Node(v).DType.String())
	}
	return strings.Join(parts, " ")
}
