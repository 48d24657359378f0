package cost

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/tunedb"
)

// calibrationDB is a tuning database at a fresh path holding recs.
func calibrationDB(t *testing.T, recs []tunedb.Record) *tunedb.DB {
	t.Helper()
	db, err := tunedb.Open(filepath.Join(t.TempDir(), "tunedb.jsonl"))
	require.NoError(t, err)
	if len(recs) > 0 {
		require.NoError(t, db.Append(recs...))
	}
	return db
}

func TestCalibrate(t *testing.T) {
	d := testDevice(t)
	truth := Defaults(d)
	truth.Memory, truth.Launch = 0.7, 4e-6
	recs := syntheticRecords(t, d, truth, 1)
	db := calibrationDB(t, recs)

	c, err := Calibrate(d, db, 0.25, 3)
	require.NoError(t, err)
	assert.Equal(t, len(recs), c.Samples)
	assert.Equal(t, int(float64(len(recs))*0.25+0.5), c.HeldOut.N)
	assert.Equal(t, Defaults(d), c.Described)
	assert.InEpsilon(t, truth.Memory, c.Fitted.Memory, 0.05)
	assert.InEpsilon(t, truth.Launch, c.Fitted.Launch, 0.1)

	again, err := Calibrate(d, db, 0.25, 3)
	require.NoError(t, err)
	assert.Equal(t, c, again, "the held-out split is a function of the seed")

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := c.Profile(at)
	assert.Equal(t, Profile{Device: d.Name, Factors: c.Fitted, Fitted: at, Samples: c.Samples - c.HeldOut.N, HeldOut: c.HeldOut}, p)
	path := filepath.Join(t.TempDir(), "profile.json")
	require.NoError(t, SaveProfile(path, p))
	back, err := LoadProfile(path)
	require.NoError(t, err)
	assert.Equal(t, p.Factors, back.Factors)
}

func TestCalibrateErrors(t *testing.T) {
	d := testDevice(t)
	recs := syntheticRecords(t, d, Defaults(d), 1)
	bad := recs[0]
	bad.Key.Spec = "not a graph"
	other := recs[0]
	other.Key.Device = "some other device"
	for _, tt := range []struct {
		name    string
		dev     *Device
		recs    []tunedb.Record
		heldOut float64
		want    string
	}{
		{"no records", d, nil, 0.25, "holds no GPU records of " + d.Name + " (run the GPU check script"},
		{"records of another device only", d, []tunedb.Record{other}, 0.25, "holds no GPU records of " + d.Name},
		{"unparsable record", d, []tunedb.Record{bad}, 0.25, "calibrate " + d.Name + " from "},
		{"too few to hold out", d, recs[:3], 0.25, "calibrate " + d.Name + ": cross-check: "},
		{"bad share", d, recs, 1.5, "held-out fraction"},
		{"no device", nil, recs, 0.25, "calibrate: no device"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Calibrate(tt.dev, calibrationDB(t, tt.recs), tt.heldOut, 1)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestCalibrationWriteText(t *testing.T) {
	d := testDevice(t)
	def := Defaults(d)
	fitted := Defaults(d)
	fitted.Memory, fitted.Launch = 0.6, 5e-6
	c := &Calibration{Device: d, Described: def, Fitted: fitted, Samples: 20,
		HeldOut: Report{MedianAbsRelError: 0.012, MaxAbsRelError: 0.05, Spearman: 0.987, N: 5}}
	var b bytes.Buffer
	require.NoError(t, c.WriteText(&b))
	out := b.String()
	assert.True(t, strings.HasPrefix(out, d.Name+": 20 GPU records, 5 held out\n\n"), out)
	assert.Regexp(t, `(?m)^FACTOR +DESCRIPTION +FITTED$`, out)
	assert.Regexp(t, `(?m)^memory +`+regexp.QuoteMeta(fmt.Sprintf("%.3f", def.Memory))+` +0\.600$`, out)
	assert.Regexp(t, `(?m)^launch +\S+ s +5e-06 s$`, out)
	for k := range fitted.Compute {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(k)+` +\d\.\d{3} +\d\.\d{3}$`, out)
	}
	assert.True(t, strings.HasSuffix(out, "\nheld out: median error 1.2%, worst 5.0%, Spearman 0.987\n"), out)
}
