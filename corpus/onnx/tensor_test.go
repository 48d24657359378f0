package onnx

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

func TestStorageForms(t *testing.T) {
	type tp = onnxpb.TensorProto
	tests := []struct {
		name   string
		tensor *tp
		files  map[string][]byte // external data files
		want   []byte
	}{
		{"raw_data float", func() *tp {
			x := tensor("w", onnxpb.TensorProto_FLOAT, 2)
			x.RawData = []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}
			return x
		}(), nil, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}},
		{"float_data", func() *tp {
			x := tensor("w", onnxpb.TensorProto_FLOAT, 2, 1)
			x.FloatData = []float32{1, -2.5}
			return x
		}(), nil, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}},
		{"float_data scalar", func() *tp {
			x := tensor("w", onnxpb.TensorProto_FLOAT)
			x.FloatData = []float32{3}
			return x
		}(), nil, []byte{0, 0, 0x40, 0x40}},
		{"int32_data float16 bit patterns", func() *tp {
			x := tensor("w", onnxpb.TensorProto_FLOAT16, 3)
			x.Int32Data = []int32{0x3c00, 0xc000, 0x7bff} // 1, -2, 65504
			return x
		}(), nil, []byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}},
		{"int32_data bfloat16", func() *tp {
			x := tensor("w", onnxpb.TensorProto_BFLOAT16, 2)
			x.Int32Data = []int32{0x3f80, 0xbf80} // 1, -1
			return x
		}(), nil, []byte{0x80, 0x3f, 0x80, 0xbf}},
		{"int32_data bool", func() *tp {
			x := tensor("w", onnxpb.TensorProto_BOOL, 3)
			x.Int32Data = []int32{1, 0, 1}
			return x
		}(), nil, []byte{1, 0, 1}},
		{"int32_data int8", func() *tp {
			x := tensor("w", onnxpb.TensorProto_INT8, 3)
			x.Int32Data = []int32{-1, 127, -128}
			return x
		}(), nil, []byte{0xff, 0x7f, 0x80}},
		{"int32_data uint8", func() *tp {
			x := tensor("w", onnxpb.TensorProto_UINT8, 2)
			x.Int32Data = []int32{255, 7}
			return x
		}(), nil, []byte{0xff, 7}},
		{"int32_data int16 and uint16", func() *tp {
			x := tensor("w", onnxpb.TensorProto_INT16, 2)
			x.Int32Data = []int32{-2, 0x1234}
			return x
		}(), nil, []byte{0xfe, 0xff, 0x34, 0x12}},
		{"int32_data int32", func() *tp {
			x := tensor("w", onnxpb.TensorProto_INT32, 2)
			x.Int32Data = []int32{-2, 0x01020304}
			return x
		}(), nil, []byte{0xfe, 0xff, 0xff, 0xff, 4, 3, 2, 1}},
		{"int32_data float8", func() *tp {
			x := tensor("w", onnxpb.TensorProto_FLOAT8E4M3FN, 2)
			x.Int32Data = []int32{0x38, 0xb8}
			return x
		}(), nil, []byte{0x38, 0xb8}},
		{"int32_data int4 packed two per byte", func() *tp {
			x := tensor("w", onnxpb.TensorProto_INT4, 3) // 1, -1, 7 -> 0xf1, 0x07
			x.Int32Data = []int32{0xf1, 0x07}
			return x
		}(), nil, []byte{0xf1, 0x07}},
		{"raw_data uint2 packed four per byte", func() *tp {
			x := tensor("w", onnxpb.TensorProto_UINT2, 5)
			x.RawData = []byte{0xe4, 0x03}
			return x
		}(), nil, []byte{0xe4, 0x03}},
		{"int64_data", func() *tp {
			x := tensor("w", onnxpb.TensorProto_INT64, 2)
			x.Int64Data = []int64{-1, 2}
			return x
		}(), nil, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0}},
		{"double_data", func() *tp {
			x := tensor("w", onnxpb.TensorProto_DOUBLE, 1)
			x.DoubleData = []float64{1.5}
			return x
		}(), nil, []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x3f}},
		{"uint64_data uint64", func() *tp {
			x := tensor("w", onnxpb.TensorProto_UINT64, 1)
			x.Uint64Data = []uint64{1<<63 | 1}
			return x
		}(), nil, []byte{1, 0, 0, 0, 0, 0, 0, 0x80}},
		{"uint64_data uint32", func() *tp {
			x := tensor("w", onnxpb.TensorProto_UINT32, 2)
			x.Uint64Data = []uint64{math.MaxUint32, 1}
			return x
		}(), nil, []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0}},
		{"empty tensor without data", tensor("w", onnxpb.TensorProto_FLOAT, 0, 3), nil, []byte{}},
		{"external with offset and length",
			external(tensor("w", onnxpb.TensorProto_FLOAT, 2), "w.bin", "3", "8"),
			map[string][]byte{"w.bin": seq(0, 16)}, seq(3, 8)},
		{"external without length runs to end of file",
			external(tensor("w", onnxpb.TensorProto_INT16, 3), "data/w.bin", "10", ""),
			map[string][]byte{"data/w.bin": seq(0, 16)}, seq(10, 6)},
		{"external without offset",
			external(tensor("w", onnxpb.TensorProto_UINT8, 4), "./w.bin", "", "4"),
			map[string][]byte{"w.bin": seq(0, 4)}, seq(0, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				writeFile(t, dir, name, data)
			}
			m, err := Load(writeModel(t, dir, modelWith(tt.tensor)))
			require.NoError(t, err)
			defer func() { require.NoError(t, m.Close()) }()
			require.Len(t, m.Tensors, 1)
			w := m.Tensors["w"]
			require.NotNil(t, w)
			assert.Equal(t, "w", w.Name)
			assert.Equal(t, onnxpb.TensorProto_DataType(tt.tensor.GetDataType()), w.DType)
			assert.Equal(t, tt.tensor.Dims, w.Dims)
			assert.Equal(t, tt.files != nil, w.IsExternal())
			raw, err := w.Raw()
			require.NoError(t, err)
			assert.Equal(t, tt.want, raw)
		})
	}
}

func TestRawRefusesStringAndComplex(t *testing.T) {
	s := tensor("s", onnxpb.TensorProto_STRING, 2)
	s.StringData = [][]byte{[]byte("a"), []byte("b")}
	c := tensor("c", onnxpb.TensorProto_COMPLEX64, 1)
	c.FloatData = []float32{1, 2}
	m, err := Parse(marshal(t, modelWith(s, c)), "")
	require.NoError(t, err)
	_, err = m.Tensors["s"].Raw()
	assert.EqualError(t, err, `parse model: initializer "s": no raw bytes: data type STRING has no fixed element size`)
	_, err = m.Tensors["c"].Raw()
	assert.EqualError(t, err, `parse model: initializer "c": no raw bytes: data type COMPLEX64 is not supported`)

	bad := tensor("s", onnxpb.TensorProto_STRING, 3)
	bad.StringData = [][]byte{[]byte("a")}
	_, err = Parse(marshal(t, modelWith(bad)), "")
	assert.EqualError(t, err, `parse model: initializer "s": string_data has 1 strings for shape [3] (3 elements)`)
}

func TestLoadTensorProtoFile(t *testing.T) {
	dir := t.TempDir()
	good := tensor("x", onnxpb.TensorProto_INT64, 2)
	good.Int64Data = []int64{7, -7}
	writeFile(t, dir, "good.pb", marshal(t, good))
	ten, err := LoadTensorProto(filepath.Join(dir, "good.pb"))
	require.NoError(t, err)
	assert.Equal(t, "x", ten.Name)
	assert.Equal(t, []int64{2}, ten.Dims)
	raw, err := ten.Raw()
	require.NoError(t, err)
	assert.Equal(t, []byte{7, 0, 0, 0, 0, 0, 0, 0, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, raw)

	writeFile(t, dir, "ext.pb", marshal(t, external(tensor("x", onnxpb.TensorProto_FLOAT, 1), "x.bin", "", "")))
	_, err = LoadTensorProto(filepath.Join(dir, "ext.pb"))
	assert.EqualError(t, err, `load `+filepath.Join(dir, "ext.pb")+`: tensor "x": refers to external data, which a standalone tensor file cannot`)

	writeFile(t, dir, "garbage.pb", []byte{0xff, 0xff, 0xff})
	_, err = LoadTensorProto(filepath.Join(dir, "garbage.pb"))
	assert.ErrorContains(t, err, `load `+filepath.Join(dir, "garbage.pb")+`: not a serialized TensorProto: `)

	writeFile(t, dir, "short.pb", marshal(t, withRaw(tensor("x", onnxpb.TensorProto_FLOAT, 2), make([]byte, 4))))
	_, err = LoadTensorProto(filepath.Join(dir, "short.pb"))
	assert.ErrorContains(t, err, `load `+filepath.Join(dir, "short.pb")+`: tensor "x": raw_data is 4 bytes, want 8 for FLOAT shape [2]`)

	_, err = LoadTensorProto(filepath.Join(dir, "missing.pb"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// withRaw sets tp's raw_data.
func withRaw(tp *onnxpb.TensorProto, raw []byte) *onnxpb.TensorProto {
	tp.RawData = raw
	return tp
}
