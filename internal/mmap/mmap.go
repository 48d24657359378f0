// Package mmap maps files read-only into memory, so that model weights
// (ONNX external data, safetensors checkpoints) are used in place instead
// of being read onto the Go heap, and advises the kernel on large memory
// (AdviseHuge). It is the one place the project calls the operating
// system's mmap and madvise.
package mmap
