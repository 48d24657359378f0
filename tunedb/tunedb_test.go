package tunedb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the time of the first generated record.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// key is a small key for device dev.
func key(spec, dev string) Key {
	return Key{
		Spec:     spec,
		Schedule: "bm=64,bn=128,bk=32,warps=4,stages=3",
		Shapes:   "a=[64,64] b=[64,64]",
		DTypes:   "bf16",
		Device:   dev,
		Driver:   "570.124.06",
		Compiler: "nvrtc 12.8",
	}
}

// rec is a valid GPU record of k measured at t0 plus minutes.
func rec(k Key, median float64, minutes int) Record {
	return Record{
		Key: k, Median: median, Spread: median / 100, Samples: 50,
		ClockMHz: 1980, MemClockMHz: 3201, Where: WhereGPU, Host: "box",
		At: t0.Add(time.Duration(minutes) * time.Minute), Predicted: median * 0.9,
	}
}

// padding makes generated specs long, so that a batch spans many pages
// and a kill can land inside its write.
var padding = strings.Repeat("(add (mul x y) z) ", 100)

// genRecord is the record number seq of writer w: its fields encode both,
// so that a reader can check that it came back intact.
func genRecord(w, seq int) Record {
	return Record{
		Key: Key{
			Spec:     fmt.Sprintf("writer %d seq %d <->& %s", w, seq, padding),
			Schedule: "bm=" + strconv.Itoa(16<<(seq%4)),
			Shapes:   fmt.Sprintf("x=[%d,%d]", w+1, seq+1),
			DTypes:   "f32",
			Device:   "NVIDIA H200",
			Driver:   "570.124.06",
			Compiler: "nvrtc 12.8",
		},
		Median: float64(seq+1) * 1e-6, Spread: 1e-8, Samples: seq + 1,
		ClockMHz: 1980, MemClockMHz: 3201, Where: WhereGPU,
		Host: "writer-" + strconv.Itoa(w), At: t0.Add(time.Duration(seq) * time.Second),
	}
}

// writerSeq reads back the writer and sequence number of a generated
// record.
func writerSeq(t *testing.T, r Record) (int, int) {
	t.Helper()
	w, err := strconv.Atoi(strings.TrimPrefix(r.Host, "writer-"))
	require.NoError(t, err, r.Host)
	return w, r.Samples - 1
}

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "sub", "tunedb.jsonl") }

// Helper-process plumbing: the test binary re-executed runs
// TestHelperProcess, which appends generated records and exits.
const (
	envMode   = "TUNEDB_HELPER_MODE" // "loop" (append forever) or "count"
	envPath   = "TUNEDB_HELPER_PATH"
	envWriter = "TUNEDB_HELPER_WRITER"
	envStart  = "TUNEDB_HELPER_START" // first sequence number
	envCount  = "TUNEDB_HELPER_COUNT" // records to append in mode count
	envBatch  = "TUNEDB_HELPER_BATCH" // largest batch
)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envMode)
	if mode == "" {
		t.Skip("runs only as a child process of other tests")
	}
	atoi := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", name, err)
			os.Exit(3)
		}
		return n
	}
	w, seq, batch := atoi(envWriter), atoi(envStart), atoi(envBatch)
	end := -1
	if mode == "count" {
		end = seq + atoi(envCount)
	}
	db, err := Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	for end < 0 || seq < end {
		n := 1 + seq%batch // batches of varying sizes
		if end >= 0 {
			n = min(n, end-seq)
		}
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = genRecord(w, seq+i)
		}
		if err := db.Append(recs...); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		seq += n
	}
	os.Exit(0)
}

// helper starts the test binary as a helper process.
func helper(t *testing.T, env ...string) *os.Process {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	attr := &os.ProcAttr{
		Env:   append(os.Environ(), env...),
		Files: []*os.File{nil, os.Stderr, os.Stderr},
	}
	p, err := os.StartProcess(exe, []string{os.Args[0], "-test.run=^TestHelperProcess$"}, attr)
	require.NoError(t, err)
	return p
}

func TestKeyHash(t *testing.T) {
	k := key("(matmul a b)", "NVIDIA H200")
	// The id must never change: records written today are looked up by it
	// tomorrow.
	assert.Equal(t, "3dd7b65001247e2a2fe1f4cede03e5de7f0a042e57b3560fd006ad712b7e166e", k.Hash())
	assert.Len(t, k.Hash(), 64)
	assert.Equal(t, k.Hash(), k.Hash())
	assert.Equal(t, k.Hash(), rec(k, 1, 0).ID())

	tests := []struct {
		name   string
		change func(*Key)
	}{
		{"spec", func(k *Key) { k.Spec += " " }},
		{"schedule", func(k *Key) { k.Schedule = "" }},
		{"shapes", func(k *Key) { k.Shapes = "a=[64,65] b=[65,64]" }},
		{"dtypes", func(k *Key) { k.DTypes = "f16" }},
		{"device", func(k *Key) { k.Device = "NVIDIA H100" }},
		{"driver", func(k *Key) { k.Driver = "580.0" }},
		{"compiler", func(k *Key) { k.Compiler = "nvrtc 11.8" }},
		{"boundary between fields", func(k *Key) { k.Driver, k.Compiler = k.Driver+"n", k.Compiler[1:] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k2 := k
			tt.change(&k2)
			assert.NotEqual(t, k.Hash(), k2.Hash())
		})
	}
}

func TestRoundTrip(t *testing.T) {
	path := dbPath(t)
	db, err := Open(path)
	require.NoError(t, err)
	assert.Zero(t, db.Len())
	_, err = os.Stat(path)
	assert.True(t, os.IsNotExist(err), "Open creates nothing")

	emu := rec(key("(exp x)", "NVIDIA H200"), 2e-3, 1)
	emu.Where, emu.ClockMHz, emu.MemClockMHz, emu.Key.Driver, emu.Predicted = WhereEmulated, 0, 0, "", 0
	local := rec(key("(relu x)", "NVIDIA A100"), 3e-6, 2)
	local.At = time.Date(2025, 6, 1, 14, 2, 0, 0, time.FixedZone("CEST", 2*3600))
	want := []Record{rec(key("(matmul a b)", "NVIDIA H200"), 4.12e-4, 0), emu, local}
	require.NoError(t, db.Append(want[:1]...))
	require.NoError(t, db.Append(want[1:]...))
	want[2].At = want[2].At.UTC()
	assert.Equal(t, want, db.Records())

	db2, err := Open(path)
	require.NoError(t, err)
	assert.Equal(t, want, db2.Records())
	assert.Zero(t, db2.Skipped())

	// Other tools see one JSON object per line, with the documented names.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 3)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &m))
	assert.Equal(t, want[0].ID(), m["id"])
	for _, f := range []string{"key", "median_s", "spread_s", "samples", "clock_mhz", "mem_clock_mhz", "where", "host", "at", "predicted_s"} {
		assert.Contains(t, m, f)
	}
	assert.Equal(t, "2025-06-01T12:00:00Z", m["at"])
	assert.Equal(t, "(matmul a b)", m["key"].(map[string]any)["spec"])
	m = nil
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &m))
	assert.NotContains(t, m, "predicted_s", "no prediction, no field")
	assert.Contains(t, lines[2], `"at":"2025-06-01T12:02:00Z"`, "times are stored in UTC")
}

func TestValidate(t *testing.T) {
	good := rec(key("(matmul a b)", "NVIDIA H200"), 1e-3, 0)
	require.NoError(t, good.Validate())
	tests := []struct {
		name   string
		change func(*Record)
		msg    string
	}{
		{"no spec", func(r *Record) { r.Key.Spec = "" }, "key.spec is empty"},
		{"no shapes", func(r *Record) { r.Key.Shapes = "" }, "key.shapes"},
		{"no dtypes", func(r *Record) { r.Key.DTypes = "" }, "key.dtypes"},
		{"no device", func(r *Record) { r.Key.Device = "" }, "key.device"},
		{"gpu without driver", func(r *Record) { r.Key.Driver = "" }, "a gpu record needs key.driver"},
		{"bad utf-8", func(r *Record) { r.Key.Shapes = "\xff" }, "key.shapes is not valid UTF-8"},
		{"where", func(r *Record) { r.Where = "tpu" }, `where is "tpu"`},
		{"zero median", func(r *Record) { r.Median = 0 }, "median_s"},
		{"negative spread", func(r *Record) { r.Spread = -1 }, "spread_s"},
		{"no samples", func(r *Record) { r.Samples = 0 }, "samples"},
		{"negative clock", func(r *Record) { r.ClockMHz = -1 }, "clock_mhz"},
		{"negative prediction", func(r *Record) { r.Predicted = -1 }, "predicted_s"},
		{"no time", func(r *Record) { r.At = time.Time{} }, "at is missing"},
	}
	db, err := Open(dbPath(t))
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good
			tt.change(&r)
			assert.ErrorContains(t, r.Validate(), tt.msg)
			err := db.Append(good, r)
			assert.ErrorContains(t, err, "record 2: "+tt.msg)
			assert.Zero(t, db.Len(), "nothing of a bad batch is written")
		})
	}
	_, err = os.Stat(db.Path())
	assert.True(t, os.IsNotExist(err))
}

// line is the text of r as a line of the file.
func line(r Record) string { return canonical(r) }

func TestOpenTorn(t *testing.T) {
	a := rec(key("(matmul a b)", "NVIDIA H200"), 1e-3, 0)
	b := rec(key("(exp x)", "NVIDIA H200"), 2e-3, 1)
	badLine := strings.Replace(line(a), `"median_s":0.001`, `"median_s":-1`, 1)
	require.NotEqual(t, line(a), badLine)
	full := line(b)
	tests := []struct {
		name    string
		content string
		want    []Record
		skipped int
		first   string // the first bad line, as BadLine.String gives it
	}{
		{"empty", "", nil, 0, ""},
		{"whole lines", line(a) + line(b), []Record{a, b}, 0, ""},
		{"blank lines", "\n" + line(a) + "\n  \n" + line(b), []Record{a, b}, 0, ""},
		{"partial last line", line(a) + full[:len(full)/2], []Record{a}, 1, "line 2: " + tornReason},
		{"one byte of a line", line(a) + "{", []Record{a}, 1, "line 2: " + tornReason},
		{"a first write cut short", full[:len(full)/3], nil, 1, "line 1: " + tornReason},
		{"NUL bytes at the end", line(a) + "\x00\x00\x00\x00", []Record{a}, 1, "line 2: " + tornReason},
		{"a tear padded with NUL bytes", line(a) + full[:100] + "\x00\x00\x00\x00\n", []Record{a}, 1, "line 2: " + tornReason},
		{"two tears", full[:10] + "\n" + line(a) + full[:200], []Record{a}, 2, "line 1: " + tornReason},
		{"invalid JSON on the last line", line(a) + "}garbage\n", []Record{a}, 1, "line 2: invalid character"},
		{"invalid JSON without a newline", line(a) + "}garbage", []Record{a}, 1, "line 2: invalid character"},
		{"whole record without its newline", line(a) + strings.TrimSuffix(full, "\n"), []Record{a, b}, 0, ""},
		{"a tear ended by a later append", line(a) + full[:40] + "\n" + line(b), []Record{a, b}, 1, "line 2: " + tornReason},
		{"invalid line in the middle", line(a) + "}garbage\n" + line(b), []Record{a, b}, 1, "line 2: invalid character"},
		{"invalid record first", badLine + line(b), []Record{b}, 1, "line 1: median_s is -1"},
		{"invalid record last", line(a) + badLine, []Record{a}, 1, "line 2: median_s is -1"},
		{"two objects on a line", strings.TrimSuffix(line(a), "\n") + line(b) + line(b), []Record{b}, 1, "line 1: text after"},
		{"wrong id", strings.Replace(line(a), a.ID(), b.ID(), 1) + line(b), []Record{b}, 1, `line 1: id "` + b.ID() + `" does not match`},
		{"no id", strings.Replace(line(a), `"id":"`+a.ID()+`",`, "", 1) + line(b), []Record{a, b}, 0, ""},
		{"unknown field", strings.Replace(line(a), `"samples"`, `"later":[1,2],"samples"`, 1), []Record{a}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tunedb.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))
			db, err := Open(path)
			require.NoError(t, err)
			assert.Equal(t, tt.want, db.Records())
			assert.Equal(t, tt.skipped, db.Skipped())
			if tt.first != "" {
				require.NotEmpty(t, db.BadLines())
				assert.True(t, strings.HasPrefix(db.BadLines()[0].String(), tt.first), "%s", db.BadLines()[0])
			} else {
				assert.Empty(t, db.BadLines())
			}

			// A later append starts on its own line, and every record
			// read before is still there.
			c := rec(key("(tanh x)", "NVIDIA H200"), 3e-3, 2)
			require.NoError(t, db.Append(c))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			before, ok := strings.CutSuffix(string(data), line(c))
			require.True(t, ok, "%q", data)
			assert.True(t, before == "" || strings.HasSuffix(before, "\n"), "the record starts its own line: %q", data)
			db2, err := Open(path)
			require.NoError(t, err)
			assert.Equal(t, append(append([]Record(nil), tt.want...), c), db2.Records())
			assert.Equal(t, tt.skipped, db2.Skipped(), "the ended tear stays skipped")
		})
	}
}

// TestEveryPrefixIsTorn: whatever a killed writer leaves of a line is
// recognised as torn, never as a bad line.
func TestEveryPrefixIsTorn(t *testing.T) {
	r := rec(key("(matmul a b) ->é", "NVIDIA H200"), 1.25e-4, 0)
	r.Key.Shapes = "q\"uo\\te\u0001"
	l := strings.TrimSuffix(line(r), "\n")
	for n := 1; n < len(l); n++ {
		_, err := decodeLine([]byte(l[:n]))
		require.ErrorIs(t, err, errTorn, "prefix %q", l[:n])
	}
	got, err := decodeLine([]byte(l))
	require.NoError(t, err)
	assert.Equal(t, r, got)
}

func TestKilledWriter(t *testing.T) {
	path := dbPath(t)
	start, tears := 0, 0
	for round := range 3 {
		size0 := fileSize(path)
		p := helper(t, envMode+"=loop", envPath+"="+path, envWriter+"=7",
			envStart+"="+strconv.Itoa(start), envBatch+"=200")
		exited := make(chan error, 1)
		go func() { _, err := p.Wait(); exited <- err }()
		// Once it has written a few batches, kill it, preferably while a
		// write is under way (the file does not end in a newline): Linux
		// stops a write to a file between pages for a fatal signal.
		deadline := time.Now().Add(60 * time.Second)
		for fileSize(path) < size0+1<<20 {
			select {
			case err := <-exited:
				t.Fatalf("round %d: the writer exited on its own: %v", round, err)
			default:
			}
			require.True(t, time.Now().Before(deadline), "round %d: the writer wrote too little", round)
			time.Sleep(time.Millisecond)
		}
		for give := time.Now().Add(2 * time.Second); time.Now().Before(give) && endsInNewline(path); {
		}
		require.NoError(t, p.Kill()) // SIGKILL
		<-exited

		db, err := Open(path)
		require.NoError(t, err, "round %d", round)
		recs := db.Records()
		require.Greater(t, len(recs), start, "round %d wrote records", round)
		for i, r := range recs {
			if want := genRecord(7, i); r != want {
				require.Equal(t, want, r, "record %d intact", i)
			}
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			tears++
		}
		start = len(recs)
	}
	t.Logf("%d records; %d of 3 kills tore a line", start, tears)

	db, err := Open(path)
	require.NoError(t, err)
	skipped := db.Skipped()
	assert.Equal(t, tears, skipped)
	last := genRecord(7, start)
	require.NoError(t, db.Append(last))
	db2, err := Open(path)
	require.NoError(t, err)
	require.Equal(t, start+1, db2.Len())
	assert.Equal(t, last, db2.Records()[start])
	assert.Equal(t, skipped, db2.Skipped())

	// Pruning clears the tears.
	res, err := db2.Prune(PruneOptions{})
	require.NoError(t, err)
	assert.Zero(t, res.Dropped)
	assert.Equal(t, skipped, res.Bad)
	db3, err := Open(path)
	require.NoError(t, err)
	assert.Equal(t, start+1, db3.Len())
	assert.Zero(t, db3.Skipped())
}

// endsInNewline says whether the file at path ends in a newline (or
// cannot be read).
func endsInNewline(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return true
	}
	var b [1]byte
	_, err = f.ReadAt(b[:], st.Size()-1)
	return err != nil || b[0] == '\n'
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// checkAll opens path and checks that it holds exactly records 0..n-1 of
// each of writers, intact, and that every line of the file is valid.
func checkAll(t *testing.T, path string, writers, n int) {
	t.Helper()
	db, err := Open(path)
	require.NoError(t, err)
	assert.Zero(t, db.Skipped())
	got := map[[2]int]int{}
	for _, r := range db.Records() {
		w, seq := writerSeq(t, r)
		require.Equal(t, genRecord(w, seq), r)
		got[[2]int{w, seq}]++
	}
	for w := range writers {
		for seq := range n {
			assert.Equal(t, 1, got[[2]int{w, seq}], "writer %d record %d", w, seq)
		}
	}
	assert.Equal(t, writers*n, db.Len())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	require.Len(t, lines, writers*n)
	for i, l := range lines {
		require.True(t, json.Valid(l), "line %d", i+1)
	}
}

func TestConcurrentProcesses(t *testing.T) {
	const writers, n = 4, 60
	path := dbPath(t)
	var procs []*os.Process
	for w := range writers {
		procs = append(procs, helper(t, envMode+"=count", envPath+"="+path, envWriter+"="+strconv.Itoa(w),
			envStart+"=0", envCount+"="+strconv.Itoa(n), envBatch+"=7"))
	}
	for w, p := range procs {
		st, err := p.Wait()
		require.NoError(t, err)
		require.True(t, st.Success(), "writer %d: %v", w, st)
	}
	checkAll(t, path, writers, n)
}

// TestConcurrentHandles appends from goroutines with a DB each while
// another prunes the file again and again: an append that waited for the
// lock of a file that a prune has since replaced must land in the new file.
// Another writer appends junk records and bad lines, which the prunes drop
// while the appends go on.
func TestConcurrentHandles(t *testing.T) {
	const writers, n = 4, 40
	path := dbPath(t)
	junk := rec(key("(junk)", "junk"), 1, 0)
	stop := make(chan struct{})
	var wg, bg sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := range writers {
		wg.Go(func() {
			db, err := Open(path)
			if err != nil {
				errs <- err
				return
			}
			for seq := 0; seq < n; {
				k := min(1+seq%5, n-seq)
				recs := make([]Record, k)
				for i := range recs {
					recs[i] = genRecord(w, seq+i)
				}
				if err := db.Append(recs...); err != nil {
					errs <- err
					return
				}
				seq += k
			}
		})
	}
	bg.Go(func() {
		db, err := Open(path)
		if err != nil {
			errs <- err
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A junk record and a bad line in one write, so that the
			// file never holds bad lines alone (which Open and Prune
			// would refuse as not a database).
			if err := db.appendBytes([]byte("\n" + line(junk) + "not a record\n")); err != nil {
				errs <- err
				return
			}
		}
	})
	prunes, badGone := 0, 0
	bg.Go(func() {
		db, err := Open(path)
		if err != nil {
			errs <- err
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := db.Prune(PruneOptions{Device: "junk"})
			if err != nil {
				errs <- err
				return
			}
			prunes++
			badGone += res.Bad
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d prunes ran during the appends, removing %d bad lines", prunes, badGone)
	db, err := Open(path)
	require.NoError(t, err)
	_, err = db.Prune(PruneOptions{Device: "junk"})
	require.NoError(t, err)
	checkAll(t, path, writers, n)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary files left behind")
}

func TestLookup(t *testing.T) {
	k := key("(matmul a b)", "NVIDIA H200")
	other := key("(matmul a b)", "NVIDIA H100")
	emu := func(median float64, minutes int) Record {
		r := rec(k, median, minutes)
		r.Where = WhereEmulated
		return r
	}
	tests := []struct {
		name     string
		recs     []Record
		gpu, cpu float64 // wanted medians; 0: none found
	}{
		{"empty", nil, 0, 0},
		{"emulation only", []Record{emu(5, 0), emu(6, 9)}, 0, 6},
		{"newest gpu wins", []Record{rec(k, 1, 5), rec(k, 2, 3), emu(7, 10)}, 1, 7},
		{"a newer emulation never hides the gpu time", []Record{rec(k, 1, 0), emu(9, 60)}, 1, 9},
		{"equal times: the later line", []Record{rec(k, 1, 5), rec(k, 2, 5)}, 2, 0},
		{"other device", []Record{rec(other, 3, 0)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := Open(dbPath(t))
			require.NoError(t, err)
			require.NoError(t, db.Append(tt.recs...))
			for _, d := range []*DB{db, reopen(t, db)} {
				r, ok := d.Lookup(k)
				assert.Equal(t, tt.gpu != 0, ok)
				assert.Equal(t, tt.gpu, r.Median)
				if ok {
					assert.Equal(t, WhereGPU, r.Where)
				}
				r, ok = d.LookupEmulated(k)
				assert.Equal(t, tt.cpu != 0, ok)
				assert.Equal(t, tt.cpu, r.Median)
			}
		})
	}
}

func reopen(t *testing.T, db *DB) *DB {
	t.Helper()
	d, err := Open(db.Path())
	require.NoError(t, err)
	return d
}

func TestPrune(t *testing.T) {
	ka := key("(matmul a b)", "NVIDIA H200")
	kb := key("(exp x)", "NVIDIA H200")
	kc := key("(exp x)", "NVIDIA A100")
	emu := rec(ka, 9, 100)
	emu.Where = WhereEmulated
	all := []Record{
		rec(ka, 1, 0), rec(ka, 2, 10), rec(ka, 3, 20), emu, // three GPU times of ka and one emulated
		rec(kb, 4, 5), rec(kb, 4, 5), // an exact copy
		rec(kc, 5, 30),
	}
	medians := func(recs []Record) []float64 {
		var m []float64
		for _, r := range recs {
			m = append(m, r.Median)
		}
		return m
	}
	tests := []struct {
		name    string
		opt     PruneOptions
		dropped int
		want    []float64 // medians of the kept records, in order
	}{
		{"nothing", PruneOptions{}, 0, []float64{1, 2, 3, 9, 4, 4, 5}},
		{"keep 1 per key and place", PruneOptions{Keep: 1}, 3, []float64{3, 9, 4, 5}},
		{"keep 2", PruneOptions{Keep: 2}, 1, []float64{2, 3, 9, 4, 4, 5}},
		{"older than", PruneOptions{Before: t0.Add(10 * time.Minute)}, 3, []float64{2, 3, 9, 5}},
		{"device", PruneOptions{Device: "NVIDIA H200"}, 6, []float64{5}},
		{"dedup", PruneOptions{Dedup: true}, 1, []float64{1, 2, 3, 9, 4, 5}},
		{"together", PruneOptions{Keep: 1, Device: "NVIDIA A100", Dedup: true}, 4, []float64{3, 9, 4}},
		{"everything", PruneOptions{Device: "NVIDIA H200", Before: t0.Add(time.Hour)}, 7, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := Open(dbPath(t))
			require.NoError(t, err)
			require.NoError(t, db.Append(all...))
			res, err := db.Prune(tt.opt)
			require.NoError(t, err)
			assert.Equal(t, tt.dropped, res.Dropped)
			assert.Equal(t, len(all)-tt.dropped, res.Kept)
			assert.Zero(t, res.Bad)
			assert.Equal(t, tt.want, medians(db.Records()))
			d := reopen(t, db)
			assert.Equal(t, tt.want, medians(d.Records()), "the file holds what was kept")
			assert.Zero(t, d.Skipped())
			require.NoError(t, d.Append(rec(ka, 8, 50)), "still appendable")
			assert.Equal(t, len(tt.want)+1, reopen(t, d).Len())
			st, err := os.Stat(db.Path())
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
		})
	}

	t.Run("missing file", func(t *testing.T) {
		db, err := Open(dbPath(t))
		require.NoError(t, err)
		res, err := db.Prune(PruneOptions{Keep: 1})
		require.NoError(t, err)
		assert.Equal(t, PruneResult{Path: db.Path()}, res)
		_, err = os.Stat(db.Path())
		assert.True(t, os.IsNotExist(err))
	})
	t.Run("sees other writers' records", func(t *testing.T) {
		db, err := Open(dbPath(t))
		require.NoError(t, err)
		require.NoError(t, db.Append(rec(ka, 1, 0)))
		other := reopen(t, db)
		require.NoError(t, other.Append(rec(ka, 2, 10), rec(kb, 3, 0)))
		res, err := db.Prune(PruneOptions{Keep: 1})
		require.NoError(t, err)
		assert.Equal(t, 1, res.Dropped)
		assert.Equal(t, []float64{2, 3}, medians(db.Records()))
	})
	t.Run("negative keep", func(t *testing.T) {
		db, err := Open(dbPath(t))
		require.NoError(t, err)
		_, err = db.Prune(PruneOptions{Keep: -1})
		assert.ErrorContains(t, err, "keep is -1")
	})
}

func TestExportImport(t *testing.T) {
	k := key("(matmul a b)", "NVIDIA H200")
	emu := rec(k, 9, 3)
	emu.Where = WhereEmulated
	recs := []Record{rec(k, 1, 0), rec(key("(exp x)", "NVIDIA A100"), 2, 1), emu, rec(k, 3, 20)}
	src, err := Open(dbPath(t))
	require.NoError(t, err)
	require.NoError(t, src.Append(recs...))

	var all bytes.Buffer
	n, err := src.Export(&all, Filter{})
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	data, err := os.ReadFile(src.Path())
	require.NoError(t, err)
	assert.Equal(t, string(data), all.String(), "an export is the file's own format")

	filters := []struct {
		name string
		f    Filter
		want int
	}{
		{"device", Filter{Device: "NVIDIA A100"}, 1},
		{"where", Filter{Where: WhereEmulated}, 1},
		{"since", Filter{Since: t0.Add(3 * time.Minute)}, 2},
		{"none match", Filter{Device: "nope"}, 0},
	}
	for _, tt := range filters {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			n, err := src.Export(&buf, tt.f)
			require.NoError(t, err)
			assert.Equal(t, tt.want, n)
			assert.Equal(t, tt.want, strings.Count(buf.String(), "\n"))
		})
	}

	dst, err := Open(dbPath(t))
	require.NoError(t, err)
	res, err := dst.Import(bytes.NewReader(all.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, ImportResult{Read: 4, Added: 4}, res)
	assert.Equal(t, src.Records(), reopen(t, dst).Records())
	res, err = dst.Import(bytes.NewReader(all.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, ImportResult{Read: 4, Duplicates: 4}, res, "importing twice adds nothing")
	assert.Equal(t, 4, reopen(t, dst).Len())

	good := line(rec(key("(tanh x)", "NVIDIA H200"), 5, 0))
	bad := []struct {
		name, input, msg string
	}{
		{"invalid record", good + strings.Replace(good, `"samples":50`, `"samples":0`, 1), "line 2: samples is 0"},
		{"not JSON", good + "\n" + good + "hello\n", "line 4: invalid character 'h'"},
		{"truncated last line", good + good[:30], "line 2: truncated record"},
		{"wrong where", strings.Replace(good, `"where":"gpu"`, `"where":"GPU"`, 1), `line 1: where is "GPU"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dst.Import(strings.NewReader(tt.input))
			assert.ErrorContains(t, err, tt.msg)
			assert.Equal(t, 4, reopen(t, dst).Len(), "nothing of a bad import is added")
		})
	}
}

func TestStats(t *testing.T) {
	db, err := Open(dbPath(t))
	require.NoError(t, err)
	s := db.Stats()
	assert.Zero(t, s.Records)
	assert.True(t, s.Oldest.IsZero())

	k := key("(matmul a b)", "NVIDIA H200")
	emu := rec(k, 9, 3)
	emu.Where = WhereEmulated
	require.NoError(t, db.Append(rec(k, 1, 0), rec(k, 1, 0), rec(k, 2, 10), emu, rec(key("(exp x)", "NVIDIA A100"), 2, -5)))
	s = db.Stats()
	assert.Equal(t, Stats{
		Records: 5, Keys: 2, Duplicates: 1, Remeasured: 3,
		ByWhere:  map[string]int{WhereGPU: 4, WhereEmulated: 1},
		ByDevice: map[string]map[string]int{"NVIDIA H200": {WhereGPU: 3, WhereEmulated: 1}, "NVIDIA A100": {WhereGPU: 1}},
		Oldest:   t0.Add(-5 * time.Minute), Newest: t0.Add(10 * time.Minute),
	}, s)
}

func TestDefaultPath(t *testing.T) {
	t.Setenv(EnvPath, "/somewhere/db.jsonl")
	p, err := DefaultPath()
	require.NoError(t, err)
	assert.Equal(t, "/somewhere/db.jsonl", p)

	t.Setenv(EnvPath, "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	t.Setenv("HOME", "/home/me")
	p, err = DefaultPath()
	require.NoError(t, err)
	dir, err := os.UserCacheDir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "lumsearch", "tunedb.jsonl"), p)
	if runtime.GOOS == "linux" {
		assert.Equal(t, "/cache/lumsearch/tunedb.jsonl", p)
		t.Setenv("XDG_CACHE_HOME", "")
		p, err = DefaultPath()
		require.NoError(t, err)
		assert.Equal(t, "/home/me/.cache/lumsearch/tunedb.jsonl", p)
	}
}
