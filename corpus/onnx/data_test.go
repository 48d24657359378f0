package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

// The expectations below were read from the files independently of this
// package: opsets and graph with `protoc --decode=onnx.ModelProto`, tensor
// values with a hand-written Python wire-format reader and struct.unpack.

func TestLoadConformanceModels(t *testing.T) {
	dir := nodeDir(t)
	tests := []struct {
		name    string
		ir      int64
		opset   int64
		op      string
		inputs  []string
		outputs []string
	}{
		{"test_add", 7, 14, "Add", []string{"x", "y"}, []string{"sum"}},
		{"test_matmul_2d", 7, 13, "MatMul", []string{"a", "b"}, []string{"c"}},
		{"test_and_bcast3v1d", 3, 7, "And", []string{"x", "y"}, []string{"and"}},
		{"test_max_float16", 7, 13, "Max", []string{"data_0", "data_1"}, []string{"result"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Load(filepath.Join(dir, tt.name, "model.onnx"))
			require.NoError(t, err)
			defer func() { require.NoError(t, m.Close()) }()
			assert.Equal(t, tt.ir, m.Proto.GetIrVersion())
			assert.Equal(t, map[string]int64{"": tt.opset}, m.Opsets)
			assert.Empty(t, m.Tensors, "conformance models keep their data in test_data_set files")
			g := m.Proto.GetGraph()
			require.Len(t, g.Node, 1)
			assert.Equal(t, tt.op, g.Node[0].GetOpType())
			var ins, outs []string
			for _, v := range g.Input {
				ins = append(ins, v.GetName())
			}
			for _, v := range g.Output {
				outs = append(outs, v.GetName())
			}
			assert.Equal(t, tt.inputs, ins)
			assert.Equal(t, tt.outputs, outs)
		})
	}
}

// decodeF32 reads little-endian float32 values.
func decodeF32(t *testing.T, raw []byte) []float64 {
	t.Helper()
	require.Zero(t, len(raw)%4)
	out := make([]float64, len(raw)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return out
}

func TestLoadConformanceTensors(t *testing.T) {
	dir := nodeDir(t)
	tests := []struct {
		file  string
		name  string
		dtype onnxpb.TensorProto_DataType
		dims  []int64
		first []float64 // float32 values, or nil
		sum   float64   // of the float32 values
		bytes []byte    // the whole raw form, or nil
	}{
		{file: "test_add/test_data_set_0/input_0.pb", name: "x", dtype: onnxpb.TensorProto_FLOAT, dims: []int64{3, 4, 5},
			first: []float64{1.764052391052246, 0.40015721321105957, 0.978738009929657}, sum: 4.600037792697549},
		{file: "test_add/test_data_set_0/input_1.pb", name: "y", dtype: onnxpb.TensorProto_FLOAT, dims: []int64{3, 4, 5},
			first: []float64{-0.6724604368209839, -0.35955315828323364, -0.8131462931632996}, sum: 11.31337186973542},
		{file: "test_matmul_2d/test_data_set_0/input_1.pb", name: "b", dtype: onnxpb.TensorProto_FLOAT, dims: []int64{4, 3},
			first: []float64{0.7610377073287964, 0.12167501449584961, 0.44386324286460876}, sum: 0.6310431361198425},
		{file: "test_matmul_2d/test_data_set_0/output_0.pb", name: "c", dtype: onnxpb.TensorProto_FLOAT, dims: []int64{3, 3},
			first: []float64{3.2471330165863037, 1.9136807918548584, -3.4609181880950928}, sum: 0.7465895414352417},
		// Five bools, one byte each: 0 0 0 0 1.
		{file: "test_and_bcast3v1d/test_data_set_0/input_1.pb", name: "y", dtype: onnxpb.TensorProto_BOOL, dims: []int64{5},
			bytes: []byte{0, 0, 0, 0, 1}},
		// float16 3, 2, 1 as bit patterns 0x4200, 0x4000, 0x3c00.
		{file: "test_max_float16/test_data_set_0/input_0.pb", name: "data_0", dtype: onnxpb.TensorProto_FLOAT16, dims: []int64{3},
			bytes: []byte{0x00, 0x42, 0x00, 0x40, 0x00, 0x3c}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ten, err := LoadTensorProto(filepath.Join(dir, tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.name, ten.Name)
			assert.Equal(t, tt.dtype, ten.DType)
			assert.Equal(t, tt.dims, ten.Dims)
			raw, err := ten.Raw()
			require.NoError(t, err)
			if tt.bytes != nil {
				assert.Equal(t, tt.bytes, raw)
			}
			if tt.first != nil {
				vals := decodeF32(t, raw)
				require.Len(t, vals, int(ten.NumElements()))
				assert.Equal(t, tt.first, vals[:len(tt.first)])
				sum := 0.0
				for _, v := range vals {
					sum += v
				}
				assert.InDelta(t, tt.sum, sum, 1e-9)
			}
		})
	}
}

// The conformance outputs follow from the inputs: x+y exactly in float32,
// a@b to float32 rounding.
func TestConformanceOutputsFollowFromInputs(t *testing.T) {
	dir := nodeDir(t)
	load := func(rel string) []float64 {
		ten, err := LoadTensorProto(filepath.Join(dir, rel))
		require.NoError(t, err)
		raw, err := ten.Raw()
		require.NoError(t, err)
		return decodeF32(t, raw)
	}
	x, y, sum := load("test_add/test_data_set_0/input_0.pb"), load("test_add/test_data_set_0/input_1.pb"), load("test_add/test_data_set_0/output_0.pb")
	require.Len(t, sum, 60)
	for i := range sum {
		assert.Equal(t, float32(sum[i]), float32(x[i])+float32(y[i]), "element %d", i)
	}
	a, b, c := load("test_matmul_2d/test_data_set_0/input_0.pb"), load("test_matmul_2d/test_data_set_0/input_1.pb"), load("test_matmul_2d/test_data_set_0/output_0.pb")
	require.Len(t, c, 9)
	for i := range 3 {
		for j := range 3 {
			want := 0.0
			for k := range 4 {
				want += a[4*i+k] * b[3*k+j]
			}
			assert.InDelta(t, want, c[3*i+j], 1e-5, "c[%d,%d]", i, j)
		}
	}
}

// Every conformance model loads, and every test data file of a tensor-typed
// graph input or output loads with the declared element type and static
// dimensions. Files of sequence- or optional-typed values hold a
// SequenceProto or OptionalProto, which LoadTensorProto refuses.
func TestLoadAllConformanceCases(t *testing.T) {
	dir := nodeDir(t)
	cases, err := os.ReadDir(dir)
	require.NoError(t, err)
	loaded, refused := 0, 0
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		m, err := Load(filepath.Join(dir, c.Name(), "model.onnx"))
		if !assert.NoError(t, err) {
			continue
		}
		g := m.Proto.GetGraph()
		sets, err := filepath.Glob(filepath.Join(dir, c.Name(), "test_data_set_*"))
		require.NoError(t, err)
		for _, set := range sets {
			for _, kind := range []string{"input", "output"} {
				vis := g.Input
				if kind == "output" {
					vis = g.Output
				}
				files, err := filepath.Glob(filepath.Join(set, kind+"_*.pb"))
				require.NoError(t, err)
				for _, f := range files {
					i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), kind+"_"), ".pb"))
					require.NoError(t, err, f)
					require.Less(t, i, len(vis), f)
					tt := vis[i].GetType().GetTensorType()
					ten, err := LoadTensorProto(f)
					if tt == nil {
						assert.Error(t, err, "%s holds a %v value", f, vis[i].GetType())
						refused++
						continue
					}
					if !assert.NoError(t, err) {
						continue
					}
					loaded++
					assert.Equal(t, tt.GetElemType(), int32(ten.DType), f)
					if dims := tt.GetShape().GetDim(); len(dims) == len(ten.Dims) {
						for d, dim := range dims {
							if v, ok := dim.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
								assert.Equal(t, v.DimValue, ten.Dims[d], "%s dim %d", f, d)
							}
						}
					} else if tt.GetShape() != nil {
						t.Errorf("%s: rank %d, graph declares %d", f, len(ten.Dims), len(dims))
					}
					if _, err := ElemBits(ten.DType); err == nil {
						raw, err := ten.Raw()
						require.NoError(t, err, f)
						bits, _ := ElemBits(ten.DType)
						assert.Equal(t, (ten.NumElements()*int64(bits)+7)/8, int64(len(raw)), f)
					}
				}
			}
		}
		require.NoError(t, m.Close())
	}
	t.Logf("%d cases, %d tensor files loaded, %d sequence/optional files refused", len(cases), loaded, refused)
	assert.Greater(t, loaded, 2000)
}

// A real model whose graph input becomes an initializer, stored in an
// external file behind a page of padding, and as raw_data: both read back
// the bytes of the conformance data file.
func TestRealInitializerExternalAndInline(t *testing.T) {
	data := nodeDir(t)
	src, err := os.ReadFile(filepath.Join(data, "test_matmul_2d", "model.onnx"))
	require.NoError(t, err)
	b, err := LoadTensorProto(filepath.Join(data, "test_matmul_2d", "test_data_set_0", "input_1.pb"))
	require.NoError(t, err)
	want, err := b.Raw()
	require.NoError(t, err)

	for _, ext := range []bool{true, false} {
		t.Run(fmt.Sprintf("external=%v", ext), func(t *testing.T) {
			mp := new(onnxpb.ModelProto)
			require.NoError(t, proto.Unmarshal(src, mp))
			init := proto.Clone(b.Proto).(*onnxpb.TensorProto)
			dir := t.TempDir()
			if ext {
				init.RawData = nil
				external(init, "weights/b.bin", "4096", strconv.Itoa(len(want)))
				writeFile(t, dir, "weights/b.bin", append(make([]byte, 4096), want...))
			}
			mp.Graph.Initializer = append(mp.Graph.Initializer, init)
			m, err := Load(writeModel(t, dir, mp))
			require.NoError(t, err)
			defer m.Close()
			require.Contains(t, m.Tensors, "b")
			got := m.Tensors["b"]
			assert.Equal(t, ext, got.IsExternal())
			assert.Equal(t, []int64{4, 3}, got.Dims)
			raw, err := got.Raw()
			require.NoError(t, err)
			assert.Equal(t, want, raw)
		})
	}
}
