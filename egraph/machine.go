package egraph

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The matcher is a small virtual machine in the style of de Moura and
// Bjørner's e-matching machine as egg compiles it. A pattern compiles into a
// list of instructions over registers that hold class ids: bind (for each
// node of the class in a register with the right operator, put its children
// in fresh registers and go on), compare (two registers must hold the same
// class: a repeated variable), and scan (for each class holding an operator:
// the root of a later pattern of a multi-pattern). Backtracking is recursion
// at bind and scan. Matching reads the e-graph and writes nothing, so rules
// can be searched in parallel.

type instrKind uint8

const (
	iBind instrKind = iota
	iCompare
	iScan
)

type instr struct {
	kind    instrKind
	pvar    int32 // bind: payload variable index, or -1 to match payload exactly
	pfirst  bool  // bind: the payload variable's first occurrence binds it
	root    bool  // bind: the class register is a pattern's root
	last    bool  // bind: no bind or scan follows, so nothing deeper can be fresh
	in      int32 // bind: the class register; compare: one side
	out     int32 // bind: first child register; scan: the register to fill; compare: other side
	arity   int32
	op      Symbol
	payload Payload
}

// program is a compiled searcher.
type program struct {
	instrs  []instr
	nregs   int
	npvars  int
	varReg  []int32 // register of each variable
	rootReg []int32 // register of each pattern's root
	rootOp  Symbol  // operator of the first pattern's root
	rootVar bool    // the first pattern is a lone variable: every class matches
}

// compile turns patterns that share variables (one pattern, or the parts
// of a multi-pattern) into a program. vars is the shared variable list;
// every pattern variable must be in it. The first pattern's root is register
// 0, filled by the caller; each later pattern's root is found by a scan of
// its operator, or is the register of an already bound variable.
func compile(pats []*Pattern, vars, pvars []string) program {
	index := map[string]int{}
	for i, v := range vars {
		index[v] = i
	}
	pindex := map[string]int{}
	for i, v := range pvars {
		pindex[v] = i
	}
	pbound := make([]bool, len(pvars))
	pr := program{varReg: make([]int32, len(vars)), nregs: 1, npvars: len(pvars)}
	for i := range pr.varReg {
		pr.varReg[i] = -1
	}
	type work struct {
		p   *Pattern
		n   int
		reg int32
	}
	for pi, p := range pats {
		root := p.nodes[p.root()]
		var reg int32
		switch {
		case pi == 0:
			reg = 0
			pr.rootOp = root.op
			if root.v >= 0 {
				pr.rootVar = true
				pr.varReg[index[p.vars[root.v]]] = 0
			}
		case root.v >= 0:
			// NewMultiPattern checks that a later root variable is bound.
			reg = pr.varReg[index[p.vars[root.v]]]
		default:
			reg = int32(pr.nregs)
			pr.nregs++
			pr.instrs = append(pr.instrs, instr{kind: iScan, out: reg, op: root.op})
		}
		pr.rootReg = append(pr.rootReg, reg)
		if root.v >= 0 {
			continue
		}
		rootBind := len(pr.instrs)
		stack := []work{{p, p.root(), reg}}
		for len(stack) > 0 {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			n := w.p.nodes[w.n]
			out := int32(pr.nregs)
			pr.nregs += len(n.kids)
			bind := instr{kind: iBind, in: w.reg, out: out, arity: int32(len(n.kids)), op: n.op, payload: n.payload, pvar: -1}
			if n.pv >= 0 {
				gi := pindex[w.p.pvars[n.pv]]
				bind.pvar, bind.pfirst = int32(gi), !pbound[gi]
				pbound[gi] = true
			}
			pr.instrs = append(pr.instrs, bind)
			// Compares right after the bind prune early; subterms are
			// pushed in reverse so that they are matched left to right.
			for k, kid := range n.kids {
				kn := w.p.nodes[kid]
				if kn.v < 0 {
					continue
				}
				gv := index[w.p.vars[kn.v]]
				if pr.varReg[gv] < 0 {
					pr.varReg[gv] = out + int32(k)
				} else {
					pr.instrs = append(pr.instrs, instr{kind: iCompare, in: out + int32(k), out: pr.varReg[gv]})
				}
			}
			for k := len(n.kids) - 1; k >= 0; k-- {
				if w.p.nodes[n.kids[k]].v < 0 {
					stack = append(stack, work{w.p, n.kids[k], out + int32(k)})
				}
			}
		}
		pr.instrs[rootBind].root = true
	}
	for i := len(pr.instrs) - 1; i >= 0; i-- {
		if k := pr.instrs[i].kind; k == iBind {
			pr.instrs[i].last = true
			break
		} else if k == iScan {
			break
		}
	}
	return pr
}

// matchSet holds matches flat: per match, the roots then the variables in
// data, and the payload variables in payloads.
type matchSet struct {
	nroots, nvars int
	npvars        int
	data          []ClassID
	payloads      []Payload
	limit         int             // stop after this many matches; 0 means no limit
	ctx           context.Context // checked between root classes; nil for none
	interrupted   bool
	skipped       bool          // the scheduler did not run the rule this iteration
	took          time.Duration // how long the search took
	// incremental asks only for matches that bind a node that changed
	// after stamp since: added or recanonicalized, or, below a pattern's
	// root, moved to another class by a union. Every other match was found
	// by the search at stamp since, with the same variables and a root
	// class that is now part of its root class, so a rule that applied all
	// of those matches unconditionally would gain nothing from them again.
	incremental bool
	since       uint32
}

func (ms *matchSet) len() int {
	w := ms.nroots + ms.nvars
	if w == 0 {
		return 0
	}
	return len(ms.data) / w
}

func (ms *matchSet) full() bool {
	return ms.interrupted || (ms.limit > 0 && ms.len() >= ms.limit)
}

// checkpoint notes a canceled context every so many root classes, so that a
// search of a huge e-graph still answers Ctrl-C promptly.
func (ms *matchSet) checkpoint(i int) {
	if ms.ctx != nil && i&255 == 0 && ms.ctx.Err() != nil {
		ms.interrupted = true
	}
}

func (ms *matchSet) at(i int) (roots, subst []ClassID, payloads []Payload) {
	w := ms.nroots + ms.nvars
	m := ms.data[i*w : (i+1)*w : (i+1)*w]
	return m[:ms.nroots], m[ms.nroots:], ms.payloads[i*ms.npvars : (i+1)*ms.npvars : (i+1)*ms.npvars]
}

// reset empties the set for a new search, keeping its buffers.
func (ms *matchSet) reset() {
	ms.data, ms.payloads, ms.took = ms.data[:0], ms.payloads[:0], 0
}

type machine struct {
	g     *Graph
	pr    *program
	regs  []ClassID
	pregs []Payload
	out   *matchSet
	// since, when incremental, restricts the output to matches that bind a
	// node changed after stamp since (see matchSet.since).
	since       uint32
	incremental bool
}

// search runs a program over the whole e-graph, which must be rebuilt.
func (pr *program) search(g *Graph, out *matchSet) {
	m := machine{g: g, pr: pr, regs: make([]ClassID, pr.nregs), pregs: make([]Payload, pr.npvars), out: out, since: out.since, incremental: out.incremental}
	if pr.rootVar {
		for id, p := range g.parent {
			if p != ClassID(id) {
				continue
			}
			out.checkpoint(id)
			m.regs[0] = ClassID(id)
			m.run(0, !m.incremental || g.cls(p).stamp > m.since)
			if out.full() {
				return
			}
		}
		return
	}
	if int(pr.rootOp) >= len(g.byOp) {
		return
	}
	for i, c := range g.byOp[pr.rootOp] {
		out.checkpoint(i)
		m.regs[0] = c
		m.run(0, !m.incremental)
		if out.full() {
			return
		}
	}
}

// run executes the program from pc. fresh says whether the match so far
// binds a node that changed after stamp m.since (see matchSet.incremental);
// in incremental mode only fresh matches are output.
func (m *machine) run(pc int, fresh bool) {
	g := m.g
	for ; pc < len(m.pr.instrs); pc++ {
		in := &m.pr.instrs[pc]
		switch in.kind {
		case iBind:
			cl := g.cls(m.regs[in.in])
			if !fresh && in.last && m.incremental && cl.stamp <= m.since {
				// No node of this class changed, and no bind follows that
				// could find one that did: every match from here is old.
				return
			}
			for _, nid := range g.opRange(cl, in.op) {
				r := &g.nodes[nid]
				if int32(r.arity) != in.arity {
					continue
				}
				switch {
				case in.pvar < 0:
					if r.payload != in.payload {
						continue
					}
				case in.pfirst:
					m.pregs[in.pvar] = r.payload
				case m.pregs[in.pvar] != r.payload:
					continue
				}
				copy(m.regs[in.out:in.out+in.arity], r.kidsIn(g.kids))
				// A node that only moved into the root's class adds no new
				// match there: the root's class contains its old one. Below
				// the root a moved node makes new combinations.
				m.run(pc+1, fresh || r.stamp > m.since || (!in.root && g.moved[nid] > m.since))
				if m.out.full() {
					return
				}
			}
			return
		case iCompare:
			if m.regs[in.in] != m.regs[in.out] {
				return
			}
		case iScan:
			if int(in.op) >= len(g.byOp) {
				return
			}
			for _, c := range g.byOp[in.op] {
				m.regs[in.out] = c
				m.run(pc+1, fresh)
				if m.out.full() {
					return
				}
			}
			return
		default:
			panic(fmt.Sprintf("egraph: bad instruction %d", in.kind))
		}
	}
	if !fresh {
		return
	}
	out := m.out
	n := len(out.data)
	out.data = slices.Grow(out.data, len(m.pr.rootReg)+len(m.pr.varReg))[:n+len(m.pr.rootReg)+len(m.pr.varReg)]
	dst := out.data[n:]
	for i, r := range m.pr.rootReg {
		dst[i] = m.regs[r]
	}
	dst = dst[len(m.pr.rootReg):]
	for i, r := range m.pr.varReg {
		dst[i] = m.regs[r]
	}
	out.payloads = append(out.payloads, m.pregs...)
}
