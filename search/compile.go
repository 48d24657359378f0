package search

import (
	"context"
	"fmt"
	"time"

	"github.com/lumsearch/lumsearch/rules"
)

// Compile runs the compiler once, without a budget or measurement: it
// saturates m's e-graph with every rule set (o.Rules: less or more sets,
// a user's verified rule files; a model whose layers repeat
// is searched on two of them and their seam), extracts the program the
// cost model of o.Target predicts fastest, lowers it to launches and a
// memory plan, and prints every kernel in the schedule the cost model
// ranks first. With libnvrtc present it compiles each kernel's best
// schedules for o.Arch, prices them again with the registers and shared
// memory NVRTC reports, and keeps the fastest. Then, unless o.NoVerify,
// it verifies: every distinct kernel under the CPU emulation at its real
// shapes, and the whole program's wiring (a corpus or config model at a
// reduced size of its architecture, any other model whole when it is
// small enough). It reports on o.Events as it goes; Result.Write writes
// the folder. Only o.Target, o.Arch, o.TuneDB, o.NoVerify,
// o.InputRanges, o.Rules and o.Events apply.
func Compile(ctx context.Context, m *Model, o Options) (*Result, error) {
	o = o.withDefaults()
	em := newEmitter(o.Events)
	log := newLogWriter(em)
	g, model := m.Graph, m.Name
	if err := (Feeds{Ranges: o.InputRanges}).checkRanges(g); err != nil {
		return nil, err
	}
	if err := checkExpect(g, o.Expect); err != nil {
		return nil, err
	}
	sat, costName, cm, err := o.price(ctx, g)
	if err != nil {
		return nil, err
	}
	if err := CheckMemory(m, cm.Device); err != nil {
		return nil, err
	}
	if err := CheckQuantizedExperts(m); err != nil {
		return nil, err
	}
	noteTuneDB(em, o.TuneDB)
	start := time.Now()
	sel, err := o.Rules.resolve(ctx, g)
	if err != nil {
		return nil, err
	}
	rws, err := sel.rewrites(sel.sets, true)
	if err != nil {
		return nil, err
	}
	c, err := pipelineWith(ctx, g, sat, cm, rws)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", model, err)
	}
	np, err := rules.NaiveProgram(ctx, g, sat)
	if err != nil {
		return nil, err
	}
	nv := naiveOf(np)
	lp := c.lowered
	fmt.Fprintf(log, "compile %s for %s (%s)\n", model, cm.Device.Name, o.Arch)
	fmt.Fprintf(log, "  program: %d kernels per run and %d at load, %s per run by %s (the naive program: %d kernels, %s)\n",
		c.prog.Kernels, c.prog.Prep, Seconds(c.prog.Cost), costName, nv.Launches, Seconds(nv.Seconds))
	fmt.Fprintf(log, "  lowered: %d launches per run, %d at load, %d buffers; arena %d bytes for %d bytes of intermediates (%v)\n",
		len(lp.Run), len(lp.Prep), len(lp.Buffers), lp.ArenaBytes, lp.TempBytes, time.Since(start).Round(time.Millisecond))
	if len(lp.Symbols) > 0 && lp.Step == nil {
		bs, err := bucketTimes(g, c, cm)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", model, err)
		}
		fmt.Fprintf(log, "  per bucket (the cost model, by runtime extent): %s\n", bucketText(bs))
	}
	src := &source{model: m, sat: sat, m: cm, arch: o.Arch, feeds: Feeds{Ranges: o.InputRanges}}
	f, err := finalize(ctx, src, c, !o.NoVerify, false, log)
	if err != nil {
		return nil, err
	}
	if lp.Step != nil {
		// Priced after finalize, which gives the row-wise launches
		// their kernels by bucket.
		bs, err := bucketTimes(g, c, cm)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", model, err)
		}
		fmt.Fprintf(log, "  per bucket of tokens (the cost model, a CUDA graph a bucket; each sequence after %d positions): %s\n", stepContext(lp.Step, cm), bucketText(bs))
	}
	pl, err := buildPlan(src, f)
	if err != nil {
		return nil, err
	}
	if err := sel.record(pl, c.prog); err != nil {
		return nil, err
	}
	return &Result{Model: m, Plan: pl, Verified: f.verified, src: src, final: f, em: em, start: start}, nil
}
