package plan

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// CheckPaged checks, for every paged attention launch of the run whose
// metadata (block table, lengths, query starts, sequence count) are all
// inputs given in inputs, that the op has a meaning on them
// (ir.PagedTokens): the kernels trust the metadata, and a block id past
// the pool would read outside it. A runner calls it before uploading
// anything, as the host library's lum_run does. Metadata the program
// computes, or inputs not given, are not checked here.
func (p *Plan) CheckPaged(inputs map[string]*ir.Tensor) error {
	for _, l := range p.Run {
		if l.Form != "paged_attention" {
			continue
		}
		body, err := ir.Parse(l.Body)
		if err != nil {
			return fmt.Errorf("launch %s: its body: %w", l.Name, err)
		}
		parts, err := cost.Paged(body)
		if err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
		n := body.Node(parts.Node)
		ins := make([]ir.ValueType, len(n.Inputs))
		for k, v := range n.Inputs {
			ins[k] = ir.ValueType{Shape: body.Node(v).Shape, DType: body.Node(v).DType}
		}
		meta := make([]*ir.Tensor, len(n.Inputs))
		given := true
		for k := 5; k < len(n.Inputs) && given; k++ {
			arg := slices.Index(body.Inputs(), n.Inputs[k])
			if arg < 0 || arg >= len(l.Args) || l.Args[arg] < 0 || l.Args[arg] >= len(p.Buffers) {
				return fmt.Errorf("launch %s: paged attention's operand %d is no argument of the launch", l.Name, k)
			}
			b := p.Buffers[l.Args[arg]]
			t := inputs[b.Name]
			if given = b.Kind == lower.Input.String() && t != nil; !given {
				break
			}
			if t.Len() != ins[k].Shape.NumElements() || !t.DType.IsInt() {
				return fmt.Errorf("launch %s: paged attention metadata %s is %s%v, not an integer tensor of %d elements", l.Name, b.Name, t.DType, t.Shape, ins[k].Shape.NumElements())
			}
			meta[k] = t
		}
		if !given {
			continue
		}
		if _, err := ir.PagedTokens(n, ins, func(k int, j int64) int64 { return meta[k].Int(j) }); err != nil {
			return fmt.Errorf("launch %s: paged attention metadata: %w", l.Name, err)
		}
	}
	return nil
}
