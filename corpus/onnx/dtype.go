package onnx

import (
	"fmt"
	"math/bits"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

// elemBits is the storage width in bits of one element of each fixed-width
// data type. Types missing here (UNDEFINED, STRING, COMPLEX64, COMPLEX128
// and numbers the schema does not know) have no raw form this package
// handles.
var elemBits = map[onnxpb.TensorProto_DataType]int{
	onnxpb.TensorProto_FLOAT:          32,
	onnxpb.TensorProto_UINT8:          8,
	onnxpb.TensorProto_INT8:           8,
	onnxpb.TensorProto_UINT16:         16,
	onnxpb.TensorProto_INT16:          16,
	onnxpb.TensorProto_INT32:          32,
	onnxpb.TensorProto_INT64:          64,
	onnxpb.TensorProto_BOOL:           8,
	onnxpb.TensorProto_FLOAT16:        16,
	onnxpb.TensorProto_DOUBLE:         64,
	onnxpb.TensorProto_UINT32:         32,
	onnxpb.TensorProto_UINT64:         64,
	onnxpb.TensorProto_BFLOAT16:       16,
	onnxpb.TensorProto_FLOAT8E4M3FN:   8,
	onnxpb.TensorProto_FLOAT8E4M3FNUZ: 8,
	onnxpb.TensorProto_FLOAT8E5M2:     8,
	onnxpb.TensorProto_FLOAT8E5M2FNUZ: 8,
	onnxpb.TensorProto_UINT4:          4,
	onnxpb.TensorProto_INT4:           4,
	onnxpb.TensorProto_FLOAT4E2M1:     4,
	onnxpb.TensorProto_FLOAT8E8M0:     8,
	onnxpb.TensorProto_UINT2:          2,
	onnxpb.TensorProto_INT2:           2,
}

// DTypeName is the schema's name for dt (FLOAT, INT64, ...), or
// "data type N" for a number the schema does not define.
func DTypeName(dt onnxpb.TensorProto_DataType) string {
	if name, ok := onnxpb.TensorProto_DataType_name[int32(dt)]; ok {
		return name
	}
	return fmt.Sprintf("data type %d", int32(dt))
}

// ElemBits is the number of bits one element of dt takes in raw storage:
// 64, 32, 16 or 8 for the byte-sized types, 4 for UINT4, INT4 and
// FLOAT4E2M1, 2 for UINT2 and INT2 (these are packed several to a byte,
// lowest bits first). It is an error for STRING, COMPLEX64, COMPLEX128,
// UNDEFINED and unknown types.
func ElemBits(dt onnxpb.TensorProto_DataType) (int, error) {
	if b, ok := elemBits[dt]; ok {
		return b, nil
	}
	switch dt {
	case onnxpb.TensorProto_STRING:
		return 0, fmt.Errorf("data type STRING has no fixed element size")
	case onnxpb.TensorProto_COMPLEX64, onnxpb.TensorProto_COMPLEX128:
		return 0, fmt.Errorf("data type %s is not supported", DTypeName(dt))
	case onnxpb.TensorProto_UNDEFINED:
		return 0, fmt.Errorf("data type is UNDEFINED")
	}
	return 0, fmt.Errorf("unknown data type %d", int32(dt))
}

// ElemSize is the number of bytes one element of dt takes in raw storage.
// It is an error for the packed sub-byte types (see ElemBits), STRING,
// COMPLEX64, COMPLEX128, UNDEFINED and unknown types.
func ElemSize(dt onnxpb.TensorProto_DataType) (int, error) {
	b, err := ElemBits(dt)
	if err != nil {
		return 0, err
	}
	if b%8 != 0 {
		return 0, fmt.Errorf("data type %s packs %d elements per byte; it has no whole-byte element size", DTypeName(dt), 8/b)
	}
	return b / 8, nil
}

// NumElements is the product of dims, or an error when a dimension is
// negative or the product does not fit in an int64.
func NumElements(dims []int64) (int64, error) {
	n := int64(1)
	for i, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
		var ok bool
		if n, ok = mulInt64(n, d); !ok {
			return 0, fmt.Errorf("shape %v has more than 2^63-1 elements", dims)
		}
	}
	return n, nil
}

// mulInt64 multiplies two non-negative int64 values, reporting false on
// overflow.
func mulInt64(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
