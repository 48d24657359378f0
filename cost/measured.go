package cost

import "github.com/lumsearch/lumsearch/tunedb"

// DBMeasurements serves a tuning database's GPU records to a Model: for a
// kernel body (whose canonical text holds its shapes and dtypes), a
// schedule and a device, the newest record measured on a GPU, whatever
// driver and compiler measured it. Records measured under CPU emulation
// are never served: they are no GPU times.
type DBMeasurements struct {
	newest map[[3]string]tunedb.Record
}

// NewDBMeasurements indexes db's GPU records.
func NewDBMeasurements(db *tunedb.DB) *DBMeasurements {
	m := &DBMeasurements{newest: map[[3]string]tunedb.Record{}}
	for _, r := range db.Records() {
		if r.Where != tunedb.WhereGPU {
			continue
		}
		k := [3]string{r.Key.Spec, r.Key.Schedule, r.Key.Device}
		if old, ok := m.newest[k]; !ok || r.At.After(old.At) {
			m.newest[k] = r
		}
	}
	return m
}

// Measured implements Measurements.
func (m *DBMeasurements) Measured(spec, schedule, device string) (float64, bool) {
	r, ok := m.newest[[3]string{spec, schedule, device}]
	return r.Median, ok
}
