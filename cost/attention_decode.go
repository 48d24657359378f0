package cost

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// DecodeParts is what attention's flash-decoding layout (package cuda,
// attention_decode.go) reads of an attention body: keys and values read
// straight from kernel inputs through views, in rows of the head dim that
// whole 16-byte loads cover, and the group of consecutive query heads
// (GQA) that read the same key and value rows.
type DecodeParts struct {
	AttentionParts
	// K and V are the kernel inputs the keys and values are read from,
	// KLayout and VLayout their addressing over KT's axes [..., D, T]
	// and V's [..., T, D] (ViewLayout).
	K, V             ir.Value
	KLayout, VLayout Layout
	// S query rows a head, D the head dim (of q, k and v alike), T the
	// keys, Batch the product of the output's batch dims (batch times
	// query heads).
	S, D, T, Batch int64
	// Group is the consecutive batch indices (query heads) that read the
	// same key and value rows; a block takes all of them.
	Group int64
	// KStride and VStride are the elements between consecutive keys'
	// rows.
	KStride, VStride int64
	// DType is the keys' and values' dtype.
	DType ir.DType
}

// Vec is the elements one 16-byte load reads.
func (p DecodeParts) Vec() int64 { return 16 / int64(p.DType.Size()) }

// Lanes is the lanes that read one key row, a 16-byte piece each.
func (p DecodeParts) Lanes() int64 { return p.D / p.Vec() }

// KeysPerLoad is the keys a warp reads with one 16-byte load a lane.
func (p DecodeParts) KeysPerLoad() int64 { return 32 / p.Lanes() }

// Rows is the query rows a block computes: the group's heads times S.
func (p DecodeParts) Rows() int64 { return p.Group * p.S }

// Heads is the blocks' key heads: the batch's groups.
func (p DecodeParts) Heads() int64 { return p.Batch / p.Group }

// decodeRegisters bounds the f32 values a lane keeps for its query rows
// (a 16-byte piece of each query row, and of each output accumulator), so
// that they stay in registers.
const decodeRegisters = 64

// DecodeAttention reads an eager attention body (Attention's parts p) for
// the flash-decoding layout, or says why the layout cannot run it: keys
// and values must be kernel inputs read through views (a computed key, a
// rotary prologue on the cache, is printed by the other layouts), their
// head dim contiguous and of one length D whose rows split into 16-byte
// pieces over a power of two of lanes (D of 64 or 128 in f16 and bf16,
// 32 to 128 in f32), every other stride and the offset whole pieces.
func DecodeAttention(body *ir.Graph, p AttentionParts) (DecodeParts, error) {
	pv := body.Node(p.PV).Shape
	q, kt, v := body.Node(p.Q).Shape, body.Node(p.KT).Shape, body.Node(p.V).Shape
	r := len(pv)
	d := DecodeParts{AttentionParts: p, S: int64(pv[r-2]), D: int64(q[len(q)-1]), T: int64(kt[len(kt)-1])}
	if dv := int64(pv[r-1]); dv != d.D {
		return d, fmt.Errorf("flash-decoding attention: value rows of %d for keys of %d (the layout reads both with the same lanes)", dv, d.D)
	}
	d.Batch = pv.NumElements() / (d.S * d.D)
	var err error
	var kBatch, vBatch [][]Mode
	if d.K, d.KLayout, kBatch, d.KStride, err = decodeOperand(body, p.KT, pv, r-2, r-1, "keys"); err != nil {
		return d, err
	}
	if d.V, d.VLayout, vBatch, d.VStride, err = decodeOperand(body, p.V, pv, r-1, r-2, "values"); err != nil {
		return d, err
	}
	d.DType = body.Node(d.K).DType
	if vt := body.Node(d.V).DType; vt != d.DType {
		return d, fmt.Errorf("flash-decoding attention: keys in %s, values in %s", d.DType, vt)
	}
	if len(kt) != r || len(v) != r {
		return d, fmt.Errorf("flash-decoding attention: keys or values of another rank than the output's")
	}
	vec := d.Vec()
	lanes := d.D / vec
	if d.D%vec != 0 || lanes > 32 || lanes&(lanes-1) != 0 {
		return d, fmt.Errorf("flash-decoding attention: a head dim of %d in %s is not a power of two of 16-byte pieces up to 32", d.D, d.DType)
	}
	for _, l := range []Layout{d.KLayout, d.VLayout} {
		if l.Offset%vec != 0 {
			return d, fmt.Errorf("flash-decoding attention: an operand at offset %d, not a whole 16-byte piece", l.Offset)
		}
		for _, modes := range l.Axes {
			for _, m := range modes {
				if m.Size > 1 && m.Stride%vec != 0 && m.Stride != 1 {
					return d, fmt.Errorf("flash-decoding attention: a stride of %d elements, not whole 16-byte pieces", m.Stride)
				}
			}
		}
	}
	if d.KStride%vec != 0 || d.VStride%vec != 0 {
		return d, fmt.Errorf("flash-decoding attention: keys %d and values %d elements apart, not whole 16-byte pieces", d.KStride, d.VStride)
	}
	d.Group = gcd(trailingBroadcast(kBatch), trailingBroadcast(vBatch))
	if d.Rows()*vec > decodeRegisters {
		return d, fmt.Errorf("flash-decoding attention: %d query rows a key head keep %d values a lane, more than %d", d.Rows(), d.Rows()*vec, decodeRegisters)
	}
	if d.T >= 1<<31 || d.Heads() > 65535 {
		return d, fmt.Errorf("flash-decoding attention: %d keys, %d key heads: past the layout's 32-bit key index and grid", d.T, d.Heads())
	}
	return d, nil
}

// decodeOperand checks operand x of an attention read by the
// flash-decoding layout: a view of a kernel input whose head-dim axis
// (dAxis) is contiguous and whose key axis (tAxis) is one stride; it
// returns the input, the layout, the modes of pv's batch dims (stride 0
// where the operand broadcasts) and the key stride.
func decodeOperand(body *ir.Graph, x ir.Value, pv ir.Shape, dAxis, tAxis int, what string) (ir.Value, Layout, [][]Mode, int64, error) {
	buf, l, ok := ViewLayout(body, x)
	if !ok {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s are computed, not a kernel input read through views", what)
	}
	if len(l.Axes) != len(pv) {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: %s of rank %d for an output of rank %d", what, len(l.Axes), len(pv))
	}
	if s, ok := oneStride(l.Axes[dAxis]); !ok || s != 1 {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s' head dim is not contiguous", what)
	}
	ts, ok := oneStride(l.Axes[tAxis])
	if !ok {
		return 0, Layout{}, nil, 0, fmt.Errorf("flash-decoding attention: the %s' rows are not one stride apart", what)
	}
	batch := make([][]Mode, len(pv)-2)
	for i := range batch {
		batch[i] = l.Axes[i]
		if axisSize(l.Axes[i]) == 1 && pv[i] != 1 {
			batch[i] = []Mode{{int64(pv[i]), 0}} // a size-1 batch dim the matmul broadcasts
		}
	}
	return buf, l, batch, ts, nil
}

// oneStride is the stride of an axis whose modes make one arithmetic
// progression (1 for an axis of one element).
func oneStride(modes []Mode) (int64, bool) {
	stride, inner := int64(0), int64(1)
	for i := len(modes) - 1; i >= 0; i-- {
		m := modes[i]
		if m.Size == 1 {
			continue
		}
		if inner == 1 {
			stride = m.Stride
		} else if m.Stride != stride*inner {
			return 0, false
		}
		inner *= m.Size
	}
	if inner == 1 {
		return 1, true
	}
	return stride, true
}

// trailingBroadcast is how many consecutive batch indices, from the
// innermost batch mode out, read the same address (their modes' strides
// are 0): the query heads of one key head.
func trailingBroadcast(batch [][]Mode) int64 {
	g := int64(1)
	for i := len(batch) - 1; i >= 0; i-- {
		for j := len(batch[i]) - 1; j >= 0; j-- {
			m := batch[i][j]
			if m.Size == 1 {
				continue
			}
			if m.Stride != 0 {
				return g
			}
			g *= m.Size
		}
	}
	return g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
