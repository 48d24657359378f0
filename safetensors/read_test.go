package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenReadsTensorsAndMetadata(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "m.safetensors", buildFile(t, []tt{
		{name: "w.f32", dtype: "F32", shape: []int64{2, 2}, data: le32(1.5, -0.25, 0, 1e30)},
		{name: "w.f16", dtype: "F16", shape: []int64{4}, data: le16(0x3C00, 0xC000, 0x0001, 0x7C00)},
		{name: "w.bf16", dtype: "BF16", shape: []int64{3}, data: le16(0x3F80, 0x4049, 0xFF80)},
		{name: "step", dtype: "I64", shape: nil, data: binary.LittleEndian.AppendUint64(nil, 42)},
		{name: "empty", dtype: "U8", shape: []int64{0, 3}, data: []byte{}},
	}, map[string]string{"format": "pt", "note": "ünïcode"}))

	f, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })

	assert.Equal(t, path, f.Path())
	assert.Equal(t, []string{"empty", "step", "w.bf16", "w.f16", "w.f32"}, f.Names())
	assert.Equal(t, map[string]string{"format": "pt", "note": "ünïcode"}, f.Metadata())

	tests := []struct {
		name  string
		dtype string
		shape []int64
		want  []float32 // nil: Float32s must fail
	}{
		{"w.f32", "F32", []int64{2, 2}, []float32{1.5, -0.25, 0, 1e30}},
		{"w.f16", "F16", []int64{4}, []float32{1, -2, 0x1p-24, float32(math.Inf(1))}},
		{"w.bf16", "BF16", []int64{3}, []float32{1, 3.140625, float32(math.Inf(-1))}},
		{"step", "I64", []int64{}, nil},
		{"empty", "U8", []int64{0, 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tensor, ok := f.Tensor(tc.name)
			require.True(t, ok)
			assert.Equal(t, tc.name, tensor.Name)
			assert.Equal(t, tc.dtype, tensor.DType)
			assert.Equal(t, len(tc.shape), len(tensor.Shape))
			if len(tc.shape) > 0 {
				assert.Equal(t, tc.shape, tensor.Shape)
			}
			assert.Equal(t, len(tensor.Data), cap(tensor.Data), "Data must not be appendable into neighbours")
			got, err := tensor.Float32s()
			if tc.want == nil {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.name)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	step, _ := f.Tensor("step")
	assert.Equal(t, uint64(42), binary.LittleEndian.Uint64(step.Data))
	assert.Equal(t, int64(1), step.NumElements())

	// Data aliases the mapping: no copy was made.
	w, _ := f.Tensor("w.f32")
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(w.Data)))
	assert.True(t, f.mapped)
	assert.True(t, p >= base && p+uintptr(len(w.Data)) <= base+uintptr(len(f.data)), "tensor data outside the mapping")

	// Returned shapes and metadata are copies.
	w.Shape[0] = 99
	w2, _ := f.Tensor("w.f32")
	assert.Equal(t, []int64{2, 2}, w2.Shape)
	md := f.Metadata()
	md["format"] = "changed"
	assert.Equal(t, "pt", f.Metadata()["format"])

	_, ok := f.Tensor("nope")
	assert.False(t, ok)
}

func TestCloseIsIdempotentAndForgetsTensors(t *testing.T) {
	path := writeFile(t, t.TempDir(), "a.safetensors", buildFile(t, []tt{{name: "x", dtype: "F32", shape: []int64{1}}}, nil))
	f, err := Open(path)
	require.NoError(t, err)
	_, ok := f.Tensor("x")
	require.True(t, ok)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close())
	_, ok = f.Tensor("x")
	assert.False(t, ok)
}

func TestF16ToFloat32Exhaustive(t *testing.T) {
	// Independent reference: evaluate the half-precision formula in float64.
	ref := func(h uint16) float64 {
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		exp := int(h>>10) & 0x1f
		mant := float64(h & 0x3ff)
		switch exp {
		case 0:
			return sign * math.Ldexp(mant, -24)
		case 0x1f:
			if mant == 0 {
				return math.Inf(int(sign))
			}
			return math.NaN()
		}
		return sign * math.Ldexp(1+mant/1024, exp-15)
	}
	for i := 0; i <= 0xffff; i++ {
		h := uint16(i)
		got := F16ToFloat32(h)
		want := ref(h)
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "0x%04x", h)
			// Payload and sign survive.
			bits := math.Float32bits(got)
			require.Equal(t, uint32(h&0x3ff), (bits>>13)&0x3ff, "0x%04x payload", h)
			require.Equal(t, uint32(h>>15), bits>>31, "0x%04x sign", h)
			continue
		}
		require.Equal(t, want, float64(got), "0x%04x", h)
		require.Equal(t, math.Signbit(want), math.Signbit(float64(got)), "0x%04x sign", h)
	}
}

func TestBF16ToFloat32(t *testing.T) {
	tests := []struct {
		bits uint16
		want float32
	}{
		{0x3F80, 1},
		{0x4049, 3.140625},
		{0xC000, -2},
		{0x0000, 0},
		{0x7F80, float32(math.Inf(1))},
		{0x0001, math.Float32frombits(0x00010000)}, // subnormal
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, BF16ToFloat32(tc.bits), "0x%04x", tc.bits)
	}
	assert.True(t, math.IsNaN(float64(BF16ToFloat32(0x7FC1))))
}

func TestFloat32sErrors(t *testing.T) {
	tests := []struct {
		name   string
		tensor Tensor
		want   string
	}{
		{"int dtype", Tensor{Name: "i", DType: "I32", Data: make([]byte, 4)}, `unsupported dtype "I32"`},
		{"f64 dtype", Tensor{Name: "d", DType: "F64", Data: make([]byte, 8)}, `unsupported dtype "F64"`},
		{"ragged f32", Tensor{Name: "r", DType: "F32", Data: make([]byte, 6)}, "not a multiple of 4"},
		{"ragged bf16", Tensor{Name: "b", DType: "BF16", Data: make([]byte, 3)}, "not a multiple of 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.tensor.Float32s()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), `"`+tc.tensor.Name+`"`)
		})
	}
}

func TestParseAcceptsEdgeCases(t *testing.T) {
	tests := []struct {
		name  string
		file  []byte
		names []string
	}{
		{"empty header", raw("{}", nil), []string{}},
		{"padded header", raw("{}      ", nil), []string{}},
		{"null metadata", raw(`{"__metadata__":null}`, nil), []string{}},
		{"gap and trailing bytes", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}}`, make([]byte, 8)), []string{"a", "b"}},
		{"out of order in header", raw(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 2)), []string{"a", "b"}},
		{"zero-size tensor inside another", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`, make([]byte, 8)), []string{"a", "z"}},
		{"packed F4", raw(`{"q":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, make([]byte, 3)), []string{"q"}},
		{"unknown entry fields ignored", raw(`{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1],"extra":[1,2]}}`, []byte{1}), []string{"a"}},
		{"empty tensor name", raw(`{"":{"dtype":"I8","shape":[],"data_offsets":[0,1]}}`, []byte{7}), []string{""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("mem.safetensors", tc.file)
			require.NoError(t, err)
			assert.Equal(t, tc.names, f.Names())
			for _, n := range tc.names {
				_, ok := f.Tensor(n)
				assert.True(t, ok, n)
			}
			assert.NoError(t, f.Close())
		})
	}
}

// entryJSON is a one-tensor header with the given entry body.
func entryJSON(name, body string) string { return `{"` + name + `":{` + body + `}}` }

func TestParseErrors(t *testing.T) {
	big := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	beyond := binary.LittleEndian.AppendUint64(nil, 64)
	beyond = append(beyond, "{}"...)
	tests := []struct {
		name   string
		file   []byte
		tensor string // tensor the error must name ("" for file-level)
		want   string // substring of the reason
	}{
		{"shorter than length", []byte{1, 2, 3}, "", "too short"},
		{"header too large", big, "", "exceeds the 100000000-byte limit"},
		{"header beyond file", beyond, "", "header length 64 is beyond the end of the 10-byte file"},
		{"header length max u64", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), "", "exceeds"},
		{"invalid utf8", raw("{\"\xff\":1}", nil), "", "not valid UTF-8"},
		{"invalid json", raw(`{"a":`, nil), "a", "invalid header JSON"},
		{"not an object", raw(`[1,2]`, nil), "", "want a JSON object"},
		{"empty header", raw(``, nil), "", "invalid header JSON"},
		{"trailing json", raw(`{} {}`, nil), "", "trailing"},
		{"trailing garbage", raw(`{}x`, nil), "", "after the JSON object"},
		{"duplicate name", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "a", "duplicate key"},
		{"entry not an object", raw(`{"w":5}`, nil), "w", "want a JSON object"},
		{"missing dtype", raw(entryJSON("w", `"shape":[1],"data_offsets":[0,1]`), []byte{0}), "w", "missing dtype"},
		{"missing shape", raw(entryJSON("w", `"dtype":"U8","data_offsets":[0,1]`), []byte{0}), "w", "missing shape"},
		{"null shape", raw(entryJSON("w", `"dtype":"U8","shape":null,"data_offsets":[0,1]`), []byte{0}), "w", "missing shape"},
		{"missing offsets", raw(entryJSON("w", `"dtype":"U8","shape":[1]`), []byte{0}), "w", "missing data_offsets"},
		{"unknown dtype", raw(entryJSON("w", `"dtype":"F31","shape":[1],"data_offsets":[0,4]`), make([]byte, 4)), "w", `unknown dtype "F31"`},
		{"dtype not a string", raw(entryJSON("w", `"dtype":3,"shape":[1],"data_offsets":[0,4]`), make([]byte, 4)), "w", "invalid dtype"},
		{"negative dim", raw(entryJSON("w", `"dtype":"U8","shape":[2,-3],"data_offsets":[0,6]`), make([]byte, 6)), "w", "negative dimension -3 in shape [2 -3]"},
		{"fractional dim", raw(entryJSON("w", `"dtype":"U8","shape":[1.5],"data_offsets":[0,1]`), []byte{0}), "w", "invalid shape"},
		{"dim beyond int64", raw(entryJSON("w", `"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]`), []byte{0}), "w", "invalid shape"},
		{"element count overflow", raw(entryJSON("w", `"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]`), []byte{0}), "w", "element count of shape [4294967296 4294967296] overflows"},
		{"byte size overflow", raw(entryJSON("w", `"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,1]`), []byte{0}), "w", "byte size of shape [4611686018427387904] × F32 overflows"},
		{"size mismatch", raw(entryJSON("w", `"dtype":"F32","shape":[2],"data_offsets":[0,4]`), make([]byte, 8)), "w", "shape [2] × F32 is 8 bytes but data_offsets [0, 4] span 4"},
		{"partial byte", raw(entryJSON("w", `"dtype":"F4","shape":[3],"data_offsets":[0,2]`), make([]byte, 2)), "w", "12 bits, not a whole number of bytes"},
		{"offsets out of order", raw(entryJSON("w", `"dtype":"U8","shape":[0],"data_offsets":[4,0]`), make([]byte, 4)), "w", "data_offsets [4, 0] out of order"},
		{"offsets outside buffer", raw(entryJSON("w", `"dtype":"F32","shape":[4],"data_offsets":[0,16]`), make([]byte, 8)), "w", "data_offsets [0, 16] outside the 8-byte data buffer"},
		{"negative offsets", raw(entryJSON("w", `"dtype":"U8","shape":[1],"data_offsets":[-1,0]`), []byte{0}), "w", "negative data_offsets"},
		{"three offsets", raw(entryJSON("w", `"dtype":"U8","shape":[1],"data_offsets":[0,1,2]`), []byte{0, 0}), "w", "data_offsets has 3 elements, want 2"},
		{"overlapping tensors", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), "b", `data_offsets [4, 12] overlap tensor "a" at [0, 8]`},
		{"identical ranges", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), "b", `overlap tensor "a"`},
		{"nested overlap", raw(`{"big":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"mid":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"x":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}}`, make([]byte, 8)), "mid", `overlap tensor "big"`},
		{"metadata not strings", raw(`{"__metadata__":{"n":1}}`, nil), "", `__metadata__ key "n": value is not a string`},
		{"metadata not an object", raw(`{"__metadata__":"x"}`, nil), "", "invalid __metadata__"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("mem.safetensors", tc.file)
			require.Error(t, err)
			assert.Nil(t, f)
			var e *Error
			require.True(t, errors.As(err, &e), "want *Error, got %T: %v", err, err)
			assert.Equal(t, "mem.safetensors", e.File)
			assert.Equal(t, tc.tensor, e.Tensor)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "mem.safetensors")
			if tc.tensor != "" {
				assert.Contains(t, err.Error(), `tensor "`+tc.tensor+`"`)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty.safetensors", nil)
	bad := writeFile(t, dir, "bad.safetensors", raw(entryJSON("layer.w", `"dtype":"F32","shape":[3],"data_offsets":[0,12]`), make([]byte, 4)))
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"empty file", empty, []string{empty, "file is 0 bytes"}},
		{"bad tensor", bad, []string{bad, `tensor "layer.w"`, "outside the 4-byte data buffer"}},
		{"directory", dir, []string{dir, "not a regular file"}},
		{"missing", filepath.Join(dir, "nope.safetensors"), []string{"nope.safetensors", "no such file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(tc.path)
			require.Error(t, err)
			assert.Nil(t, f)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestOpenDir(t *testing.T) {
	shard1 := []tt{
		{name: "embed.weight", dtype: "BF16", shape: []int64{2, 2}, data: le16(0x3F80, 0x4049, 0xC000, 0)},
		{name: "layers.0.w", dtype: "F16", shape: []int64{2}, data: le16(0x3C00, 0xC000)},
	}
	shard2 := []tt{
		{name: "layers.1.w", dtype: "F32", shape: []int64{1}, data: le32(7)},
		{name: "norm", dtype: "F32", shape: []int64{}, data: le32(0.5)},
	}
	index := `{"metadata":{"total_size":24},"weight_map":{
		"embed.weight":"model-00001-of-00002.safetensors",
		"layers.0.w":"model-00001-of-00002.safetensors",
		"layers.1.w":"model-00002-of-00002.safetensors",
		"norm":"model-00002-of-00002.safetensors"}}`

	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"without index", func(t *testing.T, dir string) {}},
		{"with index", func(t *testing.T, dir string) {
			writeFile(t, dir, "model.safetensors.index.json", []byte(index))
			// A shard the index does not name is ignored (e.g. consolidated.safetensors).
			writeFile(t, dir, "consolidated.safetensors", buildFile(t, []tt{{name: "layers.0.w", dtype: "F32", shape: []int64{1}}}, nil))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "model-00001-of-00002.safetensors", buildFile(t, shard1, nil))
			writeFile(t, dir, "model-00002-of-00002.safetensors", buildFile(t, shard2, map[string]string{"format": "pt"}))
			writeFile(t, dir, "README.md", []byte("not a shard"))
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.safetensors"), 0o755))
			tc.setup(t, dir)

			s, err := OpenDir(dir)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, s.Close()) })

			assert.Equal(t, dir, s.Dir())
			assert.Len(t, s.Files(), 2)
			assert.Equal(t, []string{"embed.weight", "layers.0.w", "layers.1.w", "norm"}, s.Names())
			vals := map[string][]float32{
				"embed.weight": {1, 3.140625, -2, 0},
				"layers.0.w":   {1, -2},
				"layers.1.w":   {7},
				"norm":         {0.5},
			}
			for name, want := range vals {
				tensor, ok := s.Tensor(name)
				require.True(t, ok, name)
				got, err := tensor.Float32s()
				require.NoError(t, err)
				assert.Equal(t, want, got, name)
			}
			_, ok := s.Tensor("missing")
			assert.False(t, ok)
			assert.NoError(t, s.Check([]Want{
				{"embed.weight", []int64{2, 2}},
				{"layers.0.w", []int64{2}},
				{"layers.1.w", []int64{1}},
				{"norm", nil},
			}))
		})
	}
}

func TestOpenDirFollowsSymlinks(t *testing.T) {
	blobs, snap := t.TempDir(), t.TempDir()
	blob := writeFile(t, blobs, "abc123", buildFile(t, []tt{{name: "x", dtype: "F32", shape: []int64{1}, data: le32(3)}}, nil))
	require.NoError(t, os.Symlink(blob, filepath.Join(snap, "model.safetensors")))
	s, err := OpenDir(snap)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, []string{"x"}, s.Names())
}

func TestOpenDirErrors(t *testing.T) {
	a := func(t *testing.T) []byte {
		return buildFile(t, []tt{{name: "a", dtype: "F32", shape: []int64{1}}, {name: "shared", dtype: "F32", shape: []int64{1}}}, nil)
	}
	b := func(t *testing.T) []byte {
		return buildFile(t, []tt{{name: "b", dtype: "F32", shape: []int64{1}}}, nil)
	}
	tests := []struct {
		name  string
		files map[string]func(t *testing.T) []byte
		want  []string // substrings; "DIR/" is replaced by the folder
	}{
		{"empty folder", nil, []string{"DIR", "no *.safetensors files"}},
		{"duplicate across shards", map[string]func(*testing.T) []byte{
			"a.safetensors": a,
			"b.safetensors": func(t *testing.T) []byte {
				return buildFile(t, []tt{{name: "shared", dtype: "F16", shape: []int64{2}}}, nil)
			},
		}, []string{"DIR/b.safetensors", `tensor "shared"`, "duplicate tensor, also in DIR/a.safetensors"}},
		{"bad shard", map[string]func(*testing.T) []byte{
			"a.safetensors": a,
			"b.safetensors": func(*testing.T) []byte {
				return raw(entryJSON("w", `"dtype":"X","shape":[1],"data_offsets":[0,1]`), []byte{0})
			},
		}, []string{"DIR/b.safetensors", `tensor "w"`, `unknown dtype "X"`}},
		{"index names missing file", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"a.safetensors","shared":"a.safetensors","z":"gone.safetensors"}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "z"`, `weight_map names missing file "gone.safetensors"`}},
		{"index names missing tensor", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"b.safetensors":                b,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"a.safetensors","shared":"a.safetensors","b":"b.safetensors","ghost":"b.safetensors"}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "ghost"`, `weight_map names it in "b.safetensors", which does not contain it`}},
		{"index names wrong file", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"b.safetensors":                b,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"b.safetensors","shared":"a.safetensors","b":"b.safetensors"}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "a"`, `weight_map names it in "b.safetensors", but it is in "a.safetensors"`}},
		{"index omits tensor", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"a.safetensors"}}`),
		}, []string{"DIR/a.safetensors", `tensor "shared"`, "not listed in the weight_map of DIR/model.safetensors.index.json"}},
		{"index path escapes folder", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"../a.safetensors"}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "a"`, "not a plain file name"}},
		{"index without weight_map", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"metadata":{}}`),
		}, []string{"DIR/model.safetensors.index.json", "no weight_map"}},
		{"index invalid JSON", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":`),
		}, []string{"DIR/model.safetensors.index.json", "invalid index JSON"}},
		{"index value not a string", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":1}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "a"`, "weight_map value is not a file name"}},
		{"index duplicate tensor", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{"a":"a.safetensors","a":"a.safetensors"}}`),
		}, []string{"DIR/model.safetensors.index.json", `tensor "a"`, "duplicate key"}},
		{"two indexes", map[string]func(*testing.T) []byte{
			"a.safetensors":                a,
			"model.safetensors.index.json": text(`{"weight_map":{}}`),
			"other.safetensors.index.json": text(`{"weight_map":{}}`),
		}, []string{"DIR", "more than one index file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				writeFile(t, dir, name, content(t))
			}
			s, err := OpenDir(dir)
			require.Error(t, err)
			assert.Nil(t, s)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), strings.ReplaceAll(w, "DIR", dir))
			}
		})
	}
	_, err := OpenDir(filepath.Join(t.TempDir(), "absent"))
	assert.Error(t, err)
}

// text adapts a literal to the file-content callbacks of TestOpenDirErrors.
func text(s string) func(*testing.T) []byte { return func(*testing.T) []byte { return []byte(s) } }

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	// Real-size shapes are written sparse: no disk or memory is used.
	writeSparse(t, dir, "model-00001-of-00002.safetensors", []tt{
		{name: "model.layers.0.mlp.up_proto.weight", dtype: "BF16", shape: []int64{14336, 4096}},
		{name: "model.norm.weight", dtype: "F32", shape: []int64{4096}},
	})
	writeSparse(t, dir, "model-00002-of-00002.safetensors", []tt{
		{name: "lm_head.weight", dtype: "BF16", shape: []int64{32000, 4096}},
		{name: "stray", dtype: "U8", shape: []int64{1}},
	})
	s, err := OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })

	up, ok := s.Tensor("model.layers.0.mlp.up_proto.weight")
	require.True(t, ok)
	assert.Len(t, up.Data, 14336*4096*2)

	good := []Want{
		{"lm_head.weight", []int64{32000, 4096}},
		{"model.layers.0.mlp.up_proto.weight", []int64{14336, 4096}},
		{"model.norm.weight", []int64{4096}},
		{"stray", []int64{1}},
	}
	many := slices.Clone(good)
	for i := range 12 {
		many = append(many, Want{Name: "missing." + string(rune('a'+i)), Shape: []int64{1}})
	}

	tests := []struct {
		name   string
		want   []Want
		dtypes []string
		err    string // full expected message with DIR placeholder; "" for nil
	}{
		{"exact, any dtype", good, nil, ""},
		{"exact, dtypes allowed", good, []string{"BF16", "F32", "U8"}, ""},
		{"wrong shape", []Want{
			{"lm_head.weight", []int64{32000, 4096}},
			{"model.layers.0.mlp.up_proto.weight", []int64{4096, 14336}},
			{"model.norm.weight", []int64{4096}},
			{"stray", []int64{1}},
		}, nil, "safetensors: DIR: 1 problem\n\tmodel.layers.0.mlp.up_proto.weight: shape [14336 4096], want [4096 14336]"},
		{"subset reports unexpected", good[:2], []string{"BF16"}, "safetensors: DIR: 2 problems\n\t" +
			"model.norm.weight: unexpected\n\tstray: unexpected"},
		{"wrong dtype, several allowed", good, []string{"BF16", "F16"}, "safetensors: DIR: 2 problems\n\t" +
			"model.norm.weight: dtype F32, want one of [BF16 F16]\n\tstray: dtype U8, want one of [BF16 F16]"},
		{"single dtype", good[2:], []string{"BF16"}, "safetensors: DIR: 4 problems\n\t" +
			"model.norm.weight: dtype F32, want BF16\n\tstray: dtype U8, want BF16\n\t" +
			"lm_head.weight: unexpected\n\tmodel.layers.0.mlp.up_proto.weight: unexpected"},
		{"missing and listed twice", []Want{
			{"lm_head.weight", []int64{32000, 4096}},
			{"lm_head.weight", []int64{32000, 4096}},
			{"model.layers.0.mlp.up_proto.weight", []int64{14336, 4096}},
			{"model.norm.weight", nil},
			{"stray", []int64{1}},
			{"model.layers.1.self_attn.q_proj.weight", []int64{4096, 4096}},
		}, nil, "safetensors: DIR: 3 problems\n\t" +
			"lm_head.weight: listed twice in want\n\tmodel.norm.weight: shape [4096], want []\n\t" +
			"model.layers.1.self_attn.q_proj.weight: missing"},
		{"more than ten", many, nil, "safetensors: DIR: 12 problems\n\tmissing.a: missing\n\tmissing.b: missing\n\t" +
			"missing.c: missing\n\tmissing.d: missing\n\tmissing.e: missing\n\tmissing.f: missing\n\tmissing.g: missing\n\t" +
			"missing.h: missing\n\tmissing.i: missing\n\tmissing.j: missing\n\t... and 2 more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Check(tc.want, tc.dtypes...)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, strings.ReplaceAll(tc.err, "DIR", dir), err.Error())
			var ce *CheckError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, dir, ce.Dir)
		})
	}

	var ce *CheckError
	require.True(t, errors.As(s.Check(many), &ce))
	assert.Len(t, ce.Problems, 12, "CheckError keeps every problem")
}
