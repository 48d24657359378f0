package measure

import (
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
)

// DriverError is OpenGPU's error when the CUDA driver itself could not be
// opened (gpu.Open failed: no driver library, no device), as opposed to a
// later step; a caller may then offer the CPU emulation instead. Its text
// is the driver's error's.
type DriverError struct {
	// Err is gpu.Open's error.
	Err error
}

// Error returns the driver's error text.
func (e *DriverError) Error() string { return e.Err.Error() }

// Unwrap returns the driver's error, so that errors.Is finds
// gpu.ErrNoDevice through it.
func (e *DriverError) Unwrap() error { return e.Err }

// OpenGPU opens the CUDA driver, retains device 0's primary context and
// loads NVRTC: the GPU measurer with its defaults. The caller releases
// g.Ctx when done; on an error nothing stays retained. A failure of the
// driver itself is a *DriverError; the other errors are those of the
// step that failed, unwrapped.
func OpenGPU() (GPU, error) {
	d, err := gpu.Open()
	if err != nil {
		return GPU{}, &DriverError{Err: err}
	}
	dev, err := d.Device(0)
	if err != nil {
		return GPU{}, err
	}
	c, err := dev.PrimaryContext()
	if err != nil {
		return GPU{}, err
	}
	lib, err := nvrtc.Load()
	if err != nil {
		_ = c.Release() // the error to report is NVRTC's
		return GPU{}, err
	}
	return GPU{Ctx: c, NVRTC: lib}, nil
}
