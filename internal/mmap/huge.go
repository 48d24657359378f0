package mmap

import "unsafe"

// AdviseHugeFloat32 is AdviseHuge for a float32 slice.
func AdviseHugeFloat32(f []float32) {
	if len(f) > 0 {
		AdviseHuge(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f)))
	}
}

// AdviseHugeFloat64 is AdviseHuge for a float64 slice.
func AdviseHugeFloat64(f []float64) {
	if len(f) > 0 {
		AdviseHuge(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 8*len(f)))
	}
}
