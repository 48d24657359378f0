package loadgen

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// events reads stream with readSSE and returns the data of each event.
func events(t testing.TB, stream string) ([]string, bool, error) {
	t.Helper()
	var got []string
	done, err := readSSE(strings.NewReader(stream), func(data []byte) error {
		got = append(got, string(data)) // data is reused after the call
		return nil
	})
	return got, done, err
}

func TestReadSSE(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   []string
		done   bool
	}{
		{"openai", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, `{"a":2}`}, true},
		{"crlf", "data: x\r\n\r\ndata: [DONE]\r\n\r\n", []string{"x"}, true},
		{"lone cr", "data: x\r\rdata: y\r\r", []string{"x", "y"}, false},
		{"comments and keep-alives", ": ping\n\ndata: x\n: in the middle\n\n:\n\ndata: [DONE]\n\n", []string{"x"}, true},
		{"blank lines between events", "\n\n\ndata: x\n\n\n\ndata: y\n\n", []string{"x", "y"}, false},
		{"no space after the colon", "data:x\n\n", []string{"x"}, false},
		{"only one space is dropped", "data:  x\n\n", []string{" x"}, false},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, false},
		{"other fields ignored", "event: message\nid: 7\nretry: 10\ndata: x\n\n", []string{"x"}, false},
		{"field without colon", "data\n\n", []string{""}, false},
		{"unterminated last event", "data: x\n\ndata: y", []string{"x", "y"}, false},
		{"unterminated done", "data: x\n\ndata: [DONE]", []string{"x"}, true},
		{"stops at done", "data: [DONE]\n\ndata: after\n\n", nil, true},
		{"done with spaces is data", "data: [DONE] \n\n", []string{"[DONE] "}, false},
		{"empty", "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, done, err := events(t, tt.stream)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.done, done)
		})
	}
}

// TestReadSSEByteAtATime: a "\r\n" split across reads is one line ending,
// as it is when a chunk straddles two TCP segments.
func TestReadSSEByteAtATime(t *testing.T) {
	var got []string
	done, err := readSSE(iotest.OneByteReader(strings.NewReader("data: a\r\n\r\ndata: b\r\n\r\ndata: [DONE]\r\n\r\n")), func(data []byte) error {
		got = append(got, string(data))
		return nil
	})
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, []string{"a", "b"}, got)
}

func TestReadSSEErrors(t *testing.T) {
	t.Run("callback error stops", func(t *testing.T) {
		stop := errors.New("stop")
		calls := 0
		_, err := readSSE(strings.NewReader("data: a\n\ndata: b\n\n"), func([]byte) error {
			calls++
			return stop
		})
		assert.ErrorIs(t, err, stop)
		assert.Equal(t, 1, calls)
	})
	t.Run("read error", func(t *testing.T) {
		broken := errors.New("connection reset")
		_, err := readSSE(iotest.ErrReader(broken), func([]byte) error { return nil })
		assert.ErrorIs(t, err, broken)
	})
	t.Run("line too long", func(t *testing.T) {
		_, err := readSSE(strings.NewReader("data: "+strings.Repeat("x", maxSSELine+1)), func([]byte) error { return nil })
		assert.Error(t, err)
	})
}

// FuzzReadSSE: readSSE never panics, and "\r\n" line endings read as "\n"
// ones do.
func FuzzReadSSE(f *testing.F) {
	for _, seed := range []string{
		"data: {\"choices\":[{\"text\":\"hi\"}]}\n\ndata: [DONE]\n\n",
		": ping\n\ndata:x\ndata: y\n\n",
		"data: a\r\rdata: b",
		"event: e\nid: 1\n\n\n",
		"data",
		"\r\n\r",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, stream string) {
		got, done, err := events(t, stream)
		require.NoError(t, err)
		if strings.Contains(stream, "\r") {
			return
		}
		crlf, crlfDone, err := events(t, strings.ReplaceAll(stream, "\n", "\r\n"))
		require.NoError(t, err)
		assert.Equal(t, got, crlf)
		assert.Equal(t, done, crlfDone)
	})
}
