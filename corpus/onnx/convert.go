package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// irDType maps an ONNX element type to the IR's. The IR has no f64, no
// 8- or 16-bit integers, no unsigned types and no strings: those report
// false, and the caller says "unsupported dtype NAME".
func irDType(dt onnxpb.TensorProto_DataType) (ir.DType, bool) {
	switch dt {
	case onnxpb.TensorProto_FLOAT:
		return ir.F32, true
	case onnxpb.TensorProto_FLOAT16:
		return ir.F16, true
	case onnxpb.TensorProto_BFLOAT16:
		return ir.BF16, true
	case onnxpb.TensorProto_INT32:
		return ir.I32, true
	case onnxpb.TensorProto_INT64:
		return ir.I64, true
	case onnxpb.TensorProto_BOOL:
		return ir.Bool, true
	}
	return ir.InvalidDType, false
}

// onnxDType is the inverse of irDType.
func onnxDType(dt ir.DType) onnxpb.TensorProto_DataType {
	switch dt {
	case ir.F32:
		return onnxpb.TensorProto_FLOAT
	case ir.F16:
		return onnxpb.TensorProto_FLOAT16
	case ir.BF16:
		return onnxpb.TensorProto_BFLOAT16
	case ir.I32:
		return onnxpb.TensorProto_INT32
	case ir.I64:
		return onnxpb.TensorProto_INT64
	case ir.Bool:
		return onnxpb.TensorProto_BOOL
	}
	return onnxpb.TensorProto_UNDEFINED
}

// unsupportedDType is the error for an element type the IR lacks.
func unsupportedDType(dt onnxpb.TensorProto_DataType) error {
	return unsupported("unsupported dtype %s", DTypeName(dt))
}

// nativeLittleEndian reports whether this machine stores numbers the way
// ONNX raw data does, so that float32 weights can be read in place.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// IRTensor converts t to an interpreter tensor. FLOAT data is aliased, not
// copied, when its bytes are 4-byte aligned on a little-endian machine: a
// big model's weights, memory-mapped from an external data file, stay
// where they are (the tensor must then not be written, and must not be
// used after the Model is closed). FLOAT16 and BFLOAT16 are widened to
// float32 storage; INT32 and INT64 go to exact int64 storage and BOOL to
// float64 storage (0 or 1). Every other type is unsupported.
func (t *Tensor) IRTensor() (*ir.Tensor, error) {
	dt, ok := irDType(t.DType)
	if !ok {
		return nil, unsupportedDType(t.DType)
	}
	shape := make(ir.Shape, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = ir.Dim(d)
	}
	if err := shape.Check(); err != nil {
		return nil, err
	}
	raw, err := t.Raw()
	if err != nil {
		return nil, err
	}
	n := t.NumElements()
	if want := n * int64(dt.Size()); int64(len(raw)) != want {
		return nil, fmt.Errorf("tensor %q: %d bytes, want %d", t.Name, len(raw), want)
	}
	le := binary.LittleEndian
	switch dt {
	case ir.F32:
		var f []float32
		if n > 0 && nativeLittleEndian && uintptr(unsafe.Pointer(&raw[0]))%4 == 0 {
			f = unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)
		} else {
			f = make([]float32, n)
			for i := range f {
				f[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
			}
		}
		return ir.TensorOfFloat32(ir.F32, shape, f)
	case ir.F16, ir.BF16:
		f := make([]float32, n)
		for i := range f {
			b := le.Uint16(raw[2*i:])
			if dt == ir.F16 {
				f[i] = f16ToF32(b)
			} else {
				f[i] = ir.BFloat16(b).Float32()
			}
		}
		return ir.TensorOfFloat32(dt, shape, f)
	}
	if dt == ir.Bool {
		v := make([]float64, n)
		for i := range v {
			if raw[i] != 0 {
				v[i] = 1
			}
		}
		return &ir.Tensor{DType: dt, Shape: shape, F64: v}, nil
	}
	// Integers stay exact: torch writes 2^63-1 for every open slice end.
	v := make([]int64, n)
	for i := range v {
		if dt == ir.I32 {
			v[i] = int64(int32(le.Uint32(raw[4*i:])))
		} else {
			v[i] = int64(le.Uint64(raw[8*i:]))
		}
	}
	return &ir.Tensor{DType: dt, Shape: shape, I64: v}, nil
}

// f16ToF32 widens IEEE half-precision bits exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}
