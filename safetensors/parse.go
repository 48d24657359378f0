package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// MetadataKey is the reserved header key holding free-form string metadata.
// Parse validates a complete safetensors file held in data and returns a File
// whose tensors alias data (nothing is copied). name is only used in error
// messages and by Path. Close on the result releases nothing; data must stay
// valid and unmodified while the File is in use.
//
// Parse never panics. It rejects: files shorter than 8 bytes; header lengths
// beyond the file or above MaxHeaderSize; headers that are not UTF-8, not a
// single JSON object, or that repeat a key; entries with a missing or unknown
// dtype, a missing or negative shape, or data_offsets that are missing,
// negative, out of order (begin > end) or outside the data buffer; shapes
// whose element count or byte size overflows 64 bits or disagrees with
// data_offsets; and tensors whose bytes overlap. Gaps between tensors and
// trailing bytes after the last tensor are allowed.
func Parse(name string, data []byte) (*File, error) {
	fail := func(tensor, format string, args ...any) error {
		return &Error{File: name, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	if len(data) < 8 {
		return nil, fail("", "file is %d bytes, too short for the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, fail("", "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fail("", "header length %d is beyond the end of the %d-byte file", n, len(data))
	}
	header := data[8 : 8+n]
	buf := data[8+n:]
	if !utf8.Valid(header) {
		return nil, fail("", "header is not valid UTF-8")
	}

	f := &File{path: name, data: data}
	type member struct {
		name string
		raw  json.RawMessage
	}
	var members []member
	err := decodeObject(header, func(key string, raw json.RawMessage) error {
		if key == MetadataKey {
			md, err := parseMetadata(name, raw)
			f.metadata = md
			return err
		}
		members = append(members, member{key, raw})
		return nil
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		var me *memberError
		if errors.As(err, &me) {
			return nil, &Error{File: name, Tensor: me.key, Reason: "invalid header JSON", Err: me.err}
		}
		return nil, &Error{File: name, Reason: "invalid header JSON", Err: err}
	}

	// Validate in name order so the first error reported is deterministic.
	slices.SortFunc(members, func(a, b member) int { return cmp.Compare(a.name, b.name) })
	f.tensors = make(map[string]Tensor, len(members))
	f.names = make([]string, 0, len(members))
	spans := make([]span, 0, len(members))
	for _, m := range members {
		e, err := parseEntry(name, m.name, m.raw)
		if err != nil {
			return nil, err
		}
		if err := e.validate(name, m.name, uint64(len(buf))); err != nil {
			return nil, err
		}
		begin, end := e.offsets[0], e.offsets[1]
		f.tensors[m.name] = Tensor{
			Name:  m.name,
			DType: e.dtype,
			Shape: e.shape,
			Data:  buf[begin:end:end],
		}
		f.names = append(f.names, m.name)
		if end > begin {
			spans = append(spans, span{m.name, begin, end})
		}
	}
	if err := checkOverlap(name, spans); err != nil {
		return nil, err
	}
	return f, nil
}

// headerEntry is one tensor's header record, before validation.
type headerEntry struct {
	dtype   string
	shape   []int64
	offsets []int64
	seen    [3]bool // dtype, shape, data_offsets present and non-null
}

// parseEntry decodes one header member. Key names are matched exactly;
// unknown keys are ignored.
func parseEntry(file, tensor string, raw json.RawMessage) (*headerEntry, error) {
	e := &headerEntry{}
	err := decodeObject(raw, func(key string, val json.RawMessage) error {
		var target any
		var idx int
		switch key {
		case "dtype":
			target, idx = &e.dtype, 0
		case "shape":
			target, idx = &e.shape, 1
		case "data_offsets":
			target, idx = &e.offsets, 2
		default:
			return nil
		}
		if string(bytes.TrimSpace(val)) == "null" {
			return nil
		}
		if err := json.Unmarshal(val, target); err != nil {
			return &Error{File: file, Tensor: tensor, Reason: fmt.Sprintf("invalid %s", key), Err: err}
		}
		e.seen[idx] = true
		return nil
	})
	if err != nil {
		var ee *Error
		if errors.As(err, &ee) {
			return nil, ee
		}
		return nil, &Error{File: file, Tensor: tensor, Reason: "invalid tensor headerEntry", Err: err}
	}
	return e, nil
}

// validate checks an headerEntry against the data buffer length.
func (e *headerEntry) validate(file, tensor string, bufLen uint64) error {
	fail := func(format string, args ...any) error {
		return &Error{File: file, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	for i, key := range [3]string{"dtype", "shape", "data_offsets"} {
		if !e.seen[i] {
			return fail("missing %s", key)
		}
	}
	bitsPer, ok := dtypeBits[e.dtype]
	if !ok {
		return fail("unknown dtype %q", e.dtype)
	}
	count := uint64(1)
	for _, d := range e.shape {
		if d < 0 {
			return fail("negative dimension %d in shape %v", d, e.shape)
		}
		hi, lo := bits.Mul64(count, uint64(d))
		if hi != 0 {
			return fail("element count of shape %v overflows", e.shape)
		}
		count = lo
	}
	if len(e.offsets) != 2 {
		return fail("data_offsets has %d elements, want 2", len(e.offsets))
	}
	begin, end := e.offsets[0], e.offsets[1]
	if begin < 0 || end < 0 {
		return fail("negative data_offsets %v", e.offsets)
	}
	if begin > end {
		return fail("data_offsets [%d, %d] out of order (begin after end)", begin, end)
	}
	if uint64(end) > bufLen {
		return fail("data_offsets [%d, %d] outside the %d-byte data buffer", begin, end, bufLen)
	}
	hi, nbits := bits.Mul64(count, bitsPer)
	if hi != 0 {
		return fail("byte size of shape %v × %s overflows", e.shape, e.dtype)
	}
	if nbits%8 != 0 {
		return fail("shape %v × %s is %d bits, not a whole number of bytes", e.shape, e.dtype, nbits)
	}
	if nbytes := nbits / 8; nbytes != uint64(end-begin) {
		return fail("shape %v × %s is %d bytes but data_offsets [%d, %d] span %d", e.shape, e.dtype, nbytes, begin, end, end-begin)
	}
	return nil
}

// span is the byte range of one non-empty tensor in the data buffer.
type span struct {
	name       string
	begin, end int64
}

// checkOverlap reports the first pair of tensors whose bytes overlap.
func checkOverlap(file string, spans []span) error {
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.begin != b.begin:
			return cmp.Compare(a.begin, b.begin)
		case a.end != b.end:
			return cmp.Compare(a.end, b.end)
		}
		return cmp.Compare(a.name, b.name)
	})
	var last *span // the span reaching furthest so far
	for i := range spans {
		s := &spans[i]
		if last != nil && s.begin < last.end {
			return &Error{File: file, Tensor: s.name, Reason: fmt.Sprintf(
				"data_offsets [%d, %d] overlap tensor %q at [%d, %d]", s.begin, s.end, last.name, last.begin, last.end)}
		}
		if last == nil || s.end > last.end {
			last = s
		}
	}
	return nil
}

// parseMetadata decodes the "__metadata__" member: null or an object of
// string values.
func parseMetadata(file string, raw json.RawMessage) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	md := map[string]string{}
	err := decodeObject(raw, func(key string, val json.RawMessage) error {
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return &Error{File: file, Reason: fmt.Sprintf("%s key %q: value is not a string", MetadataKey, key), Err: err}
		}
		md[key] = s
		return nil
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, &Error{File: file, Reason: "invalid " + MetadataKey, Err: err}
	}
	return md, nil
}

// memberError is a JSON problem attributable to one object member.
type memberError struct {
	key string
	err error
}

func (e *memberError) Error() string { return fmt.Sprintf("key %q: %v", e.key, e.err) }
func (e *memberError) Unwrap() error { return e.err }

// decodeObject walks the single JSON object in raw, calling fn for each
// member in order. Unlike json.Unmarshal into a map it rejects duplicate keys,
// and it rejects anything other than one object followed by whitespace.
// Errors returned by fn are passed through unchanged.
func decodeObject(raw []byte, fn func(key string, val json.RawMessage) error) error {
	err := walkObject(raw, fn)
	var fnErr *Error
	if errors.Is(err, io.EOF) && !errors.As(err, &fnErr) {
		// Running out of input inside the object is a truncation.
		var me *memberError
		if errors.As(err, &me) {
			return &memberError{me.key, io.ErrUnexpectedEOF}
		}
		return io.ErrUnexpectedEOF
	}
	return err
}

// walkObject implements decodeObject; io.EOF means the object was cut short.
func walkObject(raw []byte, fn func(key string, val json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err == io.EOF {
		return errors.New("empty JSON, want an object")
	}
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("found %s, want a JSON object", describeToken(tok))
	}
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok { // unreachable with encoding/json, kept for safety
			return fmt.Errorf("found %s, want an object key", describeToken(tok))
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return &memberError{key, err}
		}
		if _, dup := seen[key]; dup {
			return &memberError{key, errors.New("duplicate key")}
		}
		seen[key] = struct{}{}
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("after the JSON object: %w", err)
		}
		return fmt.Errorf("trailing %s after the JSON object", describeToken(tok))
	}
	return nil
}

// describeToken names a JSON token for error messages.
func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(v))
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
