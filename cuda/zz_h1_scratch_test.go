package cuda

import (
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

func TestZZH1Scratch(t *testing.T) {
	b := ir.NewBuilder("kernel")
	q := b.Input("$0", ir.F32, 1, 4, 1, 16)
	k := b.Input("$1", ir.F32, 1, 1, 64, 16)
	v := b.Input("$2", ir.F32, 1, 1, 64, 16)
	pos := b.Input("$3", ir.I32)
	b.Output("out0", b.CausalAttentionAt(q, k, v, 0.25, 0, pos))
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	kk, err := PrintKernelWith("k", "", g, cost.Schedule{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(kk.Text)
	kk, err = PrintKernelWith("k", "", attentionBody(t, 5, 9), cost.Schedule{BM: 4, BN: 32, Threads: 128})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(kk.Text)
}
