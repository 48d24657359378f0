// Package safetensors owns the safetensors format, the Hugging Face format
// every ML tool reads: reading checkpoints and writing lumsearch's own
// weight files.
//
// The file is an 8-byte little-endian header length N, N bytes of UTF-8
// JSON, then the data buffer. The JSON object maps each tensor's name to
// {"dtype", "shape": [dims...], "data_offsets": [begin, end]} (byte
// offsets into the data buffer, end exclusive), plus an optional
// "__metadata__" object of string values. Data are row-major and
// little-endian; BOOL is one byte, 0 or 1.
//
// Reading memory-maps a file (or a folder of shards), validates the header
// strictly and hands out tensors whose Data slices alias the read-only
// mapping, so tensor bytes are never copied. Parsing works on a plain
// []byte (Parse) so that the validation logic can be fuzzed without the
// file system, and never panics on a malformed file. Every value the
// reader returns is safe for concurrent reads; tensor data must not be
// written to (the mapping is read-only and writing faults) and must not be
// used after the File or Set that produced it is closed.
//
// Write lays a file out as the reference implementation does, so that
// every reader accepts it: the header is padded with spaces to a multiple
// of 8 bytes, and the tensors follow one another without gaps, the widest
// dtypes first and by name within a dtype width, so that each tensor's
// data is aligned to its element size in the file. lumsearch compile
// writes the prepared weights of a compiled model this way, and the
// model's host library loads them; Read and ReadFile give such a file
// back as ir tensors.
//
// The package imports ir and internal/mmap only.
package safetensors
