package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// TestQuantizedTensorsRoundTrip writes the tensors of quantized
// checkpoints (u8 codes recorded as U8, F8_E4M3 and F8_E8M0, i32 packed
// words, a scalar f32 scale) and reads them back: the bytes and words
// exactly, and the set hands out their file dtypes.
func TestQuantizedTensorsRoundTrip(t *testing.T) {
	codes, err := ir.TensorOfInts(ir.U8, ir.Shape{2, 3}, 0, 0x7e, 0xfe, 0x80, 1, 255)
	require.NoError(t, err)
	scales, err := ir.TensorOfInts(ir.U8, ir.Shape{2, 1}, 127, 130)
	require.NoError(t, err)
	blocks, err := ir.TensorOfInts(ir.U8, ir.Shape{1, 1, 16}, 0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f, 1, 2, 3, 4, 5, 6, 7, 8)
	require.NoError(t, err)
	words, err := ir.TensorOfInts(ir.I32, ir.Shape{2, 2}, -1, 0x76543210, -0x789abcdf, 7)
	require.NoError(t, err)
	scalar, err := ir.TensorOf(ir.F32, ir.Shape{}, 0.125)
	require.NoError(t, err)
	tensors := map[string]*ir.Tensor{"w": codes, "w_scale": scales, "b": blocks, "qweight": words, "s": scalar}
	var buf bytes.Buffer
	require.NoError(t, WriteWith(&buf, tensors, nil, WriteOptions{DTypes: map[string]string{"w": "F8_E4M3", "w_scale": "F8_E8M0"}}))
	got, _, err := Read("q.safetensors", buf.Bytes())
	require.NoError(t, err)
	for name, want := range tensors {
		assert.Equal(t, want.DType, got[name].DType, name)
		assert.Equal(t, want.Shape, got[name].Shape, name)
		for i := range want.Len() {
			require.Equal(t, want.At(i), got[name].At(i), "%s[%d]", name, i)
		}
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644))
	set, err := OpenDir(dir)
	require.NoError(t, err)
	defer set.Close()
	for name, dt := range map[string]string{"w": "F8_E4M3", "w_scale": "F8_E8M0", "b": "U8", "qweight": "I32", "s": "F32"} {
		st, ok := set.Tensor(name)
		require.True(t, ok, name)
		assert.Equal(t, dt, st.DType, name)
		d, err := Decode(st)
		require.NoError(t, err)
		assert.Equal(t, tensors[name].Shape, d.Shape, name)
		// Packed codes decode at their own width, not int64's: a
		// quantized checkpoint is mostly these.
		switch d.DType {
		case ir.U8:
			assert.Len(t, d.U8, int(d.Len()), name)
		case ir.I32:
			assert.Len(t, d.I32, int(d.Len()), name)
		}
		assert.Nil(t, d.I64, name)
		assert.Equal(t, tensors[name].Int64s(), d.Int64s(), name)
	}
	st, _ := set.Tensor("w")
	assert.Equal(t, []byte{0, 0x7e, 0xfe, 0x80, 1, 255}, st.Data)
}

func TestWriteOptionsErrors(t *testing.T) {
	u8, err := ir.TensorOfInts(ir.U8, ir.Shape{2}, 1, 2)
	require.NoError(t, err)
	f32, err := ir.TensorOf(ir.F32, ir.Shape{2}, 1, 2)
	require.NoError(t, err)
	tensors := map[string]*ir.Tensor{"u": u8, "f": f32}
	for _, c := range []struct {
		dtypes map[string]string
		want   string
	}{
		{map[string]string{"f": "F8_E4M3"}, `tensor "f": file dtype F8_E4M3; want a u8 tensor`},
		{map[string]string{"u": "I8"}, `tensor "u": file dtype I8`},
		{map[string]string{"x": "F8_E4M3"}, `tensor "x", which is not written`},
	} {
		var buf bytes.Buffer
		err := WriteWith(&buf, tensors, nil, WriteOptions{DTypes: c.dtypes})
		assert.ErrorContains(t, err, c.want)
	}
}

// BenchmarkDecodePacked decodes the packed codes of one MXFP4 expert
// projection at gpt-oss-120b's shape ([128, 5760, 90, 16] bytes, here one
// expert's slice of it); B/op against SetBytes says what host memory a
// checkpoint's codes take once decoded (1 byte an element; 8 when they
// were held in int64).
func BenchmarkDecodePacked(b *testing.B) {
	for _, dt := range []string{"U8", "I32"} {
		b.Run(dt, func(b *testing.B) {
			shape := []int64{5760, 90, 16}
			if dt == "I32" { // an AWQ qweight of a projection of the same size
				shape = []int64{2880, 2880}
			}
			n := shape[0] * shape[1]
			if len(shape) == 3 {
				n *= shape[2]
			}
			size := int64(1)
			if dt == "I32" {
				size = 4
			}
			st := Tensor{Name: "w", DType: dt, Shape: shape, Data: make([]byte, n*size)}
			b.SetBytes(n * size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
