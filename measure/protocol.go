// Package measure owns the measuring worker: the request and response
// protocol (one JSON object per line), the worker loop that checks a
// kernel's numbers before it times it, and the client that runs workers
// as child processes, killing and restarting one that hangs or dies, so
// that a bad candidate costs only its own measurement.
//
// Times measured under the CPU emulation are labelled "emulated" in every
// response and never pass for GPU times.
package measure

import "fmt"

// Where a time was measured.
const (
	WhereEmulated = "emulated"
	WhereGPU      = "gpu"
)

// Request is one candidate to measure: a kernel body in the ir text format
// (a canonical kernel SPEC over inputs $0..$n-1) and the schedule to print
// it in.
type Request struct {
	ID int64 `json:"id"`
	// Body is the kernel body, ir.Graph's text.
	Body string `json:"body"`
	// Schedule is cost.Schedule's text; empty means the form's default.
	Schedule string `json:"schedule,omitempty"`
	// Seed draws the random inputs and the verified blocks.
	Seed uint64 `json:"seed"`
	// Repeats is the fewest timed runs after the check (0:
	// DefaultRepeats); runs go on until their times settle (interquartile
	// range under 2% of the median) or the measurer's time cap.
	Repeats int `json:"repeats,omitempty"`
}

// DefaultRepeats is the fewest timed runs of a request that names none.
const DefaultRepeats = 5

// Response answers one request.
type Response struct {
	ID int64 `json:"id"`
	// OK says the kernel's numbers matched the reference and it was timed;
	// Error says why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Where the time was measured: WhereEmulated or WhereGPU.
	Where string `json:"where,omitempty"`
	// Median and IQR of the timed runs, in seconds.
	Median  float64 `json:"median_s,omitempty"`
	IQR     float64 `json:"iqr_s,omitempty"`
	Samples int     `json:"samples,omitempty"`
	// Checked is the output elements compared with the reference.
	Checked int64 `json:"checked_elements,omitempty"`
	// Schedule is the schedule measured, the form's default filled in.
	Schedule string `json:"schedule,omitempty"`
	// Lost says that the worker process, not the kernel's check, failed
	// on this request: it hung, died or answered out of protocol (the
	// Client sets it). The kernel's verdict is then unknown, so a caller
	// with other workers may try the request again elsewhere, where a
	// verdict (OK false, Lost false) is final.
	Lost bool `json:"lost,omitempty"`
}

func failed(id int64, format string, args ...any) Response {
	return Response{ID: id, Error: fmt.Sprintf(format, args...)}
}

// lost is a failure of the worker process itself on a request.
func lost(id int64, format string, args ...any) Response {
	r := failed(id, format, args...)
	r.Lost = true
	return r
}
