//go:build linux

package nvrtc

import "github.com/ebitengine/purego"

// dlopen opens a shared library with RTLD_NOW|RTLD_LOCAL.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// dlsym returns the address of name in the library, or 0 when it is absent.
func dlsym(handle uintptr, name string) uintptr {
	sym, err := purego.Dlsym(handle, name)
	if err != nil {
		return 0
	}
	return sym
}

// dlclose releases a library that was opened but not kept.
func dlclose(handle uintptr) { _ = purego.Dlclose(handle) }

// bind makes the Go function that fptr points to call the C function at sym.
func bind(fptr any, sym uintptr) { purego.RegisterFunc(fptr, sym) }
