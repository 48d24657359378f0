package openai

import (
	"encoding/json"
	"net/http"
)

// EventWriter writes a server-sent-event stream as OpenAI does: each event
// a "data: <json>" line and a blank line, flushed at once so tokens reach
// the client as they are made, and "data: [DONE]" at the end.
type EventWriter struct {
	w           http.ResponseWriter
	rc          *http.ResponseController
	wroteHeader bool
}

// NewEventWriter wraps w. Flushing goes through http.ResponseController,
// so middleware that wraps the writer and offers Unwrap keeps working.
func NewEventWriter(w http.ResponseWriter) *EventWriter {
	return &EventWriter{w: w, rc: http.NewResponseController(w)}
}

// WriteHeader sends the 200 and the event-stream headers; Send calls it if
// nobody did. Later calls do nothing.
func (e *EventWriter) WriteHeader() {
	if e.wroteHeader {
		return
	}
	e.wroteHeader = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	// Tells nginx-style proxies not to buffer the stream.
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
}

// Send writes v as one event and flushes. An error means the client is
// gone (or v does not marshal); the caller should stop generating.
func (e *EventWriter) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.write(b)
}

// SendError writes err as an event, {"error": {...}}, the way OpenAI and
// vLLM report failures after the stream has begun; the official clients
// end the stream with it. Follow it with Done.
func (e *EventWriter) SendError(err *Error) error {
	return e.Send(err)
}

// Done writes the final "data: [DONE]" event.
func (e *EventWriter) Done() error {
	return e.write([]byte("[DONE]"))
}

func (e *EventWriter) write(data []byte) error {
	e.WriteHeader()
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		return err
	}
	return e.rc.Flush()
}
