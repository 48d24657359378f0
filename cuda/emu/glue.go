package emu

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Parameter kinds.
const (
	kindPointer = iota
	kindInt
	kindFloat
)

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	typeRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_ ]*(\*\s*(__restrict__\s*)?)?$`)
)

var intTypes = map[string]bool{
	"int": true, "unsigned": true, "unsigned int": true, "long": true, "unsigned long": true,
	"long long": true, "unsigned long long": true, "short": true, "unsigned short": true,
	"char": true, "signed char": true, "unsigned char": true, "bool": true, "size_t": true,
	"int32_t": true, "uint32_t": true, "int64_t": true, "uint64_t": true,
}

// paramKind classifies a parameter's C type.
func paramKind(typ string) (int, error) {
	t := strings.Join(strings.Fields(typ), " ")
	if !typeRE.MatchString(t) {
		return 0, fmt.Errorf("unsupported parameter type %q", typ)
	}
	if strings.Contains(t, "*") {
		return kindPointer, nil
	}
	t = strings.TrimPrefix(t, "const ")
	switch {
	case intTypes[t]:
		return kindInt, nil
	case t == "float" || t == "double":
		return kindFloat, nil
	}
	return 0, fmt.Errorf("unsupported parameter type %q", typ)
}

// validate checks the run's description and returns each launch's kernel index.
func validate(kernels []Kernel, bufs []Buffer, launches []Launch) ([]int, error) {
	byName := map[string]int{}
	for i, k := range kernels {
		if !identRE.MatchString(k.Name) {
			return nil, fmt.Errorf("emu: kernel name %q is not a C identifier", k.Name)
		}
		if _, dup := byName[k.Name]; dup {
			return nil, fmt.Errorf("emu: kernel %s listed twice", k.Name)
		}
		byName[k.Name] = i
		for _, p := range k.Params {
			if !identRE.MatchString(p.Name) {
				return nil, fmt.Errorf("emu: kernel %s: parameter name %q is not a C identifier", k.Name, p.Name)
			}
			if _, err := paramKind(p.Type); err != nil {
				return nil, fmt.Errorf("emu: kernel %s: parameter %s: %w", k.Name, p.Name, err)
			}
		}
	}
	for i, b := range bufs {
		if b.Bytes < 0 || (b.Data != nil && len(b.Data) != b.Bytes) {
			return nil, fmt.Errorf("emu: buffer %d: %d bytes of data for a buffer of %d bytes", i, len(b.Data), b.Bytes)
		}
	}
	idx := make([]int, len(launches))
	for li, l := range launches {
		ki, ok := byName[l.Kernel]
		if !ok {
			return nil, fmt.Errorf("emu: launch %d: unknown kernel %q", li, l.Kernel)
		}
		idx[li] = ki
		k := kernels[ki]
		threads := 1
		for d := 0; d < 3; d++ {
			if l.Grid[d] < 1 || l.Block[d] < 1 || l.Grid[d] > math.MaxInt32 {
				return nil, fmt.Errorf("emu: launch %d (%s): grid %v and block %v must be positive", li, l.Kernel, l.Grid, l.Block)
			}
			threads *= l.Block[d]
		}
		if threads > 1024 || l.Block[2] > 64 {
			return nil, fmt.Errorf("emu: launch %d (%s): block %v exceeds CUDA's limits (1024 threads, z <= 64)", li, l.Kernel, l.Block)
		}
		nblocks := int64(l.Grid[0]) * int64(l.Grid[1]) * int64(l.Grid[2])
		if nblocks > math.MaxInt32 {
			return nil, fmt.Errorf("emu: launch %d (%s): grid %v has too many blocks", li, l.Kernel, l.Grid)
		}
		if err := validateBlocks(l.Blocks, nblocks); err != nil {
			return nil, fmt.Errorf("emu: launch %d (%s): grid %v: %w", li, l.Kernel, l.Grid, err)
		}
		if len(l.Args) != len(k.Params) {
			return nil, fmt.Errorf("emu: launch %d (%s): %d arguments for %d parameters", li, l.Kernel, len(l.Args), len(k.Params))
		}
		for ai, a := range l.Args {
			p := k.Params[ai]
			kind, _ := paramKind(p.Type)
			switch {
			case kind == kindInt && !a.IsInt, kind == kindFloat && !a.IsFloat,
				kind == kindPointer && (a.IsInt || a.IsFloat):
				return nil, fmt.Errorf("emu: launch %d (%s): argument %s does not match its type %s", li, l.Kernel, p.Name, p.Type)
			case kind == kindPointer && (a.Buffer < 0 || a.Buffer >= len(bufs)):
				return nil, fmt.Errorf("emu: launch %d (%s): argument %s: no buffer %d", li, l.Kernel, p.Name, a.Buffer)
			case kind == kindPointer && (a.Offset < 0 || a.Offset > bufs[a.Buffer].Bytes):
				return nil, fmt.Errorf("emu: launch %d (%s): argument %s: offset %d outside buffer %d (%d bytes)", li, l.Kernel, p.Name, a.Offset, a.Buffer, bufs[a.Buffer].Bytes)
			}
		}
	}
	return idx, nil
}

// validateBlocks checks a launch's block selection: linear ids inside a
// grid of nblocks blocks, none twice.
func validateBlocks(blocks []int, nblocks int64) error {
	if len(blocks) == 0 {
		return nil
	}
	seen := make(map[int]int, len(blocks))
	for i, b := range blocks {
		if b < 0 || int64(b) >= nblocks {
			return fmt.Errorf("selected block %d (Blocks[%d]) is outside the grid's %d blocks", b, i, nblocks)
		}
		if j, dup := seen[b]; dup {
			return fmt.Errorf("block %d is selected twice (Blocks[%d] and Blocks[%d])", b, j, i)
		}
		seen[b] = i
	}
	return nil
}

// glue generates the translation unit that the runner is compiled from: the
// header, the kernel text, one launcher per kernel, the launcher table and
// the runner.
func glue(kernels []Kernel) string {
	var b strings.Builder
	b.WriteString("// Code generated by lumsearch cuda/emu. DO NOT EDIT.\n#include \"emu.h\"\n#include \"kernels.cu\"\n\n")
	for i := range kernels {
		fmt.Fprintf(&b, "extern \"C\" __attribute__((weak)) char __start_lum_emu_shared_%d[];\n", i)
		fmt.Fprintf(&b, "extern \"C\" __attribute__((weak)) char __stop_lum_emu_shared_%d[];\n", i)
	}
	b.WriteString("\nnamespace {\n")
	for i, k := range kernels {
		fmt.Fprintf(&b, "void lum_emu_launch_%d(const lum_emu::ArgVal* a) {\n  %s(", i, k.Name)
		for j, p := range k.Params {
			if j > 0 {
				b.WriteString(", ")
			}
			t := strings.Join(strings.Fields(p.Type), " ")
			kind, _ := paramKind(t)
			field := [...]string{kindPointer: "p", kindInt: "i", kindFloat: "f"}[kind]
			fmt.Fprintf(&b, "(%s)a[%d].%s", t, j, field)
		}
		fmt.Fprintf(&b, ");\n}\nconst char* const lum_emu_params_%d[] = {", i)
		for j, p := range k.Params {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", p.Name)
		}
		if len(k.Params) == 0 {
			b.WriteString("nullptr")
		}
		b.WriteString("};\n")
	}
	b.WriteString("}  // namespace\n\nextern const lum_emu::KernelEntry lum_emu_kernels[] = {\n")
	for i, k := range kernels {
		fmt.Fprintf(&b, "    {%q, %d, lum_emu_params_%d, lum_emu_launch_%d, __start_lum_emu_shared_%d, __stop_lum_emu_shared_%d},\n",
			k.Name, len(k.Params), i, i, i, i)
	}
	if len(kernels) == 0 {
		b.WriteString("    {\"\", 0, nullptr, nullptr, nullptr, nullptr},\n")
	}
	fmt.Fprintf(&b, "};\nextern const int lum_emu_nkernels = %d;\n\n#include \"runner.inc\"\n", len(kernels))
	return b.String()
}

// writeInput writes the runner's input file (little-endian; read by
// runner.inc's run) to w, the buffers' data as they are rather than
// through one copy of everything (gigabytes at real shapes).
func writeInput(w io.Writer, idx []int, bufs []Buffer, launches []Launch, workers int, opt Options) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte // the bytes since the last flush to bw
	flush := func() {
		bw.Write(b)
		b = b[:0]
	}
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	flag := func(v bool) uint32 {
		if v {
			return 1
		}
		return 0
	}
	b = append(b, "LUMEMU03"...)
	u32(uint32(workers))
	u32(flag(opt.Shuffle))
	u64(opt.Seed)
	u32(uint32(opt.Landing))
	u32(flag(opt.Vary))
	u32(uint32(len(bufs)))
	discard := make([]bool, len(bufs))
	for _, i := range opt.Discard {
		discard[i] = true
	}
	for i, buf := range bufs {
		u64(uint64(buf.Bytes))
		flags := byte(0)
		if buf.Data != nil {
			flags |= 1
		}
		if discard[i] {
			flags |= 2
		}
		b = append(b, flags)
		flush()
		bw.Write(buf.Data)
	}
	u32(uint32(len(launches)))
	for li, l := range launches {
		u32(uint32(idx[li]))
		u64(l.Seed)
		for _, g := range l.Grid {
			u32(uint32(g))
		}
		for _, t := range l.Block {
			u32(uint32(t))
		}
		u32(uint32(len(l.Blocks))) // 0: every block
		for _, id := range l.Blocks {
			u32(uint32(id))
		}
		u32(uint32(len(l.Args)))
		for _, a := range l.Args {
			kind := byte(kindPointer)
			switch {
			case a.IsInt:
				kind = kindInt
			case a.IsFloat:
				kind = kindFloat
			}
			b = append(b, kind)
			u32(uint32(a.Buffer))
			u64(uint64(a.Offset))
			u64(uint64(a.Int))
			u64(math.Float64bits(a.Float))
		}
	}
	flush()
	return bw.Flush()
}

// kernelDefRE finds kernel definitions in the source: the name is group 1.
var kernelDefRE = regexp.MustCompile(`__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\([^)]*\)\s*\{`)

// placeShared returns the source with __shared__ redefined before each
// kernel's definition, so that kernel i's shared variables go to section
// lum_emu_shared_<i> (emu.h, runner.inc), and #line directives keeping the
// line numbers (__syncthreads tells barriers apart by them). When some
// kernel's definition is not found, the source is returned unchanged:
// every shared variable then stays in the section that every block
// poisons, which costs time, never a check.
func placeShared(source string, kernels []Kernel) string {
	defs := map[string]int{} // kernel name -> the offset of its definition's line
	for _, m := range kernelDefRE.FindAllStringSubmatchIndex(source, -1) {
		name := source[m[2]:m[3]]
		if _, dup := defs[name]; !dup {
			defs[name] = strings.LastIndexByte(source[:m[0]], '\n') + 1
		}
	}
	type cut struct{ at, kernel int }
	cuts := make([]cut, 0, len(kernels))
	for i, k := range kernels {
		at, ok := defs[k.Name]
		if !ok {
			return source
		}
		cuts = append(cuts, cut{at, i})
	}
	slices.SortFunc(cuts, func(a, b cut) int { return a.at - b.at })
	var b strings.Builder
	b.Grow(len(source) + 96*len(cuts))
	prev, line := 0, 1
	for j, c := range cuts {
		if j > 0 && c.at == cuts[j-1].at {
			return source // two kernels on one line: no section can tell them apart
		}
		b.WriteString(source[prev:c.at])
		line += strings.Count(source[prev:c.at], "\n")
		fmt.Fprintf(&b, "#undef __shared__\n#define __shared__ LUM_EMU_SHARED_IN(\"lum_emu_shared_%d\")\n#line %d \"kernels.cu\"\n", c.kernel, line)
		prev = c.at
	}
	b.WriteString(source[prev:])
	return b.String()
}
