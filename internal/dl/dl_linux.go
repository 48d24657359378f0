//go:build linux

// Package dl loads C shared libraries at run time without cgo, through
// purego: the NVRTC compiler (cuda/nvrtc) and the CUDA driver (gpu) are
// both found this way, so that lumsearch builds and runs where neither is
// installed.
package dl

import "github.com/ebitengine/purego"

// Open opens a shared library with RTLD_NOW|RTLD_LOCAL.
func Open(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// Sym returns the address of name in the library, or 0 when it is absent.
func Sym(handle uintptr, name string) uintptr {
	sym, err := purego.Dlsym(handle, name)
	if err != nil {
		return 0
	}
	return sym
}

// Close releases a library that was opened but not kept.
func Close(handle uintptr) { _ = purego.Dlclose(handle) }

// Bind makes the Go function that fptr points to call the C function at sym.
func Bind(fptr any, sym uintptr) { purego.RegisterFunc(fptr, sym) }
