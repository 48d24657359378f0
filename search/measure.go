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

// measureKernels measures the most expensive distinct kernels of a
// printed program (by predicted time per run, n at most) in their best
// schedules through the worker, skipping those done holds (and adding the
// rest), and records the measurements in the tuning database.
func measureKernels(ctx context.Context, c *compiled, m *cost.Model, client *measure.Client, n int, seed uint64, dbPath string, done map[string]bool, em *emitter) ([]kernelMeasurement, error) {
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
	db, err := openTuneDB(dbPath)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	var out []kernelMeasurement
	id := int64(0)
	for _, it := range items {
		ranked, err := m.Ranked(it.body)
		if err != nil {
			return out, err
		}
		for _, est := range ranked[:min(len(ranked), 1+cuda.Alternatives)] {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			key := it.body.String() + "\n" + est.Schedule.String()
			if done[key] {
				continue
			}
			done[key] = true
			id++
			req := measure.Request{ID: id, Body: it.body.String(), Schedule: est.Schedule.String(), Seed: seed}
			resp, err := client.Measure(ctx, req)
			if err != nil {
				return out, err
			}
			km := kernelMeasurement{kernel: it.k.Name, schedule: req.Schedule, predicted: est.Seconds, resp: resp}
			out = append(out, km)
			if !resp.OK {
				em.log(fmt.Sprintf("  measure: %s %s failed: %s\n", it.k.Name, req.Schedule, resp.Error))
				continue
			}
			em.log(fmt.Sprintf("  measure: %s %s: %s (%s), predicted %s\n", it.k.Name, req.Schedule, Seconds(resp.Median), resp.Where, Seconds(est.Seconds)))
			rec := tunedb.Record{
				Key:       tunedb.Key{Spec: req.Body, Schedule: resp.Schedule, Shapes: shapesOf(it.body), DTypes: dtypesOf(it.body), Device: m.Device.Name},
				Median:    resp.Median,
				Spread:    resp.IQR,
				Samples:   resp.Samples,
				Where:     resp.Where,
				Host:      host,
				At:        time.Now().UTC(),
				Predicted: est.Seconds,
			}
			switch resp.Where {
			case measure.WhereGPU:
				rec.Where = tunedb.WhereGPU
				rec.Key.Driver, rec.Key.Compiler = "unknown", "nvrtc"
			default:
				// Emulated times are stored apart from every device's.
				rec.Where, rec.Key.Device, rec.Key.Compiler = tunedb.WhereEmulated, tunedb.WhereEmulated, "g++"
			}
			if err := db.Append(rec); err != nil {
				return out, err
			}
		}
	}
	return out, nil
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
