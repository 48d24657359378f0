//go:build !linux

// Package dl loads C shared libraries at run time without cgo, through
// purego: the NVRTC compiler (cuda/nvrtc) and the CUDA driver (gpu) are
// both found this way, so that lumsearch builds and runs where neither is
// installed.
package dl

import (
	"errors"
	"runtime"
)

// ErrPlatform says libraries are loaded on Linux only.
var ErrPlatform = errors.New("loading CUDA libraries is supported on Linux only, not " + runtime.GOOS)

// Open fails: see ErrPlatform.
func Open(string) (uintptr, error) { return 0, ErrPlatform }

// Sym finds nothing.
func Sym(uintptr, string) uintptr { return 0 }

// Close does nothing.
func Close(uintptr) {}

// Bind cannot bind; it is never reached because Open fails first.
func Bind(any, uintptr) { panic(ErrPlatform) }
