package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/internal/shareddata"
)

// FuzzImport parses and imports arbitrary bytes. Nothing may panic, and a
// model that imports must give a graph that checks, with a tensor of the
// declared type for every weight.
func FuzzImport(f *testing.F) {
	if dir, err := shareddata.Locate(); err == nil {
		for _, c := range []string{
			"test_attention_4d_gqa_with_past_and_present", "test_attention_3d_causal_expanded",
			"test_layer_normalization_4d_axis1_expanded", "test_rotary_embedding_interleaved",
			"test_slice_neg_steps", "test_reshape_negative_dim", "test_softmax_axis_0",
			"test_split_variable_parts_2d_opset18", "test_trilu_neg", "test_reduce_mean_keepdims_example",
		} {
			if b, err := os.ReadFile(filepath.Join(dir, "onnx-node", c, "model.onnx")); err == nil {
				f.Add(b)
			}
		}
	}
	fl := onnxpb.TensorProto_FLOAT
	mk := func(mp *onnxpb.ModelProto) {
		b, err := proto.Marshal(mp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	in := []*onnxpb.ValueInfoProto{valueInfo("x", fl, "N", 3, 4)}
	mk(graphModel(13, []*onnxpb.NodeProto{
		mkNode("mm", "MatMul", []string{"x", "w"}, []string{"h"}),
		mkNode("sm", "Softmax", []string{"h"}, []string{"y"}),
	}, in, []*onnxpb.ValueInfoProto{valueInfo("y", fl, "N", 3, 2)}, f32Init("w", []int64{4, 2}, 1, 2, 3, 4, 5, 6, 7, 8)))
	mk(graphModel(13, []*onnxpb.NodeProto{
		mkNode("shape", "Shape", []string{"x"}, []string{"s"}),
		mkNode("g", "Gather", []string{"s", "idx"}, []string{"d0"}, intAttr("axis", 0)),
		mkNode("cat", "Concat", []string{"d0", "minus1"}, []string{"target"}, intAttr("axis", 0)),
		mkNode("r", "Reshape", []string{"x", "target"}, []string{"y"}),
		mkNode("sl", "Slice", []string{"y", "st", "en", "ax", "stp"}, []string{"z"}),
	}, in, []*onnxpb.ValueInfoProto{valueInfo("z", fl)},
		i64Init("idx", []int64{1}, 0), i64Init("minus1", []int64{1}, -1),
		i64Init("st", []int64{1}, -1), i64Init("en", []int64{1}, -100), i64Init("ax", []int64{1}, 1), i64Init("stp", []int64{1}, -2)))
	mk(graphModel(17, []*onnxpb.NodeProto{
		mkNode("ln", "LayerNormalization", []string{"x", "sc"}, []string{"y", "mean"}, intAttr("axis", 1)),
	}, in, []*onnxpb.ValueInfoProto{valueInfo("y", fl, "N", 3, 4)}, f32Init("sc", []int64{4}, 1, 2, 3, 4)))
	mk(graphModel(23, []*onnxpb.NodeProto{
		mkNode("att", "Attention", []string{"x", "x", "x"}, []string{"y"}, intAttr("is_causal", 1), intAttr("q_num_heads", 2), intAttr("kv_num_heads", 1)),
	}, in, []*onnxpb.ValueInfoProto{valueInfo("y", fl)}))
	f.Add([]byte{})
	f.Add([]byte("\x3a\x02\x0a\x00"))

	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data, "")
		if err != nil {
			return
		}
		defer m.Close()
		imp, err := Import(m, ImportOptions{Dims: map[string]int64{"N": 2, "batch": 2, "seq": 3}})
		if err != nil {
			return
		}
		if err := imp.Graph.Check(); err != nil {
			t.Fatalf("imported graph does not check: %v", err)
		}
		for _, v := range imp.Graph.Weights() {
			n := imp.Graph.Node(v)
			w := imp.Weights[n.Name]
			if w == nil || w.DType != n.DType || !w.Shape.Equal(n.Shape) {
				t.Fatalf("weight %q: tensor %v for %s%v", n.Name, w, n.DType, n.Shape)
			}
		}
	})
}
