package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// sample is what one request recorded. Times are offsets: sent from the
// start of the run, the others from sent, so that measuring is a pure
// function of them.
type sample struct {
	sent   time.Duration   // when the request was sent, from the start of the run
	chunks []time.Duration // when each chunk with text arrived, from sent
	done   time.Duration   // when the stream ended, from sent
	// usage is the server's usage object, when it sent one.
	usage *usage
	// promptTokens is the prompt length asked for, counted when the server
	// sends no usage.
	promptTokens int
	err          error // nil for a completed request
	canceled     bool  // stopped by the run's cancellation, not by a failure
}

// usage is the token counts of an OpenAI usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// outputTokens is the number of tokens s generated: the server's count,
// else the chunks with text (one token each, as servers stream by default).
func (s *sample) outputTokens() int {
	if s.usage != nil {
		return s.usage.CompletionTokens
	}
	return len(s.chunks)
}

// inputTokens is the prompt's length: the server's count, else the length
// asked for (0 for a prompt given as text).
func (s *sample) inputTokens() int {
	if s.usage != nil {
		return s.usage.PromptTokens
	}
	return s.promptTokens
}

// timing is one completed request's latencies.
type timing struct {
	latency time.Duration   // send to end of stream
	ttft    time.Duration   // send to first text; valid when hasTTFT
	tpot    time.Duration   // (latency - ttft) / (tokens - 1); valid when hasTPOT
	itl     []time.Duration // gaps between consecutive chunks with text
	hasTTFT bool            // some text arrived
	hasTPOT bool            // two tokens or more, so that there is a gap to share
}

// measure computes s's latencies. TPOT divides the time after the first
// token by the tokens after it, so that it is the decode rate one request
// sees whatever the server's chunking; ITL is the raw gaps between chunks.
func measure(s *sample) timing {
	t := timing{latency: s.done}
	if len(s.chunks) == 0 {
		return t
	}
	t.ttft, t.hasTTFT = s.chunks[0], true
	if n := s.outputTokens(); n > 1 {
		t.tpot, t.hasTPOT = (s.done-t.ttft)/time.Duration(n-1), true
	}
	for i := 1; i < len(s.chunks); i++ {
		t.itl = append(t.itl, s.chunks[i]-s.chunks[i-1])
	}
	return t
}

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, an
// ascending slice, by linear interpolation between the two nearest ranks:
// the value at rank (len-1)*p/100 counted from 0, as numpy's default and
// vLLM's benchmark compute it, so that figures compare. It returns 0 for
// an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	p = math.Max(0, math.Min(100, p))
	rank := float64(len(sorted)-1) * p / 100
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(rank-float64(lo))
}

// Stats summarises one latency over the requests, in milliseconds.
type Stats struct {
	Count int     `json:"count"` // the values summarised
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Summarize returns the extremes, mean and percentiles (see Percentile)
// of ds in milliseconds; all zero for none.
func Summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	ms := make([]float64, len(ds))
	sum := 0.0
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Stats{
		Count: len(ms),
		Min:   ms[0],
		Mean:  sum / float64(len(ms)),
		P50:   Percentile(ms, 50),
		P90:   Percentile(ms, 90),
		P99:   Percentile(ms, 99),
		Max:   ms[len(ms)-1],
	}
}

// Report is the outcome of a run.
type Report struct {
	URL      string `json:"url"`      // the endpoint driven
	Model    string `json:"model"`    // the model asked for
	Requests int    `json:"requests"` // requests planned
	// Sent is the requests sent; fewer than Requests when the run was
	// interrupted.
	Sent      int `json:"sent"`
	Completed int `json:"completed"` // streams that ended with [DONE]
	Failed    int `json:"failed"`    // errors: HTTP status, in-stream error, broken stream
	// Canceled is the requests in flight when the run was interrupted.
	Canceled int `json:"canceled"`
	// FirstError is the first failure's message, and Errors how many
	// failures had each message.
	FirstError  string         `json:"first_error,omitempty"`
	Errors      map[string]int `json:"errors,omitempty"`
	Interrupted bool           `json:"interrupted"` // the context ended the run early
	// PeakInFlight is the most requests that were in flight at once.
	PeakInFlight int `json:"peak_in_flight"`

	Duration        float64 `json:"duration_s"`        // start to the last request's end
	RequestRate     float64 `json:"request_rate"`      // completed requests per second
	InputTokens     int     `json:"input_tokens"`      // prompt tokens of completed requests
	OutputTokens    int     `json:"output_tokens"`     // generated tokens of completed requests
	OutputTokenRate float64 `json:"output_token_rate"` // generated tokens per second
	TotalTokenRate  float64 `json:"total_token_rate"`  // prompt and generated tokens per second
	TTFT            Stats   `json:"ttft"`              // time to first token
	TPOT            Stats   `json:"tpot"`              // time per output token after the first
	ITL             Stats   `json:"itl"`               // inter-token latency: gaps between chunks
	Latency         Stats   `json:"e2e_latency"`       // send to end of stream
}

// maxErrorKinds bounds Report.Errors: a server whose messages name the
// request would otherwise make the report as long as the run.
const maxErrorKinds = 20

// otherErrors counts the failures past maxErrorKinds distinct messages.
const otherErrors = "(other messages)"

// summarize builds the report of samples, the requests sent, over
// duration.
func summarize(samples []sample, duration time.Duration) *Report {
	r := &Report{Sent: len(samples), Duration: duration.Seconds()}
	var ttft, tpot, itl, lat []time.Duration
	for i := range samples {
		s := &samples[i]
		switch {
		case s.canceled:
			r.Canceled++
			continue
		case s.err != nil:
			r.Failed++
			msg := s.err.Error()
			if r.FirstError == "" {
				r.FirstError = msg
			}
			if r.Errors == nil {
				r.Errors = map[string]int{}
			}
			if _, seen := r.Errors[msg]; !seen && len(r.Errors) >= maxErrorKinds {
				msg = otherErrors
			}
			r.Errors[msg]++
			continue
		}
		r.Completed++
		r.InputTokens += s.inputTokens()
		r.OutputTokens += s.outputTokens()
		t := measure(s)
		lat = append(lat, t.latency)
		if t.hasTTFT {
			ttft = append(ttft, t.ttft)
		}
		if t.hasTPOT {
			tpot = append(tpot, t.tpot)
		}
		itl = append(itl, t.itl...)
	}
	if sec := duration.Seconds(); sec > 0 {
		r.RequestRate = float64(r.Completed) / sec
		r.OutputTokenRate = float64(r.OutputTokens) / sec
		r.TotalTokenRate = float64(r.InputTokens+r.OutputTokens) / sec
	}
	r.TTFT, r.TPOT, r.ITL, r.Latency = Summarize(ttft), Summarize(tpot), Summarize(itl), Summarize(lat)
	return r
}

// WriteText prints r for a person: counts, rates and a table of latencies.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "endpoint:        %s\n", r.URL)
	fmt.Fprintf(&b, "model:           %s\n", r.Model)
	fmt.Fprintf(&b, "requests:        %d completed, %d failed", r.Completed, r.Failed)
	if r.Canceled > 0 {
		fmt.Fprintf(&b, ", %d canceled", r.Canceled)
	}
	fmt.Fprintf(&b, " (%d sent of %d)\n", r.Sent, r.Requests)
	if r.Interrupted {
		fmt.Fprintf(&b, "interrupted:     the figures cover the requests that ended before\n")
	}
	fmt.Fprintf(&b, "peak in flight:  %d\n", r.PeakInFlight)
	fmt.Fprintf(&b, "duration:        %.3f s\n", r.Duration)
	fmt.Fprintf(&b, "request rate:    %.2f req/s\n", r.RequestRate)
	fmt.Fprintf(&b, "output tokens:   %d (%.1f tok/s)\n", r.OutputTokens, r.OutputTokenRate)
	fmt.Fprintf(&b, "total tokens:    %d (%.1f tok/s)\n", r.InputTokens+r.OutputTokens, r.TotalTokenRate)
	b.WriteString("\n")
	fmt.Fprintf(&b, "%-10s %6s %9s %9s %9s %9s %9s %9s\n", "(ms)", "count", "min", "mean", "p50", "p90", "p99", "max")
	for _, row := range []struct {
		name string
		s    Stats
	}{{"TTFT", r.TTFT}, {"TPOT", r.TPOT}, {"ITL", r.ITL}, {"latency", r.Latency}} {
		fmt.Fprintf(&b, "%-10s %6d %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", row.name, row.s.Count, row.s.Min, row.s.Mean, row.s.P50, row.s.P90, row.s.P99, row.s.Max)
	}
	if r.Failed > 0 {
		fmt.Fprintf(&b, "\nfirst error (%d distinct): %s\n", len(r.Errors), r.FirstError)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints r as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
