package tunedb

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goodLines returns n valid records made from seed and their lines as a
// file holds them. Every third line is written as another tool might
// write it (fields reordered, spaces, a field a later version added), so
// that a test can tell a line kept byte for byte from one re-encoded.
func goodLines(t *testing.T, seed uint64, n int) ([]Record, []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	specs := []string{"(matmul a b)", "(exp x)", "(add (mul x y) z)", "(softmax x)", "(tanh x)"}
	var recs []Record
	var lines []string
	for i := range n {
		r := rec(key(specs[rng.IntN(len(specs))]+" #"+strconv.Itoa(i), "NVIDIA H200"), float64(1+rng.IntN(1000))*1e-6, rng.IntN(600))
		recs = append(recs, r)
		l := line(r)
		if i%3 == 1 {
			l = strings.Replace(l, `{"id":`, `{ "later": {"x": [1, 2]},  "id":`, 1)
			l = strings.Replace(l, `,"samples":50`, `, "samples" : 50 `, 1)
		}
		lines = append(lines, l)
	}
	return recs, lines
}

// binaryGarbage is a line of random bytes: no newline, no NUL (which would
// make it torn), and a first byte that no JSON value starts with, so that
// it is invalid rather than cut short.
func binaryGarbage(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 2))
	b := []byte{0xff}
	for len(b) < n {
		if c := byte(rng.UintN(256)); c != '\n' && c != 0 {
			b = append(b, c)
		}
	}
	return string(b) + "\n"
}

// printable says whether s has no control characters, so that printing it
// cannot break a terminal or a log line.
func printable(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func TestBadLines(t *testing.T) {
	recs, good := goodLines(t, 7, 6)
	valid := line(recs[0])
	kinds := []struct {
		name   string
		line   string
		torn   bool
		reason string // substring of the BadLine's reason
	}{
		{"text", "this is not a record\n", false, "invalid character 'h'"},
		{"binary garbage", binaryGarbage(3, 80), false, "invalid character"},
		{"negative time", strings.Replace(valid, `"median_s":`, `"median_s":-`, 1), false, "median_s is -"},
		{"zero samples", strings.Replace(valid, `"samples":50`, `"samples":0`, 1), false, "samples is 0"},
		{"samples of the wrong type", strings.Replace(valid, `"samples":50`, `"samples":"fifty"`, 1), false, "cannot unmarshal string"},
		{"key of the wrong type", strings.Replace(valid, `"key":{`, `"key":[1],"x":{`, 1), false, "cannot unmarshal array"},
		{"unknown place", strings.Replace(valid, `"where":"gpu"`, `"where":"tpu"`, 1), false, `where is "tpu"`},
		{"missing time", strings.Replace(valid, `"at":"`, `"was":"`, 1), false, "at is missing"},
		{"an array", "[1,2,3]\n", false, "cannot unmarshal array"},
		{"a number", "42\n", false, "cannot unmarshal number"},
		{"an id with a newline", strings.Replace(valid, `"id":"`, `"id":"x\n`, 1), false, `id "x\n`},
		{"torn", valid[:len(valid)/2] + "\n", true, "torn"},
		{"NUL bytes", "\x00\x00\x00\x00\n", true, "torn"},
	}
	for _, kind := range kinds {
		for _, at := range []int{0, 3, len(good)} {
			t.Run(fmt.Sprintf("%s at line %d", kind.name, at+1), func(t *testing.T) {
				content := strings.Join(good[:at], "") + kind.line + strings.Join(good[at:], "")
				path := filepath.Join(t.TempDir(), "tunedb.jsonl")
				require.NoError(t, os.WriteFile(path, []byte(content), 0o640))

				// Open keeps every good record and names the bad line.
				db, err := Open(path)
				require.NoError(t, err)
				assert.Equal(t, recs, db.Records())
				assert.Equal(t, 1, db.Skipped())
				bad := db.BadLines()
				require.Len(t, bad, 1)
				assert.Equal(t, at+1, bad[0].Line)
				assert.Equal(t, kind.torn, bad[0].Torn)
				assert.Contains(t, bad[0].Reason, kind.reason)
				warning := db.Warning()
				assert.Contains(t, warning, path+": skipped 1 bad line that holds no valid record (line "+strconv.Itoa(at+1)+")")
				assert.Contains(t, warning, `"lumsearch tunedb prune --db `+path+`" removes it`)
				assert.True(t, printable(warning), "%q", warning)

				// Stats count it and show where it is.
				s := db.Stats()
				assert.Equal(t, 1, s.Skipped)
				assert.Equal(t, len(recs), s.Records)
				var out bytes.Buffer
				require.NoError(t, db.WriteStats(&out))
				assert.Contains(t, out.String(), "\nbad lines:  1 skipped")
				assert.Contains(t, out.String(), "\n  line "+strconv.Itoa(at+1)+": ")
				assert.True(t, printable(strings.ReplaceAll(out.String(), "\n", "")), "%q", out.String())

				// Export writes the good records.
				var exp bytes.Buffer
				n, err := db.Export(&exp, Filter{})
				require.NoError(t, err)
				assert.Equal(t, len(recs), n)
				var want bytes.Buffer
				require.NoError(t, encodeLines(&want, recs))
				assert.Equal(t, want.String(), exp.String())

				// Import stays strict: the file as it is is refused, naming
				// the bad line, and nothing of it is added.
				dst, err := Open(filepath.Join(t.TempDir(), "dst.jsonl"))
				require.NoError(t, err)
				_, err = dst.ImportFile(path, nil)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "import "+path+": line "+strconv.Itoa(at+1)+": ")
				assert.Zero(t, reopen(t, dst).Len())

				// Prune removes exactly the bad line, keeps every good line
				// byte for byte, and keeps the file's mode.
				res, err := db.Prune(PruneOptions{})
				require.NoError(t, err)
				assert.Equal(t, PruneResult{Path: path, Kept: len(recs), Bad: 1, BadLines: bad, bad: res.bad}, res)
				assert.Contains(t, res.String(), "; removed 1 bad line (line "+strconv.Itoa(at+1)+")")
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Equal(t, strings.Join(good, ""), string(data))
				st, err := os.Stat(path)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
				assert.Zero(t, db.Skipped())
				assert.Empty(t, db.Warning())
				d := reopen(t, db)
				assert.Equal(t, recs, d.Records())
				assert.Zero(t, d.Skipped())
			})
		}
	}
}

// TestBlankAndManyBadLines: blank lines are not bad (other tools write
// them) but go when Prune rewrites the file; of many bad lines the first
// are listed and the rest counted.
func TestBlankAndManyBadLines(t *testing.T) {
	recs, good := goodLines(t, 11, 8)
	const nBad = maxBadLines + 5
	var b strings.Builder
	var wantLines []int
	lineNo := 0
	emit := func(s string) { b.WriteString(s); lineNo++ }
	for i := range nBad {
		if i < len(good) {
			emit(good[i])
			emit("\n")
		}
		emit(fmt.Sprintf("garbage %d\n", i))
		wantLines = append(wantLines, lineNo)
	}
	emit("   \t\n")
	path := filepath.Join(t.TempDir(), "tunedb.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))

	db, err := Open(path)
	require.NoError(t, err)
	assert.Equal(t, recs, db.Records())
	assert.Equal(t, nBad, db.Skipped())
	var got []int
	for _, bl := range db.BadLines() {
		got = append(got, bl.Line)
	}
	assert.Equal(t, wantLines[:maxBadLines], got)
	assert.Contains(t, db.Warning(), fmt.Sprintf("skipped %d bad lines", nBad))
	assert.Contains(t, db.Warning(), fmt.Sprintf(", %d and 5 more)", wantLines[maxBadLines-1]))
	var out bytes.Buffer
	require.NoError(t, db.WriteStats(&out))
	assert.Contains(t, out.String(), fmt.Sprintf("\nbad lines:  %d skipped;", nBad))
	assert.Contains(t, out.String(), fmt.Sprintf("\n  line %d: invalid character 'g'", wantLines[0]))
	assert.Contains(t, out.String(), "\n  and 5 more\n")

	res, err := db.Prune(PruneOptions{})
	require.NoError(t, err)
	assert.Equal(t, nBad, res.Bad)
	assert.Len(t, res.BadLines, maxBadLines)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, strings.Join(good, ""), string(data), "bad and blank lines gone, good ones intact")

	// Only blank lines to drop: Prune still tidies the file, and reports
	// no bad line.
	require.NoError(t, os.WriteFile(path, []byte("\n"+good[0]+"\n\n"+good[1]), 0o644))
	db, err = Open(path)
	require.NoError(t, err)
	assert.Zero(t, db.Skipped())
	assert.Empty(t, db.Warning())
	res, err = db.Prune(PruneOptions{})
	require.NoError(t, err)
	assert.Zero(t, res.Bad)
	assert.NotContains(t, res.String(), "bad line")
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, good[0]+good[1], string(data))

	// A clean file is not rewritten.
	before, err := os.Stat(path)
	require.NoError(t, err)
	_, err = db.Prune(PruneOptions{})
	require.NoError(t, err)
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "a file with nothing to drop stays the same file")
}

// TestPruneDropsRecordsAndBadLines: the selected records and the bad lines
// go together, and the rest stay byte for byte.
func TestPruneDropsRecordsAndBadLines(t *testing.T) {
	recs, good := goodLines(t, 5, 6)
	content := good[0] + "not json\n" + good[1] + good[2] + "{\"key\":{}}\n" + good[3] + good[4] + good[5]
	path := filepath.Join(t.TempDir(), "tunedb.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	db, err := Open(path)
	require.NoError(t, err)
	before := recs[0].At
	for _, r := range recs {
		if r.At.After(before) {
			before = r.At
		}
	}
	// Drop every record older than the newest: one is left.
	res, err := db.Prune(PruneOptions{Before: before})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Bad)
	assert.Equal(t, []int{2, 5}, []int{res.BadLines[0].Line, res.BadLines[1].Line})
	assert.Contains(t, res.String(), "; removed 2 bad lines (lines 2 and 5)")
	var want strings.Builder
	for i, r := range recs {
		if !r.At.Before(before) {
			want.WriteString(good[i])
		}
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want.String(), string(data))
	assert.Equal(t, len(recs)-res.Kept, res.Dropped)
	assert.Equal(t, res.Kept, reopen(t, db).Len())
}

// TestNotADatabase: a file none of whose lines is a record, beyond what a
// crash explains, is refused, and Prune leaves it as it is.
func TestNotADatabase(t *testing.T) {
	_, good := goodLines(t, 3, 1)
	tests := []struct {
		name    string
		content string
	}{
		{"text", "hello\nworld\n"},
		{"binary", binaryGarbage(9, 200)},
		{"invalid records only", strings.Replace(good[0], `"samples":50`, `"samples":-1`, 1)},
		{"two tears", good[0][:20] + "\n" + good[0][:30]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "notes.txt")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))
			_, err := Open(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+" holds no valid record")
			assert.Contains(t, err.Error(), "does not look like a tuning database")
			db := &DB{path: path}
			db.set(parsed{})
			_, err = db.Prune(PruneOptions{})
			require.Error(t, err)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tt.content, string(data), "left as it is")
		})
	}
}

func TestExportFileAtomic(t *testing.T) {
	db := filledDB(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "export.jsonl")
	require.NoError(t, os.WriteFile(out, []byte("old contents\n"), 0o600))
	n, err := db.ExportFile(out, Filter{})
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	var want bytes.Buffer
	_, err = db.Export(&want, Filter{})
	require.NoError(t, err)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, want.String(), string(got))
	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a replaced file keeps its mode")

	_, err = db.ExportFile(dir, Filter{})
	assert.ErrorContains(t, err, "export to "+dir+": it is a folder")
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file left behind")
}
