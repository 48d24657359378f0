package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// tunedbRecord is a valid record of spec on device, measured at.
func tunedbRecord(spec, device, where string, median float64, at time.Time) tunedb.Record {
	return tunedb.Record{
		Key: tunedb.Key{
			Spec: spec, Schedule: "bm=64,bn=64", Shapes: "x=[8,8]", DTypes: "f32",
			Device: device, Driver: "570.124.06", Compiler: "nvrtc 12.8",
		},
		Median: median, Spread: median / 10, Samples: 20, ClockMHz: 1980, MemClockMHz: 3201,
		Where: where, Host: "box", At: at,
	}
}

// filledTunedb writes five records to a fresh database and returns its
// path: two keys measured on an H200 (one of them three times, once under
// emulation), one on an A100, two of them years ago.
func filledTunedb(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tunedb.jsonl")
	db, err := tunedb.Open(path)
	require.NoError(t, err)
	now := time.Now().Add(-time.Hour)
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, db.Append(
		tunedbRecord("(matmul a b)", "NVIDIA H200", tunedb.WhereGPU, 1e-3, old),
		tunedbRecord("(matmul a b)", "NVIDIA H200", tunedb.WhereGPU, 2e-3, now),
		tunedbRecord("(matmul a b)", "NVIDIA H200", tunedb.WhereEmulated, 5e-2, now),
		tunedbRecord("(exp x)", "NVIDIA H200", tunedb.WhereGPU, 1e-5, now),
		tunedbRecord("(exp x)", "NVIDIA A100", tunedb.WhereGPU, 2e-5, old),
	))
	return path
}

func TestTunedbStats(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "none", "tunedb.jsonl")
		r := runArgs(t, "tunedb", "stats", "--db", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Empty(t, r.stderr)
		assert.Contains(t, r.stdout, "database:   "+path+" (no file yet)\n")
		assert.Contains(t, r.stdout, "records:    0\n")
		assert.NotContains(t, r.stdout, "DEVICE")
		_, err := os.Stat(path)
		assert.True(t, os.IsNotExist(err), "stats creates nothing")
	})
	t.Run("filled", func(t *testing.T) {
		path := filledTunedb(t)
		r := runArgs(t, "tunedb", "stats", "--db", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		for _, want := range []string{
			"database:   " + path + "\n", "records:    5\n", "keys:       3\n", "remeasured: 2\n",
			"duplicates: 0\n", "bad lines:  0\n", "measured:   2020-01-01T00:00:00Z to ",
		} {
			assert.Contains(t, r.stdout, want)
		}
		assert.Regexp(t, `(?m)^DEVICE +GPU +CPU-EMULATION$`, r.stdout)
		assert.Regexp(t, `(?m)^NVIDIA A100 +1 +0$`, r.stdout)
		assert.Regexp(t, `(?m)^NVIDIA H200 +3 +1$`, r.stdout)
		assert.Regexp(t, `(?m)^all +4 +1$`, r.stdout)
	})
	t.Run("torn tail", func(t *testing.T) {
		path := filledTunedb(t)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.WriteString(`{"id":"abc","key":{"spec":"(ma`)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		r := runArgs(t, "tunedb", "stats", "--db", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "records:    5\n")
		assert.Contains(t, r.stdout, "bad lines:  1 skipped, 1 of them torn;")
		assert.Contains(t, r.stdout, "\n  line 6: torn")
	})
	t.Run("environment", func(t *testing.T) {
		path := filledTunedb(t)
		t.Setenv(tunedb.EnvPath, path)
		r := runArgs(t, "tunedb", "stats")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "database:   "+path+"\n")
		assert.Contains(t, r.stdout, "records:    5\n")
	})
	t.Run("invalid line", func(t *testing.T) {
		path := filledTunedb(t)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		lines := strings.SplitAfter(string(data), "\n")
		lines[1] = "not json\n"
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644))
		r := runArgs(t, "tunedb", "stats", "--db", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "records:    4\n")
		assert.Contains(t, r.stdout, "bad lines:  1 skipped; \"lumsearch tunedb prune --db "+path+"\" removes them\n"+
			"  line 2: invalid character 'o' in literal null (expecting 'u')\n")
	})
}

// badTunedb is filledTunedb with bad lines put in: garbage first, a record
// that fails validation in the middle, binary garbage, and a torn line
// last. It returns the path, the good lines as they were, and the bad
// lines' numbers.
func badTunedb(t *testing.T) (string, string, []int) {
	t.Helper()
	path := filledTunedb(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	good := strings.SplitAfter(string(data), "\n")
	good = good[:len(good)-1] // the empty string after the last newline
	require.Len(t, good, 5)
	invalid := strings.Replace(good[0], `"samples":20`, `"samples":-4`, 1)
	require.NotEqual(t, good[0], invalid)
	lines := []string{
		"{not a record}\n", good[0], good[1], invalid, good[2], "\xfe\xba\x01garbage\x7f\n", good[3], good[4],
		good[1][:len(good[1])/2],
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644))
	return path, string(data), []int{1, 4, 6, 9}
}

// TestTunedbBadLines: bad lines anywhere in the database are skipped and
// shown by stats; export works on the good records; prune removes exactly
// the bad lines; import of a file with one is refused, naming it and the
// line; and pricing with the database (the path optimize takes) still
// works.
func TestTunedbBadLines(t *testing.T) {
	warning := func(path string) string {
		return "warning: tuning database " + path + ": skipped 4 bad lines that hold no valid record (lines 1, 4, 6 and 9); " +
			"every other record is used; \"lumsearch tunedb prune --db " + path + "\" removes them\n"
	}
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, path, good string, r result)
	}{
		{"stats", []string{"stats"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "records:    5\n")
			assert.Contains(t, r.stdout, "bad lines:  4 skipped, 1 of them torn; \"lumsearch tunedb prune --db "+path+"\" removes them\n")
			assert.Regexp(t, `(?m)^  line 1: invalid character 'n' looking for beginning of object key string$`, r.stdout)
			assert.Regexp(t, `(?m)^  line 4: samples is -4, want at least 1$`, r.stdout)
			assert.Regexp(t, `(?m)^  line 6: invalid character 'þ' looking for beginning of value$`, r.stdout)
			assert.Regexp(t, `(?m)^  line 9: torn \(cut short`, r.stdout)
			assert.Regexp(t, `(?m)^all +4 +1$`, r.stdout)
		}},
		{"export", []string{"export"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, good, r.stdout, "the good records, and nothing else on standard output")
		}},
		{"export to a file", []string{"export", "-o", "OUT"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			out := filepath.Join(filepath.Dir(path), "out.jsonl")
			assert.Equal(t, "exported 5 records to "+out+"\n"+warning(path), r.stdout)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.Equal(t, good, string(got))
		}},
		{"prune", []string{"prune"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "pruned 0 of 5 records from "+path+"; 5 left; removed 4 bad lines (lines 1, 4, 6 and 9)\n", r.stdout)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, good, string(got), "every good line kept byte for byte, in order")
			r = runArgs(t, "tunedb", "stats", "--db", path)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "bad lines:  0\n")
		}},
		{"prune with a filter", []string{"prune", "--device", "NVIDIA A100"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "pruned 1 of 5 records from "+path+"; 4 left; removed 4 bad lines (lines 1, 4, 6 and 9)\n", r.stdout)
			lines := strings.SplitAfter(good, "\n")
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, strings.Join(lines[:4], ""), string(got))
		}},
		{"import into it", []string{"import", "GOOD"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "imported 0 of 5 records into "+path+" (5 already present)\n"+warning(path), r.stdout)
		}},
		{"import from it", []string{"import", "SELF", "--db", "NEW"}, func(t *testing.T, path, good string, r result) {
			require.Equal(t, exitError, r.code)
			assert.Contains(t, r.stderr, "lumsearch: tunedb: import "+path+": line 1: invalid character 'n'")
			_, err := os.Stat(filepath.Join(filepath.Dir(path), "new.jsonl"))
			assert.True(t, os.IsNotExist(err), "nothing imported")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, good, _ := badTunedb(t)
			dir := filepath.Dir(path)
			goodFile := filepath.Join(t.TempDir(), "good.jsonl")
			require.NoError(t, os.WriteFile(goodFile, []byte(good), 0o644))
			args := []string{"tunedb"}
			db := true
			for _, a := range tt.args {
				switch a {
				case "OUT":
					a = filepath.Join(dir, "out.jsonl")
				case "GOOD":
					a = goodFile
				case "SELF":
					a = path
				case "NEW":
					a, db = filepath.Join(dir, "new.jsonl"), false
				}
				args = append(args, a)
			}
			if db {
				args = append(args, "--db", path)
			}
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			r := runArgs(t, args...)
			tt.check(t, path, good, r)
			if tt.args[0] != "prune" {
				after, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Equal(t, string(before), string(after), "only prune changes the database")
			}
		})
	}

	t.Run("pricing", func(t *testing.T) {
		path, _, _ := badTunedb(t)
		r := runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4", "--target", "h200", "--db", path, "--ablate=false")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "by the cost model on h200-sxm")
	})
}

func TestTunedbExportImport(t *testing.T) {
	src := filledTunedb(t)
	want, err := os.ReadFile(src)
	require.NoError(t, err)

	r := runArgs(t, "tunedb", "export", "--db", src)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, string(want), r.stdout, "an export to standard output is the file's own format")

	r = runArgs(t, "tunedb", "export", "--db", src, "--device", "NVIDIA H200", "--where", "gpu")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, 3, strings.Count(r.stdout, "\n"))
	assert.NotContains(t, r.stdout, "cpu-emulation")
	assert.NotContains(t, r.stdout, "A100")

	out := filepath.Join(t.TempDir(), "export.jsonl")
	r = runArgs(t, "tunedb", "export", "--db", src, "-o", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "exported 5 records to "+out+"\n", r.stdout)

	dst := filepath.Join(t.TempDir(), "new", "tunedb.jsonl")
	r = runArgs(t, "tunedb", "import", out, "--db", dst)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "imported 5 of 5 records into "+dst+" (0 already present)\n", r.stdout)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))

	r = runArgs(t, "tunedb", "import", out, "--db", dst)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "imported 0 of 5 records into "+dst+" (5 already present)\n", r.stdout)

	// From standard input.
	in, err := os.Open(out)
	require.NoError(t, err)
	defer in.Close()
	saved := tunedbStdin
	tunedbStdin = in
	defer func() { tunedbStdin = saved }()
	dst2 := filepath.Join(t.TempDir(), "tunedb.jsonl")
	r = runArgs(t, "tunedb", "import", "-", "--db", dst2)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "imported 5 of 5 records into "+dst2+" (0 already present)\n", r.stdout)

	// An invalid record stops the import, naming its line.
	lines := strings.SplitAfter(string(want), "\n")
	lines[2] = strings.Replace(lines[2], `"samples":20`, `"samples":-3`, 1)
	bad := writeFile(t, "bad.jsonl", strings.Join(lines, ""))
	dst3 := filepath.Join(t.TempDir(), "tunedb.jsonl")
	r = runArgs(t, "tunedb", "import", bad, "--db", dst3)
	require.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "lumsearch: tunedb: import "+bad+": line 3: samples is -3")
	_, err = os.Stat(dst3)
	assert.True(t, os.IsNotExist(err), "nothing imported")

	r = runArgs(t, "tunedb", "import", filepath.Join(t.TempDir(), "missing.jsonl"), "--db", dst3)
	require.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "missing.jsonl")
}

func TestTunedbPrune(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		report string
		left   int
	}{
		{"keep 1", []string{"--keep", "1"}, "pruned 1 of 5 records", 4},
		{"older than", []string{"--older-than", "720h"}, "pruned 2 of 5 records", 3},
		{"older than in days", []string{"--older-than=30d"}, "pruned 2 of 5 records", 3},
		{"device", []string{"--device", "NVIDIA H200"}, "pruned 4 of 5 records", 1},
		{"together", []string{"--keep", "1", "--device", "NVIDIA A100"}, "pruned 2 of 5 records", 3},
		{"nothing", []string{"--dedup"}, "pruned 0 of 5 records", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filledTunedb(t)
			r := runArgs(t, append([]string{"tunedb", "prune", "--db", path}, tt.args...)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, tt.report+" from "+path)
			assert.NotContains(t, r.stdout, "bad line")
			db, err := tunedb.Open(path)
			require.NoError(t, err)
			assert.Equal(t, tt.left, db.Len())
			assert.Zero(t, db.Skipped())
			r = runArgs(t, "tunedb", "stats", "--db", path)
			require.Equal(t, exitOK, r.code, r.stderr)
		})
	}
}

func TestTunedbUsage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no subcommand", nil, "want: tunedb stats"},
		{"unknown subcommand", []string{"show"}, `unknown tunedb command "show"`},
		{"stats with an argument", []string{"stats", "x"}, "tunedb stats takes no arguments"},
		{"import without a file", []string{"import"}, "want: tunedb import FILE"},
		{"flag of another subcommand", []string{"stats", "--keep", "2"}, "--keep does not apply to tunedb stats"},
		{"-o on prune", []string{"prune", "-o", "x"}, "-o does not apply to tunedb prune"},
		{"keep 0", []string{"prune", "--keep", "0"}, "--keep must be at least 1"},
		{"bad age", []string{"prune", "--older-than", "soon"}, `--older-than: "soon" is not a duration`},
		{"negative age", []string{"prune", "--older-than", "-1h"}, "not a positive duration"},
		{"bad where", []string{"export", "--where", "tpu"}, `--where is "tpu"`},
		{"bad flag", []string{"stats", "--nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, append(append([]string{"tunedb"}, tt.args...), "--db", db)...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, tt.msg)
			assert.Contains(t, r.stderr, "Run 'lumsearch tunedb -h' for usage.")
		})
	}
	_, err := os.Stat(db)
	assert.True(t, os.IsNotExist(err))
}

// TestTunedbCalibrate writes GPU records of kernels timed as a device
// with known factors would run them, calibrates from them, and prices a
// model with the written profile.
func TestTunedbCalibrate(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "tunedb.jsonl")
	t.Setenv(tunedb.EnvPath, dbPath)
	dev, err := cost.LookupDevice("h200")
	require.NoError(t, err)
	truth := cost.Defaults(dev)
	truth.Memory, truth.Launch = 0.6, 5e-6
	m := cost.NewModel(dev, cost.Defaults(dev))
	db, err := tunedb.Open(dbPath)
	require.NoError(t, err)
	var recs []tunedb.Record
	for i := range 20 {
		n := ir.Dim(1) << (8 + i)
		b := ir.NewBuilder("kernel")
		b.Output("out", b.Exp(b.Input("$0", ir.F32, n)))
		body, err := b.Build()
		require.NoError(t, err)
		e, err := m.Kernel(body)
		require.NoError(t, err)
		secs, err := cost.Predict(dev, truth, e.Features)
		require.NoError(t, err)
		secs *= 1 + 0.01*float64(i%3-1)
		recs = append(recs, tunedb.Record{
			Key:    tunedb.Key{Spec: body.String(), Schedule: e.Schedule.String(), Shapes: fmt.Sprint(n), DTypes: "f32", Device: dev.Name, Driver: "test", Compiler: "test"},
			Median: secs, Spread: secs / 50, Samples: 10, Where: tunedb.WhereGPU, At: time.Now().UTC(),
		})
	}
	require.NoError(t, db.Append(recs...))

	profile := filepath.Join(dir, "h200.json")
	r := runArgs(t, "tunedb", "calibrate", "--target", "h200", "--held-out", "0.25", "-o", profile)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "h200-sxm: 20 GPU records, 5 held out")
	assert.Regexp(t, `(?m)^memory +0\.896 +0\.6\d\d$`, r.stdout)
	assert.Contains(t, r.stdout, "profile written to "+profile)
	p, err := cost.LoadProfile(profile)
	require.NoError(t, err)
	assert.InEpsilon(t, 0.6, p.Factors.Memory, 0.05)
	assert.InEpsilon(t, 5e-6, p.Factors.Launch, 0.1)

	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4", "--target", "h200", "--profile", profile, "--ablate=false")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "by the cost model on h200-sxm")
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--target", "h100", "--profile", profile)
	require.Equal(t, exitUsage, r.code, "a profile of another device")

	r = runArgs(t, "tunedb", "calibrate", "--target", "a100")
	require.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "no GPU records of a100-sxm-80gb")
	r = runArgs(t, "tunedb", "calibrate")
	require.Equal(t, exitUsage, r.code)
}
