package gpu

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is loaded device code.
type Module struct {
	ctx    *Context
	handle uintptr
}

// LoadModule loads PTX text or a CUBIN (or fatbin) image.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("gpu: load module: empty image")
	}
	data := image
	if !bytes.HasPrefix(image, []byte("\x7fELF")) && image[len(image)-1] != 0 {
		// PTX is text that the driver reads up to a NUL.
		data = append(bytes.Clone(image), 0)
	}
	m := &Module{ctx: c}
	err := c.call("cuModuleLoadData", func() cuResult { return c.drv.cuModuleLoadData(&m.handle, unsafe.Pointer(&data[0])) })
	runtime.KeepAlive(data)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unload unloads the module; its functions must not be used afterwards.
func (m *Module) Unload() error {
	return m.ctx.call("cuModuleUnload", func() cuResult { return m.ctx.drv.cuModuleUnload(m.handle) })
}

// Function is a kernel of a module.
type Function struct {
	mod    *Module
	name   string
	handle uintptr
}

// Function looks up the kernel with the given (mangled or extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{mod: m, name: name}
	cname := append([]byte(name), 0)
	err := m.ctx.call("cuModuleGetFunction("+name+")", func() cuResult {
		return m.ctx.drv.cuModuleGetFunction(&f.handle, m.handle, &cname[0])
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// Launch launches the kernel on stream (the default stream when nil). Each
// argument is a *Buffer (its device address), an int32, an int64, a uint32,
// a uint64 or a float32, in the kernel's parameter order.
func (f *Function) Launch(grid, block [3]int, sharedBytes int, stream *Stream, args ...any) error {
	for i, v := range append(grid[:], block[:]...) {
		if v <= 0 || v > math.MaxUint32 {
			return fmt.Errorf("gpu: launch %s: grid/block dimension %d is %d", f.name, i, v)
		}
	}
	if sharedBytes < 0 || sharedBytes > math.MaxUint32 {
		return fmt.Errorf("gpu: launch %s: %d bytes of shared memory", f.name, sharedBytes)
	}
	// Each argument lives in a word of its own; kernelParams points at them.
	// Both are Go memory pinned for the call, as the driver reads them.
	store := make([]uint64, len(args)+1)
	params := make([]unsafe.Pointer, len(args)+1)
	for i, a := range args {
		p := unsafe.Pointer(&store[i])
		switch v := a.(type) {
		case *Buffer:
			if v == nil || v.ptr == 0 {
				return fmt.Errorf("gpu: launch %s: argument %d is a nil or freed buffer", f.name, i)
			}
			*(*uint64)(p) = v.ptr
		case int32:
			*(*int32)(p) = v
		case uint32:
			*(*uint32)(p) = v
		case int64:
			*(*int64)(p) = v
		case uint64:
			*(*uint64)(p) = v
		case float32:
			*(*float32)(p) = v
		default:
			return fmt.Errorf("gpu: launch %s: argument %d has unsupported type %T", f.name, i, a)
		}
		params[i] = p
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&store[0])
	pin.Pin(&params[0])
	var s uintptr
	if stream != nil {
		s = stream.handle
	}
	var kp unsafe.Pointer
	if len(args) > 0 {
		kp = unsafe.Pointer(&params[0])
	}
	c := f.mod.ctx
	err := c.call("cuLaunchKernel("+f.name+")", func() cuResult {
		return c.drv.cuLaunchKernel(f.handle, uint32(grid[0]), uint32(grid[1]), uint32(grid[2]),
			uint32(block[0]), uint32(block[1]), uint32(block[2]), uint32(sharedBytes), s, kp, nil)
	})
	runtime.KeepAlive(store)
	runtime.KeepAlive(params)
	return err
}

// Stream is a CUDA stream.
type Stream struct {
	ctx    *Context
	handle uintptr
}

// NewStream creates a stream (CU_STREAM_NON_BLOCKING when nonBlocking).
func (c *Context) NewStream(nonBlocking bool) (*Stream, error) {
	s := &Stream{ctx: c}
	var flags uint32
	if nonBlocking {
		flags = 1
	}
	if err := c.call("cuStreamCreate", func() cuResult { return c.drv.cuStreamCreate(&s.handle, flags) }); err != nil {
		return nil, err
	}
	return s, nil
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return s.ctx.call("cuStreamSynchronize", func() cuResult { return s.ctx.drv.cuStreamSynchronize(s.handle) })
}

// Destroy destroys the stream.
func (s *Stream) Destroy() error {
	return s.ctx.call("cuStreamDestroy", func() cuResult { return s.ctx.drv.cuStreamDestroy(s.handle) })
}

// Event is a CUDA event, for timing.
type Event struct {
	ctx    *Context
	handle uintptr
}

// NewEvent creates an event that records timing (CU_EVENT_DEFAULT).
func (c *Context) NewEvent() (*Event, error) {
	e := &Event{ctx: c}
	if err := c.call("cuEventCreate", func() cuResult { return c.drv.cuEventCreate(&e.handle, 0) }); err != nil {
		return nil, err
	}
	return e, nil
}

// Record records the event on stream (the default stream when nil).
func (e *Event) Record(stream *Stream) error {
	var s uintptr
	if stream != nil {
		s = stream.handle
	}
	return e.ctx.call("cuEventRecord", func() cuResult { return e.ctx.drv.cuEventRecord(e.handle, s) })
}

// Synchronize waits until the event has happened.
func (e *Event) Synchronize() error {
	return e.ctx.call("cuEventSynchronize", func() cuResult { return e.ctx.drv.cuEventSynchronize(e.handle) })
}

// Elapsed returns the milliseconds from start to end, both recorded and
// completed.
func Elapsed(start, end *Event) (float32, error) {
	var ms float32
	err := start.ctx.call("cuEventElapsedTime", func() cuResult {
		return start.ctx.drv.cuEventElapsedTime(&ms, start.handle, end.handle)
	})
	return ms, err
}

// Destroy destroys the event.
func (e *Event) Destroy() error {
	return e.ctx.call("cuEventDestroy", func() cuResult { return e.ctx.drv.cuEventDestroy(e.handle) })
}

// Graph is work captured from a stream.
type Graph struct {
	ctx    *Context
	handle uintptr
}

// GraphExec is an instantiated graph, ready to launch.
type GraphExec struct {
	ctx    *Context
	handle uintptr
}

func (c *Context) needGraphs(op string) error {
	if !c.drv.HasGraphs() {
		return fmt.Errorf("gpu: %s: the driver %s has no CUDA graphs", op, c.drv.path)
	}
	return nil
}

// BeginCapture starts capturing the stream's work into a graph
// (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).
func (s *Stream) BeginCapture() error {
	if err := s.ctx.needGraphs("begin capture"); err != nil {
		return err
	}
	return s.ctx.call("cuStreamBeginCapture", func() cuResult { return s.ctx.drv.cuStreamBeginCapture(s.handle, 1) })
}

// EndCapture ends a capture and returns the graph of the work captured.
func (s *Stream) EndCapture() (*Graph, error) {
	if err := s.ctx.needGraphs("end capture"); err != nil {
		return nil, err
	}
	g := &Graph{ctx: s.ctx}
	if err := s.ctx.call("cuStreamEndCapture", func() cuResult { return s.ctx.drv.cuStreamEndCapture(s.handle, &g.handle) }); err != nil {
		return nil, err
	}
	return g, nil
}

// Instantiate makes an executable graph.
func (g *Graph) Instantiate() (*GraphExec, error) {
	x := &GraphExec{ctx: g.ctx}
	d := g.ctx.drv
	var err error
	if d.cuGraphInstantiateFlag != nil {
		err = g.ctx.call("cuGraphInstantiateWithFlags", func() cuResult { return d.cuGraphInstantiateFlag(&x.handle, g.handle, 0) })
	} else {
		log := make([]byte, 1024)
		err = g.ctx.call("cuGraphInstantiate", func() cuResult { return d.cuGraphInstantiateOld(&x.handle, g.handle, nil, &log[0], uint64(len(log))) })
		if err != nil {
			if s := goString(&log[0]); s != "" {
				err = fmt.Errorf("%w (%s)", err, s)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Destroy destroys the graph; executable graphs made from it remain.
func (g *Graph) Destroy() error {
	return g.ctx.call("cuGraphDestroy", func() cuResult { return g.ctx.drv.cuGraphDestroy(g.handle) })
}

// Launch launches the graph on stream (the default stream when nil).
func (x *GraphExec) Launch(stream *Stream) error {
	var s uintptr
	if stream != nil {
		s = stream.handle
	}
	return x.ctx.call("cuGraphLaunch", func() cuResult { return x.ctx.drv.cuGraphLaunch(x.handle, s) })
}

// Destroy destroys the executable graph.
func (x *GraphExec) Destroy() error {
	return x.ctx.call("cuGraphExecDestroy", func() cuResult { return x.ctx.drv.cuGraphExecDestroy(x.handle) })
}
