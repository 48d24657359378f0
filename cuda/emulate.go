package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/internal/mmap"
	"github.com/lumsearch/lumsearch/internal/parallel"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/x448/float16"
)

// Emulate runs printed kernels on the CPU through the emulation harness,
// one launch each in order, over the given tensors: args[i] are kernel i's
// inputs; it returns each kernel's outputs. The kernels' text goes to g++
// unchanged.
func Emulate(ctx context.Context, kernels []*Kernel, args [][]*ir.Tensor, outShapes [][]ir.ValueType, opt emu.Options) ([][]*ir.Tensor, error) {
	var bufs []emu.Buffer
	var launches []emu.Launch
	opt.Discard = append([]int(nil), opt.Discard...) // inputs are added below
	var eks []emu.Kernel
	outAt := make([][]int, len(kernels))
	declared := map[*Kernel]bool{}
	for i, k := range kernels {
		// A kernel given more than once (several inputs for one kernel)
		// is compiled once and launched on each.
		if !declared[k] {
			declared[k] = true
			ek := emu.Kernel{Name: k.Name}
			for _, p := range k.Params {
				ek.Params = append(ek.Params, emu.Param{Name: p.Name, Type: p.Type})
			}
			eks = append(eks, ek)
		}
		l := emu.Launch{Kernel: k.Name, Grid: k.Grid, Block: k.Block}
		if len(args[i]) != k.Inputs {
			return nil, fmt.Errorf("emulate %s: %d arguments for %d inputs", k.Name, len(args[i]), k.Inputs)
		}
		for _, t := range args[i] {
			l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
			data := EncodeTensor(t)
			opt.Discard = append(opt.Discard, len(bufs))
			bufs = append(bufs, emu.Buffer{Bytes: len(data), Data: data})
		}
		for _, o := range outShapes[i] {
			outAt[i] = append(outAt[i], len(bufs))
			l.Args = append(l.Args, emu.Arg{Buffer: len(bufs)})
			bufs = append(bufs, emu.Buffer{Bytes: int(o.Shape.NumElements()) * o.DType.Size()})
		}
		launches = append(launches, l)
	}
	got, err := emu.Run(ctx, Source(kernels), eks, bufs, launches, opt)
	if err != nil {
		return nil, err
	}
	out := make([][]*ir.Tensor, len(kernels))
	for i := range kernels {
		for j, b := range outAt[i] {
			t, err := DecodeTensor(outShapes[i][j], got[b])
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], t)
		}
	}
	return out, nil
}

// EncodeTensor lays a tensor out as a device buffer of its dtype (little
// endian; bool as one byte), as kernels, the emulation and the GPU runtime
// read it. Large tensors (a real-shape weight) are encoded in parallel.
func EncodeTensor(t *ir.Tensor) []byte {
	n := int(t.Len())
	b := make([]byte, n*t.DType.Size())
	mmap.AdviseHuge(b)
	chunk := encodeChunk
	if n < 2*chunk || runtime.GOMAXPROCS(0) == 1 {
		encodeRange(t, b, 0, n)
		return b
	}
	parallel.Chunks(n, chunk, func(_, lo, hi int) { encodeRange(t, b, lo, hi) })
	return b
}

// encodeChunk is how many elements each of EncodeTensor's parallel chunks
// encodes; a tensor of fewer than two chunks is encoded in one go. A
// variable only so that the round-trip test can take the parallel path
// with small tensors.
var encodeChunk = 1 << 20

// TensorBytes is EncodeTensor without the copy where a tensor's storage
// already is its encoding (float32 storage of an f32 tensor on a
// little-endian machine, byte storage of a u8 tensor), as for real-shape
// weights drawn for verification or a checkpoint's packed codes: the
// bytes alias the tensor, so neither may change while
// the other is in use.
func TensorBytes(t *ir.Tensor) []byte {
	switch {
	case t.DType == ir.F32 && len(t.F32) > 0 && littleEndian:
		return unsafe.Slice((*byte)(unsafe.Pointer(&t.F32[0])), 4*len(t.F32))
	case t.DType == ir.U8 && t.U8 != nil:
		return t.U8
	}
	return EncodeTensor(t)
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// encodeRange encodes elements [lo, hi) of t into b, the dtype chosen
// once for the range rather than per element.
func encodeRange(t *ir.Tensor, b []byte, lo, hi int) {
	switch {
	case t.U8 != nil:
		copy(b[lo:hi], t.U8[lo:hi])
		return
	case t.I32 != nil:
		for i, v := range t.I32[lo:hi] {
			binary.LittleEndian.PutUint32(b[4*(lo+i):], uint32(v))
		}
		return
	}
	if t.F32 != nil {
		src := t.F32[lo:hi]
		switch t.DType {
		case ir.F32:
			for i, v := range src {
				binary.LittleEndian.PutUint32(b[4*(lo+i):], math.Float32bits(v))
			}
			return
		case ir.BF16:
			for i, v := range src {
				binary.LittleEndian.PutUint16(b[2*(lo+i):], uint16(ir.BF16FromFloat32(v)))
			}
			return
		}
	}
	size := t.DType.Size()
	for i := lo; i < hi; i++ {
		v := t.At(int64(i))
		p := b[i*size:]
		switch t.DType {
		case ir.F32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case ir.F16:
			binary.LittleEndian.PutUint16(p, float16.Fromfloat32(float32(v)).Bits())
		case ir.BF16:
			binary.LittleEndian.PutUint16(p, uint16(ir.BF16FromFloat32(float32(v))))
		case ir.I32:
			binary.LittleEndian.PutUint32(p, uint32(int32(t.Int(int64(i)))))
		case ir.I64:
			binary.LittleEndian.PutUint64(p, uint64(t.Int(int64(i))))
		case ir.U8:
			p[0] = uint8(t.Int(int64(i)))
		case ir.Bool:
			if v != 0 {
				p[0] = 1
			}
		}
	}
}

// DecodeTensor reads a device buffer back as a tensor of type vt.
func DecodeTensor(vt ir.ValueType, b []byte) (*ir.Tensor, error) {
	n := vt.Shape.NumElements()
	size := vt.DType.Size()
	if len(b) != int(n)*size {
		return nil, fmt.Errorf("decode %s%v: %d bytes", vt.DType, vt.Shape, len(b))
	}
	if vt.DType == ir.U8 {
		return ir.TensorOfBytes(vt.Shape, append(make([]byte, 0, len(b)), b...)) // never nil, unlike a clone of none
	}
	vals := make([]float32, n)
	var ints []int64
	if !vt.DType.IsFloat() {
		ints = make([]int64, n) // an empty integer tensor is one too
	}
	for i := range n {
		p := b[int(i)*size:]
		switch vt.DType {
		case ir.F32:
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(p))
		case ir.F16:
			vals[i] = float16.Frombits(binary.LittleEndian.Uint16(p)).Float32()
		case ir.BF16:
			vals[i] = ir.BFloat16(binary.LittleEndian.Uint16(p)).Float32()
		default:
			switch vt.DType {
			case ir.I32:
				ints[i] = int64(int32(binary.LittleEndian.Uint32(p)))
			case ir.I64:
				ints[i] = int64(binary.LittleEndian.Uint64(p))
			case ir.U8:
				ints[i] = int64(p[0])
			case ir.Bool:
				ints[i] = int64(p[0])
			}
		}
	}
	if ints != nil {
		return ir.TensorOfInts(vt.DType, vt.Shape, ints...)
	}
	return ir.TensorOfFloat32(vt.DType, vt.Shape, vals)
}
