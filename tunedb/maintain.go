package tunedb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteStats writes the database's Stats as "lumsearch tunedb stats"
// prints them: the file (noting when there is none yet), the counts of
// records, keys, remeasured records, duplicates and bad lines (with the
// first bad lines' numbers and what is wrong with each), and, when there
// are records, the time span and a table of records per device and place
// of measurement.
func (db *DB) WriteStats(w io.Writer) error {
	s := db.Stats()
	note := ""
	if _, err := os.Stat(db.path); errors.Is(err, fs.ErrNotExist) {
		note = " (no file yet)"
	}
	fmt.Fprintf(w, "database:   %s%s\n", db.path, note)
	fmt.Fprintf(w, "records:    %d\n", s.Records)
	fmt.Fprintf(w, "keys:       %d\n", s.Keys)
	fmt.Fprintf(w, "remeasured: %d\n", s.Remeasured)
	fmt.Fprintf(w, "duplicates: %d\n", s.Duplicates)
	writeBadLines(w, db.path, s)
	if s.Records == 0 {
		return nil
	}
	fmt.Fprintf(w, "measured:   %s to %s\n\n", s.Oldest.Format(time.RFC3339), s.Newest.Format(time.RFC3339))
	devices := make([]string, 0, len(s.ByDevice))
	for d := range s.ByDevice {
		devices = append(devices, d)
	}
	sort.Strings(devices)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tGPU\tCPU-EMULATION")
	for _, d := range devices {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", d, s.ByDevice[d][WhereGPU], s.ByDevice[d][WhereEmulated])
	}
	fmt.Fprintf(tw, "all\t%d\t%d\n", s.ByWhere[WhereGPU], s.ByWhere[WhereEmulated])
	return tw.Flush()
}

// writeBadLines writes the "bad lines:" line of WriteStats and, under it,
// the first bad lines one to a line.
func writeBadLines(w io.Writer, path string, s Stats) {
	if s.Skipped == 0 {
		fmt.Fprintf(w, "bad lines:  0\n")
		return
	}
	torn := ""
	if s.Torn > 0 {
		torn = fmt.Sprintf(", %d of them torn", s.Torn)
	}
	fmt.Fprintf(w, "bad lines:  %d skipped%s; \"lumsearch tunedb prune --db %s\" removes them\n", s.Skipped, torn, path)
	for _, b := range s.BadLines {
		fmt.Fprintf(w, "  %s\n", b)
	}
	if more := s.Skipped - len(s.BadLines); more > 0 {
		fmt.Fprintf(w, "  and %d more\n", more)
	}
}

// ExportFile is Export to a file at path, written atomically (a temporary
// file in the same folder, then a rename), so that a failed export leaves
// any file that was there whole. A file it replaces keeps its mode; a new
// one gets 0644; a device or pipe is written as it is. It returns how many records it wrote.
func (db *DB) ExportFile(path string, f Filter) (int, error) {
	var buf bytes.Buffer
	n, err := db.Export(&buf, f)
	if err != nil {
		return 0, err
	}
	perm := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return 0, fmt.Errorf("export to %s: it is a folder", path)
		}
		if !st.Mode().IsRegular() {
			// A device or a pipe (-o /dev/stdout) cannot be renamed
			// over, and holds nothing to keep whole.
			return n, writeTo(path, buf.Bytes())
		}
		perm = st.Mode().Perm()
	}
	if err := replace(path, perm, buf.Bytes()); err != nil {
		return 0, fmt.Errorf("export to %s: %w", path, err)
	}
	return n, nil
}

// writeTo writes data to the existing file at path.
func writeTo(path string, data []byte) error {
	file, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("export to %s: %w", path, err)
	}
	_, err = file.Write(data)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export to %s: %w", path, err)
	}
	return nil
}

// ImportFile is Import from the file at path, or from stdin when path is
// "-". An error opening the file names it; an error importing is prefixed
// with "import NAME: ", NAME being path or "standard input".
func (db *DB) ImportFile(path string, stdin io.Reader) (ImportResult, error) {
	in, name := stdin, "standard input"
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return ImportResult{}, err
		}
		defer file.Close()
		in, name = file, path
	}
	res, err := db.Import(in)
	if err != nil {
		return ImportResult{}, fmt.Errorf("import %s: %w", name, err)
	}
	return res, nil
}

// maxAgeDays is the most days a time.Duration holds.
const maxAgeDays = math.MaxInt64 / int64(24*time.Hour)

// ParseAge reads how old a record must be for Prune to drop it
// (PruneOptions.Before is now less the age): a positive duration in Go's
// syntax (720h, 90m) or in whole days (30d).
func ParseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || int64(n) > maxAgeDays {
			return 0, fmt.Errorf("%q is not a duration such as 720h or 30d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 720h or 30d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}
