package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

// Tensor is one dense tensor of a model (an initializer) or of a test data
// file, checked on load: its data type is known, its dimensions are
// non-negative with a product that fits in an int64, and exactly one
// storage form holds exactly the number of elements the dimensions call
// for.
type Tensor struct {
	// Name is the tensor's name (an initializer's name is the value name
	// nodes refer to it by). Test data files may leave it empty.
	Name string
	// DType is the element type.
	DType onnxpb.TensorProto_DataType
	// Dims is the shape, outermost first; empty for a scalar.
	Dims []int64
	// Proto is the decoded message, for fields this type does not lift
	// (doc_string, metadata_props). Its external_data, if any, has been
	// resolved into the bytes Raw returns.
	Proto *onnxpb.TensorProto

	n     int64  // number of elements
	size  int64  // bytes of the raw form (not for STRING)
	where string // error prefix naming the file and the tensor
	// External data: a subslice of a read-only mapping owned by model.
	external bool
	ext      []byte
	model    *Model
}

// NumElements is the number of elements: the product of Dims (1 for a
// scalar).
func (t *Tensor) NumElements() int64 { return t.n }

// IsExternal reports whether the tensor's bytes live in an external data
// file (and so in a memory mapping owned by its Model).
func (t *Tensor) IsExternal() bool { return t.external }

// Raw returns the tensor's elements as fixed-width little-endian bytes in
// row-major order, whichever way the file stored them: one byte per BOOL,
// FLOAT16 and BFLOAT16 as their bit patterns, the 4-bit and 2-bit types
// packed lowest bits first, as in raw_data.
//
// The slice must not be modified. For raw_data it is the decoded message's
// own buffer; for external data it is a subslice of the read-only memory
// mapping of the data file, valid only until the Model is closed (writing
// to it faults). For the typed fields (float_data, int32_data, ...) it is
// converted afresh on each call.
//
// It is an error for STRING and complex tensors, and after the owning
// Model has been closed.
func (t *Tensor) Raw() ([]byte, error) {
	if t.model != nil && t.model.closed {
		return nil, fmt.Errorf("%s: model is closed", t.where)
	}
	if _, err := ElemBits(t.DType); err != nil {
		return nil, fmt.Errorf("%s: no raw bytes: %w", t.where, err)
	}
	if t.external {
		return t.ext, nil
	}
	p := t.Proto
	if p.RawData != nil {
		return p.RawData, nil
	}
	out := make([]byte, 0, t.size)
	le := binary.LittleEndian
	switch {
	case len(p.FloatData) > 0:
		for _, v := range p.FloatData {
			out = le.AppendUint32(out, math.Float32bits(v))
		}
	case len(p.DoubleData) > 0:
		for _, v := range p.DoubleData {
			out = le.AppendUint64(out, math.Float64bits(v))
		}
	case len(p.Int64Data) > 0:
		for _, v := range p.Int64Data {
			out = le.AppendUint64(out, uint64(v))
		}
	case len(p.Uint64Data) > 0:
		if t.DType == onnxpb.TensorProto_UINT32 {
			for _, v := range p.Uint64Data {
				out = le.AppendUint32(out, uint32(v))
			}
		} else {
			for _, v := range p.Uint64Data {
				out = le.AppendUint64(out, v)
			}
		}
	case len(p.Int32Data) > 0:
		switch elemBits[t.DType] {
		case 32:
			for _, v := range p.Int32Data {
				out = le.AppendUint32(out, uint32(v))
			}
		case 16:
			for _, v := range p.Int32Data {
				out = le.AppendUint16(out, uint16(v))
			}
		default: // one byte per entry: 8-bit types, and packed bytes of the sub-byte types
			for _, v := range p.Int32Data {
				out = append(out, byte(v))
			}
		}
	}
	return out, nil
}

// LoadTensorProto reads a file holding one serialized TensorProto, as the
// ONNX conformance tests' test_data_set_N/input_M.pb and output_M.pb do for
// tensor-typed values (those of sequence- and optional-typed values hold
// other messages and fail here). Such a file cannot refer to external data.
func LoadTensorProto(path string) (*Tensor, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tensor: %w", err)
	}
	tp := new(onnxpb.TensorProto)
	if err := proto.Unmarshal(data, tp); err != nil {
		return nil, fmt.Errorf("load %s: not a serialized TensorProto: %w", path, err)
	}
	t, err := newTensor(tp, fmt.Sprintf("load %s: tensor %q", path, tp.GetName()))
	if err != nil {
		// Test data of sequence and optional values decodes as a
		// TensorProto of nonsense; say what it likely is.
		return nil, fmt.Errorf("%w (a file for a sequence or optional value holds a SequenceProto or OptionalProto, which this package does not read)", err)
	}
	if t.external {
		return nil, fmt.Errorf("%s: refers to external data, which a standalone tensor file cannot", t.where)
	}
	return t, nil
}

// storageBits is the bits per element of the raw form, including the
// complex types (which Raw refuses but Load still checks).
func storageBits(dt onnxpb.TensorProto_DataType) int {
	switch dt {
	case onnxpb.TensorProto_COMPLEX64:
		return 64
	case onnxpb.TensorProto_COMPLEX128:
		return 128
	}
	return elemBits[dt]
}

// newTensor lifts and checks tp. where prefixes every error. External data
// is recognised and its keys left for the caller to resolve.
func newTensor(tp *onnxpb.TensorProto, where string) (*Tensor, error) {
	fail := func(format string, args ...any) (*Tensor, error) {
		return nil, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
	}
	dt := onnxpb.TensorProto_DataType(tp.GetDataType())
	if _, known := onnxpb.TensorProto_DataType_name[int32(dt)]; !known {
		return fail("unknown data type %d", tp.GetDataType())
	}
	if dt == onnxpb.TensorProto_UNDEFINED {
		return fail("data type is UNDEFINED")
	}
	if tp.Segment != nil {
		return fail("segmented tensors (segment %d..%d) are not supported", tp.Segment.GetBegin(), tp.Segment.GetEnd())
	}
	n, err := NumElements(tp.Dims)
	if err != nil {
		return fail("%v", err)
	}
	t := &Tensor{Name: tp.GetName(), DType: dt, Dims: tp.Dims, Proto: tp, n: n, where: where}

	// Which storage forms are present.
	var forms []string
	if tp.RawData != nil {
		forms = append(forms, "raw_data")
	}
	fields := []struct {
		name string
		len  int
	}{
		{"float_data", len(tp.FloatData)},
		{"int32_data", len(tp.Int32Data)},
		{"string_data", len(tp.StringData)},
		{"int64_data", len(tp.Int64Data)},
		{"double_data", len(tp.DoubleData)},
		{"uint64_data", len(tp.Uint64Data)},
	}
	for _, f := range fields {
		if f.len > 0 {
			forms = append(forms, f.name)
		}
	}
	external := tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL
	switch {
	case external && len(tp.ExternalData) == 0:
		return fail("data_location is EXTERNAL but external_data is empty")
	case !external && len(tp.ExternalData) > 0:
		return fail("has external_data but data_location is not EXTERNAL")
	case external:
		forms = append(forms, "external data")
	}
	if len(forms) > 1 {
		return fail("data is stored in more than one form (%s)", strings.Join(forms, ", "))
	}

	if dt == onnxpb.TensorProto_STRING {
		if len(forms) == 1 && forms[0] != "string_data" {
			return fail("STRING tensor must use string_data, not %s", forms[0])
		}
		if int64(len(tp.StringData)) != n {
			return fail("string_data has %d strings for shape %v (%d elements)", len(tp.StringData), tp.Dims, n)
		}
		return t, nil
	}
	b := int64(storageBits(dt))
	nbits, ok := mulInt64(n, b)
	if !ok {
		return fail("shape %v of %s is more than 2^63-1 bytes", tp.Dims, DTypeName(dt))
	}
	size := nbits/8 + boolInt(nbits%8 != 0)
	t.size = size
	if len(forms) == 0 {
		if n != 0 {
			return fail("no data for shape %v (%d elements)", tp.Dims, n)
		}
		return t, nil
	}
	// want is how many entries the typed field needs.
	count := func(field string, have int, want int64) error {
		if int64(have) != want {
			return fmt.Errorf("%s: %s has %d entries, want %d for %s shape %v", where, field, have, want, DTypeName(dt), tp.Dims)
		}
		return nil
	}
	wrongField := func(field string) (*Tensor, error) {
		return fail("%s cannot hold data type %s", field, DTypeName(dt))
	}
	switch forms[0] {
	case "external data":
		t.external = true
	case "raw_data":
		if int64(len(tp.RawData)) != size {
			return fail("raw_data is %d bytes, want %d for %s shape %v", len(tp.RawData), size, DTypeName(dt), tp.Dims)
		}
	case "float_data":
		switch dt {
		case onnxpb.TensorProto_FLOAT:
			err = count("float_data", len(tp.FloatData), n)
		case onnxpb.TensorProto_COMPLEX64:
			err = count("float_data", len(tp.FloatData), 2*n)
		default:
			return wrongField("float_data")
		}
	case "double_data":
		switch dt {
		case onnxpb.TensorProto_DOUBLE:
			err = count("double_data", len(tp.DoubleData), n)
		case onnxpb.TensorProto_COMPLEX128:
			err = count("double_data", len(tp.DoubleData), 2*n)
		default:
			return wrongField("double_data")
		}
	case "int64_data":
		if dt != onnxpb.TensorProto_INT64 {
			return wrongField("int64_data")
		}
		err = count("int64_data", len(tp.Int64Data), n)
	case "uint64_data":
		switch dt {
		case onnxpb.TensorProto_UINT64:
			err = count("uint64_data", len(tp.Uint64Data), n)
		case onnxpb.TensorProto_UINT32:
			if err = count("uint64_data", len(tp.Uint64Data), n); err == nil {
				for i, v := range tp.Uint64Data {
					if v > math.MaxUint32 {
						return fail("uint64_data[%d] = %d does not fit UINT32", i, v)
					}
				}
			}
		default:
			return wrongField("uint64_data")
		}
	case "int32_data":
		switch dt {
		case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64,
			onnxpb.TensorProto_UINT32, onnxpb.TensorProto_UINT64,
			onnxpb.TensorProto_COMPLEX64, onnxpb.TensorProto_COMPLEX128:
			return wrongField("int32_data")
		}
		bits := elemBits[dt]
		want := n // one element per entry
		if bits < 8 {
			want = size // one packed byte per entry
		}
		if err = count("int32_data", len(tp.Int32Data), want); err == nil && bits < 32 {
			// Accept both the signed and the unsigned reading of the width.
			w := max(bits, 8)
			lo, hi := -int64(1)<<(w-1), int64(1)<<w-1
			for i, v := range tp.Int32Data {
				if int64(v) < lo || int64(v) > hi {
					return fail("int32_data[%d] = %d does not fit a %d-bit %s value", i, v, w, DTypeName(dt))
				}
			}
		}
	case "string_data":
		return wrongField("string_data")
	default:
		return nil, errors.New("unreachable")
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}
