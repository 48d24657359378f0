//go:build !linux

package nvrtc

// saveSignals and restoreSignals guard the Go runtime's signal handlers
// against NVRTC's on Linux (signals_linux.go); elsewhere they do nothing.
func saveSignals()    {}
func restoreSignals() {}
