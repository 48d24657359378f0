package search

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
)

// Verify checks an output folder that Optimize or Compile wrote, from the
// folder itself: plan.json (each launch's body, the reference it must
// compute, with its kernel, schedule, grid and block), kernels.cu and
// constants.safetensors. Each distinct kernel is printed again from its
// body and schedule and must be the very code kernels.cu holds; it then
// runs under the CPU emulation at its real shapes against the reference
// interpreter. Then the whole program, rebuilt from the plan, runs under
// the emulation against the model rebuilt from the plan's provenance when
// its intermediates are small enough (at most 16M elements); a corpus
// model too large for that is checked at the reduced size of its
// architecture. It reports on events as it goes, ending with the line
// "verified DIR". A folder that cannot be read, or whose model cannot be
// rebuilt, is a KindInput error; a check that fails is any other.
func Verify(ctx context.Context, dir string, events func(Event)) error {
	return VerifyWith(ctx, dir, Feeds{}, events)
}

// VerifyWith is Verify with the whole program's inputs drawn as feeds
// say: stated ranges, or the tensors of an inputs file, which needs the
// whole program to run (a model too large for that is an error, since
// the reduced configuration has other shapes); and with feeds.Outputs,
// the whole program's results are compared with that file's too, within
// the verifier's allowances. A bad stated range is a KindOption error,
// an unreadable or mismatched file a KindInput one.
func VerifyWith(ctx context.Context, dir string, feeds Feeds, events func(Event)) error {
	if err := feeds.checkFiles(); err != nil {
		return err
	}
	stdout := newLogWriter(newEmitter(events))
	pl, err := readPlan(dir)
	if err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	if err := checkPlanExtents(pl, feeds.At); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "verify %s: %s, %d launches per run and %d at load\n", dir, pl.Model, len(pl.Run), len(pl.Prep))
	if err := checkFiles(dir, pl); err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	fmt.Fprintf(stdout, "  files: the folder holds the %d files plan.json lists, each with its digest, and plan.json its own\n", len(pl.Files))
	src, srcPath, err := readKernelsFile(dir)
	if err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	if err := checkCompiled(ctx, dir, pl, src, stdout); err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	fp, err := loadFolderProgram(dir, pl, src, srcPath)
	if err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	lp, ks, consts := fp.lp, fp.ks, fp.consts
	fmt.Fprintf(stdout, "  kernels.cu: each of its %d distinct kernels is what its body and schedule print\n", len(cuda.WithBuckets(ks)))
	if err := verifyKernels(ctx, pl.Model, lp, ks, stdout); err != nil {
		return err
	}

	// The whole program against the model rebuilt from the provenance.
	md, err := fp.rebuild()
	if err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	defer md.Close()
	g, weights := md.Graph, md.Weights
	c := &compiled{lowered: lp, kernels: ks}
	if err := feeds.checkRanges(g); err != nil {
		return err
	}
	const maxElements = 16 << 20
	if lp.TempBytes/4 <= maxElements {
		in, err := feeds.feed(g, 1, weights, ir.OpInput, ir.OpState, ir.OpWeight)
		if err != nil {
			return err
		}
		maps.Copy(in, consts)
		expect, err := feeds.expect(g)
		if err != nil {
			return err
		}
		at := feeds.At
		if feeds.Inputs != "" && at == nil {
			at = map[string]int64{} // the file's own values
		}
		var rel float64
		var where string
		if len(at) == 0 && feeds.Inputs != "" {
			rel, err = emulateAgainstReference(ctx, pl.Model, g, c, in, expect)
		} else {
			rel, where, err = runAtSymbols(g, in, at, bucketEdges(c.lowered, c.kernels), func() (float64, error) {
				return emulateAgainstReference(ctx, pl.Model, g, c, in, expect)
			})
		}
		if err != nil {
			return err
		}
		what := "random inputs"
		if feeds.Inputs != "" {
			what = "the inputs of " + feeds.Inputs
		}
		fmt.Fprintf(stdout, "  verify: the whole program, as the folder holds it, matches the reference interpreter under the CPU emulation on %s%s (relative error %.2g)\n", what, where, rel)
		if expect != nil {
			fmt.Fprintf(stdout, "  verify: %v\n", expect.found)
		}
		fmt.Fprintf(stdout, "verified %s\n", dir)
		return nil
	}
	if feeds.Inputs != "" || feeds.Outputs != "" {
		return withKind(KindInput, fmt.Errorf("verify %s: --inputs and --outputs need the whole program under the CPU emulation, and its %d bytes of intermediates are too many (at most %d elements); its kernels matched the reference at their real shapes", dir, lp.TempBytes, maxElements))
	}
	fmt.Fprintf(stdout, "  verify: the whole program has %d bytes of intermediates, too many to emulate whole\n", lp.TempBytes)
	if !md.reducible() {
		fmt.Fprintf(stdout, "verified %s (the kernels; the whole program was not run)\n", dir)
		return nil
	}
	sat, _, m, err := Pricing{Target: pl.Target}.Options(ctx)
	if err != nil {
		return err
	}
	if err := verifyReduced(ctx, md, sat, m, feeds, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "verified %s (the kernels at their real shapes; the architecture at the reduced size)\n", dir)
	return nil
}

// reprint prints each distinct kernel of the plan again from its body and
// schedule and checks that the folder's source holds exactly that code
// (its comment aside), returning the kernels in launch order.
func reprint(pl *plan.Plan, lp *lower.Program, src, srcPath string) ([]*cuda.Kernel, error) {
	byName := map[string]*cuda.Kernel{}
	var ks []*cuda.Kernel
	launches := append(append([]*lower.Launch(nil), lp.Prep...), lp.Run...)
	planned := append(append([]plan.Launch(nil), pl.Prep...), pl.Run...)
	for i, l := range planned {
		if k, ok := byName[l.Kernel]; ok {
			if k.Grid != l.Grid || k.Block != l.Block {
				return nil, fmt.Errorf("launch %d runs kernel %s with grid %v block %v, another with grid %v block %v", i, l.Kernel, l.Grid, l.Block, k.Grid, k.Block)
			}
			ks = append(ks, k)
			continue
		}
		s, err := cost.ParseSchedule(l.Schedule)
		if err != nil {
			return nil, fmt.Errorf("launch %d (%s): %w", i, l.Kernel, err)
		}
		rc, err := cuda.RowCountOf(lp, launches[i])
		if err != nil {
			return nil, err
		}
		k, err := cuda.PrintKernelRows(l.Kernel, "", launches[i].Body, s, rc)
		if err != nil {
			return nil, fmt.Errorf("launch %d (%s): %w", i, l.Kernel, err)
		}
		if (k.Rows == nil) != (l.Rows == nil || l.Rows.GridAxis < 0) || k.Rows != nil && (k.Rows.Dim != l.Rows.GridAxis || k.Rows.Num != l.Rows.Num || k.Rows.Den != l.Rows.Den) {
			return nil, fmt.Errorf("launch %d (%s): the plan's grid for the tokens present (%+v) is not its kernel's (%+v)", i, l.Kernel, l.Rows, k.Rows)
		}
		if k.Grid != l.Grid || k.Block != l.Block {
			return nil, fmt.Errorf("launch %d (%s): the plan launches grid %v block %v, its kernel needs grid %v block %v", i, l.Kernel, l.Grid, l.Block, k.Grid, k.Block)
		}
		want := kernelCode(k.Text, k.Name)
		got := kernelCode(src, k.Name)
		if got == "" {
			return nil, fmt.Errorf("%s has no kernel %s", srcPath, k.Name)
		}
		if got != want {
			return nil, fmt.Errorf("kernel %s in %s is not what its body and schedule (%s) print: the file was edited or written by another version", k.Name, srcPath, l.Schedule)
		}
		if l.Predicted > 0 {
			// The plan's prediction, for reports; the printer alone
			// does not price.
			k.Estimate = &cost.Estimate{Schedule: s, Seconds: l.Predicted}
		}
		byName[l.Kernel] = k
		if err := reprintBuckets(k, l, launches[i], rc, byName, src, srcPath); err != nil {
			return nil, fmt.Errorf("launch %d (%s): %w", i, l.Kernel, err)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// reprintBuckets gives k, the kernel of planned launch l (lowered as
// ll), the row buckets the plan lists: each bucket's own kernel printed
// again from the launch's body at the rows of the highest bucket it
// serves and its schedule, and checked against the folder's source as
// the launches' kernels are.
func reprintBuckets(k *cuda.Kernel, l plan.Launch, ll *lower.Launch, rc *cuda.RowCount, byName map[string]*cuda.Kernel, src, srcPath string) error {
	if len(l.Buckets) == 0 {
		return nil
	}
	if rc == nil {
		return fmt.Errorf("row buckets for a launch without a row count")
	}
	rows := map[string]int64{}
	for _, b := range l.Buckets {
		rows[b.Kernel] = max(rows[b.Kernel], b.Hi)
	}
	for _, b := range l.Buckets {
		bk, ok := byName[b.Kernel]
		if b.Kernel == l.Kernel {
			bk, ok = k, true
		}
		if !ok {
			s, err := cost.ParseSchedule(b.Schedule)
			if err != nil {
				return fmt.Errorf("row bucket %s: %w", b.Kernel, err)
			}
			body, err := ll.BodyAtRows(rows[b.Kernel])
			if err != nil {
				return fmt.Errorf("row bucket %s: %w", b.Kernel, err)
			}
			brc := *rc
			brc.Max = rows[b.Kernel]
			if bk, err = cuda.PrintKernelRows(b.Kernel, "", body, s, &brc); err != nil {
				return fmt.Errorf("row bucket %s: %w", b.Kernel, err)
			}
			bk.Body = body
			if got := kernelCode(src, bk.Name); got == "" {
				return fmt.Errorf("%s has no kernel %s", srcPath, bk.Name)
			} else if got != kernelCode(bk.Text, bk.Name) {
				return fmt.Errorf("kernel %s in %s is not what its body at %d rows and schedule (%s) print: the file was edited or written by another version", bk.Name, srcPath, brc.Max, b.Schedule)
			}
			byName[b.Kernel] = bk
		}
		r := bk.Rows
		if bk.Grid != b.Grid || bk.Block != b.Block || (r == nil) != (b.GridAxis < 0) || r != nil && (r.Dim != b.GridAxis || r.Num != b.Num || r.Den != b.Den) {
			return fmt.Errorf("row bucket %s: the plan launches grid %v block %v (rows %d %d/%d), its kernel needs grid %v block %v (%+v)", b.Kernel, b.Grid, b.Block, b.GridAxis, b.Num, b.Den, bk.Grid, bk.Block, r)
		}
		k.Buckets = append(k.Buckets, cuda.RowBucket{Hi: b.Hi, Kernel: bk, Estimate: cost.Estimate{Schedule: bk.Schedule, Seconds: b.Predicted}})
	}
	return nil
}

// kernelCode cuts kernel name's code out of CUDA source: from its
// signature line to the closing brace at the start of a line.
func kernelCode(src, name string) string {
	sig := `extern "C" __global__ void ` + name + "("
	i := strings.Index(src, sig)
	if i < 0 {
		return ""
	}
	end := strings.Index(src[i:], "\n}\n")
	if end < 0 {
		return ""
	}
	return src[i : i+end+3]
}
