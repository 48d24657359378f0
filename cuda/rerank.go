package cuda

import (
	"fmt"
	"maps"
	"runtime"
	"sort"
	"sync"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// Compiler compiles a translation unit (a prelude-less Source) and reports
// each entry's resources: NVRTC with --ptxas-options=-v.
type Compiler func(src string) (map[string]cost.Resources, error)

// Pricer prices one schedule of a body given its compiled resources:
// cost.Model.Resourced.
type Pricer func(body *ir.Graph, s cost.Schedule, r cost.Resources) (cost.Estimate, error)

// compileSplit compiles kernels in a few units at once, one per processor
// up to four, each kernel whole in one of them (a compiler call works on
// one thread, and a model's schedules take seconds to compile), and merges
// their reports. The first error in unit order wins.
func compileSplit(compile Compiler, kernels []*Kernel) (map[string]cost.Resources, error) {
	units := min(runtime.GOMAXPROCS(0), 4, len(kernels))
	if units <= 1 {
		return compile(Source(kernels))
	}
	res := make([]map[string]cost.Resources, units)
	errs := make([]error, units)
	var wg sync.WaitGroup
	for u := range units {
		var part []*Kernel
		for i := u; i < len(kernels); i += units {
			part = append(part, kernels[i])
		}
		wg.Go(func() { res[u], errs[u] = compile(Source(part)) })
	}
	wg.Wait()
	out := map[string]cost.Resources{}
	for u := range units {
		if errs[u] != nil {
			return nil, errs[u]
		}
		maps.Copy(out, res[u])
	}
	return out, nil
}

// Rerank compiles every distinct kernel that PrintProgramWith scheduled,
// in its chosen schedule and in each alternative (compileSplit), and
// prices them again with the registers and shared memory the compiler
// reports (the cost model's own figures are guesses). A kernel whose
// alternative now predicts faster is printed again in it, keeping its
// name; the others keep their kernel with the estimate updated. kernels
// are PrintProgramWith's, in launch order; it returns the new list and
// how many kernels changed schedule.
func Rerank(prog *lower.Program, kernels []*Kernel, compile Compiler, price Pricer) ([]*Kernel, int, error) {
	launches := append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...)
	if len(launches) != len(kernels) {
		return nil, 0, fmt.Errorf("rerank %s: %d kernels for %d launches", prog.Name, len(kernels), len(launches))
	}
	bodies := map[*Kernel]*ir.Graph{}
	for i, k := range kernels {
		if _, ok := bodies[k]; !ok {
			bodies[k] = launches[i].Body
		}
	}
	type candidate struct {
		k        *Kernel // as printed under its own name for compiling
		schedule cost.Schedule
	}
	cands := map[*Kernel][]candidate{}
	var all []*Kernel
	for _, k := range Distinct(kernels) {
		if k.Estimate == nil {
			continue
		}
		cands[k] = []candidate{{k, k.Schedule}}
		all = append(all, k)
		for i, a := range k.Alternatives {
			alt, err := PrintKernelRows(fmt.Sprintf("%s_alt%d", k.Name, i+1), k.comment, bodies[k], a.Schedule, k.count)
			if err != nil {
				return nil, 0, fmt.Errorf("rerank %s: %w", prog.Name, err)
			}
			cands[k] = append(cands[k], candidate{alt, a.Schedule})
			all = append(all, alt)
		}
	}
	if len(all) == 0 {
		return kernels, 0, nil
	}
	res, err := compileSplit(compile, all)
	if err != nil {
		return nil, 0, fmt.Errorf("rerank %s: %w", prog.Name, err)
	}
	replaced := map[*Kernel]*Kernel{}
	changed := 0
	for _, k := range Distinct(kernels) {
		cs, ok := cands[k]
		if !ok {
			continue
		}
		best := -1
		var ranked []cost.Estimate
		for _, c := range cs {
			r, ok := res[c.k.Name]
			if !ok {
				return nil, 0, fmt.Errorf("rerank %s: the compiler reported nothing for %s", prog.Name, c.k.Name)
			}
			e, err := price(bodies[k], c.schedule, r)
			if err != nil {
				continue // the compiled kernel does not fit the device
			}
			ranked = append(ranked, e)
			if best < 0 || e.Seconds < ranked[best].Seconds {
				best = len(ranked) - 1
			}
		}
		if best < 0 {
			return nil, 0, fmt.Errorf("rerank %s: no schedule of %s fits the device as compiled", prog.Name, k.Name)
		}
		chosen := ranked[best]
		nk := k
		if chosen.Schedule != k.Schedule {
			nk, err = PrintKernelRows(k.Name, k.comment+"\nschedule "+chosen.Schedule.String(), bodies[k], chosen.Schedule, k.count)
			if err != nil {
				return nil, 0, fmt.Errorf("rerank %s: %w", prog.Name, err)
			}
			nk.comment = k.comment
			changed++
		}
		nk.Estimate = &chosen
		nk.Alternatives = nil
		for i, e := range ranked {
			if i != best {
				nk.Alternatives = append(nk.Alternatives, e)
			}
		}
		sort.SliceStable(nk.Alternatives, func(i, j int) bool { return nk.Alternatives[i].Seconds < nk.Alternatives[j].Seconds })
		replaced[k] = nk
	}
	out := make([]*Kernel, len(kernels))
	for i, k := range kernels {
		if nk, ok := replaced[k]; ok {
			out[i] = nk
		} else {
			out[i] = k
		}
	}
	return out, changed, nil
}
