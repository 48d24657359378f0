package cost

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/tunedb"
)

// Calibration is a device's efficiency factors fitted to the GPU records
// of a tuning database (Calibrate), beside the description's own, with the
// fit's errors on the records held out of it.
type Calibration struct {
	// Device is the device fitted.
	Device *Device
	// Described are the description's factors (Defaults); Fitted the
	// fitted ones.
	Described, Fitted Factors
	// Samples is the number of GPU records of the device; HeldOut.N of
	// them were held out of the fit and HeldOut reports on them.
	Samples int
	HeldOut Report
}

// Calibrate fits d's efficiency factors to db's GPU records of d by
// CrossCheck, holding out the share heldOut of them (drawn by seed) to
// report on. A database with no such records is an error that says how to
// get some; errors name the device.
func Calibrate(d *Device, db *tunedb.DB, heldOut float64, seed uint64) (*Calibration, error) {
	if d == nil || db == nil {
		return nil, errors.New("calibrate: no device or no database")
	}
	m := NewModel(d, Defaults(d))
	samples, err := m.SamplesFromRecords(db.Records())
	if err != nil {
		return nil, fmt.Errorf("calibrate %s from %s: %w", d.Name, db.Path(), err)
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("calibrate %s: %s holds no GPU records of %s (run the GPU check script on one to measure some)", d.Name, db.Path(), d.Name)
	}
	f, rep, err := CrossCheck(d, samples, heldOut, seed, FitOptions{})
	if err != nil {
		return nil, fmt.Errorf("calibrate %s: %w", d.Name, err)
	}
	return &Calibration{Device: d, Described: Defaults(d), Fitted: f, Samples: len(samples), HeldOut: rep}, nil
}

// WriteText writes the calibration as "lumsearch tunedb calibrate" prints
// it: the records used, a table of each factor as described and as
// fitted, and the errors and rank correlation on the held-out records.
func (c *Calibration) WriteText(w io.Writer) error {
	def, f := c.Described, c.Fitted
	fmt.Fprintf(w, "%s: %d GPU records, %d held out\n\n", c.Device.Name, c.Samples, c.HeldOut.N)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FACTOR\tDESCRIPTION\tFITTED")
	fmt.Fprintf(tw, "memory\t%.3f\t%.3f\n", def.Memory, f.Memory)
	keys := make([]string, 0, len(f.Compute))
	for k := range f.Compute {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\n", k, def.Compute[k], f.Compute[k])
	}
	fmt.Fprintf(tw, "launch\t%.3g s\t%.3g s\n", def.Launch, f.Launch)
	if err := tw.Flush(); err != nil {
		return err
	}
	r := c.HeldOut
	_, err := fmt.Fprintf(w, "\nheld out: median error %.1f%%, worst %.1f%%, Spearman %.3f\n", 100*r.MedianAbsRelError, 100*r.MaxAbsRelError, r.Spearman)
	return err
}

// Profile is the calibration as SaveProfile writes it, fitted at the
// given time, on the records not held out.
func (c *Calibration) Profile(at time.Time) Profile {
	return Profile{Device: c.Device.Name, Factors: c.Fitted, Fitted: at, Samples: c.Samples - c.HeldOut.N, HeldOut: c.HeldOut}
}
