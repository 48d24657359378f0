package rules

import (
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
)

func TestZZDebug(t *testing.T) {
	for _, name := range []string{"tiny-llama:layer", "tiny-llama:model"} {
		g, _ := corpus.Build(name, corpus.Options{Seq: 8})
		for _, r := range FindRepeats(g, 4) {
			for j, b := range r.Copies {
				fmt.Println(name, "copy", j, "nodes", len(b.Nodes))
				for _, v := range b.Nodes {
					fmt.Printf("  %%%d %s\n", v, g.Nodes[v].Op)
				}
				for _, v := range b.Inputs {
					fmt.Printf("  in %%%d %s %s\n", v, g.Nodes[v].Op, g.Nodes[v].Name)
				}
				for _, v := range b.Outputs {
					fmt.Printf("  out %%%d %s\n", v, g.Nodes[v].Op)
				}
				for _, v := range b.Weights {
					fmt.Printf("  w %%%d %s\n", v, g.Nodes[v].Name)
				}
			}
		}
	}
	_ = ir.OpAdd
}
