package plan

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// tinyPlan is the plan of a lowered decode step (states, constants,
// temps and outputs all present), and the lowered program.
func tinyPlan(t testing.TB) (*Plan, *lower.Program) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 5, Past: 2})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	p, err := Build(lp, ks, nil, nil)
	require.NoError(t, err)
	p.Model, p.Target, p.Arch = "tiny-llama:decode", "h100-sxm", "sm_90"
	p.Options = Options{Seq: 5, Past: 2, DType: "f32"}
	return p, lp
}

func TestRoundTrip(t *testing.T) {
	p, lp := tinyPlan(t)
	require.Len(t, p.Buffers, len(lp.Buffers))
	require.Len(t, p.Prep, len(lp.Prep))
	require.Len(t, p.Run, len(lp.Run))
	assert.NotEmpty(t, p.WeightsDigest)
	dir := t.TempDir()
	require.NoError(t, p.Write(dir))
	q, err := Read(dir)
	require.NoError(t, err)
	assert.Equal(t, p, q)
	kinds := map[string]int{}
	for _, b := range q.Buffers {
		kinds[b.Kind]++
	}
	for _, k := range []string{"input", "weight", "state", "constant", "temp", "output"} {
		assert.Positive(t, kinds[k], "a %s buffer", k)
	}
	assert.NotEmpty(t, q.Kernels())

	// The program rebuilt from the plan has the same launches and
	// computes the same constants.
	back, err := q.Lowered("back")
	require.NoError(t, err)
	require.Len(t, back.Run, len(lp.Run))
	for i, l := range lp.Run {
		assert.Equal(t, l.Body.String(), back.Run[i].Body.String())
		assert.Equal(t, l.Args, back.Run[i].Args)
	}
	again, err := Constants(context.Background(), back)
	require.NoError(t, err)
	want, err := Constants(context.Background(), lp)
	require.NoError(t, err)
	require.Len(t, again, len(want))
	for name, w := range want {
		assert.Equal(t, w.Float64s(), again[name].Float64s(), name)
	}

	consts, err := Constants(context.Background(), lp)
	require.NoError(t, err)
	for _, b := range q.Buffers {
		if b.Kind == "constant" {
			require.Contains(t, consts, b.Name)
			vt, err := b.Type()
			require.NoError(t, err)
			assert.True(t, vt.Shape.Equal(consts[b.Name].Shape), b.Name)
		}
	}
}

// TestValidateRefuses damages a good plan one field at a time: each
// damage is refused by Parse with a message naming it.
func TestValidateRefuses(t *testing.T) {
	base, _ := tinyPlan(t)
	temp := -1
	for i, b := range base.Buffers {
		if b.Kind == "temp" && b.Offset > 0 {
			temp = i
			break
		}
	}
	require.GreaterOrEqual(t, temp, 0)
	weight := -1
	for i, b := range base.Buffers {
		if b.Kind == "weight" {
			weight = i
			break
		}
	}
	for _, c := range []struct {
		name   string
		damage func(p *Plan)
		want   string
	}{
		{"id", func(p *Plan) { p.Buffers[1].ID = 7 }, "buffer 1 has id 7"},
		{"kind", func(p *Plan) { p.Buffers[0].Kind = "scratch" }, `unknown kind "scratch"`},
		{"dtype", func(p *Plan) { p.Buffers[0].DType = "f12" }, "f12"},
		{"bytes", func(p *Plan) { p.Buffers[0].Bytes++ }, "bytes for"},
		{"negative dim", func(p *Plan) { p.Buffers[0].Shape = []int64{-1} }, "out of range"},
		{"huge dims", func(p *Plan) { p.Buffers[0].Shape = []int64{1 << 40, 1 << 40} }, "out of range"},
		{"arena overrun", func(p *Plan) { p.Buffers[temp].Offset = p.ArenaBytes }, "overrun"},
		{"offset outside the arena", func(p *Plan) { p.Buffers[weight].Offset = 8 }, "has no arena offset"},
		{"launch buffer", func(p *Plan) { p.Run[0].Args = append(p.Run[0].Args, len(p.Buffers)) }, "buffer"},
		{"grid", func(p *Plan) { p.Run[0].Grid[1] = 0 }, "grid"},
		{"threads", func(p *Plan) { p.Run[0].Block = [3]int{64, 32, 1} }, "2048 threads"},
		{"writes a weight", func(p *Plan) { p.Run[0].Outs = []int{weight} }, "writes weight buffer"},
		{"no kernel", func(p *Plan) { p.Prep[0].Kernel = "" }, "has no kernel"},
		{"output in the arena", func(p *Plan) {
			for name := range p.Outputs {
				p.Outputs[name] = temp
			}
		}, "not kept after a run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := tinyPlan(t)
			c.damage(p)
			data, err := p.Encode()
			require.NoError(t, err)
			_, err = Parse("damaged", data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "plan damaged")
		})
	}
	_, err := Parse("extra", []byte(`{"model": "m", "surprise": 1}`))
	assert.ErrorContains(t, err, "surprise")
	_, err = Parse("trailing", []byte(`{"model": "m"} {}`))
	assert.ErrorContains(t, err, "data after the plan")
	_, err = Read(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorContains(t, err, "read plan")
}

func FuzzParse(f *testing.F) {
	p, _ := tinyPlan(f)
	data, err := p.Encode()
	require.NoError(f, err)
	f.Add(data)
	f.Add([]byte(`{"buffers":[{"id":0,"kind":"temp","dtype":"f32","shape":[2],"bytes":8,"offset":0}],"arena_bytes":8}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		// A plan that parses is safe to load: every buffer has a type,
		// every launch's buffers exist.
		for _, b := range p.Buffers {
			_, err := b.Type()
			require.NoError(t, err)
		}
		for _, l := range append(append([]Launch(nil), p.Prep...), p.Run...) {
			for _, id := range append(append([]int(nil), l.Args...), l.Outs...) {
				require.Less(t, id, len(p.Buffers))
			}
		}
	})
}
