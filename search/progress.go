package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lumsearch/lumsearch/report"
)

// Printer renders the events of Optimize, Compile, Verify and Bench as the
// command line shows them: one JSON object a line, or text.
type Printer struct {
	mu       sync.Mutex
	w        io.Writer
	json     bool
	terminal bool
	status   bool // a status line is on screen
	enc      *json.Encoder
}

// NewPrinter prints events to w, as JSON lines when asJSON is set. Text
// on a terminal redraws a status line in place.
func NewPrinter(w io.Writer, asJSON bool) *Printer {
	p := &Printer{w: w, json: asJSON, enc: json.NewEncoder(w)}
	if f, ok := w.(*os.File); ok && !asJSON {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

// clearStatus ends a status line before other output.
func (p *Printer) clearStatus() {
	if p.status {
		fmt.Fprint(p.w, "\r\033[K")
		p.status = false
	}
}

// Event prints one event: in JSON mode, the event as one JSON object; in
// text mode, a line per phase, result and note (a log line as it was
// written), and on a terminal the saturation's steps as a status line
// redrawn in place.
func (p *Printer) Event(e Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(e)
		return
	}
	left := ""
	if e.Remaining != nil {
		left = fmt.Sprintf(", %.1fs left", *e.Remaining)
	}
	switch e.Kind {
	case "step":
		if p.terminal {
			best := "none yet"
			if e.Best > 0 {
				best = Seconds(e.Best)
			}
			fmt.Fprintf(p.w, "\r\033[K  [%s %.1fs%s] e-graph %d e-nodes, %d classes; best %s", e.Stage, e.Elapsed, left, e.Nodes, e.Classes, best)
			p.status = true
		}
		return
	case "phase":
		p.clearStatus()
		what := e.Phase
		if e.Stage != "" {
			what += " " + e.Stage
		}
		fmt.Fprintf(p.w, "- %s (%.1fs%s)\n", what, e.Elapsed, left)
	case "candidate":
		p.clearStatus()
		fmt.Fprintf(p.w, "  stage %s: %s per run predicted, %s; e-graph %d e-nodes\n", e.Stage, Seconds(e.Best), e.Message, e.Nodes)
	case "verified":
		p.clearStatus()
		fmt.Fprintf(p.w, "  verified the %s program: %s per run predicted\n", e.Stage, Seconds(e.Verified))
	case "rejected":
		p.clearStatus()
		fmt.Fprintf(p.w, "  rejected the %s program: %s\n", e.Stage, e.Message)
	case "note":
		p.clearStatus()
		if e.Line != "" {
			fmt.Fprintf(p.w, "%s\n", e.Line)
			return
		}
		fmt.Fprintf(p.w, "  note: %s\n", e.Message)
	case "done":
		p.clearStatus()
		fmt.Fprintf(p.w, "- search done (%.1fs): %s\n", e.Elapsed, e.Message)
	}
}

// Done prints an optimize run's summary line (JSON mode: a "result"
// object with the summary and the folder).
func (p *Printer) Done(rep *report.Report, dir string, elapsed time.Duration) {
	s := rep.Summary
	perLayer := ""
	if s.Layers > 0 {
		perLayer = fmt.Sprintf(" (%.1f per layer over %d layers)", float64(s.Launches)/float64(s.Layers), s.Layers)
	}
	speedup := 0.0
	if s.Predicted > 0 {
		speedup = s.Naive / s.Predicted
	}
	msg := fmt.Sprintf("optimized %s: %d launches per run%s, %s per run predicted against %s for the naive program (%.2fx; hardware floor %s, achievable %s); ended by %s after %v; wrote %s",
		rep.Model, s.Launches, perLayer, Seconds(s.Predicted), Seconds(s.Naive), speedup, Seconds(s.Floor), Seconds(s.Achievable), rep.EndedBy, elapsed.Round(time.Millisecond), dir)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = p.enc.Encode(struct {
			Event
			Summary report.Summary `json:"summary"`
			Dir     string         `json:"dir"`
		}{Event{Kind: "result", Elapsed: elapsed.Seconds(), Message: msg}, s, dir})
		return
	}
	p.clearStatus()
	fmt.Fprintln(p.w, msg)
}

// emitter passes events on one at a time; its log lines go out unstamped.
type emitter struct {
	mu sync.Mutex
	fn func(Event)
}

func newEmitter(fn func(Event)) *emitter { return &emitter{fn: fn} }

// send passes e on (nothing without a callback).
func (em *emitter) send(e Event) {
	if em == nil || em.fn == nil {
		return
	}
	em.mu.Lock()
	defer em.mu.Unlock()
	em.fn(e)
}

// log sends each non-blank line of text as a note that carries the line.
func (em *emitter) log(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(line) != "" {
			em.send(Event{Kind: "note", Message: strings.TrimSpace(line), Line: line})
		}
	}
}

// logf logs one formatted line.
func (em *emitter) logf(format string, args ...any) { em.log(fmt.Sprintf(format, args...)) }

// logWriter is an io.Writer whose complete lines become log events, for
// the phases that report on a writer.
type logWriter struct {
	em      *emitter
	mu      sync.Mutex
	partial bytes.Buffer
}

func newLogWriter(em *emitter) *logWriter { return &logWriter{em: em} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial.Write(p)
	data := w.partial.Bytes()
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		w.em.log(string(data[:i+1]))
		w.partial.Next(i + 1)
	}
	return len(p), nil
}
