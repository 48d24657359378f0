package tunedb

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
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

// wire is a record as a line of the file: its id first, then its fields.
type wire struct {
	ID string `json:"id"`
	Record
}

// encodeLines appends recs to buf as lines, without escaping <, > and &
// (kernel specs are easier to read with their arrows intact).
func encodeLines(buf *bytes.Buffer, recs []Record) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		if err := enc.Encode(wire{ID: r.ID(), Record: r}); err != nil {
			return err
		}
	}
	return nil
}

// errTorn marks a torn line: what a writer killed mid-write leaves behind,
// a truncated JSON object (every proper prefix of a line is one), or a line
// with NUL bytes, which some file systems leave after a crash (no valid
// line has one: JSON escapes control characters).
var errTorn = errors.New("torn line")

// decodeLine reads one line (without its newline) as a record and validates
// it; it gives errTorn for a torn line.
func decodeLine(line []byte) (Record, error) {
	if bytes.IndexByte(line, 0) >= 0 {
		return Record{}, errTorn
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	var w wire
	if err := dec.Decode(&w); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Record{}, errTorn
		}
		return Record{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Record{}, errors.New("text after the record's JSON object")
	}
	r := w.Record
	r.At = r.At.UTC()
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	if w.ID != "" && w.ID != r.ID() {
		return Record{}, fmt.Errorf("id %s does not match the key (its id is %s)", w.ID, r.ID())
	}
	return r, nil
}

// parse reads the lines of data, the contents of the file name. Torn lines
// are skipped and counted wherever they are: a writer killed mid-write
// leaves one at the end, and the next Append ends it with a newline, after
// which more lines follow. Any other bad line is an error naming the file
// and line, so that whether a file opens never depends on what was
// appended after it.
func parse(data []byte, name string) (recs []Record, skipped int, err error) {
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := decodeLine(line)
		if errors.Is(err, errTorn) {
			skipped++
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		recs = append(recs, r)
	}
	return recs, skipped, nil
}

// DB is a tuning database: the records of its file when opened, plus those
// this DB appended since. It is safe for concurrent use, and several DBs,
// in one process or many, may append to one file at once.
type DB struct {
	path string

	mu      sync.RWMutex
	recs    []Record
	byKey   map[Key][]int // indices into recs, in file order
	skipped int
}

// Open reads the database at path. A missing file is an empty database (the
// first Append creates it). A torn last line is skipped and counted by
// Skipped, never an error; an invalid line before it is an error naming
// the file and line.
func Open(path string) (*DB, error) {
	db := &DB{path: path}
	f, err := openLocked(path, os.O_RDONLY, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		db.set(nil, 0)
		return db, nil
	case err != nil:
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	data, err := io.ReadAll(f)
	release(f)
	if err != nil {
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	recs, skipped, err := parse(data, path)
	if err != nil {
		return nil, fmt.Errorf("tuning database: %w", err)
	}
	db.set(recs, skipped)
	return db, nil
}

// set replaces db's records; the caller holds db.mu or owns db.
func (db *DB) set(recs []Record, skipped int) {
	db.recs = recs
	db.skipped = skipped
	db.byKey = make(map[Key][]int, len(recs))
	for i, r := range recs {
		db.byKey[r.Key] = append(db.byKey[r.Key], i)
	}
}

// Path is the database's file.
func (db *DB) Path() string { return db.path }

// Skipped is the number of torn lines Open (or the last Prune) found and
// ignored.
func (db *DB) Skipped() int {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.skipped
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
// one write under an exclusive lock, then fsyncs. If the file ends in a
// torn line, a newline goes first so that the new records start on a line
// of their own. The file and its folder are created when missing. Times are
// stored in UTC.
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
	buf.WriteByte('\n') // dropped below unless the file ends in a torn line
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
	// Skipped is the number of torn lines ignored.
	Skipped int
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
		Skipped:  db.skipped,
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

// canonical is r's line, the identity of exact copies.
func canonical(r Record) string {
	var buf bytes.Buffer
	r.At = r.At.UTC()
	if err := encodeLines(&buf, []Record{r}); err != nil {
		// Validated records always encode.
		panic(err)
	}
	return buf.String()
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

// PruneOptions say which records Prune drops; the zero value drops none
// (but still clears torn lines).
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

// Prune drops the records opt selects and returns how many it dropped. It
// works on the file as it is now, records other processes appended since
// Open included, under the exclusive lock: it writes the records it keeps
// to a temporary file in the same folder, fsyncs it and renames it over the
// database, so that a crash leaves either the old file or the new one. The
// file is rewritten only if something is dropped (torn lines count). A
// missing file is an empty database.
func (db *DB) Prune(opt PruneOptions) (int, error) {
	if opt.Keep < 0 {
		return 0, fmt.Errorf("tuning database: prune: keep is %d, want zero (no limit) or more", opt.Keep)
	}
	f, err := openLocked(db.path, os.O_RDONLY, true)
	if errors.Is(err, fs.ErrNotExist) {
		db.mu.Lock()
		db.set(nil, 0)
		db.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tuning database: %w", err)
	}
	defer release(f)
	data, err := io.ReadAll(f)
	if err != nil {
		return 0, fmt.Errorf("tuning database: %w", err)
	}
	recs, skipped, err := parse(data, db.path)
	if err != nil {
		return 0, fmt.Errorf("tuning database: %w", err)
	}
	kept := prune(recs, opt)
	if dropped := len(recs) - len(kept); dropped > 0 || skipped > 0 {
		st, err := f.Stat()
		if err != nil {
			return 0, fmt.Errorf("tuning database: %w", err)
		}
		if err := replace(db.path, st.Mode().Perm(), kept); err != nil {
			return 0, fmt.Errorf("tuning database: prune: %w", err)
		}
		skipped = 0
	}
	db.mu.Lock()
	db.set(kept, skipped)
	db.mu.Unlock()
	return len(recs) - len(kept), nil
}

// prune returns the records of recs that opt keeps, in their order.
func prune(recs []Record, opt PruneOptions) []Record {
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
	var kept []Record
	for i, r := range recs {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	return kept
}

// replace writes recs to a temporary file next to path, fsyncs it, gives
// it mode perm and renames it over path, then fsyncs the folder.
func replace(path string, perm fs.FileMode, recs []Record) error {
	var buf bytes.Buffer
	if err := encodeLines(&buf, recs); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".prune-*")
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
	if _, err := tmp.Write(buf.Bytes()); err != nil {
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
