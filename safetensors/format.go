package safetensors

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
)

// MaxHeaderSize is the largest JSON header length accepted, in bytes
// (100 MB, the limit used by the reference implementation).
const MaxHeaderSize = 100_000_000

// Error describes a malformed or inconsistent safetensors file, shard set or
// index. File is always set; Tensor is set whenever one tensor is at fault.
type Error struct {
	File   string // path (or name given to Parse) of the file at fault
	Tensor string // name of the tensor at fault, "" for file-level problems
	Reason string // what is wrong
	Err    error  // underlying error, if any
}

// Error formats the problem as "safetensors: FILE: tensor "NAME": REASON".
func (e *Error) Error() string {
	msg := e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Tensor == "" {
		return fmt.Sprintf("safetensors: %s: %s", e.File, msg)
	}
	return fmt.Sprintf("safetensors: %s: tensor %q: %s", e.File, e.Tensor, msg)
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// dtypeBits gives the size in bits of one element of each known dtype.
var dtypeBits = map[string]uint64{
	"BOOL":        8,
	"U8":          8,
	"I8":          8,
	"F8_E5M2":     8,
	"F8_E4M3":     8,
	"F8_E8M0":     8,
	"F8_E4M3FNUZ": 8,
	"F8_E5M2FNUZ": 8,
	"I16":         16,
	"U16":         16,
	"F16":         16,
	"BF16":        16,
	"I32":         32,
	"U32":         32,
	"F32":         32,
	"I64":         64,
	"U64":         64,
	"F64":         64,
	"C64":         64,
	"F4":          4,
	"F6_E2M3":     6,
	"F6_E3M2":     6,
}

// DTypeBits reports the size in bits of one element of dtype, and whether
// dtype is known. Sub-byte dtypes (F4, F6_*) are packed.
func DTypeBits(dtype string) (int, bool) {
	b, ok := dtypeBits[dtype]
	return int(b), ok
}

// Tensor is one tensor of a file. Data aliases the file's read-only mapping
// (or the buffer given to Parse): it is valid until the owning File or Set is
// closed and must not be written to.
type Tensor struct {
	Name  string  // tensor name as it appears in the header
	DType string  // safetensors dtype name, e.g. "F32", "BF16"
	Shape []int64 // dimensions, outermost first; empty for a scalar
	Data  []byte  // little-endian, row-major element bytes
}

// NumElements returns the product of the tensor's dimensions (1 for a scalar).
// It does not check for overflow; tensors returned by this package have been
// validated not to overflow.
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s decodes the tensor into a new []float32. F32 is copied, F16 and
// BF16 are widened exactly (every half and bfloat16 value, including
// subnormals, infinities and NaN payloads, is representable in float32).
// Any other dtype is an error. It is meant for small tensors and tests.
func (t Tensor) Float32s() ([]float32, error) {
	var size int
	switch t.DType {
	case "F32":
		size = 4
	case "F16", "BF16":
		size = 2
	default:
		return nil, fmt.Errorf("safetensors: tensor %q: Float32s: unsupported dtype %q (want F32, F16 or BF16)", t.Name, t.DType)
	}
	if len(t.Data)%size != 0 {
		return nil, fmt.Errorf("safetensors: tensor %q: Float32s: %d data bytes is not a multiple of %d", t.Name, len(t.Data), size)
	}
	out := make([]float32, len(t.Data)/size)
	switch t.DType {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case "F16":
		for i := range out {
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = BF16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out, nil
}

// F16ToFloat32 converts IEEE 754 half-precision bits to float32 exactly.
// NaN payloads are preserved (shifted into the float32 mantissa).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	default: // subnormal: normalise the mantissa
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
}

// BF16ToFloat32 converts bfloat16 bits to float32 exactly.
func BF16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// File is one parsed (and, when obtained from Open, memory-mapped)
// safetensors file.
type File struct {
	path     string
	data     []byte // the whole file
	mapped   bool   // data is an mmap that Close must release
	tensors  map[string]Tensor
	names    []string
	metadata map[string]string
}

// Path returns the path the file was opened from (the name given to Parse).
func (f *File) Path() string { return f.path }

// Names returns the tensor names in sorted order. The slice is a copy.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Tensor returns the named tensor. Its Data aliases the mapping. After Close
// it always reports false.
func (f *File) Tensor(name string) (Tensor, bool) {
	t, ok := f.tensors[name]
	if !ok {
		return Tensor{}, false
	}
	t.Shape = slices.Clone(t.Shape)
	return t, true
}

// Metadata returns a copy of the header's "__metadata__" object, or nil when
// the header has none.
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// Close releases the mapping. Tensor data obtained from f must not be used
// afterwards. Close is idempotent.
func (f *File) Close() error {
	data, mapped := f.data, f.mapped
	f.data, f.mapped, f.tensors = nil, false, nil
	if mapped && data != nil {
		if err := unmap(data); err != nil {
			return fmt.Errorf("safetensors: %s: munmap: %w", f.path, err)
		}
	}
	return nil
}

// Open memory-maps the safetensors file at path read-only and validates it
// (see Parse). The file descriptor is closed before Open returns; the mapping
// lives until Close.
func Open(path string) (*File, error) {
	data, mapped, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(path, data)
	if err != nil {
		if mapped {
			_ = unmap(data)
		}
		return nil, err
	}
	f.mapped = mapped
	return f, nil
}
