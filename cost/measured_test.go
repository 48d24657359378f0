package cost

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMeasuredOverridesPrediction writes measured records to a tuning
// database and checks that the model takes the newest GPU time for a
// kernel's schedule in place of its prediction, and never an emulated one.
func TestMeasuredOverridesPrediction(t *testing.T) {
	d := testDevice(t)
	k := matmulBody(t, ir.BF16, 0, 128, 2048, 2048)
	predicted, err := NewModel(d, Defaults(d)).Kernel(k)
	require.NoError(t, err)

	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	key := tunedb.Key{Spec: k.String(), Schedule: "bm=64,bn=64,bk=32,threads=128,stages=2,mma", Shapes: "128x2048x2048", DTypes: "bf16", Device: d.Name, Driver: "550.54", Compiler: "nvrtc 12.4"}
	rec := func(median float64, where string, at time.Time) tunedb.Record {
		return tunedb.Record{Key: key, Median: median, Spread: median / 50, Samples: 20, ClockMHz: 1980, Where: where, Host: "test", At: at}
	}
	tests := []struct {
		name     string
		recs     []tunedb.Record
		measured bool
		want     float64
	}{
		{"no records", nil, false, predicted.Seconds},
		{"emulated only", []tunedb.Record{rec(predicted.Seconds/100, tunedb.WhereEmulated, at)}, false, predicted.Seconds},
		{"a gpu record wins", []tunedb.Record{rec(predicted.Seconds/3, tunedb.WhereGPU, at)}, true, predicted.Seconds / 3},
		{"the newest gpu record", []tunedb.Record{rec(predicted.Seconds/3, tunedb.WhereGPU, at.Add(time.Hour)), rec(predicted.Seconds/2, tunedb.WhereGPU, at)}, true, predicted.Seconds / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tunedb.jsonl")
			db, err := tunedb.Open(path)
			require.NoError(t, err)
			if len(tt.recs) > 0 {
				require.NoError(t, db.Append(tt.recs...))
			}
			db, err = tunedb.Open(path)
			require.NoError(t, err)
			m := NewModel(d, Defaults(d))
			m.Measurements = NewDBMeasurements(db)
			e, err := m.Kernel(k)
			require.NoError(t, err)
			assert.Equal(t, tt.measured, e.Measured)
			assert.InEpsilon(t, tt.want, e.Seconds, 1e-12)
		})
	}
}
