package onnx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

func TestElemSize(t *testing.T) {
	tests := []struct {
		dt   onnxpb.TensorProto_DataType
		size int
		bits int
		err  string
	}{
		{onnxpb.TensorProto_FLOAT, 4, 32, ""},
		{onnxpb.TensorProto_DOUBLE, 8, 64, ""},
		{onnxpb.TensorProto_INT64, 8, 64, ""},
		{onnxpb.TensorProto_UINT64, 8, 64, ""},
		{onnxpb.TensorProto_INT32, 4, 32, ""},
		{onnxpb.TensorProto_UINT32, 4, 32, ""},
		{onnxpb.TensorProto_FLOAT16, 2, 16, ""},
		{onnxpb.TensorProto_BFLOAT16, 2, 16, ""},
		{onnxpb.TensorProto_INT16, 2, 16, ""},
		{onnxpb.TensorProto_UINT16, 2, 16, ""},
		{onnxpb.TensorProto_INT8, 1, 8, ""},
		{onnxpb.TensorProto_UINT8, 1, 8, ""},
		{onnxpb.TensorProto_BOOL, 1, 8, ""},
		{onnxpb.TensorProto_FLOAT8E4M3FN, 1, 8, ""},
		{onnxpb.TensorProto_FLOAT8E4M3FNUZ, 1, 8, ""},
		{onnxpb.TensorProto_FLOAT8E5M2, 1, 8, ""},
		{onnxpb.TensorProto_FLOAT8E5M2FNUZ, 1, 8, ""},
		{onnxpb.TensorProto_FLOAT8E8M0, 1, 8, ""},
		{onnxpb.TensorProto_INT4, 0, 4, "data type INT4 packs 2 elements per byte; it has no whole-byte element size"},
		{onnxpb.TensorProto_UINT4, 0, 4, "data type UINT4 packs 2 elements per byte; it has no whole-byte element size"},
		{onnxpb.TensorProto_FLOAT4E2M1, 0, 4, "data type FLOAT4E2M1 packs 2 elements per byte; it has no whole-byte element size"},
		{onnxpb.TensorProto_INT2, 0, 2, "data type INT2 packs 4 elements per byte; it has no whole-byte element size"},
		{onnxpb.TensorProto_UINT2, 0, 2, "data type UINT2 packs 4 elements per byte; it has no whole-byte element size"},
		{onnxpb.TensorProto_STRING, 0, 0, "data type STRING has no fixed element size"},
		{onnxpb.TensorProto_COMPLEX64, 0, 0, "data type COMPLEX64 is not supported"},
		{onnxpb.TensorProto_COMPLEX128, 0, 0, "data type COMPLEX128 is not supported"},
		{onnxpb.TensorProto_UNDEFINED, 0, 0, "data type is UNDEFINED"},
		{onnxpb.TensorProto_DataType(1000), 0, 0, "unknown data type 1000"},
		{onnxpb.TensorProto_DataType(-1), 0, 0, "unknown data type -1"},
	}
	for _, tt := range tests {
		t.Run(DTypeName(tt.dt), func(t *testing.T) {
			size, err := ElemSize(tt.dt)
			bits, bitsErr := ElemBits(tt.dt)
			if tt.err != "" {
				assert.EqualError(t, err, tt.err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.size, size)
			}
			if tt.bits == 0 {
				assert.Error(t, bitsErr)
			} else {
				require.NoError(t, bitsErr)
				assert.Equal(t, tt.bits, bits)
			}
		})
	}
	// Every data type the schema defines is in the table or refused.
	for v := range onnxpb.TensorProto_DataType_name {
		dt := onnxpb.TensorProto_DataType(v)
		_, err := ElemBits(dt)
		switch dt {
		case onnxpb.TensorProto_UNDEFINED, onnxpb.TensorProto_STRING, onnxpb.TensorProto_COMPLEX64, onnxpb.TensorProto_COMPLEX128:
			assert.Error(t, err, DTypeName(dt))
		default:
			assert.NoError(t, err, DTypeName(dt))
		}
	}
}

func TestNumElements(t *testing.T) {
	n, err := NumElements(nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = NumElements([]int64{2, 0, 1 << 62})
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
	n, err = NumElements([]int64{1 << 31, 1 << 31})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<62), n)
	_, err = NumElements([]int64{1 << 32, 1 << 31})
	assert.EqualError(t, err, "shape [4294967296 2147483648] has more than 2^63-1 elements")
	_, err = NumElements([]int64{3, -1})
	assert.EqualError(t, err, "dimension 1 is negative (-1)")
}
