package onnx

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
)

const (
	benchTensors     = 8
	benchTensorBytes = 64 << 20 // 16 Mi float32 each, 512 MiB in all
	pageSize         = 4096
)

// writeLargeExternalModel writes dir/model.onnx whose benchTensors float32
// initializers of benchTensorBytes each live back to back in dir/weights.bin,
// streaming the data file through a small buffer.
func writeLargeExternalModel(b *testing.B, dir string) string {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "weights.bin"))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	chunk := make([]byte, 1<<20)
	var inits []*onnxpb.TensorProto
	for i := range benchTensors {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		for range benchTensorBytes / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		tp := tensor(fmt.Sprintf("w%d", i), onnxpb.TensorProto_FLOAT, benchTensorBytes/4/1024, 1024)
		inits = append(inits, external(tp, "weights.bin", strconv.Itoa(i*benchTensorBytes), strconv.Itoa(benchTensorBytes)))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	data, err := proto.Marshal(modelWith(inits...))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// vmHWM is the process's peak resident set size in bytes, from
// /proc/self/status; 0 where that is not available.
func vmHWM(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				b.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	return 0
}

// BenchmarkLoadLargeExternal times loading a model with 512 MiB of float32
// initializers in one external data file and reading a byte of every 4 KiB
// page of every tensor. peak-rss-MiB (VmHWM after; the peak is reset
// before the timed part where the kernel allows) shows the touched mapping
// counted in RSS, while heap-inuse-MiB shows that none of it was copied
// onto the Go heap.
func BenchmarkLoadLargeExternal(b *testing.B) {
	path := writeLargeExternalModel(b, b.TempDir())
	runtime.GC()
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	before := vmHWM(b)
	var heapInuse uint64
	var sum uint64
	b.SetBytes(benchTensors * benchTensorBytes)
	b.ResetTimer()
	for range b.N {
		m, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range m.Tensors {
			raw, err := t.Raw()
			if err != nil {
				b.Fatal(err)
			}
			for off := 0; off < len(raw); off += pageSize {
				sum += uint64(raw[off])
			}
		}
		b.StopTimer()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapInuse = max(heapInuse, ms.HeapInuse)
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	after := vmHWM(b)
	const mib = 1 << 20
	b.ReportMetric(float64(after)/mib, "peak-rss-MiB")
	b.ReportMetric(float64(after-before)/mib, "rss-growth-MiB")
	b.ReportMetric(float64(heapInuse)/mib, "heap-inuse-MiB")
	// Page k of tensor i starts with byte i (the pattern is i+j, j a
	// multiple of 4096 there).
	if want := uint64(b.N) * benchTensorBytes / pageSize * (benchTensors * (benchTensors - 1) / 2); sum != want {
		b.Fatalf("sum of page bytes %d, want %d", sum, want)
	}
}
