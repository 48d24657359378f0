package onnx

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// Builders of small models for the tests.

// dim is an extent (int) or a symbolic dimension's name (string).
type dim = any

// valueInfo declares a tensor value.
func valueInfo(name string, dt onnxpb.TensorProto_DataType, dims ...dim) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	return &onnxpb.ValueInfoProto{
		Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(int32(dt)),
			Shape:    shape,
		}}},
	}
}

// mkNode makes a node of the default domain.
func mkNode(name, op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func stringAttr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// graphModel makes a model of one graph at the given default-domain opset.
func graphModel(opset int64, nodes []*onnxpb.NodeProto, ins, outs []*onnxpb.ValueInfoProto, inits ...*onnxpb.TensorProto) *onnxpb.ModelProto {
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("g"),
			Node:        nodes,
			Input:       ins,
			Output:      outs,
			Initializer: inits,
		},
	}
}

// parsed serializes and parses mp.
func parsed(t *testing.T, mp *onnxpb.ModelProto) *Model {
	t.Helper()
	m, err := Parse(marshal(t, mp), "")
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// f32Init makes a FLOAT initializer stored as raw data.
func f32Init(name string, dims []int64, vals ...float32) *onnxpb.TensorProto {
	tp := tensor(name, onnxpb.TensorProto_FLOAT, dims...)
	tp.RawData = make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(tp.RawData[4*i:], math.Float32bits(v))
	}
	return tp
}

// i64Init makes an INT64 initializer.
func i64Init(name string, dims []int64, vals ...int64) *onnxpb.TensorProto {
	tp := tensor(name, onnxpb.TensorProto_INT64, dims...)
	tp.Int64Data = vals
	return tp
}

// evalOne imports m and evaluates it on feeds, returning output name.
func evalOne(t *testing.T, m *Model, feeds map[string]*ir.Tensor, name string) *ir.Tensor {
	t.Helper()
	imp, err := Import(m, ImportOptions{})
	require.NoError(t, err)
	all := map[string]*ir.Tensor{}
	for k, v := range imp.Weights {
		all[k] = v
	}
	for k, v := range feeds {
		all[k] = v
	}
	res, err := ir.Eval(context.Background(), imp.Graph, all, ir.EvalOptions{})
	require.NoError(t, err)
	return res.Outputs[name]
}

func iota32(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i%7) - 2.5
	}
	return out
}

func TestImportBindsSymbolicDims(t *testing.T) {
	mp := graphModel(13,
		[]*onnxpb.NodeProto{mkNode("relu", "Relu", []string{"x"}, []string{"y"})},
		[]*onnxpb.ValueInfoProto{valueInfo("x", onnxpb.TensorProto_FLOAT, "batch", 4)},
		[]*onnxpb.ValueInfoProto{valueInfo("y", onnxpb.TensorProto_FLOAT, "batch", 4)})
	m := parsed(t, mp)
	tests := []struct {
		name    string
		dims    map[string]int64
		wantErr []string
		want    ir.Shape
	}{
		{"unbound", nil, []string{`input "x"`, "axis 0", `"batch"`, "--dim batch=VALUE"}, nil},
		{"other name bound", map[string]int64{"seq": 3}, []string{`"batch"`, "--dim batch=VALUE"}, nil},
		{"negative", map[string]int64{"batch": -1}, []string{`input "x"`, "negative"}, nil},
		{"bound", map[string]int64{"batch": 3}, nil, ir.Shape{3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			imp, err := Import(m, ImportOptions{Dims: tt.dims})
			if tt.wantErr != nil {
				require.Error(t, err)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			in := imp.Graph.Inputs()
			require.Len(t, in, 1)
			n := imp.Graph.Node(in[0])
			assert.Equal(t, "x", n.Name)
			assert.Equal(t, tt.want, n.Shape)
			assert.Equal(t, tt.want, imp.Graph.Node(imp.Graph.Outputs[0].Value).Shape)
		})
	}
}

func TestImportUnsupportedDType(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	d := onnxpb.TensorProto_DOUBLE
	dInit := tensor("w", d, 2)
	dInit.DoubleData = []float64{1, 2}
	tests := []struct {
		name string
		mp   *onnxpb.ModelProto
		want string
	}{
		{"input", graphModel(13,
			[]*onnxpb.NodeProto{mkNode("add_1", "Add", []string{"x", "x"}, []string{"y"})},
			[]*onnxpb.ValueInfoProto{valueInfo("x", d, 2)}, []*onnxpb.ValueInfoProto{valueInfo("y", d, 2)}),
			`node "add_1" (Add, opset 13): input "x" has unsupported dtype DOUBLE`},
		{"initializer", graphModel(13,
			[]*onnxpb.NodeProto{mkNode("add_1", "Add", []string{"w", "w"}, []string{"y"})},
			nil, []*onnxpb.ValueInfoProto{valueInfo("y", d, 2)}, dInit),
			`node "add_1" (Add, opset 13): initializer "w" has unsupported dtype DOUBLE`},
		{"cast target", graphModel(13,
			[]*onnxpb.NodeProto{mkNode("c", "Cast", []string{"x"}, []string{"y"}, intAttr("to", int64(d)))},
			[]*onnxpb.ValueInfoProto{valueInfo("x", f, 2)}, []*onnxpb.ValueInfoProto{valueInfo("y", d, 2)}),
			`node "c" (Cast, opset 13): unsupported dtype DOUBLE`},
		{"int8 input", graphModel(14,
			[]*onnxpb.NodeProto{mkNode("", "Neg", []string{"x"}, []string{"y"})},
			[]*onnxpb.ValueInfoProto{valueInfo("x", onnxpb.TensorProto_INT8, 2)}, []*onnxpb.ValueInfoProto{valueInfo("y", onnxpb.TensorProto_INT8, 2)}),
			`node "y" (Neg, opset 14): input "x" has unsupported dtype INT8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Import(parsed(t, tt.mp), ImportOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.ErrorIs(t, err, ErrUnsupported)
			var ne *NodeError
			assert.True(t, errors.As(err, &ne))
		})
	}
}

func TestVersionInEffect(t *testing.T) {
	tests := []struct {
		op    string
		opset int64
		want  int64
		ok    bool
	}{
		{"Softmax", 1, 1, true},
		{"Softmax", 12, 11, true},
		{"Softmax", 13, 13, true},
		{"Softmax", 27, 13, true},
		{"Reshape", 26, 25, true},
		{"Attention", 22, 0, false},
		{"Attention", 23, 23, true},
		{"NoSuchOp", 13, 0, false},
	}
	for _, tt := range tests {
		got, ok := versionInEffect(tt.op, tt.opset)
		assert.Equal(t, tt.ok, ok, "%s at %d", tt.op, tt.opset)
		assert.Equal(t, tt.want, got, "%s at %d", tt.op, tt.opset)
	}
}

// Every registered operator has its versions in the table, and implements
// only versions the table lists.
func TestHandlerVersionsAreKnown(t *testing.T) {
	for op, vs := range sinceVersions {
		assert.True(t, slices.IsSorted(vs), op)
		assert.Equal(t, len(vs), len(slices.Compact(slices.Clone(vs))), op)
	}
	for op, def := range handlers {
		since, ok := sinceVersions[op]
		if assert.True(t, ok, "%s has no since_versions", op) {
			for _, v := range def.impl {
				assert.Contains(t, since, v, "%s-%d is not a version of %s", op, v, op)
			}
		}
	}
}

// softmaxRows is softmax over consecutive groups of n values.
func softmaxRows(x []float64, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += n {
		mx := math.Inf(-1)
		for _, v := range x[r : r+n] {
			mx = math.Max(mx, v)
		}
		s := 0.0
		for j := range n {
			out[r+j] = math.Exp(x[r+j] - mx)
			s += out[r+j]
		}
		for j := range n {
			out[r+j] /= s
		}
	}
	return out
}

// The same operator at two opsets means different things.
func TestVersionDispatch(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	xv := iota32(24)
	x, err := ir.TensorOf(ir.F32, ir.Shape{2, 3, 4}, xv...)
	require.NoError(t, err)
	in := []*onnxpb.ValueInfoProto{valueInfo("x", f, 2, 3, 4)}
	out := func(dims ...dim) []*onnxpb.ValueInfoProto {
		return []*onnxpb.ValueInfoProto{valueInfo("y", f, dims...)}
	}
	sum := func(axis int) []float64 {
		// Sums over axis of [2,3,4] keeping it.
		s := ir.Shape{2, 3, 4}
		st := s.Strides()
		var res []float64
		outShape := s.Clone()
		outShape[axis] = 1
		for i := range outShape.NumElements() {
			idx := make([]int64, 3)
			r := i
			for d := 2; d >= 0; d-- {
				idx[d] = r % int64(outShape[d])
				r /= int64(outShape[d])
			}
			acc := 0.0
			for k := range int64(s[axis]) {
				j := idx[0]*st[0] + idx[1]*st[1] + idx[2]*st[2] + k*st[axis]
				acc += xv[j]
			}
			res = append(res, acc)
		}
		return res
	}
	tests := []struct {
		name string
		mp   *onnxpb.ModelProto
		want []float64
	}{
		{"Softmax-11 coerces to 2-D at axis 1", graphModel(11,
			[]*onnxpb.NodeProto{mkNode("s", "Softmax", []string{"x"}, []string{"y"})}, in, out(2, 3, 4)),
			softmaxRows(xv, 12)},
		{"Softmax-13 normalizes the last axis", graphModel(13,
			[]*onnxpb.NodeProto{mkNode("s", "Softmax", []string{"x"}, []string{"y"})}, in, out(2, 3, 4)),
			softmaxRows(xv, 4)},
		{"ReduceSum-11 takes axes as an attribute", graphModel(11,
			[]*onnxpb.NodeProto{mkNode("r", "ReduceSum", []string{"x"}, []string{"y"}, intsAttr("axes", 1))}, in, out(2, 1, 4)),
			sum(1)},
		{"ReduceSum-13 takes axes as an input", graphModel(13,
			[]*onnxpb.NodeProto{mkNode("r", "ReduceSum", []string{"x", "axes"}, []string{"y"})}, in, out(2, 3, 1),
			i64Init("axes", []int64{1}, -1)),
			sum(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := evalOne(t, parsed(t, tt.mp), map[string]*ir.Tensor{"x": x}, "y")
			require.Equal(t, int64(len(tt.want)), got.Len())
			for i, w := range tt.want {
				assert.InDelta(t, w, got.At(int64(i)), 1e-12, "element %d", i)
			}
		})
	}

	// ReduceSum-13 has no axes attribute: a model that sets one is refused,
	// not silently reduced over every axis.
	mp := graphModel(13, []*onnxpb.NodeProto{mkNode("r", "ReduceSum", []string{"x"}, []string{"y"}, intsAttr("axes", 1))}, in, out(2, 1, 4))
	_, err = Import(parsed(t, mp), ImportOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "r" (ReduceSum, opset 13): attribute "axes" is not supported`)
	assert.ErrorIs(t, err, ErrUnsupported)
}

func TestImportErrorsNameTheNode(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	in := []*onnxpb.ValueInfoProto{valueInfo("x", f, 2)}
	out := []*onnxpb.ValueInfoProto{valueInfo("y", f, 2)}
	custom := mkNode("n1", "FancyOp", []string{"x"}, []string{"y"})
	custom.Domain = proto.String("com.example")
	tests := []struct {
		name        string
		opset       int64
		node        *onnxpb.NodeProto
		want        string
		unsupported bool
	}{
		{"unknown op", 13, mkNode("n1", "FancyOp", []string{"x"}, []string{"y"}), `node "n1" (FancyOp, opset 13): operator FancyOp is not supported`, true},
		{"other domain", 13, custom, `node "n1" (com.example.FancyOp, opset 0): operators of domain "com.example" are not supported`, true},
		{"version not implemented", 6, mkNode("add_1", "Add", []string{"x", "x"}, []string{"y"}), `node "add_1" (Add, opset 6): Add-6, the version in effect at opset 6, is not implemented (implemented: Add-7, Add-13, Add-14)`, true},
		{"attribute value", 20, mkNode("g", "Gelu", []string{"x"}, []string{"y"}, stringAttr("approximate", "fast")), `node "g" (Gelu, opset 20): approximate = "fast" is not supported`, true},
		{"op too new for the opset", 13, mkNode("g", "Gelu", []string{"x"}, []string{"y"}), `node "g" (Gelu, opset 13): operator Gelu does not exist at opset 13`, false},
		{"undefined input", 13, mkNode("r", "Relu", []string{"z"}, []string{"y"}), `node "r" (Relu, opset 13): input 0 ("z") is not defined before the node`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Import(parsed(t, graphModel(tt.opset, []*onnxpb.NodeProto{tt.node}, in, out)), ImportOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, tt.unsupported, errors.Is(err, ErrUnsupported))
			var ne *NodeError
			assert.True(t, errors.As(err, &ne))
		})
	}
}

// Shapes computed from Shape nodes fold into a static reshape; a value
// needed at import time that only a run knows is refused with
// ErrNotConstant, and ImportOptions.Constants supplies it.
func TestImportFoldsShapesAndBindsConstants(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	nodes := []*onnxpb.NodeProto{
		mkNode("shape", "Shape", []string{"x"}, []string{"s"}),
		mkNode("g", "Gather", []string{"s", "idx"}, []string{"d0"}, intAttr("axis", 0)),
		mkNode("cat", "Concat", []string{"d0", "minus1"}, []string{"target"}, intAttr("axis", 0)),
		mkNode("r", "Reshape", []string{"x", "target"}, []string{"y"}),
	}
	mp := graphModel(14, nodes,
		[]*onnxpb.ValueInfoProto{valueInfo("x", f, 2, 3, 4)},
		[]*onnxpb.ValueInfoProto{valueInfo("y", f, 2, 12)},
		i64Init("idx", []int64{1}, 0), i64Init("minus1", []int64{1}, -1))
	imp, err := Import(parsed(t, mp), ImportOptions{})
	require.NoError(t, err)
	counts := imp.Graph.OpCounts()
	assert.Equal(t, map[ir.Op]int{ir.OpInput: 1, ir.OpReshape: 1}, counts)

	// The shape as an input: refused, then bound.
	mp = graphModel(14, []*onnxpb.NodeProto{mkNode("r", "Reshape", []string{"x", "shape"}, []string{"y"})},
		[]*onnxpb.ValueInfoProto{valueInfo("x", f, 2, 3, 4), valueInfo("shape", onnxpb.TensorProto_INT64, 2)},
		[]*onnxpb.ValueInfoProto{valueInfo("y", f, 6, 4)})
	m := parsed(t, mp)
	_, err = Import(m, ImportOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotConstant)
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), `node "r" (Reshape, opset 14): input 1 ("shape") must be a constant known at import time`)
	shape, err := ir.TensorOf(ir.I64, ir.Shape{2}, 6, -1)
	require.NoError(t, err)
	imp, err = Import(m, ImportOptions{Constants: map[string]*ir.Tensor{"shape": shape}})
	require.NoError(t, err)
	assert.Len(t, imp.Graph.Inputs(), 1)
	bad, err := ir.TensorOf(ir.I64, ir.Shape{3}, 6, -1, 1)
	require.NoError(t, err)
	_, err = Import(m, ImportOptions{Constants: map[string]*ir.Tensor{"shape": bad}})
	assert.ErrorContains(t, err, `input "shape" has extent 2 on axis 0`)
}

// A FLOAT weight's storage is the model's bytes, for raw_data and for a
// memory-mapped external data file alike.
func TestWeightsAliasModelBytes(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	nodes := []*onnxpb.NodeProto{mkNode("mm", "MatMul", []string{"x", "w"}, []string{"y"})}
	in := []*onnxpb.ValueInfoProto{valueInfo("x", f, 1, 2)}
	out := []*onnxpb.ValueInfoProto{valueInfo("y", f, 1, 2)}
	check := func(t *testing.T, m *Model) {
		imp, err := Import(m, ImportOptions{})
		require.NoError(t, err)
		w := imp.Weights["w"]
		require.NotNil(t, w)
		raw, err := m.Tensors["w"].Raw()
		require.NoError(t, err)
		require.Len(t, w.F32, 4)
		assert.Equal(t, unsafe.Pointer(&raw[0]), unsafe.Pointer(&w.F32[0]), "the weight is a copy")
		assert.Equal(t, []float32{1, 2, 3, 4}, w.F32)
		x, err := ir.TensorOf(ir.F32, ir.Shape{1, 2}, 1, 1)
		require.NoError(t, err)
		res, err := ir.Eval(context.Background(), imp.Graph, map[string]*ir.Tensor{"x": x, "w": w}, ir.EvalOptions{})
		require.NoError(t, err)
		assert.Equal(t, []float64{4, 6}, res.Outputs["y"].Float64s())
	}
	t.Run("raw_data", func(t *testing.T) {
		check(t, parsed(t, graphModel(13, nodes, in, out, f32Init("w", []int64{2, 2}, 1, 2, 3, 4))))
	})
	t.Run("external", func(t *testing.T) {
		dir := t.TempDir()
		data := make([]byte, 0, 16)
		for _, v := range []float32{1, 2, 3, 4} {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
		}
		writeFile(t, dir, "w.bin", data)
		path := writeModel(t, dir, graphModel(13, nodes, in, out, external(tensor("w", f, 2, 2), "w.bin", "0", "16")))
		m, err := Load(path)
		require.NoError(t, err)
		defer m.Close()
		require.True(t, m.Tensors["w"].IsExternal())
		check(t, m)
	})
}

// Integer initializers are constants; the unused ones are pruned.
func TestImportInitializers(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	h := tensor("h", onnxpb.TensorProto_FLOAT16, 2)
	h.Int32Data = []int32{0x3c00, 0xc000} // 1, -2
	mp := graphModel(13,
		[]*onnxpb.NodeProto{
			mkNode("c", "Cast", []string{"h"}, []string{"hf"}, intAttr("to", int64(f))),
			mkNode("a", "Add", []string{"x", "hf"}, []string{"y"}),
		},
		[]*onnxpb.ValueInfoProto{valueInfo("x", f, 2)},
		[]*onnxpb.ValueInfoProto{valueInfo("y", f, 2)},
		h, f32Init("unused", []int64{1}, 5), i64Init("also_unused", []int64{1}, 5))
	m := parsed(t, mp)
	imp, err := Import(m, ImportOptions{})
	require.NoError(t, err)
	assert.Len(t, imp.Weights, 1)
	assert.Equal(t, ir.F16, imp.Weights["h"].DType)
	assert.Equal(t, []float32{1, -2}, imp.Weights["h"].F32)
	x, err := ir.TensorOf(ir.F32, ir.Shape{2}, 10, 20)
	require.NoError(t, err)
	assert.Equal(t, []float64{11, 18}, evalOne(t, m, map[string]*ir.Tensor{"x": x}, "y").Float64s())
}

func TestF16ToF32(t *testing.T) {
	tests := []struct {
		bits uint16
		want float32
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 0x1p-24}, {0x8001, -0x1p-24},
		{0x0000, 0}, {0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))}, {0x3555, 0.33325195},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, f16ToF32(tt.bits), "%#04x", tt.bits)
	}
	assert.True(t, math.IsNaN(float64(f16ToF32(0x7e00))))
}
