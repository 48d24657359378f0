package safetensors

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/lumsearch/lumsearch/ir"
)

// MetadataKey is the reserved header key of the file's string metadata; no
// tensor may have this name.
const MetadataKey = "__metadata__"

// MaxHeaderBytes is the largest header Write produces and readers accept
// (the reference implementation's limit).
const MaxHeaderBytes = MaxHeaderSize

var dtypeNames = map[ir.DType]string{ir.F32: "F32", ir.F16: "F16", ir.BF16: "BF16", ir.I32: "I32", ir.I64: "I64", ir.Bool: "BOOL", ir.U8: "U8"}

// byteDTypes are the file dtypes of one byte whose bytes an ir u8 tensor
// holds as they are: the packed codes and scales of quantized weights
// (FP8's e4m3 codes, MXFP4's e8m0 scales when a file names them so).
var byteDTypes = []string{"U8", "F8_E4M3", "F8_E8M0"}

// DTypeName is the safetensors name of an ir dtype: F32, F16, BF16, I32,
// I64, BOOL or U8.
func DTypeName(dt ir.DType) (string, error) {
	s, ok := dtypeNames[dt]
	if !ok {
		return "", fmt.Errorf("safetensors: no dtype for %s", dt)
	}
	return s, nil
}

// ParseDTypeName is the ir dtype of a safetensors dtype name: those
// DTypeName gives, and F8_E4M3 and F8_E8M0, whose bytes are u8 codes
// (quantized weights' e4m3 codes and e8m0 scales); the others (F64, I8,
// ...) are errors.
func ParseDTypeName(s string) (ir.DType, error) {
	for dt, n := range dtypeNames {
		if n == s {
			return dt, nil
		}
	}
	if slices.Contains(byteDTypes, s) {
		return ir.U8, nil
	}
	return ir.InvalidDType, fmt.Errorf("safetensors: dtype %q is not one of F32, F16, BF16, I32, I64, BOOL, U8, F8_E4M3, F8_E8M0", s)
}

// entry is one tensor's header record.
type entry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// layout is the order of the tensors in the data buffer and the header
// that describes them, padded.
type layout struct {
	names  []string
	header []byte
	bytes  int64 // the data buffer's size
}

func plan(tensors map[string]*ir.Tensor, metadata map[string]string, opt WriteOptions) (*layout, error) {
	l := &layout{}
	for name, d := range opt.DTypes {
		t, ok := tensors[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("safetensors: file dtype %s for tensor %q, which is not written", d, name)
		case t == nil || t.DType != ir.U8 || !slices.Contains(byteDTypes, d):
			return nil, fmt.Errorf("safetensors: tensor %q: file dtype %s; want a u8 tensor stored as one of %v", name, d, byteDTypes)
		}
	}
	for name, t := range tensors {
		if name == MetadataKey {
			return nil, fmt.Errorf("safetensors: a tensor may not be named %s", MetadataKey)
		}
		if !utf8.ValidString(name) {
			return nil, fmt.Errorf("safetensors: tensor name %q is not UTF-8", name)
		}
		if err := check(t); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		l.names = append(l.names, name)
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("safetensors: metadata %q = %q is not UTF-8", k, v)
		}
	}
	// The widest elements first, then by name: every tensor starts at a
	// multiple of its element size (the header is padded to 8).
	slices.SortFunc(l.names, func(a, b string) int {
		if c := cmp.Compare(tensors[b].DType.Size(), tensors[a].DType.Size()); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	hdr := make(map[string]any, len(tensors)+1)
	for _, name := range l.names {
		t := tensors[name]
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		n := t.Len() * int64(t.DType.Size())
		dt := dtypeNames[t.DType]
		if d, ok := opt.DTypes[name]; ok {
			dt = d
		}
		hdr[name] = entry{DType: dt, Shape: shape, DataOffsets: [2]int64{l.bytes, l.bytes + n}}
		l.bytes += n
	}
	if len(metadata) > 0 {
		hdr[MetadataKey] = metadata
	}
	var buf bytesBuffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(hdr); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	h := buf.b[:len(buf.b)-1] // Encode's newline
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if len(h) > MaxHeaderBytes {
		return nil, fmt.Errorf("safetensors: the header takes %d bytes, more than the %d readers accept", len(h), MaxHeaderBytes)
	}
	l.header = h
	return l, nil
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// check verifies that a tensor is one Write can store.
func check(t *ir.Tensor) error {
	if t == nil {
		return errors.New("nil tensor")
	}
	if _, ok := dtypeNames[t.DType]; !ok {
		return fmt.Errorf("dtype %s", t.DType)
	}
	if err := t.Shape.Check(); err != nil {
		return err
	}
	return t.CheckStorage()
}

// Write writes tensors and metadata (nil for none) to w as a safetensors
// file. Each element is stored in its tensor's dtype, rounded to it as
// ir.DType.Round does (the values of an ir tensor already are). The same
// input gives the same bytes.
func Write(w io.Writer, tensors map[string]*ir.Tensor, metadata map[string]string) error {
	return WriteWith(w, tensors, metadata, WriteOptions{})
}

// WriteOptions change how Write records tensors.
type WriteOptions struct {
	// DTypes names the file dtype of u8 tensors stored as another
	// dtype of one byte: F8_E4M3 for e4m3 codes (an fp8 checkpoint's
	// weights), F8_E8M0 for e8m0 scales. The bytes are the same.
	DTypes map[string]string
}

// WriteWith is Write with options.
func WriteWith(w io.Writer, tensors map[string]*ir.Tensor, metadata map[string]string, opt WriteOptions) error {
	l, err := plan(tensors, metadata, opt)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(l.header)))
	bw.Write(n[:])
	bw.Write(l.header)
	chunk := make([]byte, 0, 1<<16)
	for _, name := range l.names {
		t := tensors[name]
		size := t.DType.Size()
		for i := range t.Len() {
			if len(chunk)+size > cap(chunk) {
				bw.Write(chunk)
				chunk = chunk[:0]
			}
			chunk = appendElement(chunk, t, i)
		}
	}
	bw.Write(chunk)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// Encode is Write into memory.
func Encode(tensors map[string]*ir.Tensor, metadata map[string]string) ([]byte, error) {
	var b bytesBuffer
	if err := Write(&b, tensors, metadata); err != nil {
		return nil, err
	}
	return b.b, nil
}

// WriteFile writes tensors and metadata to the file at path, replacing it
// whole: the file is written beside it under a temporary name and renamed,
// so that a reader never sees half a file.
func WriteFile(path string, tensors map[string]*ir.Tensor, metadata map[string]string) (err error) {
	if _, err := plan(tensors, metadata, WriteOptions{}); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := Write(f, tensors, metadata); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// appendElement appends v stored in dtype dt, little-endian.
func appendElement(b []byte, t *ir.Tensor, i int64) []byte {
	v := t.At(i)
	switch t.DType {
	case ir.F32:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
	case ir.F16:
		return binary.LittleEndian.AppendUint16(b, float16.Fromfloat32(float32(v)).Bits())
	case ir.BF16:
		return binary.LittleEndian.AppendUint16(b, uint16(ir.BF16FromFloat32(float32(v))))
	case ir.I32:
		return binary.LittleEndian.AppendUint32(b, uint32(ir.I32.WrapInt(t.Int(i))))
	case ir.I64:
		return binary.LittleEndian.AppendUint64(b, uint64(t.Int(i)))
	case ir.Bool:
		if v != 0 {
			return append(b, 1)
		}
		return append(b, 0)
	case ir.U8:
		return append(b, uint8(t.Int(i)))
	}
	panic("unreachable: check refused the dtype")
}

// Read parses a safetensors file held in data and decodes every tensor
// into an ir tensor (Decode), with the file's metadata (nil when it has
// none). name is the file's name in errors. A malformed file (a header
// length beyond the file, JSON that is not an object of well-formed
// entries, offsets out of order, out of range or overlapping, a byte
// count that disagrees with the shape), a dtype Decode does not take, a
// shape of more than 2^62 elements, or a BOOL byte other than 0 or 1 is
// an error naming the file and the tensor; Read never panics.
func Read(name string, data []byte) (map[string]*ir.Tensor, map[string]string, error) {
	f, err := Parse(name, data)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]*ir.Tensor, len(f.Names()))
	for _, n := range f.Names() {
		st, _ := f.Tensor(n)
		t, err := Decode(st)
		if err != nil {
			return nil, nil, &Error{File: name, Tensor: n, Reason: err.Error()}
		}
		out[n] = t
	}
	return out, f.Metadata(), nil
}

// ReadFile is Read of the file at path.
func ReadFile(path string) (map[string]*ir.Tensor, map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	return Read(path, data)
}

// Decode converts a tensor of a parsed file (its byte count checked
// against its shape and dtype) into an ir tensor of the dtype
// ParseDTypeName gives: float dtypes in float32 storage, which holds every
// f32, f16 and bf16 value exactly; integers at their own width (the bytes
// of U8, F8_E4M3 and F8_E8M0 as u8 in byte storage, I32 in int32, I64 in
// int64), exactly; bool in float64. The tensor's data is copied.
func Decode(st Tensor) (*ir.Tensor, error) {
	dt, err := ParseDTypeName(st.DType)
	if err != nil {
		return nil, fmt.Errorf("dtype %q is not one of F32, F16, BF16, I32, I64, BOOL, U8, F8_E4M3, F8_E8M0", st.DType)
	}
	if want := st.NumElements() * int64(dt.Size()); int64(len(st.Data)) != want {
		return nil, fmt.Errorf("%d data bytes for %s%v; want %d", len(st.Data), st.DType, st.Shape, want)
	}
	shape := make(ir.Shape, len(st.Shape))
	for i, d := range st.Shape {
		shape[i] = ir.Dim(d)
	}
	if err := shape.Check(); err != nil {
		return nil, err
	}
	n := int(shape.NumElements())
	b := st.Data
	if dt.IsFloat() {
		vals := make([]float32, n)
		for i := range vals {
			switch dt {
			case ir.F32:
				vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			case ir.F16:
				vals[i] = float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
			case ir.BF16:
				vals[i] = ir.BFloat16(binary.LittleEndian.Uint16(b[2*i:])).Float32()
			}
		}
		return ir.TensorOfFloat32(dt, shape, vals)
	}
	if dt == ir.U8 {
		return ir.TensorOfBytes(shape, append(make([]byte, 0, n), b[:n]...)) // never nil, unlike a clone of none
	}
	t := ir.NewTensor(dt, shape)
	switch dt {
	case ir.I32:
		for i := range t.I32 {
			t.I32[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return t, nil
	case ir.I64:
		for i := range t.I64 {
			t.I64[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return t, nil
	}
	for i := range t.Len() { // bool, the one dtype left
		if b[i] > 1 {
			return nil, fmt.Errorf("BOOL element %d is %d, not 0 or 1", i, b[i])
		}
		t.SetInt(i, int64(b[i]))
	}
	return t, nil
}
