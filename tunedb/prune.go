package tunedb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"time"
)

// PruneOptions say which records Prune drops; the zero value drops none
// (but still removes bad lines).
type PruneOptions struct {
	// Keep, when positive, keeps only the newest Keep records of each key
	// and place of measurement (so emulated records never crowd out GPU
	// ones).
	Keep int
	// Before, when set, drops records measured before it.
	Before time.Time
	// Device, when set, drops every record of that device.
	Device string
	// Dedup drops exact copies of an earlier record.
	Dedup bool
}

// PruneResult says what Prune did.
type PruneResult struct {
	// Path is the database's file.
	Path string
	// Dropped is the number of records dropped, Kept of those left.
	Dropped, Kept int
	// Bad is the number of bad lines (torn or invalid) removed; BadLines
	// are the first of them, numbered as they were in the file.
	Bad      int
	BadLines []BadLine
	bad      badLines
}

// String is the result as "lumsearch tunedb prune" reports it: "pruned D
// of N records from PATH; K left", then which bad lines went, if any.
func (r PruneResult) String() string {
	s := fmt.Sprintf("pruned %d of %d records from %s; %d left", r.Dropped, r.Dropped+r.Kept, r.Path, r.Kept)
	switch {
	case r.Bad == 1:
		s += fmt.Sprintf("; removed 1 bad line (%s)", r.bad.where())
	case r.Bad > 1:
		s += fmt.Sprintf("; removed %d bad lines (%s)", r.Bad, r.bad.where())
	}
	return s
}

// Prune drops the records opt selects, and every bad line (torn or
// invalid), and says what it dropped. It works on the file as it is now,
// records other processes appended since Open included, under the
// exclusive lock that appenders take too: it writes the lines it keeps,
// byte for byte as they were, to a temporary file in the same folder,
// fsyncs it and renames it over the database, so that a crash leaves
// either the old file or the new one, and an appender that was waiting for
// the lock appends to the new file. The file is rewritten only if that
// changes it. A missing file is an empty database; a file that holds no
// record and does not look like a database (see Open) is refused and left
// as it is.
func (db *DB) Prune(opt PruneOptions) (PruneResult, error) {
	res := PruneResult{Path: db.path}
	if opt.Keep < 0 {
		return res, fmt.Errorf("tuning database: prune: keep is %d, want zero (no limit) or more", opt.Keep)
	}
	f, err := openLocked(db.path, os.O_RDONLY, true)
	if errors.Is(err, fs.ErrNotExist) {
		db.mu.Lock()
		db.set(parsed{})
		db.mu.Unlock()
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("tuning database: %w", err)
	}
	defer release(f)
	data, err := io.ReadAll(f)
	if err != nil {
		return res, fmt.Errorf("tuning database: %w", err)
	}
	p := parse(data)
	if err := notADatabase(db.path, p); err != nil {
		return res, fmt.Errorf("tuning database: prune: %w", err)
	}
	keep := prune(p.recs, opt)
	var out bytes.Buffer
	kept := parsed{recs: make([]Record, 0, len(keep)), raw: make([][]byte, 0, len(keep))}
	for _, i := range keep {
		out.Write(p.raw[i])
		out.WriteByte('\n')
		kept.recs = append(kept.recs, p.recs[i])
		kept.raw = append(kept.raw, p.raw[i])
	}
	// A file that would not change (no record dropped, no bad or blank
	// line, a newline at the end) is left alone.
	if !bytes.Equal(out.Bytes(), data) {
		st, err := f.Stat()
		if err != nil {
			return res, fmt.Errorf("tuning database: %w", err)
		}
		if err := replace(db.path, st.Mode().Perm(), out.Bytes()); err != nil {
			return res, fmt.Errorf("tuning database: prune: %w", err)
		}
		res.Bad, res.BadLines, res.bad = p.bad.n, p.bad.first, p.bad
	}
	db.mu.Lock()
	db.set(kept)
	db.mu.Unlock()
	res.Dropped, res.Kept = len(p.recs)-len(keep), len(keep)
	return res, nil
}

// prune returns the indices of the records of recs that opt keeps, in
// order.
func prune(recs []Record, opt PruneOptions) []int {
	drop := make([]bool, len(recs))
	seen := map[string]bool{}
	type group struct {
		key   Key
		where string
	}
	groups := map[group][]int{}
	for i, r := range recs {
		if (opt.Device != "" && r.Key.Device == opt.Device) || (!opt.Before.IsZero() && r.At.Before(opt.Before)) {
			drop[i] = true
			continue
		}
		if opt.Dedup {
			c := canonical(r)
			if seen[c] {
				drop[i] = true
				continue
			}
			seen[c] = true
		}
		g := group{r.Key, r.Where}
		groups[g] = append(groups[g], i)
	}
	if opt.Keep > 0 {
		for _, idx := range groups {
			if len(idx) <= opt.Keep {
				continue
			}
			// Newest first; on equal times the later in the file first.
			sort.SliceStable(idx, func(a, b int) bool {
				ta, tb := recs[idx[a]].At, recs[idx[b]].At
				if !ta.Equal(tb) {
					return ta.After(tb)
				}
				return idx[a] > idx[b]
			})
			for _, i := range idx[opt.Keep:] {
				drop[i] = true
			}
		}
	}
	var keep []int
	for i := range recs {
		if !drop[i] {
			keep = append(keep, i)
		}
	}
	return keep
}
