package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tt describes one tensor for the test writer. A nil data means "zeros of
// the right size"; buildFile writes them, writeSparse leaves a hole.
type tt struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// tensorBytes is the byte size of a well-formed tensor.
func tensorBytes(t tt) int64 {
	n := int64(1)
	for _, d := range t.shape {
		n *= d
	}
	bitsPer, _ := DTypeBits(t.dtype)
	return n * int64(bitsPer) / 8
}

// header builds a safetensors JSON header for tensors laid out back to back,
// padded with spaces to a multiple of 8 bytes like the reference writer.
func header(tb testing.TB, tensors []tt, meta map[string]string) string {
	tb.Helper()
	var b strings.Builder
	b.WriteString("{")
	sep := ""
	if meta != nil {
		m, err := json.Marshal(meta)
		require.NoError(tb, err)
		b.WriteString(`"__metadata__":` + string(m))
		sep = ","
	}
	off := int64(0)
	for _, t := range tensors {
		size := tensorBytes(t)
		if t.data != nil {
			size = int64(len(t.data))
		}
		shape := t.shape
		if shape == nil {
			shape = []int64{}
		}
		e, err := json.Marshal(map[string]any{
			"dtype":        t.dtype,
			"shape":        shape,
			"data_offsets": []int64{off, off + size},
		})
		require.NoError(tb, err)
		k, err := json.Marshal(t.name)
		require.NoError(tb, err)
		b.WriteString(sep + string(k) + ":" + string(e))
		sep = ","
		off += size
	}
	b.WriteString("}")
	for b.Len()%8 != 0 {
		b.WriteString(" ")
	}
	return b.String()
}

// raw assembles a file from a literal header and data buffer.
func raw(hdr string, buf []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, buf...)
}

// buildFile returns the bytes of a well-formed safetensors file.
func buildFile(tb testing.TB, tensors []tt, meta map[string]string) []byte {
	tb.Helper()
	var buf []byte
	for _, t := range tensors {
		if t.data != nil {
			buf = append(buf, t.data...)
		} else {
			buf = append(buf, make([]byte, tensorBytes(t))...)
		}
	}
	return raw(header(tb, tensors, meta), buf)
}

// writeFile writes b to dir/name and returns the path.
func writeFile(tb testing.TB, dir, name string, b []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	require.NoError(tb, os.WriteFile(p, b, 0o644))
	return p
}

// writeSparse writes a well-formed file whose tensors are all zero, leaving
// the data as a hole so that big shapes cost no disk or memory.
func writeSparse(tb testing.TB, dir, name string, tensors []tt) string {
	tb.Helper()
	hdr := header(tb, tensors, nil)
	p := writeFile(tb, dir, name, raw(hdr, nil))
	total := int64(8 + len(hdr))
	for _, t := range tensors {
		total += tensorBytes(t)
	}
	require.NoError(tb, os.Truncate(p, total))
	return p
}

// le32 encodes float32 values little-endian.
func le32(vs ...float32) []byte {
	var out []byte
	for _, v := range vs {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

// le16 encodes raw 16-bit patterns little-endian.
func le16(vs ...uint16) []byte {
	var out []byte
	for _, v := range vs {
		out = binary.LittleEndian.AppendUint16(out, v)
	}
	return out
}
