// Package gpu owns the process's access to an NVIDIA GPU: the CUDA driver API
// (libcuda.so.1), loaded at run time through github.com/ebitengine/purego with
// no cgo and no CUDA header at build time.
//
// [Open] loads the driver ($LUMSEARCH_LIBCUDA names another library, for
// tests) and calls cuInit. Without the library or without a device it returns
// an error that wraps [ErrNoDevice] and says why; it never crashes. Every
// driver call is checked, and its error names the call and CUDA's error name
// and string.
//
// CUDA contexts are current per OS thread, so every operation runs with the
// device's primary context pushed on a goroutine locked to its OS thread
// ([Context.Do]), so any goroutine may use a Context; one Buffer, Stream or
// Event must not be freed or destroyed while another goroutine uses it.
//
// Left to callers: the driver handle stays open for the life of the process,
// and asynchronous copies, pinned host memory and multi-GPU work are not
// offered yet.
package gpu

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/lumsearch/lumsearch/internal/dl"
)

// EnvPath names the environment variable that points [Open] at a driver
// library other than libcuda.so.1.
const EnvPath = "LUMSEARCH_LIBCUDA"

// ErrNoDevice is wrapped by the error of an [Open] that found no usable
// driver or no device.
var ErrNoDevice = errors.New("no CUDA device")

// cuResult is the driver's status code; 0 is CUDA_SUCCESS.
type cuResult = int32

// CUDA error codes the package tells apart.
const (
	cudaErrorNoDevice = 100
)

// Device attribute codes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock   = 1
	attrMaxSharedPerBlock    = 8
	attrWarpSize             = 10
	attrClockRate            = 13
	attrMultiprocessorCount  = 16
	attrComputeCapMajor      = 75
	attrComputeCapMinor      = 76
	attrMaxSharedOptinPerBlk = 97
)

// Driver is a loaded CUDA driver. Its methods are safe for concurrent use.
type Driver struct {
	path    string
	version int

	cuInit                 func(flags uint32) cuResult
	cuDriverGetVersion     func(v *int32) cuResult
	cuGetErrorName         func(r cuResult, s **byte) cuResult
	cuGetErrorString       func(r cuResult, s **byte) cuResult
	cuDeviceGetCount       func(n *int32) cuResult
	cuDeviceGet            func(d *int32, ordinal int32) cuResult
	cuDeviceGetName        func(name *byte, n int32, d int32) cuResult
	cuDeviceGetAttribute   func(v *int32, attr int32, d int32) cuResult
	cuDeviceTotalMem       func(b *uint64, d int32) cuResult
	cuPrimaryCtxRetain     func(c *uintptr, d int32) cuResult
	cuPrimaryCtxRelease    func(d int32) cuResult
	cuCtxPushCurrent       func(c uintptr) cuResult
	cuCtxPopCurrent        func(c *uintptr) cuResult
	cuCtxSynchronize       func() cuResult
	cuMemAlloc             func(p *uint64, size uint64) cuResult
	cuMemFree              func(p uint64) cuResult
	cuMemcpyHtoD           func(dst uint64, src unsafe.Pointer, n uint64) cuResult
	cuMemcpyDtoH           func(dst unsafe.Pointer, src uint64, n uint64) cuResult
	cuMemsetD8             func(dst uint64, v uint8, n uint64) cuResult
	cuModuleLoadData       func(m *uintptr, image unsafe.Pointer) cuResult
	cuModuleGetFunction    func(f *uintptr, m uintptr, name *byte) cuResult
	cuModuleUnload         func(m uintptr) cuResult
	cuLaunchKernel         func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) cuResult
	cuStreamCreate         func(s *uintptr, flags uint32) cuResult
	cuStreamSynchronize    func(s uintptr) cuResult
	cuStreamDestroy        func(s uintptr) cuResult
	cuEventCreate          func(e *uintptr, flags uint32) cuResult
	cuEventRecord          func(e, s uintptr) cuResult
	cuEventSynchronize     func(e uintptr) cuResult
	cuEventElapsedTime     func(ms *float32, start, end uintptr) cuResult
	cuEventDestroy         func(e uintptr) cuResult
	cuStreamBeginCapture   func(s uintptr, mode uint32) cuResult // nil when absent
	cuStreamEndCapture     func(s uintptr, g *uintptr) cuResult  // nil when absent
	cuGraphInstantiateFlag func(e *uintptr, g uintptr, flags uint64) cuResult
	cuGraphInstantiateOld  func(e *uintptr, g uintptr, errNode *uintptr, log *byte, n uint64) cuResult
	cuGraphLaunch          func(e, s uintptr) cuResult // nil when absent
	cuGraphExecDestroy     func(e uintptr) cuResult    // nil when absent
	cuGraphDestroy         func(g uintptr) cuResult    // nil when absent
}

// Open loads the CUDA driver from $LUMSEARCH_LIBCUDA or libcuda.so.1, binds
// the functions the package uses and initialises it. An error that means no
// GPU can be used here wraps [ErrNoDevice].
func Open() (*Driver, error) {
	path := os.Getenv(EnvPath)
	if path == "" {
		path = "libcuda.so.1"
	}
	h, err := dl.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s not found (%v)", ErrNoDevice, path, err)
	}
	d := &Driver{path: path}
	required := []struct {
		names []string
		fptr  any
	}{
		{[]string{"cuInit"}, &d.cuInit},
		{[]string{"cuDriverGetVersion"}, &d.cuDriverGetVersion},
		{[]string{"cuGetErrorName"}, &d.cuGetErrorName},
		{[]string{"cuGetErrorString"}, &d.cuGetErrorString},
		{[]string{"cuDeviceGetCount"}, &d.cuDeviceGetCount},
		{[]string{"cuDeviceGet"}, &d.cuDeviceGet},
		{[]string{"cuDeviceGetName"}, &d.cuDeviceGetName},
		{[]string{"cuDeviceGetAttribute"}, &d.cuDeviceGetAttribute},
		{[]string{"cuDeviceTotalMem_v2"}, &d.cuDeviceTotalMem},
		{[]string{"cuDevicePrimaryCtxRetain"}, &d.cuPrimaryCtxRetain},
		{[]string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, &d.cuPrimaryCtxRelease},
		{[]string{"cuCtxPushCurrent_v2"}, &d.cuCtxPushCurrent},
		{[]string{"cuCtxPopCurrent_v2"}, &d.cuCtxPopCurrent},
		{[]string{"cuCtxSynchronize"}, &d.cuCtxSynchronize},
		{[]string{"cuMemAlloc_v2"}, &d.cuMemAlloc},
		{[]string{"cuMemFree_v2"}, &d.cuMemFree},
		{[]string{"cuMemcpyHtoD_v2"}, &d.cuMemcpyHtoD},
		{[]string{"cuMemcpyDtoH_v2"}, &d.cuMemcpyDtoH},
		{[]string{"cuMemsetD8_v2"}, &d.cuMemsetD8},
		{[]string{"cuModuleLoadData"}, &d.cuModuleLoadData},
		{[]string{"cuModuleGetFunction"}, &d.cuModuleGetFunction},
		{[]string{"cuModuleUnload"}, &d.cuModuleUnload},
		{[]string{"cuLaunchKernel"}, &d.cuLaunchKernel},
		{[]string{"cuStreamCreate"}, &d.cuStreamCreate},
		{[]string{"cuStreamSynchronize"}, &d.cuStreamSynchronize},
		{[]string{"cuStreamDestroy_v2", "cuStreamDestroy"}, &d.cuStreamDestroy},
		{[]string{"cuEventCreate"}, &d.cuEventCreate},
		{[]string{"cuEventRecord"}, &d.cuEventRecord},
		{[]string{"cuEventSynchronize"}, &d.cuEventSynchronize},
		{[]string{"cuEventElapsedTime"}, &d.cuEventElapsedTime},
		{[]string{"cuEventDestroy_v2", "cuEventDestroy"}, &d.cuEventDestroy},
	}
	for _, f := range required {
		sym := uintptr(0)
		for _, n := range f.names {
			if sym = dl.Sym(h, n); sym != 0 {
				break
			}
		}
		if sym == 0 {
			dl.Close(h)
			return nil, fmt.Errorf("%w: %s has no %s: not a usable CUDA driver", ErrNoDevice, path, f.names[0])
		}
		dl.Bind(f.fptr, sym)
	}
	// Graphs are optional: a driver without them still runs kernels.
	optional := []struct {
		name string
		fptr any
	}{
		{"cuStreamBeginCapture_v2", &d.cuStreamBeginCapture},
		{"cuStreamEndCapture", &d.cuStreamEndCapture},
		{"cuGraphLaunch", &d.cuGraphLaunch},
		{"cuGraphExecDestroy", &d.cuGraphExecDestroy},
		{"cuGraphDestroy", &d.cuGraphDestroy},
		// From CUDA 11.4 on; CUDA 12 headers turn cuGraphInstantiate into it.
		{"cuGraphInstantiateWithFlags", &d.cuGraphInstantiateFlag},
	}
	for _, f := range optional {
		if sym := dl.Sym(h, f.name); sym != 0 {
			dl.Bind(f.fptr, sym)
		}
	}
	if d.cuGraphInstantiateFlag == nil {
		// The five-argument form: cuGraphInstantiate_v2 in CUDA 12's
		// library, cuGraphInstantiate before CUDA 12.
		for _, n := range []string{"cuGraphInstantiate_v2", "cuGraphInstantiate"} {
			if sym := dl.Sym(h, n); sym != 0 {
				dl.Bind(&d.cuGraphInstantiateOld, sym)
				break
			}
		}
	}
	if r := d.cuInit(0); r != 0 {
		err := d.check("cuInit", r)
		dl.Close(h)
		if r == cudaErrorNoDevice {
			return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
		}
		return nil, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		dl.Close(h)
		return nil, err
	}
	d.version = int(v)
	// The handle stays open for the life of the process.
	return d, nil
}

// Path returns the name or path the driver was loaded from.
func (d *Driver) Path() string { return d.path }

// Version returns the driver's CUDA version, such as 12040 for 12.4.
func (d *Driver) Version() int { return d.version }

// HasGraphs reports whether the driver offers stream capture and graphs.
func (d *Driver) HasGraphs() bool {
	return d.cuStreamBeginCapture != nil && d.cuStreamEndCapture != nil && d.cuGraphLaunch != nil &&
		d.cuGraphExecDestroy != nil && d.cuGraphDestroy != nil &&
		(d.cuGraphInstantiateFlag != nil || d.cuGraphInstantiateOld != nil)
}

// Error is a failed driver call.
type Error struct {
	Call   string // the driver function, such as "cuMemAlloc"
	Code   int    // the CUresult
	Name   string // such as CUDA_ERROR_OUT_OF_MEMORY
	String string // the driver's description
}

// Error returns "call: CUDA_ERROR_NAME: description".
func (e *Error) Error() string {
	return e.Call + ": " + e.Name + ": " + e.String
}

// check turns a CUresult into nil or an *Error.
func (d *Driver) check(call string, r cuResult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: "CUDA error " + strconv.Itoa(int(r)), String: "unknown error"}
	var p *byte
	if d.cuGetErrorName(r, &p) == 0 && p != nil {
		e.Name = goString(p)
	}
	p = nil
	if d.cuGetErrorString(r, &p) == 0 && p != nil {
		e.String = goString(p)
	}
	return e
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	var b strings.Builder
	for q := p; *q != 0; q = (*byte)(unsafe.Add(unsafe.Pointer(q), 1)) {
		b.WriteByte(*q)
	}
	return b.String()
}

// DeviceCount returns the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device describes one GPU.
type Device struct {
	drv     *Driver
	handle  int32
	Ordinal int    // the index given to [Driver.Device]
	Name    string // such as "NVIDIA H100 80GB HBM3"
	// Major and Minor are the compute capability (9, 0 for sm_90).
	Major, Minor        int
	SMs                 int   // streaming multiprocessors
	ClockKHz            int   // peak SM clock
	TotalMemory         int64 // bytes of device memory
	MaxThreadsPerBlock  int
	WarpSize            int
	SharedPerBlock      int // bytes of shared memory a block gets by default
	SharedPerBlockOptIn int // bytes a block may opt in to (0 when unknown)
}

// Device returns the device with the given ordinal and its properties.
func (d *Driver) Device(ordinal int) (*Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gpu: device %d does not exist (%d devices)", ordinal, n)
	}
	dev := &Device{drv: d, Ordinal: ordinal}
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev.handle, int32(ordinal))); err != nil {
		return nil, err
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), dev.handle)); err != nil {
		return nil, err
	}
	if i := strings.IndexByte(string(name), 0); i >= 0 {
		name = name[:i]
	}
	dev.Name = string(name)
	attrs := []struct {
		attr int32
		dst  *int
	}{
		{attrComputeCapMajor, &dev.Major},
		{attrComputeCapMinor, &dev.Minor},
		{attrMultiprocessorCount, &dev.SMs},
		{attrClockRate, &dev.ClockKHz},
		{attrMaxThreadsPerBlock, &dev.MaxThreadsPerBlock},
		{attrWarpSize, &dev.WarpSize},
		{attrMaxSharedPerBlock, &dev.SharedPerBlock},
		{attrMaxSharedOptinPerBlk, &dev.SharedPerBlockOptIn},
	}
	for _, a := range attrs {
		v, err := dev.Attribute(int(a.attr))
		if err != nil {
			return nil, err
		}
		*a.dst = v
	}
	var mem uint64
	if err := d.check("cuDeviceTotalMem", d.cuDeviceTotalMem(&mem, dev.handle)); err != nil {
		return nil, err
	}
	dev.TotalMemory = int64(mem)
	return dev, nil
}

// Attribute returns one CUdevice_attribute of the device.
func (dev *Device) Attribute(attr int) (int, error) {
	var v int32
	if err := dev.drv.check(fmt.Sprintf("cuDeviceGetAttribute(%d)", attr), dev.drv.cuDeviceGetAttribute(&v, int32(attr), dev.handle)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Arch returns the device's real architecture, such as "sm_90".
func (dev *Device) Arch() string { return fmt.Sprintf("sm_%d%d", dev.Major, dev.Minor) }

// Context is a device's primary context, retained.
type Context struct {
	drv    *Driver
	dev    *Device
	handle uintptr
}

// PrimaryContext retains the device's primary context. Release it when done.
func (dev *Device) PrimaryContext() (*Context, error) {
	c := &Context{drv: dev.drv, dev: dev}
	if err := dev.drv.check("cuDevicePrimaryCtxRetain", dev.drv.cuPrimaryCtxRetain(&c.handle, dev.handle)); err != nil {
		return nil, err
	}
	return c, nil
}

// Device returns the context's device.
func (c *Context) Device() *Device { return c.dev }

// Release releases the primary context. Free what was made in it first.
func (c *Context) Release() error {
	return c.drv.check("cuDevicePrimaryCtxRelease", c.drv.cuPrimaryCtxRelease(c.dev.handle))
}

// Do runs fn on a locked OS thread with the context current, and makes it
// no longer current afterwards. Driver calls inside fn may use the context.
func (c *Context) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.drv.check("cuCtxPushCurrent", c.drv.cuCtxPushCurrent(c.handle)); err != nil {
		return err
	}
	ferr := fn()
	var popped uintptr
	perr := c.drv.check("cuCtxPopCurrent", c.drv.cuCtxPopCurrent(&popped))
	return errors.Join(ferr, perr)
}

// call runs one driver call with the context current.
func (c *Context) call(name string, f func() cuResult) error {
	return c.Do(func() error { return c.drv.check(name, f()) })
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error {
	return c.call("cuCtxSynchronize", c.drv.cuCtxSynchronize)
}

// Buffer is device memory.
type Buffer struct {
	ctx  *Context
	ptr  uint64
	size int
}

// Alloc allocates size bytes of device memory.
func (c *Context) Alloc(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("gpu: alloc of %d bytes", size)
	}
	b := &Buffer{ctx: c, size: size}
	if err := c.call("cuMemAlloc", func() cuResult { return c.drv.cuMemAlloc(&b.ptr, uint64(size)) }); err != nil {
		return nil, err
	}
	return b, nil
}

// Ptr returns the device address.
func (b *Buffer) Ptr() uint64 { return b.ptr }

// Size returns the size in bytes.
func (b *Buffer) Size() int { return b.size }

// Free frees the memory; the Buffer must not be used afterwards.
func (b *Buffer) Free() error {
	if b.ptr == 0 {
		return nil
	}
	err := b.ctx.call("cuMemFree", func() cuResult { return b.ctx.drv.cuMemFree(b.ptr) })
	b.ptr = 0
	return err
}

func (b *Buffer) span(op string, off, n int) error {
	if b.ptr == 0 {
		return fmt.Errorf("gpu: %s on a freed buffer", op)
	}
	if off < 0 || n < 0 || off+n > b.size {
		return fmt.Errorf("gpu: %s of %d bytes at %d outside a buffer of %d", op, n, off, b.size)
	}
	return nil
}

// Upload copies src to the start of the buffer, synchronously.
func (b *Buffer) Upload(src []byte) error {
	if err := b.span("upload", 0, len(src)); err != nil || len(src) == 0 {
		return err
	}
	err := b.ctx.call("cuMemcpyHtoD", func() cuResult {
		return b.ctx.drv.cuMemcpyHtoD(b.ptr, unsafe.Pointer(&src[0]), uint64(len(src)))
	})
	runtime.KeepAlive(src)
	return err
}

// Download copies the start of the buffer to dst, synchronously.
func (b *Buffer) Download(dst []byte) error {
	if err := b.span("download", 0, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	err := b.ctx.call("cuMemcpyDtoH", func() cuResult {
		return b.ctx.drv.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), b.ptr, uint64(len(dst)))
	})
	runtime.KeepAlive(dst)
	return err
}

// Memset sets n bytes from offset off to v.
func (b *Buffer) Memset(off, n int, v byte) error {
	if err := b.span("memset", off, n); err != nil || n == 0 {
		return err
	}
	return b.ctx.call("cuMemsetD8", func() cuResult { return b.ctx.drv.cuMemsetD8(b.ptr+uint64(off), v, uint64(n)) })
}
