package search

import (
	"context"
	"errors"
	"fmt"

	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/nats-io/nats.go"
)

// fleetMeasurer measures on the tune-workers of a fleet: every planned
// kernel of a round is one job, all sent at once. Once the fleet is found
// unavailable it stays so for the run, so that later rounds go straight
// to the cost model.
type fleetMeasurer struct {
	nc     *nats.Conn
	client *fleet.Client
	// gone is why the fleet cannot measure (nil while it can).
	gone error
}

// dialFleet connects to the fleet at url for the workers of kind
// measuring in mode. A fleet that cannot be reached gives a measurer
// that says why on its first round, as a fleet lost later does: the run
// goes on with the cost model.
func dialFleet(ctx context.Context, url, kind, mode string, o fleet.ClientOptions, em *emitter) *fleetMeasurer {
	o.Kind, o.Mode = kind, mode
	o.Log = func(format string, args ...any) { em.logf("  "+format, args...) }
	nc, err := fleet.Connect(url, fleet.ConnectOptionsFromEnv())
	if err != nil {
		return &fleetMeasurer{gone: fmt.Errorf("%w: %v", fleet.ErrUnavailable, err)}
	}
	c, err := fleet.NewClient(ctx, nc, o)
	if err != nil {
		nc.Close()
		return &fleetMeasurer{gone: fmt.Errorf("%w: %v", fleet.ErrUnavailable, err)}
	}
	return &fleetMeasurer{nc: nc, client: c}
}

func (f *fleetMeasurer) measure(ctx context.Context, plan []plannedMeasurement, seed uint64, each func(int, measure.Response, *measuredBy) error) error {
	if f.gone != nil {
		return f.gone
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make([]fleet.Job, len(plan))
	for i, p := range plan {
		jobs[i] = fleet.Job{Body: p.body.String(), Schedule: p.schedule, Shapes: shapesOf(p.body), DTypes: dtypesOf(p.body), Seed: seed, Predicted: p.predicted}
	}
	var stop error
	err := f.client.Measure(ctx, jobs, func(i int, r fleet.Result) {
		if stop != nil {
			return
		}
		resp := measure.Response{ID: int64(i + 1), Schedule: plan[i].schedule}
		if r.Err != nil {
			resp.Error = "fleet: " + r.Err.Error()
		} else {
			resp.OK, resp.Median, resp.IQR, resp.Samples = true, r.Record.Median, r.Record.Spread, r.Record.Samples
			resp.Where = measure.WhereGPU
			if r.Record.Where == tunedb.WhereEmulated {
				resp.Where = measure.WhereEmulated
			}
		}
		var by *measuredBy
		if r.Err == nil {
			by = &measuredBy{rec: r.Record, source: fleetSource(r)}
		}
		if stop = each(i, resp, by); stop != nil {
			cancel() // a record that cannot be kept ends the round
		}
	})
	if stop != nil {
		return stop
	}
	if errors.Is(err, fleet.ErrUnavailable) {
		f.gone = err
	}
	return err
}

func (f *fleetMeasurer) Close() error {
	if f.nc != nil {
		f.nc.Close()
	}
	return nil
}

// fleetSource says where a fleet's record came from, for the progress
// lines.
func fleetSource(r fleet.Result) string {
	switch {
	case r.Cached:
		return "from the fleet's tuning bucket"
	case r.Record.Host == "":
		return "by the fleet"
	}
	return "by the fleet on " + r.Record.Host
}

// fleetURL is a fleet's URL for messages, its password hidden.
func fleetURL(u string) string { return fleet.Redact(u) }
