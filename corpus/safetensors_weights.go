package corpus

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
)

// SafetensorsWeights loads the weights of g from a Hugging Face checkpoint
// folder (one or more .safetensors files, with or without an index),
// memory-mapped. Every weight of g must be in the checkpoint with g's shape,
// stored as F32, F16 or BF16; tensors g does not use are ignored (the
// rotary buffers some checkpoints carry). A quantized weight's tensors
// (the operands of a dequant) must have its format's file dtypes: fp8's
// codes F8_E4M3, mxfp4's blocks U8 and scales U8 or F8_E8M0, awq's and
// gptq's words I32, scales any float dtype; an fp8 scale of one element
// may be stored as [] or [1] for the graph's [1, 1]. A gptq weight's
// g_idx, when the checkpoint has one, must be the inputs' own order. An F32 tensor for an f32 weight
// is used in place, aliasing the mapping, so a large model is never read
// into memory twice; other combinations are converted to float32 storage
// (every f32, f16 and bf16 value is exact in float32) and rounded to the
// weight's dtype. A gpt2 weight named "transformer.X" is also found as "X",
// as in the original checkpoint. Close the returned set when done with the
// tensors.
func SafetensorsWeights(g *ir.Graph, dir string) (map[string]*ir.Tensor, *safetensors.Set, error) {
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*ir.Tensor{}
	problems := checkGIdx(set, g)
	roles := packedRoles(g)
	for _, v := range g.Weights() {
		n := g.Node(v)
		if r, packed := roles[v]; packed {
			w, err := loadPacked(set, n, r)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			out[n.Name] = w
			continue
		}
		t, ok := set.Tensor(n.Name)
		if !ok {
			// openai-community/gpt2's own file predates the "transformer."
			// prefix that save_pretrained writes.
			t, ok = set.Tensor(strings.TrimPrefix(n.Name, "transformer."))
		}
		if st, stacked := ParseStacked(n.Name); !ok && stacked {
			// Stacked from the experts' own tensors (stacked.go).
			w, err := st.Assemble(n, func(name string, shape ir.Shape) ([]float32, error) {
				t, ok := set.Tensor(name)
				switch {
				case !ok:
					return nil, fmt.Errorf("%s: missing", name)
				case !sameDims(t.Shape, shape):
					return nil, fmt.Errorf("%s: shape %v, want %v", name, t.Shape, []int64(shapeInts(shape)))
				case t.DType != "F32" && t.DType != "F16" && t.DType != "BF16":
					return nil, fmt.Errorf("%s: dtype %s; want F32, F16 or BF16", name, t.DType)
				}
				return t.Float32s()
			})
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			out[n.Name] = w
			continue
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: missing", n.Name))
			continue
		}
		// A W8A8 checkpoint's static activation scale is one number, which
		// some writers store as a scalar and others as [1].
		scalar := strings.HasSuffix(n.Name, ".input_scale") && len(t.Shape) == 0 && n.Shape.NumElements() == 1
		if !sameDims(t.Shape, n.Shape) && !scalar {
			problems = append(problems, fmt.Sprintf("%s: shape %v, want %v", n.Name, t.Shape, []int64(shapeInts(n.Shape))))
			continue
		}
		w, err := weightTensor(t, n.DType, n.Shape)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", n.Name, err))
			continue
		}
		out[n.Name] = w
	}
	if len(problems) > 0 {
		set.Close()
		more := ""
		if len(problems) > 10 {
			more = fmt.Sprintf("\n  ... and %d more", len(problems)-10)
			problems = problems[:10]
		}
		return nil, nil, fmt.Errorf("weights from %s for %s:\n  %s%s", dir, g.Name, strings.Join(problems, "\n  "), more)
	}
	return out, set, nil
}

func shapeInts(s ir.Shape) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

func sameDims(a []int64, s ir.Shape) bool {
	if len(a) != len(s) {
		return false
	}
	for i := range a {
		if a[i] != int64(s[i]) {
			return false
		}
	}
	return true
}

// weightTensor turns a checkpoint tensor into a weight of dtype dt.
func weightTensor(t safetensors.Tensor, dt ir.DType, shape ir.Shape) (*ir.Tensor, error) {
	if !dt.IsFloat() {
		return nil, fmt.Errorf("weights of dtype %s cannot come from a checkpoint", dt)
	}
	n := t.NumElements()
	if t.DType == "F32" && dt == ir.F32 && n > 0 && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		// The mapping is read-only and F32 needs no rounding: alias it.
		vals := unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n)
		return &ir.Tensor{DType: dt, Shape: shape.Clone(), F32: vals}, nil
	}
	switch t.DType {
	case "F32", "F16", "BF16":
	default:
		return nil, errors.New("dtype " + t.DType + "; want F32, F16 or BF16")
	}
	vals, err := t.Float32s() // a fresh slice, safe to round in place
	if err != nil {
		return nil, err
	}
	return ir.TensorOfFloat32(dt, shape, vals)
}

// loadPacked makes the packed leaf n, of role r, from the checkpoint's
// tensor of its name or, for a stacked leaf, from each expert's.
func loadPacked(set *safetensors.Set, n *ir.Node, r packedRole) (*ir.Tensor, error) {
	t, ok := set.Tensor(n.Name)
	if !ok {
		if st, stacked := ParseStacked(n.Name); stacked {
			return assemblePacked(set, st, n, r)
		}
		return nil, fmt.Errorf("%s: missing", n.Name)
	}
	w, err := packedTensor(t, n, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	return w, nil
}
