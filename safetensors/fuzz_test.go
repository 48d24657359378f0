package safetensors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"unsafe"
)

// FuzzParseHeader feeds arbitrary bytes to Parse. It must never panic; when
// it accepts the input, every tensor must be internally consistent and lie
// inside the input, without overlapping another.
func FuzzParseHeader(f *testing.F) {
	f.Add(buildFile(f, []tt{
		{name: "a", dtype: "F32", shape: []int64{2}, data: le32(1, 2)},
		{name: "b", dtype: "F16", shape: []int64{1, 2}, data: le16(0x3C00, 0xC000)},
		{name: "c", dtype: "BF16", shape: nil, data: le16(0x4049)},
		{name: "d", dtype: "F4", shape: []int64{2}, data: []byte{0x12}},
	}, map[string]string{"format": "pt"}))
	f.Add(raw("{}", nil))
	f.Add(raw(`{"__metadata__":null}`, nil))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(raw(`{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, []byte{0}))
	f.Add(raw(`{"w":{"dtype":"U8","shape":[-1],"data_offsets":[1,0]}}`, nil))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<63))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.safetensors", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz.safetensors" {
				t.Fatalf("error %T %v does not name the file", err, err)
			}
			return
		}
		names := file.Names()
		if !slices.IsSorted(names) {
			t.Fatalf("names not sorted: %q", names)
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		type rng struct{ lo, hi uintptr }
		var ranges []rng
		for _, n := range names {
			tensor, ok := file.Tensor(n)
			if !ok {
				t.Fatalf("listed tensor %q not found", n)
			}
			bitsPer, known := DTypeBits(tensor.DType)
			if !known {
				t.Fatalf("%q: unknown dtype %q accepted", n, tensor.DType)
			}
			count := int64(1)
			for _, d := range tensor.Shape {
				if d < 0 {
					t.Fatalf("%q: negative dim accepted", n)
				}
				count *= d // cannot overflow: Parse checked it
			}
			if want := count * int64(bitsPer) / 8; int64(len(tensor.Data)) != want {
				t.Fatalf("%q: %d data bytes, want %d", n, len(tensor.Data), want)
			}
			if len(tensor.Data) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.SliceData(tensor.Data)))
			if p < base || p+uintptr(len(tensor.Data)) > base+uintptr(len(data)) {
				t.Fatalf("%q: data outside the input", n)
			}
			ranges = append(ranges, rng{p, p + uintptr(len(tensor.Data))})
			_, _ = tensor.Float32s()
		}
		slices.SortFunc(ranges, func(a, b rng) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(ranges); i++ {
			if ranges[i].lo < ranges[i-1].hi {
				t.Fatalf("overlapping tensors accepted")
			}
		}
		_ = file.Metadata()
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
