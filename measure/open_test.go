package measure

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenGPU: a driver that cannot be opened, or that finds no device,
// is a *DriverError wrapping gpu.ErrNoDevice; with the fake driver the
// measurer opens when NVRTC loads, and otherwise fails with NVRTC's error,
// which is no DriverError.
func TestOpenGPU(t *testing.T) {
	tests := []struct {
		name   string
		driver func(t *testing.T) // points LUMSEARCH_LIBCUDA somewhere
		noDev  bool
	}{
		{
			name:   "no driver library",
			driver: func(t *testing.T) { t.Setenv(gpu.EnvPath, filepath.Join(t.TempDir(), "libcuda.so.1")) },
			noDev:  true,
		},
		{
			name:   "no device",
			driver: func(t *testing.T) { fakecuda.Build(t).Set("no_device", 1) },
			noDev:  true,
		},
		{
			name:   "the fake driver",
			driver: func(t *testing.T) { fakecuda.Build(t) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.driver(t)
			g, err := OpenGPU()
			_, isDriver := errors.AsType[*DriverError](err)
			if tt.noDev {
				require.True(t, isDriver, "%v", err)
				assert.ErrorIs(t, err, gpu.ErrNoDevice)
				var de *DriverError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, de.Err.Error(), err.Error(), "the driver's text, unchanged")
				return
			}
			if _, lerr := nvrtc.Load(); lerr != nil {
				require.Error(t, err)
				assert.False(t, isDriver)
				assert.Equal(t, lerr.Error(), err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "Fake GPU", g.Ctx.Device().Name)
			assert.NotNil(t, g.NVRTC)
			require.NoError(t, g.Ctx.Release())
		})
	}
}
