package lower

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// StoredBuffers lists the buffers of a program's prepared weights, in
// buffer order: every Weight and Prepared buffer that a Run launch reads.
// Together with the constants (which the host library embeds) they are
// all a run needs besides its inputs and states, so a model loaded from
// them skips the Prep launches. A weight that only Prep launches read,
// and a prepared buffer that only feeds other Prep launches, are left
// out. It is an error for two of them to share a name, since the
// prepared weights are stored and loaded by name.
func StoredBuffers(prog *Program) ([]*Buffer, error) {
	read := make([]bool, len(prog.Buffers))
	for _, l := range prog.Run {
		for _, a := range l.Args {
			if a < 0 || a >= len(prog.Buffers) {
				return nil, fmt.Errorf("prepared weights of %s: launch %s reads buffer %d of %d", prog.Name, l.Name, a, len(prog.Buffers))
			}
			read[a] = true
		}
	}
	var out []*Buffer
	byName := map[string]*Buffer{}
	for i, b := range prog.Buffers {
		if !read[i] || (b.Kind != Weight && b.Kind != Prepared) {
			continue
		}
		if o, dup := byName[b.Name]; dup {
			return nil, fmt.Errorf("prepared weights of %s: %s %s and %s %s share a name", prog.Name, o.Kind, o.Name, b.Kind, b.Name)
		}
		byName[b.Name] = b
		out = append(out, b)
	}
	return out, nil
}

// PrepareWeights computes a program's prepared weights from its weights:
// the tensors of StoredBuffers by their buffer names. Weight buffers come
// from weights, as the caller's tensors (weights may hold more; weights
// that only Prep launches read are left out of the result). Prepared buffers are computed as loading
// the model does, by running the Prep launches in order in the reference
// interpreter, their inputs the weights and the constants, and stored in
// their buffers' dtypes (floats in float32 storage). A weight that is
// missing or has another shape or dtype than its buffer is an error
// naming it.
func PrepareWeights(ctx context.Context, prog *Program, weights map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	stored, err := StoredBuffers(prog)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("prepared weights of %s: "+format, append([]any{prog.Name}, args...)...)
	}
	// The buffers read: by a Prep launch, or stored.
	needed := make([]bool, len(prog.Buffers))
	lastPrep := map[int]int{} // buffer -> the last Prep launch reading it
	for i, l := range prog.Prep {
		for _, a := range l.Args {
			if a < 0 || a >= len(prog.Buffers) {
				return nil, fail("launch %s reads buffer %d of %d", l.Name, a, len(prog.Buffers))
			}
			needed[a] = true
			lastPrep[a] = i
		}
	}
	keep := make([]bool, len(prog.Buffers))
	for _, b := range stored {
		needed[b.ID], keep[b.ID] = true, true
	}
	vals := make([]*ir.Tensor, len(prog.Buffers))
	for i, b := range prog.Buffers {
		if !needed[i] {
			continue
		}
		switch b.Kind {
		case Weight:
			t, ok := weights[b.Name]
			if !ok || t == nil {
				return nil, fail("weight %s %s%v is missing", b.Name, b.DType, b.Shape)
			}
			if t.DType != b.DType || !t.Shape.Equal(b.Shape) {
				return nil, fail("weight %s is %s%v, want %s%v", b.Name, t.DType, t.Shape, b.DType, b.Shape)
			}
			n := b.Shape.NumElements()
			if int64(t.StorageLen()) != n {
				return nil, fail("weight %s %s%v holds the wrong number of elements", b.Name, b.DType, b.Shape)
			}
			vals[i] = t
		case Constant:
			t, err := b.Value(ctx)
			if err != nil {
				return nil, fail("%w", err)
			}
			vals[i] = t
		case Prepared:
		default:
			// A Prep launch reads only weights, constants and prepared
			// buffers (the weight-only classes lowering sends there).
			return nil, fail("a load-time launch reads %s %s", b.Kind, b.Name)
		}
	}
	for i, l := range prog.Prep {
		args := make([]*ir.Tensor, len(l.Args))
		for j, a := range l.Args {
			if vals[a] == nil {
				return nil, fail("launch %s reads %s %s before anything wrote it", l.Name, prog.Buffers[a].Kind, prog.Buffers[a].Name)
			}
			args[j] = vals[a]
		}
		outs, err := ir.EvalKernel(ctx, l.Body, args...)
		if err != nil {
			return nil, fail("launch %s: %w", l.Name, err)
		}
		if len(outs) != len(l.Outs) {
			return nil, fail("launch %s computes %d tensors for %d buffers", l.Name, len(outs), len(l.Outs))
		}
		for j, o := range l.Outs {
			if o < 0 || o >= len(prog.Buffers) {
				return nil, fail("launch %s writes buffer %d of %d", l.Name, o, len(prog.Buffers))
			}
			b := prog.Buffers[o]
			if b.Kind != Prepared {
				return nil, fail("load-time launch %s writes %s %s", l.Name, b.Kind, b.Name)
			}
			t, err := storeAs(outs[j], b)
			if err != nil {
				return nil, fail("launch %s: %w", l.Name, err)
			}
			vals[o] = t
		}
		// What no later Prep launch reads and the file does not keep is
		// dropped now: preparing a large model holds no more than it must.
		for _, a := range l.Args {
			if lastPrep[a] == i && !keep[a] && prog.Buffers[a].Kind == Prepared {
				vals[a] = nil
			}
		}
	}
	out := make(map[string]*ir.Tensor, len(stored))
	for _, b := range stored {
		if vals[b.ID] == nil {
			return nil, fail("no load-time launch computes %s %s", b.Kind, b.Name)
		}
		out[b.Name] = vals[b.ID]
	}
	return out, nil
}

// storeAs returns t as buffer b holds it: its dtype and shape checked,
// every element rounded to the dtype, floats in float32 storage.
func storeAs(t *ir.Tensor, b *Buffer) (*ir.Tensor, error) {
	if t == nil || t.DType != b.DType || !t.Shape.Equal(b.Shape) {
		return nil, fmt.Errorf("computes %v for %s %s%v", t, b.Name, b.DType, b.Shape)
	}
	if b.DType.IsFloat() {
		vals := make([]float32, t.Len())
		for i := range vals {
			vals[i] = float32(t.At(int64(i)))
		}
		return ir.TensorOfFloat32(b.DType, b.Shape, vals)
	}
	out := ir.NewTensor(b.DType, b.Shape) // at the dtype's width, with no int64 copy between
	for i := range out.Len() {
		out.SetInt(i, t.Int(i))
	}
	return out, nil
}

// DigestMetadataKey is the metadata key under which a prepared weights
// file records the WeightsDigest of the program it is for.
const DigestMetadataKey = "lumsearch.program"

// WeightsDigest identifies what a program's prepared weights mean: a
// SHA-256, in hex, of the stored buffers' kinds, names, dtypes and shapes
// and of the Prep launches that compute the prepared ones (their bodies
// and the buffers they read and write). Two programs with the same digest
// take the same prepared weights file; the host library refuses a file
// whose digest is another's, since a prepared buffer's name (t<ID>) alone
// says nothing about what it holds.
func WeightsDigest(prog *Program) (string, error) {
	stored, err := StoredBuffers(prog)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	desc := func(id int) string {
		if id < 0 || id >= len(prog.Buffers) {
			return fmt.Sprintf("buffer %d", id)
		}
		b := prog.Buffers[id]
		s := fmt.Sprintf("%s %q %s%v", b.Kind, b.Name, b.DType, b.Shape)
		if b.Kind == Constant && b.Leaf != nil {
			leaf := &ir.Graph{Name: "constant", Nodes: []*ir.Node{b.Leaf}}
			s += " " + strings.ReplaceAll(leaf.String(), "\n", "; ")
		}
		return s
	}
	fmt.Fprintf(h, "lumsearch prepared weights 1\n")
	for _, b := range stored {
		fmt.Fprintf(h, "stored %s\n", desc(b.ID))
	}
	for _, l := range prog.Prep {
		fmt.Fprintf(h, "prep %d args", len(l.Args))
		for _, a := range l.Args {
			fmt.Fprintf(h, " [%s]", desc(a))
		}
		fmt.Fprintf(h, " outs")
		for _, o := range l.Outs {
			fmt.Fprintf(h, " [%s]", desc(o))
		}
		fmt.Fprintf(h, "\n%s\n", l.Body)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
