package corpus

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// writeSafetensors writes a checkpoint file of F32 and BF16 tensors.
func writeSafetensors(t *testing.T, path string, tensors map[string]struct {
	dtype string
	shape []int64
	vals  []float32
}) {
	t.Helper()
	header := map[string]any{}
	var data []byte
	for _, name := range []string{"a", "b", "c", "extra"} {
		tt, ok := tensors[name]
		if !ok {
			continue
		}
		begin := len(data)
		for _, v := range tt.vals {
			if tt.dtype == "F32" {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			} else {
				data = binary.LittleEndian.AppendUint16(data, uint16(math.Float32bits(v)>>16))
			}
		}
		header[name] = map[string]any{"dtype": tt.dtype, "shape": tt.shape, "data_offsets": []int{begin, len(data)}}
	}
	h, err := json.Marshal(header)
	require.NoError(t, err)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data...)
	require.NoError(t, os.WriteFile(path, out, 0o644))
}

func TestSafetensorsWeights(t *testing.T) {
	b := ir.NewBuilder("w")
	x := b.Input("x", ir.F32, 1, 2)
	a := b.Weight("a", ir.F32, 2, 2)
	bw := b.Weight("b", ir.BF16, 2)
	b.Output("y", b.Add(b.MatMul(x, a), b.Cast(bw, ir.F32)))
	g, err := b.Build()
	require.NoError(t, err)

	dir := t.TempDir()
	type tt = struct {
		dtype string
		shape []int64
		vals  []float32
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), map[string]tt{
		"a":     {"F32", []int64{2, 2}, []float32{1, 2, 3, 4}},
		"b":     {"F32", []int64{2}, []float32{1.00390625 + 0.001, -2}}, // rounds to bf16
		"extra": {"F32", []int64{1}, []float32{9}},
	})
	ws, set, err := SafetensorsWeights(g, dir)
	require.NoError(t, err)
	defer set.Close()
	require.Equal(t, []float32{1, 2, 3, 4}, ws["a"].F32)
	raw, ok := set.Tensor("a")
	require.True(t, ok)
	require.Equal(t, unsafe.Pointer(&raw.Data[0]), unsafe.Pointer(&ws["a"].F32[0]), "f32 weights alias the mapping")
	require.Equal(t, []float32{float32(ir.BF16.Round(1.00490625)), -2}, ws["b"].F32)
	require.Equal(t, ir.BF16, ws["b"].DType)

	bad := t.TempDir()
	writeSafetensors(t, filepath.Join(bad, "model.safetensors"), map[string]tt{
		"a": {"F32", []int64{4}, []float32{1, 2, 3, 4}},
	})
	_, _, err = SafetensorsWeights(g, bad)
	require.ErrorContains(t, err, "a: shape [4], want [2 2]")
	require.ErrorContains(t, err, "b: missing")
}
