package cost

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// ParseSchedule reads a schedule's canonical text (Schedule.String).
func ParseSchedule(text string) (Schedule, error) {
	var s Schedule
	for _, part := range strings.Split(text, ",") {
		if part == "mma" {
			s.Tensor = true
			continue
		}
		if part == "gemv" {
			s.GEMV = true
			continue
		}
		if part == "splitkeys" {
			s.SplitKeys = true
			continue
		}
		if part == "grouped" {
			s.Grouped = true
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n <= 0 {
			return Schedule{}, fmt.Errorf("schedule %q: %q is not name=positive integer, mma, gemv, splitkeys or grouped", text, part)
		}
		switch k {
		case "bm":
			s.BM = n
		case "bn":
			s.BN = n
		case "bk":
			s.BK = n
		case "threads":
			s.Threads = n
		case "stages":
			s.Stages = n
		case "rows":
			s.Rows = n
		case "tm":
			s.TM = n
		case "warp":
			s.Warp = n
		case "keysplits":
			s.KeySplits = n
		default:
			return Schedule{}, fmt.Errorf("schedule %q: unknown field %q", text, k)
		}
	}
	if s.Threads == 0 {
		return Schedule{}, fmt.Errorf("schedule %q: no threads", text)
	}
	return s, nil
}

// Features returns the features of a kernel body under one schedule on the
// model's device, for calibrating on measured records.
func (m *Model) Features(body *ir.Graph, s Schedule) (Features, error) {
	k, err := m.analyze(body)
	if err != nil {
		return Features{}, err
	}
	x, ok := k.features(s, m.Device)
	if !ok {
		return Features{}, fmt.Errorf("schedule %s does not fit kernel %s on %s", s, k.describe(), m.Device.Name)
	}
	return x, nil
}

// SamplesFromRecords turns the GPU records of the model's device into
// calibration samples: each record's kernel body (its SPEC text) and
// schedule give the features, its median the time. Records of other
// devices and emulated ones are left out; a record whose body or schedule
// does not parse or fit is an error naming it.
func (m *Model) SamplesFromRecords(recs []tunedb.Record) ([]Sample, error) {
	var out []Sample
	var errs []error
	bodies := map[string]*ir.Graph{}
	for _, r := range recs {
		if r.Where != tunedb.WhereGPU || r.Key.Device != m.Device.Name {
			continue
		}
		body, ok := bodies[r.Key.Spec]
		if !ok {
			g, err := ir.Parse(r.Key.Spec)
			if err != nil {
				errs = append(errs, fmt.Errorf("record %s: kernel body: %w", r.Key.Hash()[:12], err))
				continue
			}
			body, bodies[r.Key.Spec] = g, g
		}
		s, err := ParseSchedule(r.Key.Schedule)
		if err == nil {
			var x Features
			if x, err = m.Features(body, s); err == nil {
				out = append(out, Sample{Features: x, Seconds: r.Median})
				continue
			}
		}
		errs = append(errs, fmt.Errorf("record %s: %w", r.Key.Hash()[:12], err))
	}
	return out, errors.Join(errs...)
}
