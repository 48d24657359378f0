package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// The typed reader of config.json fields: each lookup records the key it
// read (for the test that keeps ReadKeys in step) and keeps the first
// error, which names the field.

// fields are a config.json object's members, decoded lazily so that a
// type error names its field.
type fields map[string]json.RawMessage

// fieldParser reads typed fields, keeping the first error.
type fieldParser struct {
	f      fields
	prefix string // for nested objects: "rope_scaling."
	err    error
	// read records the keys looked up, when not nil.
	read map[string]bool
}

func (p *fieldParser) fail(err error) {
	if p.err == nil && err != nil {
		p.err = err
	}
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// lookup returns a field's raw value, or false when it is absent or null.
func (p *fieldParser) lookup(key string) (json.RawMessage, bool) {
	if p.read != nil {
		p.read[key] = true
	}
	raw, ok := p.f[key]
	if !ok || isNull(raw) {
		return nil, false
	}
	return raw, true
}

// has says whether a field is present, null included.
func (p *fieldParser) has(key string) bool {
	if p.read != nil {
		p.read[key] = true
	}
	_, ok := p.f[key]
	return ok
}

// intAbsentNull reads an integral field that is absent for one default
// and null for another, as transformers' Optional arguments are.
func (p *fieldParser) intAbsentNull(key string, absent, null int) int {
	if !p.has(key) {
		return absent
	}
	if v, ok := p.integer(key); ok {
		return v
	}
	return null
}

// strings reads an array of strings; nil when absent or null.
func (p *fieldParser) strings(key string) []string { return arrayField[string](p, key, "strings") }

// ints reads an array of integers; nil when absent or null.
func (p *fieldParser) ints(key string) []int { return arrayField[int](p, key, "integers") }

// arrayField reads an array of what's elements; nil when absent or null.
func arrayField[T any](p *fieldParser, key, what string) []T {
	raw, ok := p.lookup(key)
	if !ok {
		return nil
	}
	var s []T
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(fmt.Errorf("%q: want an array of %s, got %s", p.prefix+key, what, shortJSON(raw)))
		return nil
	}
	return s
}

// number reads a numeric field.
func (p *fieldParser) number(key string) (float64, bool) {
	raw, ok := p.lookup(key)
	if !ok {
		return 0, false
	}
	var n json.Number
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) || json.Unmarshal(raw, &n) != nil {
		// json.Number would take a quoted number; config.json's sizes are bare.
		p.fail(fmt.Errorf("%q: want a number, got %s", p.prefix+key, raw))
		return 0, false
	}
	v, err := n.Float64()
	if err != nil {
		p.fail(fmt.Errorf("%q: %s is not a number", p.prefix+key, raw))
		return 0, false
	}
	return v, true
}

// integer reads an integral field (4096 or 4096.0).
func (p *fieldParser) integer(key string) (int, bool) {
	v, ok := p.number(key)
	if !ok {
		return 0, false
	}
	if v != math.Trunc(v) || math.Abs(v) > 1<<40 {
		p.fail(fmt.Errorf("%q: want an integer, got %v", p.prefix+key, v))
		return 0, false
	}
	return int(v), true
}

func (p *fieldParser) required(key string) int {
	v, ok := p.integer(key)
	if !ok {
		p.fail(fmt.Errorf("missing %q", p.prefix+key))
	}
	return v
}

func (p *fieldParser) required64(key string) float64 {
	v, ok := p.number(key)
	if !ok {
		p.fail(fmt.Errorf("missing %q", p.prefix+key))
	}
	return v
}

func (p *fieldParser) intOr(key string, def int) int {
	if v, ok := p.integer(key); ok {
		return v
	}
	return def
}

func (p *fieldParser) floatOr(key string, def float64) float64 {
	if v, ok := p.number(key); ok {
		return v
	}
	return def
}

func (p *fieldParser) boolOr(key string, def bool) bool {
	raw, ok := p.lookup(key)
	if !ok {
		return def
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		p.fail(fmt.Errorf("%q: want true or false, got %s", p.prefix+key, raw))
		return def
	}
	return b
}

func (p *fieldParser) str(key string) (string, bool) {
	raw, ok := p.lookup(key)
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(fmt.Errorf("%q: want a string, got %s", p.prefix+key, raw))
		return "", false
	}
	return s, true
}

// subFields decodes a nested object's members; an error for anything but
// an object.
func subFields(raw json.RawMessage) (fields, error) {
	var sub fields
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&sub); err != nil {
		return nil, err
	}
	if sub == nil {
		return nil, fmt.Errorf("null")
	}
	return sub, nil
}

// object reads a nested object field as a parser of its own (its errors
// prefixed with the path); nil when absent or null.
func (p *fieldParser) object(key string) *fieldParser {
	raw, ok := p.lookup(key)
	if !ok {
		return nil
	}
	sub, err := subFields(raw)
	if err != nil {
		p.fail(fmt.Errorf("%q: want an object, got %s", p.prefix+key, shortJSON(raw)))
		return nil
	}
	return &fieldParser{f: sub, prefix: p.prefix + key + "."}
}
