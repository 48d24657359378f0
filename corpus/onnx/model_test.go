package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

// mappedIn reports whether b lies inside mapping.
func mappedIn(b, mapping []byte) bool {
	if len(b) == 0 || len(mapping) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&mapping[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(mapping))
}

func TestExternalDataMappedOncePerFileAndNotCopied(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.bin", seq(0, 64))
	writeFile(t, dir, "sub/b.bin", seq(100, 8))
	m, err := Load(writeModel(t, dir, modelWith(
		external(tensor("a0", onnxpb.TensorProto_FLOAT, 4), "a.bin", "0", "16"),
		external(tensor("a1", onnxpb.TensorProto_INT64, 2), "./a.bin", "32", "16"),
		external(tensor("a2", onnxpb.TensorProto_UINT8, 2, 2), "sub/../a.bin", "60", ""),
		external(tensor("b", onnxpb.TensorProto_INT32, 2), "sub/b.bin", "", ""),
	)))
	require.NoError(t, err)
	require.Len(t, m.mappings, 2, "one mapping per distinct file")
	assert.Equal(t, 1, mappingsOf(t, filepath.Join(dir, "a.bin")), "a.bin is mapped once")
	assert.Equal(t, 1, mappingsOf(t, filepath.Join(dir, "sub", "b.bin")), "b.bin is mapped once")
	want := map[string][]byte{"a0": seq(0, 16), "a1": seq(32, 16), "a2": seq(60, 4), "b": seq(100, 8)}
	for name, w := range want {
		raw, err := m.Tensors[name].Raw()
		require.NoError(t, err, name)
		assert.Equal(t, w, raw, name)
		file := "a.bin"
		if name == "b" {
			file = "sub/b.bin"
		}
		assert.True(t, mappedIn(raw, m.mappings[file]), "%s is a view of the %s mapping", name, file)
		assert.Equal(t, len(raw), cap(raw), "%s cannot be appended into its neighbours", name)
	}

	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close twice")
	assert.Zero(t, mappingsOf(t, filepath.Join(dir, "a.bin")), "unmapped on Close")
	_, err = m.Tensors["a0"].Raw()
	assert.ErrorContains(t, err, `initializer "a0": model is closed`)
}

func TestOpsets(t *testing.T) {
	opset := func(domain string, v int64) *onnxpb.OperatorSetIdProto {
		return &onnxpb.OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(v)}
	}
	tests := []struct {
		name    string
		imports []*onnxpb.OperatorSetIdProto
		want    map[string]int64
		err     string
	}{
		{"default domain", []*onnxpb.OperatorSetIdProto{opset("", 21)}, map[string]int64{"": 21}, ""},
		{"ai.onnx is the default domain", []*onnxpb.OperatorSetIdProto{opset("ai.onnx", 18), opset("com.microsoft", 1)},
			map[string]int64{"": 18, "com.microsoft": 1}, ""},
		{"absent domain field", []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(13)}}, map[string]int64{"": 13}, ""},
		{"same version twice", []*onnxpb.OperatorSetIdProto{opset("", 17), opset("ai.onnx", 17)}, map[string]int64{"": 17}, ""},
		{"none", nil, map[string]int64{}, ""},
		{"conflicting versions", []*onnxpb.OperatorSetIdProto{opset("", 17), opset("ai.onnx", 18)}, nil,
			`opset_import lists domain "ai.onnx" twice, as versions 17 and 18`},
		{"version zero", []*onnxpb.OperatorSetIdProto{opset("", 0)}, nil, `opset_import of domain "" has version 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mp := modelWith()
			mp.OpsetImport = tt.imports
			m, err := Parse(marshal(t, mp), "")
			if tt.err != "" {
				assert.EqualError(t, err, "parse model: "+tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, m.Opsets)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	f32 := func(name string, dims ...int64) *onnxpb.TensorProto {
		return tensor(name, onnxpb.TensorProto_FLOAT, dims...)
	}
	tests := []struct {
		name  string
		model *onnxpb.ModelProto // nil: write data instead
		data  []byte
		setup func(t *testing.T, dir string)
		err   string // the error after "load <dir>/model.onnx: "
	}{
		{name: "missing external file",
			model: modelWith(external(f32("w", 2), "w.bin", "", "")),
			err:   `initializer "w": external data file w.bin not found in `},
		{name: "offset past end",
			model: modelWith(external(f32("w", 100), "w.bin", "100", "400")),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "w.bin", make([]byte, 300)) },
			err:   `initializer "w": external data offset 100+400 past end of w.bin (300 bytes)`},
		{name: "offset past end without length",
			model: modelWith(external(f32("w", 1), "w.bin", "301", "")),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "w.bin", make([]byte, 300)) },
			err:   `initializer "w": external data offset 301 past end of w.bin (300 bytes)`},
		{name: "offset plus length overflows",
			model: modelWith(external(f32("w", 1), "w.bin", "9223372036854775807", "4")),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "w.bin", make([]byte, 8)) },
			err:   `initializer "w": external data offset 9223372036854775807+4 past end of w.bin (8 bytes)`},
		{name: "length mismatch",
			model: modelWith(external(f32("w", 3), "w.bin", "0", "8")),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "w.bin", make([]byte, 16)) },
			err:   `initializer "w": external data length 8 in w.bin, want 12 for FLOAT shape [3]`},
		{name: "rest of file is the wrong length",
			model: modelWith(external(f32("w", 3), "w.bin", "", "")),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "w.bin", make([]byte, 16)) },
			err:   `initializer "w": external data length 16 in w.bin, want 12 for FLOAT shape [3]`},
		{name: "dot-dot escape",
			model: modelWith(external(f32("w", 1), "../w.bin", "", "")),
			err:   `initializer "w": external data location "../w.bin" is not a relative path inside the model's folder`},
		{name: "hidden dot-dot escape",
			model: modelWith(external(f32("w", 1), "sub/../../w.bin", "", "")),
			err:   `initializer "w": external data location "sub/../../w.bin" is not a relative path inside the model's folder`},
		{name: "absolute path",
			model: modelWith(external(f32("w", 1), "/etc/passwd", "", "")),
			err:   `initializer "w": external data location "/etc/passwd" is not a relative path inside the model's folder`},
		{name: "symlink out of the folder",
			model: modelWith(external(f32("w", 1), "link.bin", "", "")),
			setup: func(t *testing.T, dir string) {
				outside := filepath.Join(t.TempDir(), "secret.bin")
				require.NoError(t, os.WriteFile(outside, make([]byte, 4), 0o644))
				require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link.bin")))
			},
			err: `initializer "w": external data link.bin: `},
		{name: "location is a folder",
			model: modelWith(external(f32("w", 1), "sub", "", "")),
			setup: func(t *testing.T, dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755)) },
			err:   `initializer "w": external data sub is not a regular file`},
		{name: "no location",
			model: modelWith(func() *onnxpb.TensorProto {
				x := external(f32("w", 1), "", "", "")
				x.ExternalData = x.ExternalData[1:]
				x.ExternalData = append(x.ExternalData, &onnxpb.StringStringEntryProto{Key: proto.String("offset"), Value: proto.String("0")})
				return x
			}()),
			err: `initializer "w": external data has no "location"`},
		{name: "bad offset",
			model: modelWith(external(f32("w", 1), "w.bin", "12abc", "")),
			err:   `initializer "w": external data offset "12abc" is not a non-negative integer`},
		{name: "negative length",
			model: modelWith(external(f32("w", 1), "w.bin", "", "-4")),
			err:   `initializer "w": external data length "-4" is not a non-negative integer`},
		{name: "duplicate key",
			model: modelWith(func() *onnxpb.TensorProto {
				x := external(f32("w", 1), "w.bin", "0", "")
				x.ExternalData = append(x.ExternalData, x.ExternalData[1])
				return x
			}()),
			err: `initializer "w": external_data key "offset" appears twice`},
		{name: "external_data without data_location",
			model: modelWith(func() *onnxpb.TensorProto {
				x := external(f32("w", 1), "w.bin", "", "")
				x.DataLocation = nil
				return x
			}()),
			err: `initializer "w": has external_data but data_location is not EXTERNAL`},
		{name: "EXTERNAL without external_data",
			model: modelWith(func() *onnxpb.TensorProto {
				x := f32("w", 1)
				x.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
				return x
			}()),
			err: `initializer "w": data_location is EXTERNAL but external_data is empty`},
		{name: "external and raw_data",
			model: modelWith(withRaw(external(f32("w", 1), "w.bin", "", ""), make([]byte, 4))),
			err:   `initializer "w": data is stored in more than one form (raw_data, external data)`},
		{name: "truncated protobuf",
			data: marshal(t, modelWith(withRaw(f32("w", 4), make([]byte, 16))))[:20],
			err:  `not a serialized ModelProto: `},
		{name: "garbage protobuf",
			data: []byte("this is not a protobuf \xff\xff\xff\xff"),
			err:  `not a serialized ModelProto: `},
		{name: "empty file has no graph",
			data: []byte{},
			err:  `model has no graph`},
		{name: "negative dimension",
			model: modelWith(withRaw(f32("w", 2, -3), nil)),
			err:   `initializer "w": dimension 1 is negative (-3)`},
		{name: "element count overflows",
			model: modelWith(f32("w", 1<<40, 1<<40)),
			err:   `initializer "w": shape [1099511627776 1099511627776] has more than 2^63-1 elements`},
		{name: "byte size overflows",
			model: modelWith(tensor("w", onnxpb.TensorProto_DOUBLE, 1<<61)),
			err:   `initializer "w": shape [2305843009213693952] of DOUBLE is more than 2^63-1 bytes`},
		{name: "huge dims without data",
			model: modelWith(f32("w", 1<<20, 1<<20)),
			err:   `initializer "w": no data for shape [1048576 1048576] (1099511627776 elements)`},
		{name: "huge dims with little raw_data",
			model: modelWith(withRaw(f32("w", 1<<30), make([]byte, 8))),
			err:   `initializer "w": raw_data is 8 bytes, want 4294967296 for FLOAT shape [1073741824]`},
		{name: "raw_data wrong length",
			model: modelWith(withRaw(f32("w", 3), make([]byte, 11))),
			err:   `initializer "w": raw_data is 11 bytes, want 12 for FLOAT shape [3]`},
		{name: "float_data count",
			model: modelWith(func() *onnxpb.TensorProto { x := f32("w", 3); x.FloatData = []float32{1, 2}; return x }()),
			err:   `initializer "w": float_data has 2 entries, want 3 for FLOAT shape [3]`},
		{name: "float_data for INT64",
			model: modelWith(func() *onnxpb.TensorProto {
				x := tensor("w", onnxpb.TensorProto_INT64, 1)
				x.FloatData = []float32{1}
				return x
			}()),
			err: `initializer "w": float_data cannot hold data type INT64`},
		{name: "int32_data out of range for INT8",
			model: modelWith(func() *onnxpb.TensorProto {
				x := tensor("w", onnxpb.TensorProto_INT8, 2)
				x.Int32Data = []int32{1, 300}
				return x
			}()),
			err: `initializer "w": int32_data[1] = 300 does not fit a 8-bit INT8 value`},
		{name: "uint64_data out of range for UINT32",
			model: modelWith(func() *onnxpb.TensorProto {
				x := tensor("w", onnxpb.TensorProto_UINT32, 1)
				x.Uint64Data = []uint64{1 << 32}
				return x
			}()),
			err: `initializer "w": uint64_data[0] = 4294967296 does not fit UINT32`},
		{name: "two storage forms",
			model: modelWith(func() *onnxpb.TensorProto {
				x := withRaw(f32("w", 1), make([]byte, 4))
				x.FloatData = []float32{1}
				return x
			}()),
			err: `initializer "w": data is stored in more than one form (raw_data, float_data)`},
		{name: "unknown data type",
			model: modelWith(tensor("w", onnxpb.TensorProto_DataType(99), 1)),
			err:   `initializer "w": unknown data type 99`},
		{name: "undefined data type",
			model: modelWith(tensor("w", onnxpb.TensorProto_UNDEFINED, 1)),
			err:   `initializer "w": data type is UNDEFINED`},
		{name: "string tensor in raw_data",
			model: modelWith(withRaw(tensor("w", onnxpb.TensorProto_STRING, 1), []byte("x"))),
			err:   `initializer "w": STRING tensor must use string_data, not raw_data`},
		{name: "segment",
			model: modelWith(func() *onnxpb.TensorProto {
				x := withRaw(f32("w", 1), make([]byte, 4))
				x.Segment = &onnxpb.TensorProto_Segment{Begin: proto.Int64(0), End: proto.Int64(1)}
				return x
			}()),
			err: `initializer "w": segmented tensors (segment 0..1) are not supported`},
		{name: "unnamed initializer",
			model: modelWith(withRaw(tensor("", onnxpb.TensorProto_FLOAT, 1), make([]byte, 4))),
			err:   `initializer 0 has no name`},
		{name: "duplicate initializer",
			model: modelWith(withRaw(f32("w", 1), make([]byte, 4)), withRaw(f32("w", 1), make([]byte, 4))),
			err:   `initializer "w" appears twice`},
		{name: "sparse initializer",
			model: func() *onnxpb.ModelProto {
				mp := modelWith()
				mp.Graph.SparseInitializer = []*onnxpb.SparseTensorProto{{Values: f32("s", 0), Dims: []int64{4}}}
				return mp
			}(),
			err: `sparse initializer "s": sparse initializers are not supported`},
		{name: "no graph",
			model: &onnxpb.ModelProto{IrVersion: proto.Int64(10)},
			err:   `model has no graph`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			path := filepath.Join(dir, "model.onnx")
			if tt.model != nil {
				path = writeModel(t, dir, tt.model)
			} else {
				require.NoError(t, os.WriteFile(path, tt.data, 0o644))
			}
			m, err := Load(path)
			require.Error(t, err)
			assert.Nil(t, m)
			assert.True(t, strings.HasPrefix(err.Error(), "load "+path+": "+tt.err), "error %q\nwant prefix %q", err, "load "+path+": "+tt.err)
		})
	}
}

func TestParseExternalWithoutDir(t *testing.T) {
	_, err := Parse(marshal(t, modelWith(external(tensor("w", onnxpb.TensorProto_FLOAT, 1), "w.bin", "", ""))), "")
	assert.EqualError(t, err, `parse model: initializer "w": external data w.bin, but no folder was given to find it in`)
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.onnx"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "nope.onnx")
}

// A failing load unmaps what it had mapped: the second initializer fails
// after the first mapped its file.
func TestFailedLoadUnmaps(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.bin", make([]byte, 4))
	_, err := Load(writeModel(t, dir, modelWith(
		external(tensor("a", onnxpb.TensorProto_FLOAT, 1), "a.bin", "", ""),
		external(tensor("b", onnxpb.TensorProto_FLOAT, 1), "b.bin", "", ""),
	)))
	require.ErrorContains(t, err, `initializer "b": external data file b.bin not found`)
	assert.Zero(t, mappingsOf(t, filepath.Join(dir, "a.bin")))
}

// mappingsOf counts the process's memory mappings of the file at path, from
// /proc/self/maps; it skips the test where that is not available.
func mappingsOf(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasSuffix(strings.TrimRight(line, "\n"), " "+path) {
			n++
		}
	}
	return n
}
