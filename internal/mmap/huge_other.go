//go:build !linux

package mmap

// AdviseHuge does nothing off Linux, where transparent huge pages are not
// asked for this way.
func AdviseHuge(b []byte) {}
