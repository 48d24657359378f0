package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrinterText(t *testing.T) {
	var b bytes.Buffer
	p := NewPrinter(&b, false)
	left := 3.0
	for _, e := range []Event{
		{Kind: "phase", Phase: "saturate", Stage: "fusion", Elapsed: 1.25, Remaining: &left},
		{Kind: "step", Stage: "fusion", Nodes: 10}, // not a terminal: no status line
		{Kind: "note", Message: "plain"},
		{Kind: "note", Message: "nvrtc: not compiled", Line: "  nvrtc: not compiled"},
		{Kind: "verified", Stage: "all", Verified: 2e-6},
		{Kind: "rejected", Stage: "all", Message: "differs"},
	} {
		p.Event(e)
	}
	assert.Equal(t, "- saturate fusion (1.2s, 3.0s left)\n  note: plain\n  nvrtc: not compiled\n  verified the all program: 2 µs per run predicted\n  rejected the all program: differs\n", b.String())
}

func TestPrinterJSON(t *testing.T) {
	var b bytes.Buffer
	p := NewPrinter(&b, true)
	p.Event(Event{Kind: "note", Message: "nvrtc: not compiled", Line: "  nvrtc: not compiled"})
	p.Event(Event{Kind: "phase", Phase: "write", Elapsed: 2})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, `{"event":"note","elapsed_s":0,"message":"nvrtc: not compiled"}`, lines[0], "the printed line is not part of the JSON")
	var e Event
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &e))
	assert.Equal(t, "write", e.Phase)
}

// TestLogWriter: what a phase writes reaches the events a whole line at a
// time, blank lines dropped, from several writers at once.
func TestLogWriter(t *testing.T) {
	var mu sync.Mutex
	var got []string
	em := newEmitter(func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "note", e.Kind)
		assert.Equal(t, strings.TrimSpace(e.Line), e.Message)
		got = append(got, e.Line)
	})
	w := newLogWriter(em)
	fmt.Fprint(w, "  first ")
	fmt.Fprint(w, "half\n\n  second\n  third")
	assert.Equal(t, []string{"  first half", "  second"}, got, "the third waits for its newline")
	fmt.Fprint(w, "\n")
	assert.Equal(t, []string{"  first half", "  second", "  third"}, got)

	got = nil
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(w, "line %d\n", i)
		}()
	}
	wg.Wait()
	assert.Len(t, got, 8)
	newEmitter(nil).log("nobody listens") // no callback: nothing happens
}
