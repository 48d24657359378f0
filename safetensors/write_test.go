package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// randomTensor makes a tensor of dt with non-zero random values drawn from
// seed, then overwrites its first elements with the dtype's edge values.
func randomTensor(t *testing.T, dt ir.DType, shape ir.Shape, seed uint64) *ir.Tensor {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	n := shape.NumElements()
	vals := make([]float64, n)
	for i := range vals {
		switch {
		case dt.IsFloat():
			vals[i] = (rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(20)-10))
			if vals[i] == 0 {
				vals[i] = 1
			}
		case dt == ir.Bool:
			vals[i] = float64(rng.IntN(2))
		default:
			vals[i] = float64(rng.IntN(2000) - 1000)
			if vals[i] == 0 {
				vals[i] = 7
			}
		}
	}
	var edges []float64
	switch dt {
	case ir.F32:
		edges = []float64{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), math.MaxFloat32, math.SmallestNonzeroFloat32, -1.5}
	case ir.F16:
		edges = []float64{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 65504, 0x1p-24, -1.5}
	case ir.BF16:
		edges = []float64{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0x1.fep127, 0x1p-133, -1.5}
	case ir.I32:
		edges = []float64{math.MaxInt32, math.MinInt32, -1}
	case ir.I64:
		edges = []float64{1 << 53, -(1 << 53), math.MinInt64, -1}
	case ir.Bool:
		edges = []float64{1, 0, 1}
	}
	copy(vals, edges)
	tt, err := ir.TensorOf(dt, shape, vals...)
	require.NoError(t, err)
	return tt
}

// sameTensor asserts that got holds exactly want's values (NaN equal to
// NaN, the sign of zero kept).
func sameTensor(t *testing.T, want, got *ir.Tensor, name string) {
	t.Helper()
	require.NotNil(t, got, name)
	require.Equal(t, want.DType, got.DType, name)
	require.True(t, want.Shape.Equal(got.Shape), "%s: shape %v, want %v", name, got.Shape, want.Shape)
	for i := range want.Len() {
		w, g := want.At(i), got.At(i)
		if math.IsNaN(w) {
			require.True(t, math.IsNaN(g), "%s[%d]: %v, want NaN", name, i, g)
			continue
		}
		require.Equal(t, w, g, "%s[%d]", name, i)
		require.Equal(t, math.Signbit(w), math.Signbit(g), "%s[%d]: sign", name, i)
	}
}

// TestRoundTrip writes tensors of every dtype and shape kind (scalars,
// empty tensors, several dimensions), with edge values, reads them back
// and gets the same values; the metadata comes back too, the layout is
// the reference implementation's, and the strict reader (Parse) accepts the file.
func TestRoundTrip(t *testing.T) {
	dtypes := []ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32, ir.I64, ir.Bool}
	shapes := []ir.Shape{{}, {7}, {2, 3, 4}, {0, 5}, {1, 1, 9}}
	for i, dt := range dtypes {
		t.Run(dt.String(), func(t *testing.T) {
			tensors := map[string]*ir.Tensor{}
			for j, s := range shapes {
				tensors[dt.String()+"/"+s.String()] = randomTensor(t, dt, s, uint64(10*i+j+1))
			}
			// A second dtype in the same file, to exercise the layout.
			tensors["model.layers.0.weight"] = randomTensor(t, ir.F32, ir.Shape{3, 2}, 99)
			meta := map[string]string{"lumsearch.model": "tiny <model> & \"quotes\"", "format": "pt"}
			data, err := Encode(tensors, meta)
			require.NoError(t, err)

			got, gotMeta, err := Read("rt.safetensors", data)
			require.NoError(t, err)
			assert.Equal(t, meta, gotMeta)
			require.Len(t, got, len(tensors))
			for name, want := range tensors {
				sameTensor(t, want, got[name], name)
			}
			checkLayout(t, data)

			again, err := Encode(got, gotMeta)
			require.NoError(t, err)
			assert.Equal(t, data, again, "writing what was read gives the same bytes")
		})
	}
}

// checkLayout checks what the reference reader requires and the host
// library relies on: a header padded to 8 bytes, the tensors contiguous
// from offset 0 to the end of the file, each aligned to its element size.
func checkLayout(t *testing.T, data []byte) {
	t.Helper()
	n := binary.LittleEndian.Uint64(data)
	require.Zero(t, n%8, "header length %d", n)
	var header map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data[8:8+n], &header))
	type span struct{ begin, end, size int64 }
	var spans []span
	for name, raw := range header {
		if name == MetadataKey {
			continue
		}
		var e entry
		require.NoError(t, json.Unmarshal(raw, &e))
		dt, err := ParseDTypeName(e.DType)
		require.NoError(t, err)
		spans = append(spans, span{e.DataOffsets[0], e.DataOffsets[1], int64(dt.Size())})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end)) })
	at := int64(0)
	for _, s := range spans {
		require.Equal(t, at, s.begin, "the tensors follow one another without gaps")
		require.Zero(t, s.begin%s.size, "tensor at %d misaligned for %d-byte elements", s.begin, s.size)
		at = s.end
	}
	assert.Equal(t, int64(len(data))-8-int64(n), at, "the tensors cover the data buffer")
}

// TestGolden pins the exact bytes of a small file: what the format
// documentation describes, spelled out.
func TestGolden(t *testing.T) {
	a, err := ir.TensorOf(ir.F32, ir.Shape{2}, 1, -2)
	require.NoError(t, err)
	b, err := ir.TensorOf(ir.Bool, ir.Shape{3}, 1, 0, 1)
	require.NoError(t, err)
	c, err := ir.TensorOf(ir.BF16, ir.Shape{}, 1.5)
	require.NoError(t, err)
	data, err := Encode(map[string]*ir.Tensor{"a": a, "b": b, "c": c}, map[string]string{"k": "v<"})
	require.NoError(t, err)

	header := `{"__metadata__":{"k":"v<"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"b":{"dtype":"BOOL","shape":[3],"data_offsets":[10,13]},"c":{"dtype":"BF16","shape":[],"data_offsets":[8,10]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	want = append(want, header...)
	want = append(want, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0) // 1.0f, -2.0f
	want = append(want, 0xc0, 0x3f)                      // bf16 1.5
	want = append(want, 1, 0, 1)
	assert.Equal(t, string(want), string(data))
}

// TestWriteErrors: what cannot be stored is refused, naming the tensor,
// and WriteFile leaves nothing behind.
func TestWriteErrors(t *testing.T) {
	ok := randomTensor(t, ir.F32, ir.Shape{2}, 1)
	cases := []struct {
		name    string
		tensors map[string]*ir.Tensor
		meta    map[string]string
		want    string
	}{
		{"metadata name", map[string]*ir.Tensor{MetadataKey: ok}, nil, "may not be named __metadata__"},
		{"nil tensor", map[string]*ir.Tensor{"w": nil}, nil, `tensor "w": nil tensor`},
		{"invalid dtype", map[string]*ir.Tensor{"w": {Shape: ir.Shape{1}, F64: []float64{1}}}, nil, `tensor "w": dtype invalid`},
		{"element count", map[string]*ir.Tensor{"w": {DType: ir.F32, Shape: ir.Shape{3}, F32: []float32{1, 2}}}, nil, `tensor "w": f32[3] holds the wrong number`},
		{"integer in float32", map[string]*ir.Tensor{"w": {DType: ir.I32, Shape: ir.Shape{1}, F32: []float32{1}}}, nil, `tensor "w": i32[1] in float32 storage`},
		{"name not UTF-8", map[string]*ir.Tensor{"w\xff": ok}, nil, "is not UTF-8"},
		{"metadata not UTF-8", map[string]*ir.Tensor{"w": ok}, map[string]string{"k": "\xfe"}, "is not UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Encode(c.tensors, c.meta)
			require.ErrorContains(t, err, c.want)
			dir := t.TempDir()
			path := filepath.Join(dir, "w.safetensors")
			require.ErrorContains(t, WriteFile(path, c.tensors, c.meta), c.want)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries)
		})
	}
}

// TestWriteFile writes a file atomically and reads it back.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "weights.safetensors")
	require.NoError(t, os.WriteFile(path, []byte("an older file"), 0o600))
	w := randomTensor(t, ir.BF16, ir.Shape{4, 4}, 3)
	require.NoError(t, WriteFile(path, map[string]*ir.Tensor{"w": w}, nil))
	got, meta, err := ReadFile(path)
	require.NoError(t, err)
	assert.Nil(t, meta)
	sameTensor(t, w, got["w"], "w")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left")
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	_, _, err = ReadFile(filepath.Join(dir, "missing.safetensors"))
	assert.ErrorContains(t, err, "missing.safetensors")
}

// rawFile is a file with the given header text and data buffer.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// TestReadErrors: malformed or unsupported files are errors naming the
// file and, where one is at fault, the tensor.
func TestReadErrors(t *testing.T) {
	good, err := Encode(map[string]*ir.Tensor{"w": randomTensor(t, ir.F32, ir.Shape{4}, 5)}, nil)
	require.NoError(t, err)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"truncated", good[:len(good)-1], `tensor "w": data_offsets [0, 16] outside the 15-byte data buffer`},
		{"header beyond the file", binary.LittleEndian.AppendUint64(nil, 64), "beyond the end"},
		{"header too large", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"not JSON", rawFile("{nope", nil), "invalid header JSON"},
		{"not an object", rawFile("[1]", nil), "want a JSON object"},
		{"unsupported dtype", rawFile(`{"u":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2}), `tensor "u": dtype "I8" is not one of`},
		{"unknown dtype", rawFile(`{"u":{"dtype":"X9","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2}), `tensor "u": unknown dtype`},
		{"bool byte", rawFile(`{"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2}), `tensor "b": BOOL element 1 is 2`},
		{"wrong size", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), `tensor "w": shape [2] × F32 is 8 bytes`},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), `overlap tensor "a"`},
		{"duplicate", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), "duplicate key"},
		{"negative offset", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, nil), `tensor "a": negative data_offsets`},
		{"metadata value", rawFile(`{"__metadata__":{"k":1}}`, nil), "value is not a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Read("bad.safetensors", c.data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "bad.safetensors")
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestDTypeNames maps every ir dtype both ways.
func TestDTypeNames(t *testing.T) {
	for _, c := range []struct {
		dt   ir.DType
		name string
	}{{ir.F32, "F32"}, {ir.F16, "F16"}, {ir.BF16, "BF16"}, {ir.I32, "I32"}, {ir.I64, "I64"}, {ir.Bool, "BOOL"}, {ir.U8, "U8"}} {
		n, err := DTypeName(c.dt)
		require.NoError(t, err)
		assert.Equal(t, c.name, n)
		dt, err := ParseDTypeName(c.name)
		require.NoError(t, err)
		assert.Equal(t, c.dt, dt)
	}
	_, err := DTypeName(ir.InvalidDType)
	assert.Error(t, err)
	_, err = ParseDTypeName("F64")
	assert.Error(t, err)
	for _, name := range []string{"F8_E4M3", "F8_E8M0"} {
		dt, err := ParseDTypeName(name)
		require.NoError(t, err)
		assert.Equal(t, ir.U8, dt, "%s's bytes are u8 codes", name)
	}
}

// FuzzRead feeds arbitrary bytes to Read: it never panics, an error names
// the file, and a file it accepts writes back into one that reads the
// same tensors.
func FuzzRead(f *testing.F) {
	seed := map[string]*ir.Tensor{}
	for i, dt := range []ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32, ir.I64, ir.Bool, ir.U8} {
		tt, err := ir.TensorOf(dt, ir.Shape{2}, float64(i+1), -1)
		if err != nil {
			f.Fatal(err)
		}
		seed["t"+dt.String()] = tt
	}
	good, err := Encode(seed, map[string]string{"k": "v"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(rawFile(`{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`, []byte{0x01, 0x7e}))
	f.Add(rawFile(`{"b":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]},"c":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, bytes.Repeat([]byte{0xff}, 8)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}}`, nil))
	f.Add(rawFile(`{"__metadata__":{"a":"\u00e9\ud800"}}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tensors, meta, err := Read("fuzz.safetensors", data)
		if err != nil {
			if !bytes.Contains([]byte(err.Error()), []byte("fuzz.safetensors")) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		again, err := Encode(tensors, meta)
		if err != nil {
			t.Fatalf("an accepted file does not write back: %v", err)
		}
		back, meta2, err := Read("again", again)
		if err != nil {
			t.Fatalf("a written file does not read back: %v", err)
		}
		if len(back) != len(tensors) || len(meta2) != len(meta) {
			t.Fatalf("%d tensors and %d metadata read back as %d and %d", len(tensors), len(meta), len(back), len(meta2))
		}
		for name, want := range tensors {
			got := back[name]
			if got == nil || got.DType != want.DType || !got.Shape.Equal(want.Shape) {
				t.Fatalf("tensor %q changed type", name)
			}
			for i := range want.Len() {
				w, g := want.At(i), got.At(i)
				if w != g && !(math.IsNaN(w) && math.IsNaN(g)) {
					t.Fatalf("tensor %q element %d: %v read back as %v", name, i, w, g)
				}
			}
		}
	})
}
