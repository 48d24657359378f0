package loadgen

import (
	"bufio"
	"bytes"
	"io"
)

// maxSSELine bounds one line of a stream: a chunk is small, and a server
// that sends megabytes without a newline is broken, not slow.
const maxSSELine = 16 << 20

// doneData is the data of the event that ends an OpenAI stream.
var doneData = []byte("[DONE]")

// readSSE reads server-sent events from r and calls onData with each
// event's data (its data lines joined by "\n"), until the "[DONE]" event,
// the end of r or an error from onData. It says whether "[DONE]" came.
//
// It follows the event-stream format rather than one server's habits:
// lines may end in "\r\n", "\n" or "\r"; lines starting with ":" are
// comments (keep-alives); fields other than data (event, id, retry) are
// ignored; "data:" may be followed by one optional space; an event ends
// at a blank line. An event left unterminated at the end of the stream is
// still delivered, since a server that closes right after its last data
// line has said all it meant to.
func readSSE(r io.Reader, onData func(data []byte) error) (done bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	sc.Split(scanSSELines)
	var data []byte
	have := false
	dispatch := func() (bool, error) {
		if !have {
			return false, nil
		}
		have = false
		if bytes.Equal(data, doneData) {
			return true, nil
		}
		err := onData(data)
		data = data[:0]
		return false, err
	}
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if done, err := dispatch(); done || err != nil {
				return done, err
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			value = nil // a field name alone has an empty value
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue
		}
		if have {
			data = append(data, '\n')
		}
		data = append(data, value...)
		have = true
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return dispatch()
}

// scanSSELines is a bufio.SplitFunc for the event stream's three line
// endings. A "\r" at the end of the buffer waits for more input, since it
// may be the first half of "\r\n".
func scanSSELines(buf []byte, atEOF bool) (advance int, token []byte, err error) {
	i := bytes.IndexAny(buf, "\r\n")
	switch {
	case i < 0 && atEOF && len(buf) > 0:
		return len(buf), buf, nil
	case i < 0:
		return 0, nil, nil
	case buf[i] == '\n':
		return i + 1, buf[:i], nil
	case i+1 < len(buf):
		if buf[i+1] == '\n' {
			return i + 2, buf[:i], nil
		}
		return i + 1, buf[:i], nil
	case atEOF:
		return i + 1, buf[:i], nil
	default:
		return 0, nil, nil // a "\r" last: wait for a possible "\n"
	}
}
