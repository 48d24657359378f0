package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
)

// DefaultMaxBytes is the body limit used when a caller passes maxBytes <= 0.
const DefaultMaxBytes = 8 << 20

// readObject reads at most maxBytes and decodes a JSON object into its raw
// fields. Fields are then decoded one by one so that every type error can
// name its field exactly, which encoding/json's own errors cannot do for
// elements of arrays ("messages[1].role").
func readObject(r io.Reader, maxBytes int64) (fields, *Error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if r == nil {
		return fields{}, InvalidRequest("", "request body is empty; expected a JSON object")
	}
	body, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		// A server that wraps the body in http.MaxBytesReader gets the same
		// 413 as our own limit.
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fields{}, TooLarge(mbe.Limit)
		}
		return fields{}, InvalidRequest("", "reading request body: "+err.Error())
	}
	if int64(len(body)) > maxBytes {
		return fields{}, TooLarge(maxBytes)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return fields{}, InvalidRequest("", "request body is empty; expected a JSON object")
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fields{}, InvalidRequest("", fmt.Sprintf("invalid JSON at offset %d: %s", syn.Offset, syn.Error()))
		}
		return fields{}, InvalidRequest("", "invalid JSON in request body")
	}
	var m map[string]json.RawMessage
	if body[0] != '{' || json.Unmarshal(body, &m) != nil {
		return fields{}, InvalidRequest("", "request body must be a JSON object, got "+kind(body))
	}
	return fields{m: m}, nil
}

// kind names the JSON type of a raw value for error messages.
func kind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// fields decodes the members of one JSON object. The first error sticks and
// later calls do nothing, so decoding reads as a flat list of fields.
type fields struct {
	m    map[string]json.RawMessage
	path string // prefix of params, "" at the top, "messages[1]." inside
	err  *Error
}

func (f *fields) param(name string) string { return f.path + name }

// raw returns a field's value, or nil when it is absent or null: OpenAI
// treats an explicit null as "use the default".
func (f *fields) raw(name string) json.RawMessage {
	if f.err != nil {
		return nil
	}
	v := bytes.TrimSpace(f.m[name])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

func (f *fields) fail(e *Error) {
	if f.err == nil {
		f.err = e
	}
}

func (f *fields) typeErr(param, want string, raw []byte) {
	f.fail(invalidf(param, "expected %s, got %s", want, kind(raw)))
}

func (f *fields) str(name string, dst *string) {
	if v := f.raw(name); v != nil {
		f.decodeString(f.param(name), v, dst)
	}
}

func (f *fields) decodeString(param string, v []byte, dst *string) {
	if v[0] != '"' || json.Unmarshal(v, dst) != nil {
		f.typeErr(param, "a string", v)
	}
}

func (f *fields) boolean(name string, dst *bool) {
	v := f.raw(name)
	if v == nil {
		return
	}
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		f.typeErr(f.param(name), "a boolean", v)
	}
}

func (f *fields) float(name string, dst **float64) {
	v := f.raw(name)
	if v == nil {
		return
	}
	x, ok := f.parseFloat(f.param(name), v)
	if ok {
		*dst = &x
	}
}

func (f *fields) parseFloat(param string, v []byte) (float64, bool) {
	if kind(v) != "a number" {
		f.typeErr(param, "a number", v)
		return 0, false
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(x, 0) {
		f.fail(invalidf(param, "number %s is out of range", v))
		return 0, false
	}
	return x, true
}

func (f *fields) integer(name string, dst **int) {
	v := f.raw(name)
	if v == nil {
		return
	}
	if x, ok := f.parseInt(f.param(name), v, math.MinInt, math.MaxInt); ok {
		n := int(x)
		*dst = &n
	}
}

// parseInt accepts integral numbers in [lo, hi], including forms such as
// 16.0 or 1e3 that lenient clients produce.
func (f *fields) parseInt(param string, v []byte, lo, hi int64) (int64, bool) {
	if kind(v) != "a number" {
		f.typeErr(param, "an integer", v)
		return 0, false
	}
	if x, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		if x < lo || x > hi {
			f.fail(invalidf(param, "%d is out of range [%d, %d]", x, lo, hi))
			return 0, false
		}
		return x, true
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil || x != math.Trunc(x) {
		f.typeErr(param, "an integer", v)
		return 0, false
	}
	// float64(hi) may round up past hi, so compare strictly below 2^63.
	if x < float64(lo) || x >= float64(hi) {
		f.fail(invalidf(param, "%s is out of range [%d, %d]", v, lo, hi))
		return 0, false
	}
	return int64(x), true
}

func (f *fields) int64(name string, dst **int64) {
	v := f.raw(name)
	if v == nil {
		return
	}
	if x, ok := f.parseInt(f.param(name), v, math.MinInt64, math.MaxInt64); ok {
		*dst = &x
	}
}

// array decodes an array field's elements; ok is false when absent or wrong.
func (f *fields) array(param string, v []byte) ([]json.RawMessage, bool) {
	var elems []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &elems) != nil {
		f.typeErr(param, "an array", v)
		return nil, false
	}
	for i := range elems {
		elems[i] = bytes.TrimSpace(elems[i])
	}
	return elems, true
}

// object decodes v as a nested object whose params are prefixed by param.
func (f *fields) object(param string, v []byte) (fields, bool) {
	var m map[string]json.RawMessage
	if v[0] != '{' || json.Unmarshal(v, &m) != nil {
		f.typeErr(param, "an object", v)
		return fields{}, false
	}
	return fields{m: m, path: param + "."}, true
}

// MaxStop is the most stop sequences a request may carry: more than
// OpenAI's 4, as vLLM allows, but bounded so matching stays cheap.
const MaxStop = 16

// stop decodes "stop": a string or an array of strings. Empty strings are
// dropped, since a stop sequence that matches everywhere would end every
// generation at once.
func (f *fields) stop(dst *[]string) {
	v := f.raw("stop")
	if v == nil {
		return
	}
	var list []string
	if v[0] == '"' {
		var s string
		f.decodeString("stop", v, &s)
		list = append(list, s)
	} else {
		if v[0] != '[' {
			f.typeErr("stop", "a string or an array of strings", v)
			return
		}
		elems, ok := f.array("stop", v)
		if !ok {
			return
		}
		if len(elems) > MaxStop {
			f.fail(invalidf("stop", "at most %d stop sequences are supported, got %d", MaxStop, len(elems)))
			return
		}
		for i, e := range elems {
			var s string
			if len(e) == 0 || e[0] == 'n' {
				f.typeErr(fmt.Sprintf("stop[%d]", i), "a string", e)
				return
			}
			f.decodeString(fmt.Sprintf("stop[%d]", i), e, &s)
			list = append(list, s)
		}
	}
	for _, s := range list {
		if s != "" {
			*dst = append(*dst, s)
		}
	}
}

func (f *fields) streamOptions(dst **StreamOptions) {
	v := f.raw("stream_options")
	if v == nil {
		return
	}
	o, ok := f.object("stream_options", v)
	if !ok {
		return
	}
	var so StreamOptions
	o.boolean("include_usage", &so.IncludeUsage)
	f.fail(o.err)
	*dst = &so
}
