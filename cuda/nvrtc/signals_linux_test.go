package nvrtc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompileKeepsSignalActions: every signal's action (the Go runtime's
// handlers with SA_ONSTACK, among them SIGINT's and SIGTERM's) is the
// same after compilations, one at a time and several at once, as before:
// NVRTC's compiler would otherwise leave them without SA_ONSTACK and the
// next Ctrl-C would crash the process.
func TestCompileKeepsSignalActions(t *testing.T) {
	lib := library(t)
	var before [numSignals]kernelSigaction
	for sig := 1; sig < numSignals; sig++ {
		sigaction(sig, nil, &before[sig])
	}
	const src = `extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }`
	_, err := lib.Compile(context.Background(), src, "k.cu", Options{Arch: "sm_80"})
	require.NoError(t, err)
	done := make(chan error)
	for range 3 {
		go func() {
			_, err := lib.Compile(context.Background(), src, "k.cu", Options{Arch: "sm_80"})
			done <- err
		}()
	}
	for range 3 {
		require.NoError(t, <-done)
	}
	for sig := 1; sig < numSignals; sig++ {
		var after kernelSigaction
		sigaction(sig, nil, &after)
		assert.Equal(t, before[sig], after, "signal %d", sig)
	}
	const saOnStack = 0x08000000
	for _, sig := range []int{2, 15} {
		var a kernelSigaction
		sigaction(sig, nil, &a)
		assert.NotZero(t, a[1]&saOnStack, "signal %d keeps SA_ONSTACK", sig)
	}
}
