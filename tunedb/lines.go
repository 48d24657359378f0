package tunedb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

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
		return Record{}, fmt.Errorf("id %q does not match the key (its id is %s)", w.ID, r.ID())
	}
	return r, nil
}

// BadLine is a line of the file that holds no record: torn (cut short, as
// a writer killed mid-write leaves it) or invalid (not a JSON object, or
// one that fails Record.Validate). Open and Prune skip such lines.
type BadLine struct {
	// Line is the line's number in the file, from 1, when it was read.
	Line int
	// Torn says that the line was cut short rather than written wrong.
	Torn bool
	// Reason says what is wrong with it.
	Reason string
}

// tornReason is a torn line's BadLine.Reason.
const tornReason = "torn (cut short, as a writer killed mid-write leaves a line)"

// String is "line N: REASON".
func (b BadLine) String() string { return fmt.Sprintf("line %d: %s", b.Line, b.Reason) }

// maxBadLines is how many bad lines are kept in detail; the rest are only
// counted, so that a file of garbage costs no more memory than its size.
const maxBadLines = 20

// badLines counts the bad lines of a file and keeps the first in detail.
type badLines struct {
	n     int       // bad lines in all
	torn  int       // of which torn
	first []BadLine // the first maxBadLines, in file order
}

func (b *badLines) add(line int, err error) {
	b.n++
	bl := BadLine{Line: line, Torn: errors.Is(err, errTorn)}
	if bl.Torn {
		b.torn++
		bl.Reason = tornReason
	} else {
		bl.Reason = err.Error()
	}
	if len(b.first) < maxBadLines {
		b.first = append(b.first, bl)
	}
}

// where names the bad lines' numbers: "line 3", "lines 3, 8 and 12", or
// the first maxBadLines and how many more.
func (b badLines) where() string {
	nums := make([]string, len(b.first))
	for i, bl := range b.first {
		nums[i] = strconv.Itoa(bl.Line)
	}
	switch {
	case len(nums) == 0:
		return ""
	case len(nums) == 1 && b.n == 1:
		return "line " + nums[0]
	case b.n > len(nums):
		return fmt.Sprintf("lines %s and %d more", strings.Join(nums, ", "), b.n-len(nums))
	}
	return "lines " + strings.Join(nums[:len(nums)-1], ", ") + " and " + nums[len(nums)-1]
}

// parsed is a file read line by line.
type parsed struct {
	recs []Record
	// raw holds each record's line as it is in the file, without its
	// newline, so that Prune keeps the lines it keeps byte for byte
	// (fields a later version added included).
	raw   [][]byte
	bad   badLines
	blank int // lines of nothing but white space
	// tornTail says that the last non-blank line is torn.
	tornTail bool
}

// parse reads the lines of data. Every line that holds no valid record,
// wherever it is, is skipped and counted: a writer killed mid-write leaves
// a torn line at the end (and the next Append ends it with a newline,
// after which more lines follow), and a line damaged by hand or by another
// tool must not cost the measurements around it.
func parse(data []byte) parsed {
	var p parsed
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
			p.blank++
			continue
		}
		r, err := decodeLine(line)
		p.tornTail = errors.Is(err, errTorn)
		if err != nil {
			p.bad.add(lineNo, err)
			continue
		}
		p.recs = append(p.recs, r)
		p.raw = append(p.raw, line)
	}
	return p
}

// notADatabase says why the file at path, read as p, is refused: when
// none of its lines is a record and some are bad in a way a crash does not
// explain (anything but one torn last line), it is most likely some other
// file given by mistake, and appending records to it or pruning it would
// damage it. It gives nil for a file that may be a database.
func notADatabase(path string, p parsed) error {
	if len(p.recs) > 0 || p.bad.n == 0 || (p.bad.n == 1 && p.tornTail) {
		return nil
	}
	return fmt.Errorf("%s holds no valid record: its %d non-blank lines are all bad (%s), so it does not look like a tuning database; give another path, or delete the file to start an empty database",
		path, p.bad.n, p.bad.first[0])
}
