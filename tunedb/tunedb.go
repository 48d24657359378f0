package tunedb

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Places a time is measured, Record.Where.
const (
	WhereGPU      = "gpu"           // on the device
	WhereEmulated = "cpu-emulation" // by the kernel's CPU emulation
)

// EnvPath names the environment variable that overrides DefaultPath.
const EnvPath = "LUMSEARCH_TUNEDB"

// DefaultPath is where the database lives unless a command is told
// otherwise: $LUMSEARCH_TUNEDB if set, else lumsearch/tunedb.jsonl in the
// user's cache folder ($XDG_CACHE_HOME, else ~/.cache, on Linux).
func DefaultPath() (string, error) {
	if p := os.Getenv(EnvPath); p != "" {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tuning database: no cache folder (%v); set %s or give a path", err, EnvPath)
	}
	return filepath.Join(dir, "lumsearch", "tunedb.jsonl"), nil
}

// Key identifies a measured kernel: what it computes, how it is scheduled,
// on what arguments, and where it ran. Records with equal keys are
// measurements of the same thing.
type Key struct {
	// Spec is the canonical kernel body: an ir graph in text form, as
	// "lumsearch rules" prints a kernel's SPEC.
	Spec string `json:"spec"`
	// Schedule is the canonical schedule string, such as
	// "bm=64,bn=128,bk=32,warps=4,stages=3"; empty for the default one.
	Schedule string `json:"schedule"`
	// Shapes and DTypes are the arguments' shapes and element types.
	Shapes string `json:"shapes"`
	DTypes string `json:"dtypes"`
	// Device is the device name, Driver the driver version, Compiler the
	// kernel compiler's name and version.
	Device   string `json:"device"`
	Driver   string `json:"driver"`
	Compiler string `json:"compiler"`
}

// keyDomain starts the hashed bytes of every key, so that a change of the
// key's definition can change every id at once.
const keyDomain = "lumsearch tunedb key v1\n"

// Hash is the key's id: the hex SHA-256 of keyDomain followed by each field
// in declaration order (Spec, Schedule, Shapes, DTypes, Device, Driver,
// Compiler), each written as its length in bytes in decimal, a colon, the
// field's bytes and a newline. It is stable across versions and platforms.
func (k Key) Hash() string {
	h := sha256.New()
	io.WriteString(h, keyDomain)
	for _, f := range k.fields() {
		io.WriteString(h, strconv.Itoa(len(f)))
		io.WriteString(h, ":")
		io.WriteString(h, f)
		io.WriteString(h, "\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (k Key) fields() [7]string {
	return [7]string{k.Spec, k.Schedule, k.Shapes, k.DTypes, k.Device, k.Driver, k.Compiler}
}

// Record is one measurement of a kernel.
type Record struct {
	Key Key `json:"key"`
	// Median is the median time of the timed runs, Spread their
	// interquartile range (third quartile less first), both in seconds.
	Median float64 `json:"median_s"`
	Spread float64 `json:"spread_s"`
	// Samples is the number of timed runs.
	Samples int `json:"samples"`
	// ClockMHz and MemClockMHz are the SM and memory clocks during the
	// runs; 0 when unknown.
	ClockMHz    float64 `json:"clock_mhz"`
	MemClockMHz float64 `json:"mem_clock_mhz"`
	// Where is WhereGPU or WhereEmulated.
	Where string `json:"where"`
	// Host is the machine's name; may be empty.
	Host string `json:"host"`
	// At is when the measurement was taken.
	At time.Time `json:"at"`
	// Predicted is the cost model's prediction at measurement time, in
	// seconds; 0 when there was none.
	Predicted float64 `json:"predicted_s,omitempty"`
}

// ID is the record's key id, r.Key.Hash().
func (r Record) ID() string { return r.Key.Hash() }

// Validate says what, if anything, makes r unfit for the database.
func (r Record) Validate() error {
	k := r.Key
	names := [7]string{"spec", "schedule", "shapes", "dtypes", "device", "driver", "compiler"}
	for i, f := range k.fields() {
		if !utf8.ValidString(f) {
			return fmt.Errorf("key.%s is not valid UTF-8", names[i])
		}
	}
	switch {
	case k.Spec == "":
		return errors.New("key.spec is empty")
	case k.Shapes == "":
		return errors.New("key.shapes is empty")
	case k.DTypes == "":
		return errors.New("key.dtypes is empty")
	case k.Device == "":
		return errors.New("key.device is empty")
	}
	switch r.Where {
	case WhereGPU:
		if k.Driver == "" || k.Compiler == "" {
			return errors.New("a gpu record needs key.driver and key.compiler")
		}
	case WhereEmulated:
	default:
		return fmt.Errorf("where is %q, want %q or %q", r.Where, WhereGPU, WhereEmulated)
	}
	if !utf8.ValidString(r.Host) {
		return errors.New("host is not valid UTF-8")
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(r.Median) || r.Median <= 0:
		return fmt.Errorf("median_s is %v, want a positive time", r.Median)
	case !finite(r.Spread) || r.Spread < 0:
		return fmt.Errorf("spread_s is %v, want zero or more", r.Spread)
	case r.Samples < 1:
		return fmt.Errorf("samples is %d, want at least 1", r.Samples)
	case !finite(r.ClockMHz) || r.ClockMHz < 0:
		return fmt.Errorf("clock_mhz is %v, want zero or more", r.ClockMHz)
	case !finite(r.MemClockMHz) || r.MemClockMHz < 0:
		return fmt.Errorf("mem_clock_mhz is %v, want zero or more", r.MemClockMHz)
	case !finite(r.Predicted) || r.Predicted < 0:
		return fmt.Errorf("predicted_s is %v, want zero or more", r.Predicted)
	case r.At.IsZero():
		return errors.New("at is missing")
	}
	return nil
}

// DB is a tuning database: the records of its file when opened, plus those
// this DB appended since. It is safe for concurrent use, and several DBs,
// in one process or many, may append to one file at once.
type DB struct {
	path string

	mu    sync.RWMutex
	recs  []Record
	byKey map[Key][]int // indices into recs, in file order
	bad   badLines
}

// Open reads the database at path. A missing file is an empty database (the
// first Append creates it). Lines that hold no valid record, torn or
// invalid, wherever they are, are skipped and counted (Skipped, BadLines,
// Warning), never an error, so that one damaged line costs no measurement
// around it. Open refuses only a file none of whose lines is a record
// unless a crash explains it (one torn line), as that is most likely not a
// tuning database at all.
func Open(path string) (*DB, error) {
	db := &DB{path: path}
	f, err := openLocked(path, os.O_RDONLY, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		db.set(parsed{})
		return db, nil
	case err != nil:
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	data, err := io.ReadAll(f)
	release(f)
	if err != nil {
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	p := parse(data)
	if err := notADatabase(path, p); err != nil {
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	db.set(p)
	return db, nil
}

// set replaces db's records and bad lines with p's; the caller holds db.mu
// or owns db.
func (db *DB) set(p parsed) {
	db.recs = p.recs
	db.bad = p.bad
	db.byKey = make(map[Key][]int, len(p.recs))
	for i, r := range p.recs {
		db.byKey[r.Key] = append(db.byKey[r.Key], i)
	}
}

// Path is the database's file.
func (db *DB) Path() string { return db.path }

// Skipped is the number of lines, torn or invalid, that Open (or the last
// Prune) found holding no valid record and ignored.
func (db *DB) Skipped() int {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.bad.n
}

// BadLines returns the first of the lines Skipped counts (at most 20), in
// file order, each with its line number and what is wrong with it.
func (db *DB) BadLines() []BadLine {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return append([]BadLine(nil), db.bad.first...)
}

// Warning is what a program using the database should tell its user when
// Open skipped lines: how many, which, and that "lumsearch tunedb prune"
// removes them. It is "" when every line was read.
func (db *DB) Warning() string {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.bad.n == 0 {
		return ""
	}
	what, them := "bad lines that hold", "them"
	if db.bad.n == 1 {
		what, them = "bad line that holds", "it"
	}
	return fmt.Sprintf("tuning database %s: skipped %d %s no valid record (%s); every other record is used; \"lumsearch tunedb prune --db %s\" removes %s",
		db.path, db.bad.n, what, db.bad.where(), db.path, them)
}

// Len is the number of records.
func (db *DB) Len() int {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return len(db.recs)
}

// Records returns a copy of the records in file order.
func (db *DB) Records() []Record {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return append([]Record(nil), db.recs...)
}

// Lookup returns the newest GPU record for k: the one with the latest At,
// the later in the file on a tie. Records measured under CPU emulation are
// never returned.
func (db *DB) Lookup(k Key) (Record, bool) { return db.newest(k, WhereGPU) }

// LookupEmulated returns the newest record for k measured under CPU
// emulation. Its time is the emulation's, not the GPU's.
func (db *DB) LookupEmulated(k Key) (Record, bool) { return db.newest(k, WhereEmulated) }

func (db *DB) newest(k Key, where string) (Record, bool) {
	db.mu.RLock()
	defer db.mu.RUnlock()
	best := -1
	for _, i := range db.byKey[k] {
		r := db.recs[i]
		if r.Where == where && (best < 0 || !r.At.Before(db.recs[best].At)) {
			best = i
		}
	}
	if best < 0 {
		return Record{}, false
	}
	return db.recs[best], true
}

// Append validates recs and appends them to the file as whole lines, with
// one write under an exclusive lock, then fsyncs. If the file does not end
// in a newline (a torn last line, or any last line without one), a newline
// goes first so that the new records start on a line of their own. The
// file and its folder are created when missing. Times are stored in UTC.
func (db *DB) Append(recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	recs = append([]Record(nil), recs...)
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("tuning database: record %d: %w", i+1, err)
		}
		recs[i].At = recs[i].At.UTC()
	}
	var buf bytes.Buffer
	buf.WriteByte('\n') // dropped below when the file is empty or ends in one
	if err := encodeLines(&buf, recs); err != nil {
		return fmt.Errorf("tuning database: %w", err)
	}
	if err := db.appendBytes(buf.Bytes()); err != nil {
		return fmt.Errorf("tuning database: %w", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, r := range recs {
		db.byKey[r.Key] = append(db.byKey[r.Key], len(db.recs))
		db.recs = append(db.recs, r)
	}
	return nil
}

// appendBytes writes data, which starts with a newline, to the end of the
// file, leaving the newline out when the file is empty or already ends in
// one.
func (db *DB) appendBytes(data []byte) error {
	dir := filepath.Dir(db.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, statErr := os.Stat(db.path)
	created := errors.Is(statErr, fs.ErrNotExist)
	f, err := openLocked(db.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, true)
	if err != nil {
		return err
	}
	defer release(f)
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if size := st.Size(); size == 0 {
		data = data[1:]
	} else {
		var lastByte [1]byte
		if _, err := f.ReadAt(lastByte[:], size-1); err != nil {
			return err
		}
		if lastByte[0] == '\n' {
			data = data[1:]
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if created {
		return syncDir(dir)
	}
	return nil
}

// openLocked opens path with flag and locks the open file, shared or
// exclusive. While it waited for the lock a Prune may have replaced the
// file (renamed a new one over it): then it opens and locks the new one,
// so that the caller never reads or appends to a file no longer at path.
// Where the platform has no lock, a shared lock is skipped and an
// exclusive one fails.
func openLocked(path string, flag int, exclusive bool) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return nil, err
		}
		if !lockSupported && !exclusive {
			return f, nil
		}
		if err := lockFile(f, exclusive); err != nil {
			f.Close()
			return nil, err
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		now, err := os.Stat(path)
		if err == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// Replaced or removed: open whatever is at path now.
	}
}

// release unlocks and closes f.
func release(f *os.File) {
	unlockFile(f)
	f.Close()
}

// syncDir fsyncs a folder so that a file created or renamed in it survives
// a crash. Windows cannot sync a folder; there it does nothing.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// replace writes data to a temporary file next to path, fsyncs it, gives
// it mode perm and renames it over path, then fsyncs the folder.
func replace(path string, perm fs.FileMode, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	return syncDir(dir)
}

// Stats summarise a database.
type Stats struct {
	Records int
	// Keys is the number of distinct keys.
	Keys int
	// Duplicates counts records that are exact copies of an earlier one
	// (an import done twice); Prune with Dedup drops them.
	Duplicates int
	// Remeasured counts records whose key has an earlier record: Records
	// less Keys.
	Remeasured int
	// Skipped is the number of lines holding no valid record (torn or
	// invalid) that were ignored; Torn counts the torn ones among them.
	Skipped, Torn int
	// BadLines are the first of the skipped lines (DB.BadLines).
	BadLines []BadLine
	// ByWhere counts records per place of measurement, ByDevice per device
	// and place.
	ByWhere  map[string]int
	ByDevice map[string]map[string]int
	// Oldest and Newest are the earliest and latest At; zero when empty.
	Oldest, Newest time.Time
}

// Stats summarises the records.
func (db *DB) Stats() Stats {
	db.mu.RLock()
	defer db.mu.RUnlock()
	s := Stats{
		Records:  len(db.recs),
		Keys:     len(db.byKey),
		Skipped:  db.bad.n,
		Torn:     db.bad.torn,
		BadLines: append([]BadLine(nil), db.bad.first...),
		ByWhere:  map[string]int{},
		ByDevice: map[string]map[string]int{},
	}
	s.Remeasured = s.Records - s.Keys
	seen := map[string]bool{}
	for _, r := range db.recs {
		s.ByWhere[r.Where]++
		d := s.ByDevice[r.Key.Device]
		if d == nil {
			d = map[string]int{}
			s.ByDevice[r.Key.Device] = d
		}
		d[r.Where]++
		if s.Oldest.IsZero() || r.At.Before(s.Oldest) {
			s.Oldest = r.At
		}
		if r.At.After(s.Newest) {
			s.Newest = r.At
		}
		c := canonical(r)
		if seen[c] {
			s.Duplicates++
		}
		seen[c] = true
	}
	return s
}

// Filter selects records; an empty field selects all.
type Filter struct {
	Device string    // only this device
	Where  string    // only this place of measurement
	Since  time.Time // only records measured at or after it
}

func (f Filter) match(r Record) bool {
	return (f.Device == "" || r.Key.Device == f.Device) &&
		(f.Where == "" || r.Where == f.Where) &&
		(f.Since.IsZero() || !r.At.Before(f.Since))
}

// Export writes the records f selects to w, in file order, in the file's
// own format, and returns how many it wrote.
func (db *DB) Export(w io.Writer, f Filter) (int, error) {
	var sel []Record
	for _, r := range db.Records() {
		if f.match(r) {
			sel = append(sel, r)
		}
	}
	var buf bytes.Buffer
	if err := encodeLines(&buf, sel); err != nil {
		return 0, err
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(sel), nil
}

// ImportResult says what Import did.
type ImportResult struct {
	Read       int // records read
	Added      int // records appended
	Duplicates int // exact copies of a record already present, left out
}

// Import reads records in the file's format from r (an Export, or another
// tool's output), validates every one, and appends those not already
// present as one batch. Any invalid line is an error naming its line
// number, and then nothing is appended. Blank lines are ignored.
func (db *DB) Import(r io.Reader) (ImportResult, error) {
	var res ImportResult
	seen := map[string]bool{}
	for _, rec := range db.Records() {
		seen[canonical(rec)] = true
	}
	var add []Record
	br := bufio.NewReader(r)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return ImportResult{}, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec, derr := decodeLine(bytes.TrimSuffix(line, []byte("\n")))
			if errors.Is(derr, errTorn) {
				derr = errors.New("truncated record")
			}
			if derr != nil {
				return ImportResult{}, fmt.Errorf("line %d: %w", lineNo, derr)
			}
			res.Read++
			if c := canonical(rec); seen[c] {
				res.Duplicates++
			} else {
				seen[c] = true
				add = append(add, rec)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if err := db.Append(add...); err != nil {
		return ImportResult{}, err
	}
	res.Added = len(add)
	return res, nil
}
