package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/internal/shareddata"
)

// FuzzParse feeds arbitrary bytes to Parse, with a folder holding a small
// external data file w.bin that seeds refer to, and to the TensorProto
// checks. Nothing may panic, and whatever loads must give Raw bytes of the
// size its shape calls for.
func FuzzParse(f *testing.F) {
	// Real models, when the shared data is there (the fuzz target must run
	// without it too, so no skip).
	if dir, err := shareddata.Locate(); err == nil {
		for _, c := range []string{"test_add", "test_matmul_2d", "test_and_bcast3v1d", "test_max_float16"} {
			if b, err := os.ReadFile(filepath.Join(dir, "onnx-node", c, "model.onnx")); err == nil {
				f.Add(b)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "onnx-node", c, "test_data_set_0", "input_0.pb")); err == nil {
				f.Add(b)
			}
		}
	}
	// Synthetic models covering every storage form.
	mk := func(tp *onnxpb.TensorProto) []byte {
		b, err := proto.Marshal(modelWith(tp))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	raw := tensor("r", onnxpb.TensorProto_FLOAT, 2)
	raw.RawData = make([]byte, 8)
	f.Add(mk(raw))
	fd := tensor("f", onnxpb.TensorProto_FLOAT, 2)
	fd.FloatData = []float32{1, 2}
	f.Add(mk(fd))
	h := tensor("h", onnxpb.TensorProto_FLOAT16, 2)
	h.Int32Data = []int32{0x3c00, 1}
	f.Add(mk(h))
	i4 := tensor("i4", onnxpb.TensorProto_INT4, 3)
	i4.Int32Data = []int32{0x12, 0x3}
	f.Add(mk(i4))
	i64 := tensor("i", onnxpb.TensorProto_INT64, 1)
	i64.Int64Data = []int64{-5}
	f.Add(mk(i64))
	d := tensor("d", onnxpb.TensorProto_DOUBLE, 1)
	d.DoubleData = []float64{2}
	f.Add(mk(d))
	u := tensor("u", onnxpb.TensorProto_UINT32, 1)
	u.Uint64Data = []uint64{9}
	f.Add(mk(u))
	f.Add(mk(external(tensor("e", onnxpb.TensorProto_FLOAT, 2), "w.bin", "4", "8")))
	f.Add(mk(external(tensor("e", onnxpb.TensorProto_UINT8, 16), "w.bin", "", "")))
	f.Add(mk(tensor("n", onnxpb.TensorProto_FLOAT, -1, 1<<62)))
	// Garbage.
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte("\x3a\x05\x2a\x03\x0a\x01\x01")) // graph{initializer{dims: truncated}}

	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), seq(0, 16), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data, dir)
		if err == nil {
			for name, ten := range m.Tensors {
				checkRaw(t, name, ten)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
		}
		tp := new(onnxpb.TensorProto)
		if proto.Unmarshal(data, tp) == nil {
			if ten, err := newTensor(tp, "fuzz"); err == nil && !ten.external {
				checkRaw(t, "tensor", ten)
			}
		}
	})
}

// checkRaw asserts that a loaded tensor's Raw bytes, where it has them, are
// as many as its shape and type call for.
func checkRaw(t *testing.T, name string, ten *Tensor) {
	raw, err := ten.Raw()
	bits, bitsErr := ElemBits(ten.DType)
	if bitsErr != nil {
		if err == nil {
			t.Fatalf("%s: Raw of %s succeeded", name, DTypeName(ten.DType))
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: Raw: %v", name, err)
	}
	if want := (ten.NumElements()*int64(bits) + 7) / 8; int64(len(raw)) != want {
		t.Fatalf("%s: Raw gave %d bytes, want %d", name, len(raw), want)
	}
}
