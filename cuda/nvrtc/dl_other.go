//go:build !linux

package nvrtc

import (
	"errors"
	"runtime"
)

var errPlatform = errors.New("loading NVRTC is supported on Linux only, not " + runtime.GOOS)

func dlopen(string) (uintptr, error) { return 0, errPlatform }

func dlsym(uintptr, string) uintptr { return 0 }

func dlclose(uintptr) {}

func bind(any, uintptr) { panic(errPlatform) }
