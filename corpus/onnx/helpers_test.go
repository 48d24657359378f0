package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/internal/shareddata"
)

// nodeDir is the ONNX conformance cases folder of the shared data; the test
// skips (or fails under LUMSEARCH_REQUIRE_DATA=1) when it is absent.
func nodeDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(shareddata.Dir(t), "onnx-node")
}

// modelWith builds a model importing opset 21 of the default domain whose
// graph has the given initializers.
func modelWith(inits ...*onnxpb.TensorProto) *onnxpb.ModelProto {
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(21)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("g"),
			Initializer: inits,
		},
	}
}

// marshal serializes m, failing the test on error.
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

// writeModel writes m as dir/model.onnx and returns that path.
func writeModel(t testing.TB, dir string, m *onnxpb.ModelProto) string {
	t.Helper()
	p := filepath.Join(dir, "model.onnx")
	require.NoError(t, os.WriteFile(p, marshal(t, m), 0o644))
	return p
}

// tensor builds a TensorProto with a name, type and shape; the caller sets
// its data.
func tensor(name string, dt onnxpb.TensorProto_DataType, dims ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(dt)), Dims: dims}
}

// external points tp at location with the given keys (offset, length as
// decimal strings; "" leaves a key out).
func external(tp *onnxpb.TensorProto, location, offset, length string) *onnxpb.TensorProto {
	tp.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	tp.ExternalData = []*onnxpb.StringStringEntryProto{kv("location", location)}
	if offset != "" {
		tp.ExternalData = append(tp.ExternalData, kv("offset", offset))
	}
	if length != "" {
		tp.ExternalData = append(tp.ExternalData, kv("length", length))
	}
	return tp
}

// writeFile writes data to dir/name, creating folders.
func writeFile(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, data, 0o644))
}

// seq returns n bytes counting up from start (mod 256).
func seq(start, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(start + i)
	}
	return b
}
