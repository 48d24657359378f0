package extract

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoCBC is returned when exact extraction has to call the CBC solver
// and cannot find it on PATH.
var ErrNoCBC = errors.New("exact extraction needs the cbc solver: apt-get install coinor-cbc")

// cbcName is the solver binary looked up on PATH; tests change it to
// check the error a missing solver gives.
var cbcName = "cbc"

// cbcModel is the integer program, written in CPLEX LP format for CBC:
//
//	x<n> binary: node n is chosen (alive nodes only)
//	y<c> in [0,1]: class c is computed (reachable non-root classes; a
//	     root's is the constant 1). It is integral whenever the x are,
//	     through the class rows, so it need not be declared integer.
//	class rows   sum of x over c's candidates = y<c> (= 1 for a root):
//	             a needed class chooses exactly one node, an unneeded none
//	child rows   for each class c and class k that nodes of c read: the
//	             sum of x over those nodes <= y<k>
//	pair rows    for classes a and b that read each other, the nodes of a
//	             reading b and the nodes of b reading a: at most one
//	             chosen (a 2-cycle); they are known before any solve and
//	             common in rewrite e-graphs (a = f(b), b = g(a))
//	cut rows     longer cycles, found in integer solutions and added lazily
//	objective    minimize sum of cost·x: each chosen node paid once, the
//	             DAG cost
//
// Pair and cut rows only forbid cycles, so every program of the sequence
// admits every acyclic solution: its optimum bounds the optimal DAG cost
// from below, and an acyclic optimum is optimal.
//
// Its LP relaxation is weak on e-graphs of tensor programs (a class may
// spread over several nodes and each of their children be half computed),
// so CBC's bounds there come from branching, slowly; the chain bound of
// pathBound, which needs no solver, is often far better.
type cbcModel struct {
	m *exactModel
	// pairs and cuts are rows of the form sum of x over nodes <= rhs.
	pairs []cutRow
	cuts  []cutRow
	// root marks root classes.
	root []bool
	// cut holds the class cycles already cut, by addCut's key.
	cut map[string]bool
}

type cutRow struct {
	nodes []int32
	rhs   int
}

func newCBCModel(m *exactModel) *cbcModel {
	cm := &cbcModel{m: m, root: make([]bool, m.p.NumClasses()), cut: map[string]bool{}}
	for _, r := range m.p.Roots {
		cm.root[r] = true
	}
	cm.pairs = m.twoCycles()
	return cm
}

// twoCycles finds the pair rows: for each pair of classes a < b where an
// alive node of a reads b and an alive node of b reads a.
func (m *exactModel) twoCycles() []cutRow {
	p := m.p
	readers := func(a, b int32) []int32 { // alive nodes of a that read b
		var out []int32
		for _, n := range p.ClassNodes[a] {
			if m.alive[n] && exactHas(m.kids[n], b) {
				out = append(out, n)
			}
		}
		return out
	}
	var rows []cutRow
	for _, a := range m.classes {
		seen := map[int32]bool{}
		for _, n := range p.ClassNodes[a] {
			if !m.alive[n] {
				continue
			}
			for _, b := range m.kids[n] {
				if b <= a || seen[b] {
					continue
				}
				seen[b] = true
				back := readers(b, a)
				if len(back) == 0 {
					continue
				}
				rows = append(rows, cutRow{nodes: append(readers(a, b), back...), rhs: 1})
			}
		}
	}
	return rows
}

func exactHas(sorted []int32, x int32) bool {
	lo, hi := 0, len(sorted)
	for lo < hi {
		mid := (lo + hi) / 2
		if sorted[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo < len(sorted) && sorted[lo] == x
}

// cycleCut is the row that forbids a cycle of classes c[0] -> c[1] -> ...
// -> c[0] (each reading the next through its choice): not every class of
// the cycle may choose a node that reads the next one. It covers every
// node that closes the same class cycle, not only the ones just chosen,
// which makes it much stronger than forbidding the one set of nodes.
func (m *exactModel) cycleCut(cycle []int32) cutRow {
	var nodes []int32
	for i, c := range cycle {
		next := cycle[(i+1)%len(cycle)]
		for _, n := range m.p.ClassNodes[c] {
			if m.alive[n] && exactHas(m.kids[n], next) {
				nodes = append(nodes, n)
			}
		}
	}
	return cutRow{nodes: nodes, rhs: len(cycle) - 1}
}

// addCut adds the cut row of a class cycle, unless that cycle (from any
// starting class) already has one; it reports whether it added a row.
func (cm *cbcModel) addCut(cycle []int32) bool {
	// Rotate the smallest class to the front: the same cycle found from
	// another class gets the same key.
	first := 0
	for i, c := range cycle {
		if c < cycle[first] {
			first = i
		}
	}
	var key strings.Builder
	for i := range cycle {
		fmt.Fprintf(&key, "%d,", cycle[(first+i)%len(cycle)])
	}
	if cm.cut[key.String()] {
		return false
	}
	cm.cut[key.String()] = true
	cm.cuts = append(cm.cuts, cm.m.cycleCut(cycle))
	return true
}

// writeLP writes the program.
func (cm *cbcModel) writeLP(path string) error {
	m, p := cm.m, cm.m.p
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	terms := 0
	// term writes one "+ coef name" term, wrapping lines so that no line
	// gets long (LP readers have line limits).
	term := func(coef float64, name string, id int32) {
		if terms > 0 && terms%8 == 0 {
			w.WriteString("\n ")
		}
		terms++
		switch {
		case coef == 1:
			fmt.Fprintf(w, " + %s%d", name, id)
		case coef == -1:
			fmt.Fprintf(w, " - %s%d", name, id)
		case coef < 0:
			fmt.Fprintf(w, " - %s %s%d", strconv.FormatFloat(-coef, 'g', -1, 64), name, id)
		default:
			fmt.Fprintf(w, " + %s %s%d", strconv.FormatFloat(coef, 'g', -1, 64), name, id)
		}
	}
	row := func(name string) { terms = 0; fmt.Fprintf(w, " %s:", name) }
	w.WriteString("Minimize\n")
	row("cost")
	for i, n := range p.Nodes {
		if m.alive[i] {
			term(n.Cost, "x", int32(i))
		}
	}
	w.WriteString("\nSubject To\n")
	for _, c := range m.classes {
		row(fmt.Sprintf("c%d", c))
		for _, n := range m.candidates(c) {
			term(1, "x", n)
		}
		if cm.root[c] {
			w.WriteString(" = 1\n")
		} else {
			term(-1, "y", c)
			w.WriteString(" = 0\n")
		}
	}
	for _, c := range m.classes {
		// One row per (class, child class) rather than per (node, child
		// class): a class chooses at most one node, so all of c's nodes
		// that read k together need k. In integer solutions the two are
		// the same; in the LP relaxation this one is tighter (a class
		// spread over several nodes that read k needs all of k, not the
		// largest share) and it has fewer rows.
		readers := map[int32][]int32{}
		var order []int32
		for _, n := range m.candidates(c) {
			for _, k := range m.kids[n] {
				if cm.root[k] {
					continue
				}
				if _, ok := readers[k]; !ok {
					order = append(order, k)
				}
				readers[k] = append(readers[k], n)
			}
		}
		slices.Sort(order)
		for _, k := range order {
			row(fmt.Sprintf("e%d_%d", c, k))
			for _, n := range readers[k] {
				term(1, "x", n)
			}
			term(-1, "y", k)
			w.WriteString(" <= 0\n")
		}
	}
	for j, r := range cm.pairs {
		row(fmt.Sprintf("p%d", j))
		for _, n := range r.nodes {
			term(1, "x", n)
		}
		fmt.Fprintf(w, " <= %d\n", r.rhs)
	}
	for j, r := range cm.cuts {
		row(fmt.Sprintf("k%d", j))
		for _, n := range r.nodes {
			term(1, "x", n)
		}
		fmt.Fprintf(w, " <= %d\n", r.rhs)
	}
	w.WriteString("Bounds\n")
	for _, c := range m.classes {
		if !cm.root[c] {
			fmt.Fprintf(w, " 0 <= y%d <= 1\n", c)
		}
	}
	w.WriteString("Binaries\n")
	terms = 0
	for i := range p.Nodes {
		if m.alive[i] {
			if terms > 0 && terms%8 == 0 {
				w.WriteString("\n")
			}
			terms++
			fmt.Fprintf(w, " x%d", i)
		}
	}
	w.WriteString("\nEnd\n")
	if err := w.Flush(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// writeStart writes a solution in the format CBC's mipstart option reads
// (the format of its own solution files), so that the solver starts with
// the incumbent and prunes against it from the first node.
func (cm *cbcModel) writeStart(path string, s *Solution) error {
	m, p := cm.m, cm.m.p
	var b bytes.Buffer
	b.WriteString("Feasible - objective value 0\n")
	j := 0
	for i := range p.Nodes {
		if !m.alive[i] {
			continue
		}
		v := 0
		if s.Choice[p.Nodes[i].Class] == int32(i) {
			v = 1
		}
		fmt.Fprintf(&b, "%d x%d %d 0\n", j, i, v)
		j++
	}
	for _, c := range m.classes {
		if cm.root[c] {
			continue
		}
		v := 0
		if s.Choice[c] >= 0 {
			v = 1
		}
		fmt.Fprintf(&b, "%d y%d %d 0\n", j, c, v)
		j++
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// cbcResult is what one solver run gave.
type cbcResult struct {
	// chosen holds the nodes with x = 1 in the solver's best integer
	// solution; nil when it had none.
	chosen []int32
	// optimal: the solver proved chosen optimal for the program it was
	// given.
	optimal bool
	// bound is a lower bound on the program's optimum from the solver's
	// log (its LP relaxation or its search's best possible), or -Inf.
	bound float64
}

// debugCBC, when set (by tests), sees each run's folder and log.
var debugCBC func(dir, log string)

var (
	cbcReContinuous = regexp.MustCompile(`Continuous objective value is (\S+)`)
	cbcReBestPoss   = regexp.MustCompile(`best possible (\S+?)[,)\s]`)
	cbcReLowerBound = regexp.MustCompile(`(?m)^Lower bound:\s+(\S+)`)
)

// runCBC solves the program once. limit > 0 is CBC's own wall-clock limit;
// ctx ends the process outright, for when CBC overruns its limit in a
// phase where it does not look at the clock.
func (cm *cbcModel) runCBC(ctx context.Context, bin, dir string, start *Solution, limit time.Duration) (*cbcResult, error) {
	lp := filepath.Join(dir, "model.lp")
	if err := cm.writeLP(lp); err != nil {
		return nil, err
	}
	args := []string{lp, "timeMode", "elapsed"}
	if limit > 0 {
		args = append(args, "seconds", strconv.FormatFloat(limit.Seconds(), 'f', 3, 64))
	}
	if start != nil {
		sp := filepath.Join(dir, "start.sol")
		if err := cm.writeStart(sp, start); err != nil {
			return nil, err
		}
		args = append(args, "mipStart", sp)
	}
	// The default cutoff increment (1e-5) lets CBC prune a branch that
	// could only improve by less than that, which would make "optimal"
	// mean within 1e-5 in absolute terms; a tiny increment makes it mean
	// within the solver's feasibility tolerances. CBC still raises it on
	// its own when every cost is a multiple of some step, which is exact.
	args = append(args, "increment", "1e-10", "allowableGap", "0", "ratioGap", "0")
	sol := filepath.Join(dir, "out.sol")
	os.Remove(sol)
	args = append(args, "solve", "solution", sol)
	// CBC writes its log through stdio, which buffers a pipe in blocks;
	// stdbuf (coreutils) makes it line-buffered so that a run ended early
	// still leaves the bounds it had logged.
	name := bin
	if sb, err := exec.LookPath("stdbuf"); err == nil {
		name, args = sb, append([]string{"-oL", bin}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	runErr := cmd.Run()
	if debugCBC != nil {
		debugCBC(dir, out.String())
	}
	log := out.String()
	res := &cbcResult{bound: cbcLogBound(log)}
	if runErr != nil {
		var ee *exec.ExitError
		if ctx.Err() != nil || errors.As(runErr, &ee) && !ee.Exited() {
			// Cut short by ctx, or ended by a signal: CBC 2.10 now and
			// then crashes while stopping on its time limit. Either way
			// the run is over without a solution; its bounds stand.
			return res, nil
		}
		return nil, fmt.Errorf("extract: cbc failed: %v\n%s", runErr, exactTail(log, 2000))
	}
	data, err := os.ReadFile(sol)
	if err != nil {
		return nil, fmt.Errorf("extract: cbc wrote no solution: %v\n%s", err, exactTail(log, 2000))
	}
	lines := strings.Split(string(data), "\n")
	status := lines[0]
	switch {
	case strings.HasPrefix(status, "Optimal"):
		res.optimal = true
	case strings.Contains(status, "no integer solution"), strings.Contains(status, "nfeasible"),
		!strings.HasPrefix(status, "Stopped"):
		// No integer solution to read: an infeasible program cannot
		// happen (the incumbent satisfies every row), so this is a
		// stop before CBC found or accepted one.
		return res, nil
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "**" { // CBC flags values out of bounds
			f = f[1:]
		}
		if len(f) < 3 || !strings.HasPrefix(f[1], "x") {
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(f[1][1:])
		if err != nil || n < 0 || n >= len(cm.m.p.Nodes) {
			return nil, fmt.Errorf("extract: cbc solution names unknown variable %q", f[1])
		}
		if v >= 0.5 {
			res.chosen = append(res.chosen, int32(n))
		}
	}
	if res.chosen == nil {
		return nil, fmt.Errorf("extract: cbc reported %q but no chosen node", status)
	}
	return res, nil
}

// cbcLogBound reads a lower bound from a CBC log, or -Inf. The bounds in
// the log hold whether or not the run finished: the root LP's value, the
// search's best possible, the final lower bound. Only the last of each is
// read: the search's only grows, and any line an earlier sub-search (CBC
// completing the mipstart) might print is left out, since its bound would
// be of a restricted problem.
func cbcLogBound(log string) float64 {
	bound := math.Inf(-1)
	for _, re := range []*regexp.Regexp{cbcReContinuous, cbcReBestPoss, cbcReLowerBound} {
		if all := re.FindAllStringSubmatch(log, -1); len(all) > 0 {
			// 1e50 is CBC's infinity, printed before a bound is known.
			if v, ok := cbcFloorParse(all[len(all)-1][1]); ok && math.Abs(v) < 1e49 {
				bound = math.Max(bound, v)
			}
		}
	}
	return bound
}

// cbcFloorParse reads a number CBC printed, rounded to a few digits (as
// few as 3 for "Lower bound:"), and lowers it by one unit in its last
// printed digit, so that a rounded-up bound never claims more than CBC
// proved.
func cbcFloorParse(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		if exp, err = strconv.Atoi(s[i+1:]); err != nil {
			return 0, false
		}
	}
	frac := 0
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		frac = len(mant) - i - 1
	}
	return v - math.Pow(10, float64(exp-frac)), true
}

func exactTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
