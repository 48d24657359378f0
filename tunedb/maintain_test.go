package tunedb

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filledDB is a database of four records: two keys on an H200 (one
// measured twice, once under emulation) and one on an A100.
func filledDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open(dbPath(t))
	require.NoError(t, err)
	h200, a100 := key("(matmul a b)", "NVIDIA H200"), key("(exp x)", "NVIDIA A100")
	emulated := rec(h200, 5e-2, 2)
	emulated.Where, emulated.ClockMHz, emulated.MemClockMHz = WhereEmulated, 0, 0
	require.NoError(t, db.Append(rec(h200, 1e-3, 0), rec(h200, 2e-3, 1), emulated, rec(a100, 2e-5, 3)))
	return db
}

func TestWriteStats(t *testing.T) {
	t.Run("no file", func(t *testing.T) {
		db, err := Open(dbPath(t))
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, db.WriteStats(&b))
		assert.Equal(t, "database:   "+db.Path()+" (no file yet)\nrecords:    0\nkeys:       0\nremeasured: 0\n"+
			"duplicates: 0\nbad lines:  0\n", b.String())
	})
	t.Run("filled", func(t *testing.T) {
		db := filledDB(t)
		var b bytes.Buffer
		require.NoError(t, db.WriteStats(&b))
		assert.Equal(t, "database:   "+db.Path()+"\nrecords:    4\nkeys:       2\nremeasured: 2\n"+
			"duplicates: 0\nbad lines:  0\nmeasured:   2025-06-01T12:00:00Z to 2025-06-01T12:03:00Z\n\n"+
			"DEVICE       GPU  CPU-EMULATION\n"+
			"NVIDIA A100  1    0\n"+
			"NVIDIA H200  2    1\n"+
			"all          3    1\n", b.String())
	})
}

func TestExportFileImportFile(t *testing.T) {
	db := filledDB(t)
	out := filepath.Join(t.TempDir(), "export.jsonl")
	n, err := db.ExportFile(out, Filter{Where: WhereGPU})
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	var want bytes.Buffer
	_, err = db.Export(&want, Filter{Where: WhereGPU})
	require.NoError(t, err)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, want.String(), string(got))

	for _, tt := range []struct {
		name  string
		path  string
		stdin string
	}{
		{"from a file", out, ""},
		{"from standard input", "-", want.String()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst, err := Open(dbPath(t))
			require.NoError(t, err)
			res, err := dst.ImportFile(tt.path, strings.NewReader(tt.stdin))
			require.NoError(t, err)
			assert.Equal(t, ImportResult{Read: 3, Added: 3}, res)
			res, err = dst.ImportFile(tt.path, strings.NewReader(tt.stdin))
			require.NoError(t, err)
			assert.Equal(t, ImportResult{Read: 3, Duplicates: 3}, res)
		})
	}
}

func TestExportImportFileErrors(t *testing.T) {
	db := filledDB(t)
	dir := t.TempDir()
	_, err := db.ExportFile(filepath.Join(dir, "no", "x.jsonl"), Filter{})
	require.ErrorContains(t, err, filepath.Join(dir, "no", "x.jsonl"))

	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"key\":{}}\n"), 0o644))
	for _, tt := range []struct {
		name, path, stdin, want string
	}{
		{"missing file", filepath.Join(dir, "missing.jsonl"), "", "open " + filepath.Join(dir, "missing.jsonl") + ": "},
		{"invalid file", bad, "", "import " + bad + ": line 1: "},
		{"invalid standard input", "-", "\nnot json\n", "import standard input: line 2: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.ImportFile(tt.path, strings.NewReader(tt.stdin))
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tt.want), err.Error())
			assert.Equal(t, 4, db.Len(), "nothing imported")
		})
	}
}

func TestParseAge(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"720h", 720 * time.Hour, ""},
		{"90m", 90 * time.Minute, ""},
		{"30d", 30 * 24 * time.Hour, ""},
		{"1d", 24 * time.Hour, ""},
		{"soon", 0, `"soon" is not a duration such as 720h or 30d`},
		{"d", 0, `"d" is not a duration such as 720h or 30d`},
		{"1.5d", 0, `"1.5d" is not a duration such as 720h or 30d`},
		{"99999999999d", 0, `"99999999999d" is not a duration such as 720h or 30d`},
		{"", 0, `"" is not a duration such as 720h or 30d`},
		{"0d", 0, `"0d" is not a positive duration`},
		{"-1h", 0, `"-1h" is not a positive duration`},
		{"-2d", 0, `"-2d" is not a positive duration`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAge(tt.in)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
