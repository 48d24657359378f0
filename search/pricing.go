package search

import (
	"context"
	"fmt"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
	"github.com/lumsearch/lumsearch/tunedb"
)

// DefaultTarget is the device priced for when none is named.
const DefaultTarget = "h100-sxm"

// Pricing says how programs are priced: by the cost model of a target
// device (with the tuning database's GPU times in place of predictions
// where it has them), or by the simple estimate (bytes moved plus
// launches), which needs no device.
type Pricing struct {
	// Simple prices by the simple estimate; the other fields are unused.
	Simple bool
	// Target is a device name (cost.ResolveTarget: built-in, from Files,
	// or "auto" for the GPU here; "" means DefaultTarget).
	Target string
	// Files are users' device description files.
	Files []string
	// TuneDB is the tuning database ("" means $LUMSEARCH_TUNEDB or the
	// user cache's).
	TuneDB string
	// Profile is a calibrated profile of the target's efficiency factors
	// (tunedb calibrate -o; "" means the description's).
	Profile string
	// Expect narrows the runtime positions the cost model prices over
	// (Options.Expect).
	Expect map[string]ir.Symbol
}

// Options returns the saturation options that price as p says, a name of
// the pricing for reports, and the cost model (nil for the simple
// estimate). An unknown target or a profile of another device is a
// KindOption error.
func (p Pricing) Options(ctx context.Context) (rules.SaturateOptions, string, *cost.Model, error) {
	sat := rules.SaturateOptions{}
	if p.Simple {
		return sat, "the simple estimate", nil, nil
	}
	target := p.Target
	if target == "" {
		target = DefaultTarget
	}
	dev, err := cost.ResolveTarget(ctx, target, p.Files)
	if err != nil {
		return sat, "", nil, optionErrorf("%v", err)
	}
	factors := cost.Defaults(dev)
	if p.Profile != "" {
		prof, err := cost.LoadProfile(p.Profile)
		if err != nil {
			return sat, "", nil, err
		}
		if prof.Device != dev.Name {
			return sat, "", nil, optionErrorf("--profile %s was fitted for %s, not %s", p.Profile, prof.Device, dev.Name)
		}
		factors = prof.Factors
	}
	m := cost.NewModel(dev, factors)
	db, err := openTuneDB(p.TuneDB)
	if err != nil {
		return sat, "", nil, err
	}
	m.Measurements = cost.NewDBMeasurements(db)
	for name, e := range p.Expect {
		if name != corpus.PastSymbol && name != step.ContextName {
			return sat, "", nil, optionErrorf("--expect %s=%d..%d: only a decode step's position, %s, and a serving step's context, %s, have an expected range", name, e.Lo, e.Hi, corpus.PastSymbol, step.ContextName)
		}
		m = m.Expecting(e.Lo, e.Hi)
	}
	sat.Cost = func(eg *egraph.EGraph[rules.Data]) extract.CostFunc { return rules.ModelCost(eg, m) }
	return sat, "the cost model on " + dev.Name, m, nil
}

// openTuneDB opens the tuning database at path ("" for the default).
func openTuneDB(path string) (*tunedb.DB, error) {
	path, err := tuneDBPath(path)
	if err != nil {
		return nil, err
	}
	return tunedb.Open(path)
}

// noteTuneDB reports the bad lines the tuning database at path skipped,
// with how to remove them, as a note on em (nothing when it has none, or
// cannot be opened: pricing says so).
func noteTuneDB(em *emitter, path string) {
	db, err := openTuneDB(path)
	if err != nil {
		return
	}
	if w := db.Warning(); w != "" {
		em.logf("  note: %s", w)
	}
}

// tuneDBPath is path, or the default database's path when it is "".
func tuneDBPath(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	return tunedb.DefaultPath()
}

// Seconds prints a time with a unit that keeps it readable: "1.5 ms".
func Seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}
