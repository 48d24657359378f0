package mmap

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the machines we run on.
const hugePage = 2 << 20

// AdviseHuge asks the kernel to back the memory under b with transparent
// huge pages (madvise MADV_HUGEPAGE), which takes effect for pages not yet
// touched, so call it right after allocating. Real-shape tensors drawn for
// verification are gigabytes: in 4 KiB pages every first touch is a page
// fault and every copy out of them (to the emulation's input file) a TLB
// miss per page, which on a virtual machine cost several times the work
// itself. It is advice: where the kernel declines it, nothing changes.
func AdviseHuge(b []byte) {
	if len(b) < 2*hugePage {
		return
	}
	page := uintptr(unix.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	region := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), lo-start)), hi-lo)
	_ = unix.Madvise(region, unix.MADV_HUGEPAGE)
}
