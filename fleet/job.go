package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// JobVersion is the version of the job message this package writes and
// reads. A worker refuses (dead-letters) a job of another version rather
// than guess what a newer requester meant.
const JobVersion = 1

// maxBodyBytes bounds a job's kernel body: far above any real kernel's
// text, far below what would hurt a worker.
const maxBodyBytes = 4 << 20

// Job is one measurement: a kernel body and schedule, the arguments'
// shapes and dtypes as the tuning database keys them, and where to measure
// it. Its JSON form is the job message.
type Job struct {
	Version int `json:"v"`
	// Kind is the GPU kind (ResolveKind), Mode ModeGPU or ModeEmulated.
	Kind string `json:"kind"`
	Mode string `json:"mode"`
	// Driver and Compiler are the environment of the kind's workers
	// (Env); the requester fills them in from the fleet bucket, and a
	// worker of another environment hands the job back.
	Driver   string `json:"driver,omitempty"`
	Compiler string `json:"compiler"`
	// Body is the kernel body in the ir text format, Schedule the
	// schedule to print it in (cost.Schedule's text).
	Body     string `json:"body"`
	Schedule string `json:"schedule"`
	// Shapes and DTypes describe the body's inputs as the tuning
	// database's key does.
	Shapes string `json:"shapes"`
	DTypes string `json:"dtypes"`
	// Seed draws the inputs; Repeats is the fewest timed runs (0: the
	// measurer's default).
	Seed    uint64 `json:"seed"`
	Repeats int    `json:"repeats,omitempty"`
	// Predicted is the requester's cost model's time, in seconds, kept in
	// the record for calibration (0: none).
	Predicted float64 `json:"predicted_s,omitempty"`
}

// device is what a record of the job names as its device: the kind for a
// GPU time; for an emulated one, the emulation, as the local database
// keeps emulated times apart from every device's.
func (j Job) device() string {
	if j.Mode == ModeEmulated {
		return tunedb.WhereEmulated
	}
	return j.Kind
}

// where is the record's place of measurement.
func (j Job) where() string {
	if j.Mode == ModeEmulated {
		return tunedb.WhereEmulated
	}
	return tunedb.WhereGPU
}

// tuneKey is the tuning database's key of the job's result.
func (j Job) tuneKey() tunedb.Key {
	return tunedb.Key{Spec: j.Body, Schedule: j.Schedule, Shapes: j.Shapes, DTypes: j.DTypes, Device: j.device(), Driver: j.Driver, Compiler: j.Compiler}
}

// Key is the job's key: its mode, a dot, and the tuning database's key id
// of its result (tunedb.Key.Hash: the kernel's body, schedule, shapes and
// dtypes, the device kind, the driver and the compiler). It is the job
// message's Nats-Msg-Id and the result's key in ResultBucket.
func (j Job) Key() string { return j.Mode + "." + j.tuneKey().Hash() }

// RecordKey is the key under which a record of the tuning database lives
// in ResultBucket: the key of the job that measures it.
func RecordKey(r tunedb.Record) string {
	mode := ModeGPU
	if r.Where == tunedb.WhereEmulated {
		mode = ModeEmulated
	}
	return mode + "." + r.Key.Hash()
}

// Request is the measuring worker's request for the job.
func (j Job) Request() measure.Request {
	return measure.Request{ID: 1, Body: j.Body, Schedule: j.Schedule, Seed: j.Seed, Repeats: j.Repeats}
}

// Check says what, if anything, makes j unfit to send: a field missing or
// out of range, a body that is not ir text, a schedule that does not
// parse.
func (j Job) Check() error {
	if j.Version != JobVersion {
		return fmt.Errorf("job version %d; this lumsearch reads version %d (upgrade the older side)", j.Version, JobVersion)
	}
	if !kindPattern.MatchString(j.Kind) {
		return fmt.Errorf("kind %q is not a GPU kind (letters, digits, - and _)", j.Kind)
	}
	if err := checkMode(j.Mode); err != nil {
		return err
	}
	for _, f := range [][2]string{{"driver", j.Driver}, {"compiler", j.Compiler}, {"body", j.Body}, {"schedule", j.Schedule}, {"shapes", j.Shapes}, {"dtypes", j.DTypes}} {
		if !utf8.ValidString(f[1]) {
			return fmt.Errorf("%s is not valid UTF-8", f[0])
		}
	}
	switch {
	case j.Compiler == "":
		return errors.New("no compiler")
	case j.Mode == ModeGPU && j.Driver == "":
		return errors.New("a gpu job needs a driver")
	case j.Body == "":
		return errors.New("no kernel body")
	case len(j.Body) > maxBodyBytes:
		return fmt.Errorf("kernel body of %d bytes, at most %d", len(j.Body), maxBodyBytes)
	case j.Shapes == "" || j.DTypes == "":
		return errors.New("no shapes or dtypes")
	case j.Repeats < 0 || j.Repeats > 10000:
		return fmt.Errorf("repeats %d: want 0 to 10000", j.Repeats)
	case !(j.Predicted >= 0) || j.Predicted > 1e6:
		return fmt.Errorf("predicted_s %v: want a time in seconds", j.Predicted)
	}
	if _, err := ir.Parse(j.Body); err != nil {
		return fmt.Errorf("kernel body: %w", err)
	}
	if j.Schedule != "" {
		if _, err := cost.ParseSchedule(j.Schedule); err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
	}
	return nil
}

// Encode is the job message: j as one JSON object.
func (j Job) Encode() ([]byte, error) {
	if j.Version == 0 {
		j.Version = JobVersion
	}
	return json.Marshal(j)
}

// ParseJob reads a job message strictly: one JSON object of the current
// version with no unknown field and nothing after it, checked (Job.Check).
// Whatever the bytes, it returns an error and never panics.
func ParseJob(data []byte) (Job, error) {
	var j Job
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("not a job message: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Job{}, errors.New("not a job message: data after the JSON object")
	}
	if err := j.Check(); err != nil {
		return Job{}, err
	}
	return j, nil
}
