package onnx

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// Integer constants stay exact from the model's bytes to the values the
// interpreter computes: torch.onnx writes 2^63-1 as the end of every open
// slice and -2^63 as the end of a reversed one, and float64 holds neither.

const (
	maxI64  = math.MaxInt64
	minI64  = math.MinInt64
	p53Plus = 1<<53 + 1 // the least positive integer float64 cannot hold
)

// tensorAttr makes a TENSOR attribute.
func tensorAttr(name string, tp *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: tp}
}

// i64Raw makes an INT64 tensor stored as little-endian raw_data, the form
// torch.onnx writes.
func i64Raw(name string, dims []int64, vals ...int64) *onnxpb.TensorProto {
	tp := tensor(name, onnxpb.TensorProto_INT64, dims...)
	tp.RawData = make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(tp.RawData[8*i:], uint64(v))
	}
	return tp
}

// i32Init makes an INT32 initializer.
func i32Init(name string, dims []int64, vals ...int32) *onnxpb.TensorProto {
	tp := tensor(name, onnxpb.TensorProto_INT32, dims...)
	tp.Int32Data = vals
	return tp
}

// constNode is a Constant node whose output out holds an INT64 tensor, as
// torch.onnx writes every index, axis and bound.
func constNode(out string, dims []int64, vals ...int64) *onnxpb.NodeProto {
	return mkNode(out+"_const", "Constant", nil, []string{out}, tensorAttr("value", i64Raw("", dims, vals...)))
}

// runModel imports mp with opt and evaluates the graph on feeds (and the
// imported weights), returning every output by name.
func runModel(t *testing.T, mp *onnxpb.ModelProto, opt ImportOptions, feeds map[string]*ir.Tensor) map[string]*ir.Tensor {
	t.Helper()
	imp, err := Import(parsed(t, mp), opt)
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
	return res.Outputs
}

// intsOf makes an exact integer tensor, failing the test on error.
func intsOf(t *testing.T, dt ir.DType, shape ir.Shape, vals ...int64) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorOfInts(dt, shape, vals...)
	require.NoError(t, err)
	return x
}

// assertInts checks an integer result's type, shape and exact values.
func assertInts(t *testing.T, dt ir.DType, shape ir.Shape, want []int64, got *ir.Tensor) {
	t.Helper()
	require.NotNil(t, got)
	assert.Equal(t, dt, got.DType)
	assert.True(t, shape.Equal(got.Shape), "shape %v, want %v", got.Shape, shape)
	if want == nil {
		want = []int64{}
	}
	assert.Equal(t, want, append([]int64{}, got.Int64s()...))
}

var extremes = []struct {
	name string
	v    int64
}{
	{"2^63-1", maxI64}, {"-(2^63-1)", -maxI64}, {"-2^63", minI64}, {"2^53+1", p53Plus}, {"-(2^53+1)", -p53Plus},
}

// Each way a model states an integer constant keeps it exact.
func TestIntegerConstantsStayExact(t *testing.T) {
	i64 := onnxpb.TensorProto_INT64
	for _, x := range extremes {
		v := x.v
		tests := []struct {
			name  string
			nodes []*onnxpb.NodeProto
			inits []*onnxpb.TensorProto
			shape ir.Shape
			want  []int64
		}{
			{"Constant value", []*onnxpb.NodeProto{constNode("y", []int64{2}, v, 7)}, nil, ir.Shape{2}, []int64{v, 7}},
			{"Constant value_int", []*onnxpb.NodeProto{mkNode("c", "Constant", nil, []string{"y"}, intAttr("value_int", v))}, nil, ir.Shape{}, []int64{v}},
			{"Constant value_ints", []*onnxpb.NodeProto{mkNode("c", "Constant", nil, []string{"y"}, intsAttr("value_ints", v, v))}, nil, ir.Shape{2}, []int64{v, v}},
			{"initializer int64_data", []*onnxpb.NodeProto{mkNode("i", "Identity", []string{"w"}, []string{"y"})},
				[]*onnxpb.TensorProto{i64Init("w", []int64{3}, 1, v, -1)}, ir.Shape{3}, []int64{1, v, -1}},
			{"initializer raw_data", []*onnxpb.NodeProto{mkNode("i", "Identity", []string{"w"}, []string{"y"})},
				[]*onnxpb.TensorProto{i64Raw("w", []int64{3}, v, 0, v)}, ir.Shape{3}, []int64{v, 0, v}},
			{"ConstantOfShape", []*onnxpb.NodeProto{mkNode("f", "ConstantOfShape", []string{"s"}, []string{"y"}, tensorAttr("value", i64Raw("", []int64{1}, v)))},
				[]*onnxpb.TensorProto{i64Init("s", []int64{2}, 2, 3)}, ir.Shape{2, 3}, []int64{v, v, v, v, v, v}},
			{"Concat of constants", []*onnxpb.NodeProto{constNode("a", []int64{1}, v), constNode("b", []int64{2}, 5, v),
				mkNode("cat", "Concat", []string{"a", "b"}, []string{"y"}, intAttr("axis", 0))}, nil, ir.Shape{3}, []int64{v, 5, v}},
			{"Gather of a constant", []*onnxpb.NodeProto{constNode("a", []int64{3}, 4, v, 6), constNode("i", nil, -2),
				mkNode("g", "Gather", []string{"a", "i"}, []string{"y"}, intAttr("axis", 0))}, nil, ir.Shape{}, []int64{v}},
			{"Unsqueeze of a constant", []*onnxpb.NodeProto{constNode("a", nil, v), constNode("ax", []int64{1}, 0),
				mkNode("u", "Unsqueeze", []string{"a", "ax"}, []string{"y"})}, nil, ir.Shape{1}, []int64{v}},
		}
		for _, tt := range tests {
			t.Run(x.name+"/"+tt.name, func(t *testing.T) {
				mp := graphModel(17, tt.nodes, nil, []*onnxpb.ValueInfoProto{valueInfo("y", i64)}, tt.inits...)
				mp.Graph.Output[0].Type.GetTensorType().Shape = nil
				got := runModel(t, mp, ImportOptions{}, nil)
				assertInts(t, ir.I64, tt.shape, tt.want, got["y"])
			})
		}
	}
}

// Integer arithmetic is exact and wraps as two's complement, both when the
// import folds it and when the graph computes it at run time; the two
// agree.
func TestIntegerArithmeticIsExact(t *testing.T) {
	tests := []struct {
		op      string
		dt      ir.DType
		a, b    int64
		want    int64
		wantErr string
	}{
		{"Add", ir.I64, maxI64 - 1, 1, maxI64, ""},
		{"Add", ir.I64, minI64, p53Plus, -9214364837600034815, ""},
		{"Add", ir.I64, maxI64, 1, minI64, ""}, // wraps
		{"Sub", ir.I64, minI64, 1, maxI64, ""}, // wraps
		{"Sub", ir.I64, p53Plus, -p53Plus, 18014398509481986, ""},
		{"Mul", ir.I64, p53Plus, 3, 27021597764222979, ""},
		{"Mul", ir.I64, 1 << 32, 1 << 31, minI64, ""}, // 2^63 wraps
		{"Mul", ir.I64, -maxI64, -1, maxI64, ""},
		{"Div", ir.I64, maxI64, p53Plus, 1023, ""},
		{"Div", ir.I64, minI64, p53Plus, -1023, ""}, // truncates toward zero
		{"Div", ir.I64, -7, 2, -3, ""},
		{"Div", ir.I64, p53Plus, 1, p53Plus, ""},
		{"Div", ir.I64, 5, 0, 0, "division by zero"},
		{"Add", ir.I32, math.MaxInt32, 1, math.MinInt32, ""},
		{"Mul", ir.I32, 1 << 16, 1 << 15, math.MinInt32, ""},
		{"Div", ir.I32, math.MinInt32, 3, -715827882, ""},
	}
	for _, tt := range tests {
		odt := onnxDType(tt.dt)
		init := func(name string, v int64) *onnxpb.TensorProto {
			if tt.dt == ir.I32 {
				return i32Init(name, []int64{1}, int32(v))
			}
			return i64Init(name, []int64{1}, v)
		}
		node := []*onnxpb.NodeProto{mkNode("op", tt.op, []string{"a", "b"}, []string{"y"})}
		out := []*onnxpb.ValueInfoProto{valueInfo("y", odt, 1)}
		t.Run(tt.op+" "+tt.dt.String()+" folded", func(t *testing.T) {
			mp := graphModel(14, node, nil, out, init("a", tt.a), init("b", tt.b))
			if tt.wantErr != "" {
				_, err := Import(parsed(t, mp), ImportOptions{})
				require.Error(t, err)
				assert.Contains(t, err.Error(), `node "op" (`+tt.op+", opset 14)")
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			assertInts(t, tt.dt, ir.Shape{1}, []int64{tt.want}, runModel(t, mp, ImportOptions{}, nil)["y"])
		})
		t.Run(tt.op+" "+tt.dt.String()+" at run time", func(t *testing.T) {
			mp := graphModel(14, node, []*onnxpb.ValueInfoProto{valueInfo("a", odt, 1)}, out, init("b", tt.b))
			imp, err := Import(parsed(t, mp), ImportOptions{})
			require.NoError(t, err)
			feeds := map[string]*ir.Tensor{"a": intsOf(t, tt.dt, ir.Shape{1}, tt.a)}
			res, err := ir.Eval(context.Background(), imp.Graph, feeds, ir.EvalOptions{})
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assertInts(t, tt.dt, ir.Shape{1}, []int64{tt.want}, res.Outputs["y"])
		})
	}
}

// Range over integers is exact, including ranges whose span does not fit
// in an int64.
func TestIntegerRange(t *testing.T) {
	tests := []struct {
		name                string
		dt                  ir.DType
		start, limit, delta int64
		want                []int64
		wantErr             string
	}{
		{"up to 2^63-1", ir.I64, maxI64 - 3, maxI64, 1, []int64{maxI64 - 3, maxI64 - 2, maxI64 - 1}, ""},
		{"up from -2^63", ir.I64, minI64, minI64 + 3, 1, []int64{minI64, minI64 + 1, minI64 + 2}, ""},
		{"across the whole range", ir.I64, maxI64, minI64, -(1 << 62), []int64{maxI64, 1<<62 - 1, -1, -(1 << 62) - 1}, ""},
		{"past 2^53", ir.I64, p53Plus, p53Plus + 3, 2, []int64{p53Plus, p53Plus + 2}, ""},
		{"step does not divide", ir.I64, 0, 10, 3, []int64{0, 3, 6, 9}, ""},
		{"down", ir.I64, 10, 0, -3, []int64{10, 7, 4, 1}, ""},
		{"empty", ir.I64, 5, 5, 1, nil, ""},
		{"wrong direction", ir.I64, 5, 1, 1, nil, ""},
		{"i32 to its greatest", ir.I32, math.MaxInt32 - 2, math.MaxInt32, 1, []int64{math.MaxInt32 - 2, math.MaxInt32 - 1}, ""},
		{"delta 0", ir.I64, 0, 3, 0, nil, "delta 0"},
		{"too long", ir.I64, minI64, maxI64, 1, nil, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scalar := func(name string, v int64) *onnxpb.TensorProto {
				if tt.dt == ir.I32 {
					return i32Init(name, nil, int32(v))
				}
				return i64Init(name, nil, v)
			}
			mp := graphModel(17, []*onnxpb.NodeProto{mkNode("r", "Range", []string{"s", "l", "d"}, []string{"y"})},
				nil, []*onnxpb.ValueInfoProto{valueInfo("y", onnxDType(tt.dt), "n")},
				scalar("s", tt.start), scalar("l", tt.limit), scalar("d", tt.delta))
			if tt.wantErr != "" {
				_, err := Import(parsed(t, mp), ImportOptions{})
				require.Error(t, err)
				assert.Contains(t, err.Error(), `node "r" (Range, opset 17)`)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			got := runModel(t, mp, ImportOptions{}, nil)["y"]
			assertInts(t, tt.dt, ir.Shape{ir.Dim(len(tt.want))}, tt.want, got)
		})
	}
}

// Slice bounds clamp as the ONNX spec says: a negative start or end has
// the extent added once; then, for a positive step, both are clamped to
// [0, extent], and for a negative step the start to [0, extent-1] and the
// end to [-1, extent-1]. The data holds the extremes, so that the sliced
// values are checked exact too.
func TestSliceClampsLikeONNX(t *testing.T) {
	data := []int64{minI64, -p53Plus, 0, p53Plus, maxI64}
	tests := []struct {
		name             string
		start, end, step int64
		want             []int // indices into data, in order
	}{
		{"open end", 2, maxI64, 1, []int{2, 3, 4}},
		{"from the back to the open end", -2, maxI64, 1, []int{3, 4}},
		{"whole axis", 0, maxI64, 1, []int{0, 1, 2, 3, 4}},
		{"-2^63 start", minI64, 2, 1, []int{0, 1}},
		{"start past the end", maxI64, maxI64, 1, nil},
		{"end before start", 3, 1, 1, nil},
		{"x[::-1]", -1, minI64, -1, []int{4, 3, 2, 1, 0}},
		{"reversed from 2^63-1", maxI64, minI64, -1, []int{4, 3, 2, 1, 0}},
		{"reversed by 2", -1, minI64, -2, []int{4, 2, 0}},
		{"reversed by 3 from 2^63-1", maxI64, minI64, -3, []int{4, 1}},
		{"reversed to -(2^63-1)", 3, -maxI64, -1, []int{3, 2, 1, 0}},
		{"reversed, stopping early", 4, 1, -1, []int{4, 3, 2}},
		{"reversed to end -1, the last index", 4, -1, -1, nil},
		{"reversed from the first index", 0, maxI64, -1, nil},
		{"step 2^63-1", 1, 4, maxI64, []int{1}},
		{"step -2^63", 4, 0, minI64, []int{4}},
		{"step 2 over everything", -maxI64, maxI64, 2, []int{0, 2, 4}},
		{"step 3", 1, maxI64, 3, []int{1, 4}},
	}
	i64 := onnxpb.TensorProto_INT64
	for _, tt := range tests {
		want := make([]int64, len(tt.want))
		for i, k := range tt.want {
			want[i] = data[k]
		}
		shape := ir.Shape{ir.Dim(len(want))}
		nodes := []*onnxpb.NodeProto{
			constNode("starts", []int64{1}, tt.start), constNode("ends", []int64{1}, tt.end),
			constNode("axes", []int64{1}, -1), constNode("steps", []int64{1}, tt.step),
			mkNode("s", "Slice", []string{"d", "starts", "ends", "axes", "steps"}, []string{"y"}),
		}
		out := []*onnxpb.ValueInfoProto{valueInfo("y", i64, len(want))}
		t.Run(tt.name+"/folded", func(t *testing.T) {
			mp := graphModel(13, nodes, nil, out, i64Init("d", []int64{5}, data...))
			assertInts(t, ir.I64, shape, want, runModel(t, mp, ImportOptions{}, nil)["y"])
		})
		t.Run(tt.name+"/at run time", func(t *testing.T) {
			mp := graphModel(13, nodes, []*onnxpb.ValueInfoProto{valueInfo("d", i64, 5)}, out)
			got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"d": intsOf(t, ir.I64, ir.Shape{5}, data...)})
			assertInts(t, ir.I64, shape, want, got["y"])
		})
		if tt.step == 1 {
			// Slice-1 takes the bounds as attributes, with no steps.
			t.Run(tt.name+"/Slice-1", func(t *testing.T) {
				mp := graphModel(9, []*onnxpb.NodeProto{mkNode("s", "Slice", []string{"d"}, []string{"y"},
					intsAttr("starts", tt.start), intsAttr("ends", tt.end), intsAttr("axes", 0))},
					[]*onnxpb.ValueInfoProto{valueInfo("d", i64, 5)}, out)
				got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"d": intsOf(t, ir.I64, ir.Shape{5}, data...)})
				assertInts(t, ir.I64, shape, want, got["y"])
			})
		}
	}
}

// Slices of an empty axis are empty whatever the step (a reversed slice
// once took one element of it), several axes slice at once, and a step of
// 0 is refused.
func TestSliceEdges(t *testing.T) {
	f := onnxpb.TensorProto_FLOAT
	slice := func(dims []int64, starts, ends, axes, steps []int64, outDims ...dim) *onnxpb.ModelProto {
		in := make([]dim, len(dims))
		for i, d := range dims {
			in[i] = int(d)
		}
		n := int64(len(starts))
		return graphModel(13, []*onnxpb.NodeProto{
			constNode("starts", []int64{n}, starts...), constNode("ends", []int64{n}, ends...),
			constNode("axes", []int64{n}, axes...), constNode("steps", []int64{n}, steps...),
			mkNode("s", "Slice", []string{"x", "starts", "ends", "axes", "steps"}, []string{"y"}),
		}, []*onnxpb.ValueInfoProto{valueInfo("x", f, in...)}, []*onnxpb.ValueInfoProto{valueInfo("y", f, outDims...)})
	}
	empty, err := ir.TensorOf(ir.F32, ir.Shape{3, 0})
	require.NoError(t, err)
	for _, step := range []int64{-1, 1, minI64, maxI64} {
		mp := slice([]int64{3, 0}, []int64{-1}, []int64{minI64}, []int64{1}, []int64{step}, 3, 0)
		got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"x": empty})["y"]
		assert.Equal(t, ir.Shape{3, 0}, got.Shape, "step %d", step)
	}

	// Rows in order, columns 4, 2, 0.
	xv := make([]float64, 10)
	for i := range xv {
		xv[i] = float64(10 * i)
	}
	x, err := ir.TensorOf(ir.F32, ir.Shape{2, 5}, xv...)
	require.NoError(t, err)
	mp := slice([]int64{2, 5}, []int64{-1, minI64}, []int64{minI64, maxI64}, []int64{-1, 0}, []int64{-2, 1}, 2, 3)
	got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"x": x})["y"]
	assert.Equal(t, []float64{40, 20, 0, 90, 70, 50}, got.Float64s())

	mp = slice([]int64{2, 5}, []int64{0}, []int64{maxI64}, []int64{1}, []int64{0}, 2, 5)
	_, err = Import(parsed(t, mp), ImportOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "s" (Slice, opset 13): step 0 on axis 1`)
}

// CastLike of a known value to the type of a value known only at run time
// is computed at import, exactly between integers and wrapping to i32.
func TestCastLikeOfKnownIntegers(t *testing.T) {
	for _, x := range extremes {
		for _, like := range []ir.DType{ir.I64, ir.I32} {
			t.Run(x.name+" to "+like.String(), func(t *testing.T) {
				mp := graphModel(17, []*onnxpb.NodeProto{
					constNode("a", []int64{2}, x.v, -3),
					mkNode("c", "CastLike", []string{"a", "z"}, []string{"y"}),
				}, []*onnxpb.ValueInfoProto{valueInfo("z", onnxDType(like), 1)}, []*onnxpb.ValueInfoProto{valueInfo("y", onnxDType(like), 2)})
				imp, err := Import(parsed(t, mp), ImportOptions{})
				require.NoError(t, err)
				assert.Equal(t, map[ir.Op]int{ir.OpInput: 1, ir.OpConst: 1}, imp.Graph.OpCounts())
				want := []int64{x.v, -3}
				if like == ir.I32 {
					want[0] = int64(int32(x.v)) // the low 32 bits, two's complement
				}
				got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"z": intsOf(t, like, ir.Shape{1}, 0)})
				assertInts(t, like, ir.Shape{2}, want, got["y"])
			})
		}
	}
}
