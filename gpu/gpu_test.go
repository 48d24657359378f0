package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenMissingLibrary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-libcuda.so.1")
	t.Setenv(EnvPath, path)
	d, err := Open()
	require.Error(t, err)
	assert.Nil(t, d)
	assert.ErrorIs(t, err, ErrNoDevice)
	assert.Contains(t, err.Error(), "no CUDA device: "+path+" not found (")
}

func TestOpenNoDevice(t *testing.T) {
	f := fakecuda.Build(t)
	f.Set("no_device", 1)
	d, err := Open()
	require.Error(t, err)
	assert.Nil(t, d)
	assert.ErrorIs(t, err, ErrNoDevice)
	assert.Contains(t, err.Error(), "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected")
	var ce *Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, 100, ce.Code)
}

// openFake opens the fake driver and the primary context of its device.
func openFake(t *testing.T) (*fakecuda.Driver, *Driver, *Context) {
	f := fakecuda.Build(t)
	d, err := Open()
	require.NoError(t, err)
	dev, err := d.Device(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, ctx.Release())
		assert.Equal(t, int32(0), f.Allocs(), "allocations outstanding")
		assert.Equal(t, int32(0), f.Depth(), "context depth")
	})
	return f, d, ctx
}

func TestDeviceProperties(t *testing.T) {
	_, d, ctx := openFake(t)
	assert.Equal(t, 12040, d.Version())
	assert.True(t, d.HasGraphs())
	n, err := d.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	dev := ctx.Device()
	assert.Equal(t, "Fake GPU", dev.Name)
	assert.Equal(t, 9, dev.Major)
	assert.Equal(t, 0, dev.Minor)
	assert.Equal(t, "sm_90", dev.Arch())
	assert.Equal(t, 132, dev.SMs)
	assert.Equal(t, 1980000, dev.ClockKHz)
	assert.Equal(t, int64(80)<<30, dev.TotalMemory)
	assert.Equal(t, 1024, dev.MaxThreadsPerBlock)
	assert.Equal(t, 32, dev.WarpSize)
	assert.Equal(t, 49152, dev.SharedPerBlock)
	assert.Equal(t, 232448, dev.SharedPerBlockOptIn)
	_, err = d.Device(1)
	assert.ErrorContains(t, err, "device 1 does not exist")
	_, err = dev.Attribute(12345)
	assert.ErrorContains(t, err, "cuDeviceGetAttribute(12345): CUDA error 1: unknown error")
}

func TestBufferRoundTrip(t *testing.T) {
	_, _, ctx := openFake(t)
	b, err := ctx.Alloc(4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	src := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	require.NoError(t, b.Upload(src))
	require.NoError(t, b.Memset(100, 50, 0xab))
	dst := make([]byte, 4096)
	require.NoError(t, b.Download(dst))
	want := append([]byte(nil), src...)
	for i := 100; i < 150; i++ {
		want[i] = 0xab
	}
	assert.Equal(t, want, dst)
	assert.ErrorContains(t, b.Memset(4000, 200, 0), "outside a buffer of 4096")
	assert.ErrorContains(t, b.Upload(make([]byte, 5000)), "outside a buffer of 4096")
}

func TestAllocError(t *testing.T) {
	f, _, ctx := openFake(t)
	f.Set("fail_alloc", 1)
	_, err := ctx.Alloc(1 << 20)
	require.Error(t, err)
	assert.EqualError(t, err, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
	var ce *Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", ce.Name)
	assert.Equal(t, 2, ce.Code)
	assert.NotErrorIs(t, err, ErrNoDevice)
}

func TestLaunch(t *testing.T) {
	f, _, ctx := openFake(t)
	f.Set("nparams", 3)
	m, err := ctx.LoadModule([]byte(".version 8.0\n.target sm_90\n"))
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Unload()) }()
	fn, err := m.Function("k")
	require.NoError(t, err)
	_, err = m.Function("missing")
	assert.ErrorContains(t, err, "cuModuleGetFunction(missing): CUDA error 500")
	b, err := ctx.Alloc(64)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	require.NoError(t, fn.Launch([3]int{4, 2, 1}, [3]int{128, 1, 1}, 256, nil, b, int32(-7), float32(1.5)))
	want := fmt.Sprintf("load .version\nlaunch grid=4,2,1 block=128,1,1 shared=256 stream=0 %x %x %x\n",
		b.Ptr(), uint32(0xfffffff9), math.Float32bits(1.5))
	assert.Equal(t, want, f.Log())
	assert.ErrorContains(t, fn.Launch([3]int{0, 1, 1}, [3]int{1, 1, 1}, 0, nil), "dimension 0 is 0")
	assert.ErrorContains(t, fn.Launch([3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, nil, "x"), "argument 0 has unsupported type string")
}

func TestStreamEventsGraph(t *testing.T) {
	f, _, ctx := openFake(t)
	f.Set("nparams", 1)
	m, err := ctx.LoadModule([]byte("//ptx"))
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Unload()) }()
	fn, err := m.Function("k")
	require.NoError(t, err)
	s, err := ctx.NewStream(true)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Destroy()) }()

	start, err := ctx.NewEvent()
	require.NoError(t, err)
	defer func() { require.NoError(t, start.Destroy()) }()
	end, err := ctx.NewEvent()
	require.NoError(t, err)
	defer func() { require.NoError(t, end.Destroy()) }()
	require.NoError(t, start.Record(s))
	require.NoError(t, fn.Launch([3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, s, int64(5)))
	require.NoError(t, end.Record(s))
	require.NoError(t, end.Synchronize())
	ms, err := Elapsed(start, end)
	require.NoError(t, err)
	assert.InDelta(t, 1.5, ms, 1e-6)

	require.NoError(t, s.BeginCapture())
	for i := range 3 {
		require.NoError(t, fn.Launch([3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, s, int64(i)))
	}
	g, err := s.EndCapture()
	require.NoError(t, err)
	x, err := g.Instantiate()
	require.NoError(t, err)
	require.NoError(t, g.Destroy())
	require.NoError(t, x.Launch(s))
	require.NoError(t, s.Synchronize())
	require.NoError(t, ctx.Synchronize())
	require.NoError(t, x.Destroy())
	assert.Equal(t, "load //ptx\nrecord stream=s\nlaunch grid=1,1,1 block=32,1,1 shared=0 stream=s 5\nrecord stream=s\ngraph launch 3 kernels stream=s\n", f.Log())
}

// TestConcurrent runs buffer round trips from several goroutines: each
// operation pushes and pops the context on its own locked OS thread.
func TestConcurrent(t *testing.T) {
	_, _, ctx := openFake(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := range errs {
		wg.Go(func() {
			errs[g] = func() error {
				for i := range 20 {
					b, err := ctx.Alloc(256)
					if err != nil {
						return err
					}
					src := bytes.Repeat([]byte{byte(g), byte(i)}, 128)
					if err := b.Upload(src); err != nil {
						return err
					}
					dst := make([]byte, 256)
					if err := b.Download(dst); err != nil {
						return err
					}
					if !bytes.Equal(src, dst) {
						return fmt.Errorf("goroutine %d round %d: data differs", g, i)
					}
					if err := b.Free(); err != nil {
						return err
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// TestMain removes the fake driver's folder after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	fakecuda.Cleanup()
	os.Exit(code)
}
