package onnx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// Graphs in the shape torch.onnx.export gives them: bounds and axes as
// Constant nodes of INT64 raw data, INT64_MAX for every open slice end,
// shape arithmetic on Shape outputs, symbolic dimensions bound at import.

// randF32 makes a float tensor of the given shape with values drawn from
// rng (exact in f32).
func randF32(t *testing.T, rng *rand.Rand, shape ir.Shape) *ir.Tensor {
	t.Helper()
	vals := make([]float64, shape.NumElements())
	for i := range vals {
		vals[i] = float64(float32(rng.NormFloat64()))
	}
	x, err := ir.TensorOf(ir.F32, shape, vals...)
	require.NoError(t, err)
	return x
}

// rotateHalfModel is llama's rotate_half as torch exports it at opset 17:
//
//	x1 = x[..., : x.shape[-1] // 2]
//	x2 = x[..., x.shape[-1] // 2 :]
//	return torch.cat((-x2, x1), dim=-1)
func rotateHalfModel() *onnxpb.ModelProto {
	f := onnxpb.TensorProto_FLOAT
	nodes := []*onnxpb.NodeProto{
		mkNode("/Shape", "Shape", []string{"x"}, []string{"shape"}),
		constNode("last", nil, -1),
		mkNode("/Gather", "Gather", []string{"shape", "last"}, []string{"d"}, intAttr("axis", 0)),
		constNode("two", nil, 2),
		mkNode("/Div", "Div", []string{"d", "two"}, []string{"half"}),
		constNode("zero_axis", []int64{1}, 0),
		mkNode("/Unsqueeze", "Unsqueeze", []string{"half", "zero_axis"}, []string{"half1"}),
		constNode("zero", []int64{1}, 0),
		constNode("axis", []int64{1}, -1),
		constNode("one", []int64{1}, 1),
		mkNode("/Slice", "Slice", []string{"x", "zero", "half1", "axis", "one"}, []string{"x1"}),
		constNode("open_end", []int64{1}, math.MaxInt64),
		mkNode("/Slice_1", "Slice", []string{"x", "half1", "open_end", "axis", "one"}, []string{"x2"}),
		mkNode("/Neg", "Neg", []string{"x2"}, []string{"nx2"}),
		mkNode("/Concat", "Concat", []string{"nx2", "x1"}, []string{"y"}, intAttr("axis", -1)),
	}
	return graphModel(17, nodes,
		[]*onnxpb.ValueInfoProto{valueInfo("x", f, "batch", 2, "seq", "head_dim")},
		[]*onnxpb.ValueInfoProto{valueInfo("y", f, "batch", 2, "seq", "head_dim")})
}

func TestTorchRotateHalf(t *testing.T) {
	mp := rotateHalfModel()
	rng := rand.New(rand.NewPCG(20, 2))
	for _, dims := range []map[string]int64{
		{"batch": 1, "seq": 3, "head_dim": 8},
		{"batch": 2, "seq": 1, "head_dim": 6},
	} {
		t.Run(fmt.Sprint(dims), func(t *testing.T) {
			shape := ir.Shape{ir.Dim(dims["batch"]), 2, ir.Dim(dims["seq"]), ir.Dim(dims["head_dim"])}
			x := randF32(t, rng, shape)
			got := runModel(t, mp, ImportOptions{Dims: dims}, map[string]*ir.Tensor{"x": x})["y"]
			require.Equal(t, shape, got.Shape)
			n := int64(dims["head_dim"])
			h := n / 2
			for r := range x.Len() / n {
				for j := range n {
					var want float64
					if j < h {
						want = -x.At(r*n + j + h)
					} else {
						want = x.At(r*n + j - h)
					}
					require.Equal(t, want, got.At(r*n+j), "row %d element %d", r, j)
				}
			}
		})
	}
}

// kvCacheModel appends this step's keys to the cache as a decoder export
// with dynamic axes does, and derives from the present cache's shape the
// positions of the new keys, a flattened view and the last key:
//
//	present = torch.cat([past_key, key], dim=-2)
//	T, S = present.shape[2], key.shape[2]
//	pos = torch.arange(T - S, T)
//	flat = present.reshape(*present.shape[:2], -1)
//	last = present[:, :, -1:]
//	tail = present.shape[-2:]
func kvCacheModel() *onnxpb.ModelProto {
	f, i64 := onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT64
	nodes := []*onnxpb.NodeProto{
		mkNode("/Concat", "Concat", []string{"past_key", "key"}, []string{"present"}, intAttr("axis", -2)),
		mkNode("/Shape", "Shape", []string{"present"}, []string{"ps"}),
		mkNode("/Shape_1", "Shape", []string{"key"}, []string{"ks"}),
		constNode("two", nil, 2),
		mkNode("/Gather", "Gather", []string{"ps", "two"}, []string{"T"}, intAttr("axis", 0)),
		mkNode("/Gather_1", "Gather", []string{"ks", "two"}, []string{"S"}, intAttr("axis", 0)),
		mkNode("/Sub", "Sub", []string{"T", "S"}, []string{"first"}),
		constNode("one", nil, 1),
		mkNode("/Range", "Range", []string{"first", "T", "one"}, []string{"pos"}),
		constNode("zero1", []int64{1}, 0),
		constNode("two1", []int64{1}, 2),
		mkNode("/Slice", "Slice", []string{"ps", "zero1", "two1"}, []string{"head"}),
		constNode("minus1", []int64{1}, -1),
		mkNode("/Concat_1", "Concat", []string{"head", "minus1"}, []string{"flat_shape"}, intAttr("axis", 0)),
		mkNode("/Reshape", "Reshape", []string{"present", "flat_shape"}, []string{"flat"}),
		constNode("open_end", []int64{1}, math.MaxInt64),
		mkNode("/Slice_1", "Slice", []string{"present", "minus1", "open_end", "two1"}, []string{"last"}),
		constNode("minus2", []int64{1}, -2),
		mkNode("/Slice_2", "Slice", []string{"ps", "minus2", "open_end"}, []string{"tail"}),
	}
	return graphModel(17, nodes,
		[]*onnxpb.ValueInfoProto{valueInfo("past_key", f, "batch", 2, "past", 4), valueInfo("key", f, "batch", 2, "seq", 4)},
		[]*onnxpb.ValueInfoProto{
			valueInfo("present", f, "batch", 2, "total", 4), valueInfo("pos", i64, "seq"),
			valueInfo("flat", f, "batch", 2, "flat"), valueInfo("last", f, "batch", 2, 1, 4), valueInfo("tail", i64, 2),
		})
}

func TestTorchKVCacheConcat(t *testing.T) {
	mp := kvCacheModel()
	rng := rand.New(rand.NewPCG(20, 3))
	for _, dims := range []map[string]int64{
		{"batch": 1, "past": 5, "seq": 1},
		{"batch": 2, "past": 3, "seq": 2},
		{"batch": 1, "past": 0, "seq": 3},
	} {
		t.Run(fmt.Sprint(dims), func(t *testing.T) {
			B, P, S := dims["batch"], dims["past"], dims["seq"]
			T := P + S
			past := randF32(t, rng, ir.Shape{ir.Dim(B), 2, ir.Dim(P), 4})
			key := randF32(t, rng, ir.Shape{ir.Dim(B), 2, ir.Dim(S), 4})
			out := runModel(t, mp, ImportOptions{Dims: dims}, map[string]*ir.Tensor{"past_key": past, "key": key})

			// present[b, h, j, d] is past's row j below P, key's row j-P after.
			want := make([]float64, 0, B*2*T*4)
			for bh := range B * 2 {
				for j := range T {
					for d := range int64(4) {
						if j < P {
							want = append(want, past.At((bh*P+j)*4+d))
						} else {
							want = append(want, key.At((bh*S+j-P)*4+d))
						}
					}
				}
			}
			assert.Equal(t, ir.Shape{ir.Dim(B), 2, ir.Dim(T), 4}, out["present"].Shape)
			assert.Equal(t, want, out["present"].Float64s())
			assert.Equal(t, ir.Shape{ir.Dim(B), 2, ir.Dim(T * 4)}, out["flat"].Shape)
			assert.Equal(t, want, out["flat"].Float64s())

			var last []float64
			for bh := range B * 2 {
				last = append(last, want[(bh*T+T-1)*4:(bh*T+T)*4]...)
			}
			assert.Equal(t, ir.Shape{ir.Dim(B), 2, 1, 4}, out["last"].Shape)
			assert.Equal(t, last, out["last"].Float64s())

			var pos []int64
			for p := P; p < T; p++ {
				pos = append(pos, p)
			}
			assertInts(t, ir.I64, ir.Shape{ir.Dim(S)}, pos, out["pos"])
			assertInts(t, ir.I64, ir.Shape{2}, []int64{T, 4}, out["tail"])
		})
	}
}

// ReduceMax and ReduceMin over an empty axis give the empty fold: -inf and
// +inf for floats, the least and greatest value for integers, false and
// true for bool (opset 20 orders false < true). Folded at import and
// computed at run time alike. ReduceMin of integers holding -2^63 is
// -2^63 (negation would map it to itself).
func TestReduceMaxMinEmptyAxis(t *testing.T) {
	tests := []struct {
		dt       ir.DType
		max, min float64 // as float64: exact for every value here but i64's
		imax     int64
		imin     int64
	}{
		{ir.F32, math.Inf(-1), math.Inf(1), 0, 0},
		{ir.F16, math.Inf(-1), math.Inf(1), 0, 0},
		{ir.I32, 0, 0, math.MinInt32, math.MaxInt32},
		{ir.I64, 0, 0, minI64, maxI64},
		{ir.Bool, 0, 0, 0, 1},
	}
	for _, tt := range tests {
		for _, op := range []string{"ReduceMax", "ReduceMin"} {
			opset := int64(18)
			if tt.dt == ir.Bool {
				opset = 20
			}
			odt := onnxDType(tt.dt)
			nodes := []*onnxpb.NodeProto{
				constNode("axes", []int64{1}, 1),
				mkNode("r", op, []string{"x", "axes"}, []string{"y"}, intAttr("keepdims", 1)),
			}
			out := []*onnxpb.ValueInfoProto{valueInfo("y", odt, 2, 1, 3)}
			check := func(t *testing.T, got *ir.Tensor) {
				require.Equal(t, ir.Shape{2, 1, 3}, got.Shape)
				require.Equal(t, tt.dt, got.DType)
				for i := range got.Len() {
					switch {
					case tt.dt.IsFloat() && op == "ReduceMax":
						assert.Equal(t, tt.max, got.At(i))
					case tt.dt.IsFloat():
						assert.Equal(t, tt.min, got.At(i))
					case op == "ReduceMax":
						assert.Equal(t, tt.imax, got.Int(i))
					default:
						assert.Equal(t, tt.imin, got.Int(i))
					}
				}
			}
			t.Run(op+" "+tt.dt.String()+" at run time", func(t *testing.T) {
				mp := graphModel(opset, nodes, []*onnxpb.ValueInfoProto{valueInfo("x", odt, 2, 0, 3)}, out)
				x := ir.NewTensor(tt.dt, ir.Shape{2, 0, 3})
				check(t, runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"x": x})["y"])
			})
			if !tt.dt.IsFloat() {
				t.Run(op+" "+tt.dt.String()+" folded", func(t *testing.T) {
					init := tensor("x", odt, 2, 0, 3)
					init.RawData = []byte{}
					mp := graphModel(opset, nodes, nil, out, init)
					check(t, runModel(t, mp, ImportOptions{}, nil)["y"])
				})
			}
		}
	}

	// The extremes of i64 in one row, at run time and folded.
	for _, op := range []struct {
		name string
		want int64
	}{{"ReduceMax", maxI64}, {"ReduceMin", minI64}} {
		vals := []int64{0, maxI64, minI64, -1, p53Plus}
		nodes := []*onnxpb.NodeProto{constNode("axes", []int64{1}, 0), mkNode("r", op.name, []string{"x", "axes"}, []string{"y"}, intAttr("keepdims", 0))}
		out := []*onnxpb.ValueInfoProto{valueInfo("y", onnxpb.TensorProto_INT64)}
		mp := graphModel(18, nodes, []*onnxpb.ValueInfoProto{valueInfo("x", onnxpb.TensorProto_INT64, 5)}, out)
		got := runModel(t, mp, ImportOptions{}, map[string]*ir.Tensor{"x": intsOf(t, ir.I64, ir.Shape{5}, vals...)})
		assertInts(t, ir.I64, ir.Shape{}, []int64{op.want}, got["y"])
		mp = graphModel(18, nodes, nil, out, i64Init("x", []int64{5}, vals...))
		assertInts(t, ir.I64, ir.Shape{}, []int64{op.want}, runModel(t, mp, ImportOptions{}, nil)["y"])
	}
}
