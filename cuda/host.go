package cuda

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/safetensors"
)

// HostLibrary generates the host library of a compiled model: a C header
// (model.h) declaring a small C API and a self-contained C++17 source
// (model.cpp) implementing it. The source includes no CUDA header: it
// declares the driver-API functions it calls and loads libcuda.so.1 at run
// time with dlopen, so any C++ compiler builds it with no CUDA toolkit
// (link with -ldl). It embeds the compiled kernels (cubin, the CUBIN for
// arch, loaded first when given; ptx, the PTX text, as the fallback the
// driver compiles), the bytes of the program's constants, and tables of the
// buffers and launches: the arena is one allocation holding the Temp
// buffers at their planned offsets, every other buffer has its own, and
// each launch passes its buffers' device addresses as the kernel's
// parameters (the body's inputs, then its outputs).
//
// The library loads a model two ways: lum_load_weights with every weight
// and lum_prepare, which runs the preparation launches; or
// lum_load_prepared, which reads the prepared weights file that lumsearch
// compile writes (a safetensors file holding lower.StoredBuffers, computed
// by lower.PrepareWeights, with lower.WeightsDigest under the metadata key
// lower.DigestMetadataKey) and runs no launch.
//
// kernels are PrintProgram's for prog (preparation first, then one run).
// An empty ptx (NVRTC was missing) gives a library with no module whose
// lum_create fails saying so. The same input gives the same bytes.
func HostLibrary(prog *lower.Program, kernels []*Kernel, ptx string, cubin []byte, arch string) (header, source string, err error) {
	h, err := newHost(prog, kernels, ptx, cubin, arch)
	if err != nil {
		return "", "", fmt.Errorf("host library of %s: %w", prog.Name, err)
	}
	return h.header(), h.source(), nil
}

// C-side buffer kinds, as the generated source numbers them.
var hostKinds = [...]string{
	lower.Input: "kInput", lower.Weight: "kWeight", lower.State: "kState", lower.Constant: "kConstant",
	lower.Prepared: "kPrepared", lower.Temp: "kTemp", lower.Output: "kOutput",
}

// The public kinds of model.h's tensor table, in the order it lists them.
var hostPublic = []struct {
	kind lower.BufferKind
	enum string
}{{lower.Input, "LUM_INPUT"}, {lower.Weight, "LUM_WEIGHT"}, {lower.State, "LUM_STATE"}, {lower.Output, "LUM_OUTPUT"}}

type host struct {
	prog      *lower.Program
	launches  []*lower.Launch
	kernels   []*Kernel
	names     []string // distinct kernel names, in first-launch order
	kernelOf  []int    // each launch's index in names
	ptx       string
	cubin     []byte
	arch      string
	constants map[int][]byte // Constant buffers' bytes by buffer id
	maxParams int
	stored    []*lower.Buffer // the tensors of the prepared weights file
	digest    string          // lower.WeightsDigest
}

func newHost(prog *lower.Program, kernels []*Kernel, ptx string, cubin []byte, arch string) (*host, error) {
	h := &host{prog: prog, kernels: kernels, ptx: ptx, cubin: cubin, arch: arch, constants: map[int][]byte{}}
	h.launches = append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...)
	if len(kernels) != len(h.launches) {
		return nil, fmt.Errorf("%d kernels for %d launches", len(kernels), len(h.launches))
	}
	if strings.ContainsRune(ptx, 0) {
		return nil, fmt.Errorf("the PTX contains a NUL byte")
	}
	if ptx == "" && len(cubin) > 0 {
		return nil, fmt.Errorf("a CUBIN without its PTX")
	}
	index := map[string]int{}
	for i, k := range kernels {
		l := h.launches[i]
		if len(k.Params) != len(l.Params()) {
			return nil, fmt.Errorf("kernel %s has %d parameters for launch %s's %d buffers", k.Name, len(k.Params), l.Name, len(l.Params()))
		}
		if k.Rows != nil && (l.Rows == nil || k.Rows.Dim < 0 || k.Rows.Dim > 2 || k.Rows.Num < 1 || k.Rows.Den < 1) {
			return nil, fmt.Errorf("kernel %s: a grid that follows the tokens present (%+v) for launch %s, which has no row count", k.Name, *k.Rows, l.Name)
		}
		for d := range 3 {
			if k.Grid[d] < 1 || k.Block[d] < 1 {
				return nil, fmt.Errorf("kernel %s: launch shape grid %v block %v", k.Name, k.Grid, k.Block)
			}
		}
		for _, id := range l.Params() {
			if id < 0 || id >= len(prog.Buffers) {
				return nil, fmt.Errorf("launch %s names buffer %d of %d", l.Name, id, len(prog.Buffers))
			}
		}
		name := func(k *Kernel) int {
			j, ok := index[k.Name]
			if !ok {
				j = len(h.names)
				index[k.Name] = j
				h.names = append(h.names, k.Name)
			}
			return j
		}
		h.kernelOf = append(h.kernelOf, name(k))
		h.maxParams = max(h.maxParams, len(k.Params))
		for _, bk := range k.Buckets {
			if l.Rows == nil || len(bk.Kernel.Params) != len(k.Params) || bk.Kernel.Rows != nil && (bk.Kernel.Rows.Dim < 0 || bk.Kernel.Rows.Dim > 2 || bk.Kernel.Rows.Num < 1 || bk.Kernel.Rows.Den < 1) {
				return nil, fmt.Errorf("kernel %s: row bucket %s does not fit launch %s", k.Name, bk.Kernel.Name, l.Name)
			}
			name(bk.Kernel)
		}
	}
	for i, b := range prog.Buffers {
		if b.ID != i {
			return nil, fmt.Errorf("buffer %d has id %d", i, b.ID)
		}
		switch b.Kind {
		case lower.Temp:
			if b.Offset < 0 || b.Offset+b.Bytes > prog.ArenaBytes {
				return nil, fmt.Errorf("temp %s (%d bytes at %d) lies outside the %d-byte arena", b.Name, b.Bytes, b.Offset, prog.ArenaBytes)
			}
		case lower.Constant:
			t, err := b.Value(context.Background())
			if err != nil {
				return nil, err
			}
			data := EncodeTensor(t)
			if int64(len(data)) != b.Bytes {
				return nil, fmt.Errorf("constant %s: %d bytes for a %d-byte buffer", b.Name, len(data), b.Bytes)
			}
			h.constants[b.ID] = data
		}
	}
	var err error
	if h.stored, err = lower.StoredBuffers(prog); err != nil {
		return nil, err
	}
	for _, b := range h.stored {
		if _, err := safetensors.DTypeName(b.DType); err != nil {
			return nil, fmt.Errorf("%s %s: %w", b.Kind, b.Name, err)
		}
	}
	if h.digest, err = lower.WeightsDigest(prog); err != nil {
		return nil, err
	}
	return h, nil
}

// typeOf is a buffer's type as the library's messages and model.h write
// it: f32[4 64].
func typeOf(b *lower.Buffer) string {
	dims := make([]string, len(b.Shape))
	for i, d := range b.Shape {
		dims[i] = strconv.FormatInt(int64(d), 10)
	}
	return b.DType.String() + "[" + strings.Join(dims, " ") + "]"
}

// paged lists, as PagedDesc initializers, the paged attention launches
// whose metadata are all inputs of the program (the caller's, which
// lum_run checks), each distinct one once. Metadata the program computes
// is its own.
func (h *host) paged() []string {
	var out []string
	for _, l := range slices.Concat(h.prog.Prep, h.prog.Run) {
		p, err := cost.Paged(l.Body)
		if err != nil {
			continue // not a paged attention launch
		}
		n := l.Body.Node(p.Node)
		var bufs, sizes [4]int
		inputs := true
		for k := range 4 {
			arg := slices.Index(l.Body.Inputs(), n.Inputs[5+k])
			if arg < 0 || arg >= len(l.Args) || h.prog.Buffers[l.Args[arg]].Kind != lower.Input {
				inputs = false
				break
			}
			bufs[k], sizes[k] = l.Args[arg], p.MetaTypes[k].Size()
		}
		if !inputs {
			continue
		}
		d := fmt.Sprintf("{{%d, %d, %d, %d}, {%d, %d, %d, %d}, %dLL, %dLL, %dLL, %dLL, %dLL}", bufs[0], bufs[1], bufs[2], bufs[3],
			sizes[0], sizes[1], sizes[2], sizes[3], p.T, p.Seqs, p.Blocks, p.Slots, p.Block)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// public lists the buffers model.h's tensor table shows: inputs, weights,
// states and outputs, each kind in buffer order.
func (h *host) public() []*lower.Buffer {
	var out []*lower.Buffer
	for _, k := range hostPublic {
		for _, b := range h.prog.Buffers {
			if b.Kind == k.kind {
				out = append(out, b)
			}
		}
	}
	return out
}

func (h *host) header() string {
	var b strings.Builder
	name := commentText(h.prog.Name)
	fmt.Fprintf(&b, "/* model.h: the C API of the host library of %s, generated by lumsearch. Do not edit.\n", name)
	b.WriteString(hostHeaderDoc)
	fmt.Fprintf(&b, " * The tensors of %s (lum_tensor lists them at run time):\n", name)
	pub := h.public()
	width := 0
	for _, t := range pub {
		width = max(width, len(commentText(t.Name)))
	}
	for _, t := range pub {
		fmt.Fprintf(&b, " *   %-6s  %-*s  %s, %d bytes\n", t.Kind, width, commentText(t.Name), typeOf(t), t.Bytes)
	}
	if len(h.prog.Updates) > 0 {
		b.WriteString(" * lum_run writes each state's new content in place.\n")
	}
	fmt.Fprintf(&b, " * A run makes %d launches, the preparation %d; the arena of intermediates takes %d bytes.\n",
		len(h.prog.Run), len(h.prog.Prep), h.prog.ArenaBytes)
	nw, np := 0, 0
	var bytes int64
	for _, t := range h.stored {
		if t.Kind == lower.Weight {
			nw++
		} else {
			np++
		}
		bytes += t.Bytes
	}
	fmt.Fprintf(&b, " * The prepared weights file (lum_load_prepared) holds %d tensors, %d bytes: %d weights the run reads\n"+
		" * and %d computed from weights at load time.\n", nw+np, bytes, nw, np)
	if h.ptx == "" {
		b.WriteString(" * This library was generated without NVRTC: it embeds no kernels and lum_create fails.\n")
	}
	b.WriteString(" */\n")
	b.WriteString("#ifndef LUM_MODEL_H\n#define LUM_MODEL_H\n\n#include <stddef.h>\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n")
	fmt.Fprintf(&b, "/* The model, the architecture its CUBIN targets, and whether kernels are embedded. */\n")
	fmt.Fprintf(&b, "#define LUM_MODEL_NAME %s\n", cString(h.prog.Name))
	fmt.Fprintf(&b, "#define LUM_ARCH %s\n", cString(h.arch))
	fmt.Fprintf(&b, "#define LUM_HAS_KERNELS %d\n", boolInt(h.ptx != ""))
	fmt.Fprintf(&b, "#define LUM_HAS_CUBIN %d\n", boolInt(len(h.cubin) > 0))
	fmt.Fprintf(&b, "#define LUM_ARENA_BYTES %dULL\n", h.prog.ArenaBytes)
	b.WriteString("/* The program a prepared weights file must be for: its metadata's " + lower.DigestMetadataKey + ". */\n")
	fmt.Fprintf(&b, "#define LUM_PROGRAM_DIGEST %s\n\n", cString(h.digest))
	b.WriteString(hostHeaderAPI)
	b.WriteString("\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* LUM_MODEL_H */\n")
	return b.String()
}

func (h *host) source() string {
	var b strings.Builder
	fmt.Fprintf(&b, "// model.cpp: the host library of %s, generated by lumsearch. Do not edit.\n", commentText(h.prog.Name))
	b.WriteString(hostSourcePrefix)
	b.WriteString("\n// ---- The model: generated tables ----\n\n")
	p := h.prog
	fmt.Fprintf(&b, "const char kModelName[] = %s;\n", cString(p.Name))
	fmt.Fprintf(&b, "const char kArch[] = %s;\n", cString(h.arch))
	fmt.Fprintf(&b, "constexpr unsigned long long kArenaBytes = %dULL;\n", p.ArenaBytes)
	fmt.Fprintf(&b, "constexpr int kNumBuffers = %d;\n", len(p.Buffers))
	fmt.Fprintf(&b, "constexpr int kNumKernels = %d;  // distinct kernels; launches of equal bodies share one\n", len(h.names))
	fmt.Fprintf(&b, "constexpr int kNumPrep = %d;\n", len(p.Prep))
	fmt.Fprintf(&b, "constexpr int kNumLaunches = %d;\n", len(h.launches))
	fmt.Fprintf(&b, "constexpr int kMaxParams = %d;\n\n", h.maxParams)

	// Constants' bytes.
	for _, buf := range p.Buffers {
		if data, ok := h.constants[buf.ID]; ok {
			fmt.Fprintf(&b, "// %s: %s %s\n", commentText(buf.Name), typeOf(buf), commentText(leafText(buf.Leaf)))
			writeBytes(&b, fmt.Sprintf("kConst%d", buf.ID), data, false)
		}
	}
	if len(h.constants) > 0 {
		b.WriteString("\n")
	}

	// Shapes of the public tensors and those of the prepared weights file,
	// then the buffers.
	pub := h.public()
	shaped := map[int]bool{}
	for _, t := range slices.Concat(pub, h.stored) {
		if len(t.Shape) == 0 || shaped[t.ID] {
			continue
		}
		shaped[t.ID] = true
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = strconv.FormatInt(int64(d), 10) + "LL"
		}
		fmt.Fprintf(&b, "const long long kShape%d[] = {%s};\n", t.ID, strings.Join(dims, ", "))
	}
	b.WriteString("\n// Every buffer: its kind, name, type, size, its offset in the arena (temps),\n// and the bytes of a constant.\n")
	b.WriteString("const BufferDesc kBuffers[kNumBuffers + 1] = {\n")
	for _, buf := range p.Buffers {
		data := "nullptr"
		if _, ok := h.constants[buf.ID]; ok {
			data = fmt.Sprintf("kConst%d", buf.ID)
		}
		offset := int64(-1)
		if buf.Kind == lower.Temp {
			offset = buf.Offset
		}
		fmt.Fprintf(&b, "    {%s, %s, %s, %dULL, %dLL, %s},  // %d\n", hostKinds[buf.Kind], cString(buf.Name), cString(typeOf(buf)), buf.Bytes, offset, data, buf.ID)
	}
	b.WriteString("    {kTemp, nullptr, nullptr, 0ULL, -1LL, nullptr},\n};\n\n")

	b.WriteString("// The runtime extents, checked by lum_set_input against their ranges.\n")
	fmt.Fprintf(&b, "constexpr int kNumSymbols = %d;\n", len(p.Symbols))
	b.WriteString("const SymbolDesc kSymbols[kNumSymbols + 1] = {\n")
	for _, s := range p.Symbols {
		i := slices.IndexFunc(p.Buffers, func(buf *lower.Buffer) bool { return buf.Kind == lower.Input && buf.Name == s.Name })
		fmt.Fprintf(&b, "    {%d, %dLL, %dLL},  // %s\n", i, s.Lo, s.Hi, commentText(s.String()))
	}
	b.WriteString("    {-1, 0LL, 0LL},\n};\n\n")
	writeStepTable(&b, p)

	paged := h.paged()
	b.WriteString("// Paged attention metadata given as inputs, checked by lum_run before any launch.\n")
	fmt.Fprintf(&b, "constexpr int kNumPaged = %d;\n", len(paged))
	b.WriteString("const PagedDesc kPaged[kNumPaged + 1] = {\n")
	for _, pd := range paged {
		b.WriteString("    " + pd + ",\n")
	}
	b.WriteString("    {{-1, -1, -1, -1}, {0, 0, 0, 0}, 0LL, 0LL, 0LL, 0LL, 0LL},\n};\n\n")

	b.WriteString("// The tensors lum_tensor lists: inputs, weights, states, outputs.\n")
	fmt.Fprintf(&b, "constexpr size_t kNumTensors = %d;\n", len(pub))
	b.WriteString("const lum_tensor_info kTensors[kNumTensors + 1] = {\n")
	enum := map[lower.BufferKind]string{}
	for _, k := range hostPublic {
		enum[k.kind] = k.enum
	}
	for _, t := range pub {
		shape := "nullptr"
		if len(t.Shape) > 0 {
			shape = fmt.Sprintf("kShape%d", t.ID)
		}
		fmt.Fprintf(&b, "    {%s, %s, %s, %d, %s, %d},\n", cString(t.Name), enum[t.Kind], cString(t.DType.String()), len(t.Shape), shape, t.Bytes)
	}
	b.WriteString("    {nullptr, LUM_INPUT, nullptr, 0, nullptr, 0},\n};\n\n")

	b.WriteString("// The tensors of the prepared weights file (lum_load_prepared): the weights and\n")
	b.WriteString("// prepared weights the run reads, with their safetensors dtypes.\n")
	fmt.Fprintf(&b, "constexpr int kNumStored = %d;\n", len(h.stored))
	b.WriteString("const StoredDesc kStored[kNumStored + 1] = {\n")
	for _, t := range h.stored {
		dt, _ := safetensors.DTypeName(t.DType)
		shape := "nullptr"
		if len(t.Shape) > 0 {
			shape = fmt.Sprintf("kShape%d", t.ID)
		}
		fmt.Fprintf(&b, "    {%d, %s, %d, %s},  // %s %s\n", t.ID, cString(dt), len(t.Shape), shape, t.Kind, commentText(t.Name))
	}
	b.WriteString("    {-1, nullptr, 0, nullptr},\n};\n")
	fmt.Fprintf(&b, "const char kDigestKey[] = %s;\n", cString(lower.DigestMetadataKey))
	fmt.Fprintf(&b, "const char kProgramDigest[] = %s;\n\n", cString(h.digest))

	b.WriteString("// The kernels, by the names the module exports.\n")
	b.WriteString("const char* const kKernelNames[kNumKernels + 1] = {")
	for _, n := range h.names {
		b.WriteString(cString(n) + ", ")
	}
	b.WriteString("nullptr};\n\n")

	b.WriteString("// Each launch's buffers: the kernel's parameters in order (inputs, then outputs).\n")
	b.WriteString("const int kLaunchArgs[] = {\n")
	first := make([]int, len(h.launches))
	n := 0
	for i, l := range h.launches {
		first[i] = n
		ids := l.Params()
		s := make([]string, len(ids))
		for j, id := range ids {
			s[j] = strconv.Itoa(id)
		}
		n += len(ids)
		fmt.Fprintf(&b, "    %s,  // %s\n", strings.Join(s, ", "), l.Name)
	}
	b.WriteString("    -1,\n};\n\n")
	index := map[string]int{}
	for i, n := range h.names {
		index[n] = i
	}
	b.WriteString("// The row buckets: the kernel a row-wise launch runs with at most hi rows present.\n")
	b.WriteString("const BucketDesc kBuckets[] = {\n")
	firstBucket := make([]int, len(h.launches))
	nb := 0
	for i := range h.launches {
		k := h.kernels[i]
		firstBucket[i] = nb
		for _, bk := range k.Buckets {
			rows := RowGrid{Dim: -1, Num: 1, Den: 1}
			if bk.Kernel.Rows != nil {
				rows = *bk.Kernel.Rows
			}
			g, bl := bk.Kernel.Grid, bk.Kernel.Block
			fmt.Fprintf(&b, "    {%dLL, %d, {%du, %du, %du}, {%du, %du, %du}, %d, %dLL, %dLL},  // %s\n", bk.Hi, index[bk.Kernel.Name],
				g[0], g[1], g[2], bl[0], bl[1], bl[2], rows.Dim, rows.Num, rows.Den, commentText(bk.Kernel.Name))
			nb++
		}
	}
	b.WriteString("    {0LL, -1, {0u, 0u, 0u}, {0u, 0u, 0u}, -1, 1LL, 1LL},\n};\n\n")
	b.WriteString("// The launches: the preparation (kNumPrep), then one run.\n")
	b.WriteString("const LaunchDesc kLaunches[kNumLaunches + 1] = {\n")
	for i, l := range h.launches {
		k := h.kernels[i]
		rows := RowGrid{Dim: -1, Num: 1, Den: 1}
		if k.Rows != nil {
			rows = *k.Rows
		}
		seqs := l.Rows != nil && l.Rows.Seqs
		fmt.Fprintf(&b, "    {%d, {%du, %du, %du}, {%du, %du, %du}, %d, %d, %d, %dLL, %dLL, %t, %d, %d},  // %s: %s\n", h.kernelOf[i],
			k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0], k.Block[1], k.Block[2], first[i], len(l.Params()), rows.Dim, rows.Num, rows.Den, seqs,
			firstBucket[i], len(k.Buckets), commentText(k.Name), l.Form)
	}
	b.WriteString("    {-1, {0u, 0u, 0u}, {0u, 0u, 0u}, 0, 0, -1, 1LL, 1LL, false, 0, 0},\n};\n\n")

	b.WriteString("// The compiled module: the PTX text (NUL-terminated) and the CUBIN for kArch.\n")
	if h.ptx == "" {
		b.WriteString("// This model was compiled without NVRTC: no kernels are embedded.\n")
	}
	fmt.Fprintf(&b, "constexpr size_t kPTXBytes = %d;\n", len(h.ptx))
	writeBytes(&b, "kPTX", append([]byte(h.ptx), 0), true)
	fmt.Fprintf(&b, "constexpr size_t kCUBINBytes = %d;\n", len(h.cubin))
	cub := h.cubin
	if len(cub) == 0 {
		cub = []byte{0}
	}
	writeBytes(&b, "kCUBIN", cub, true)
	b.WriteString(hostSourceSuffix)
	return b.String()
}

// writeBytes writes a byte array definition.
func writeBytes(b *strings.Builder, name string, data []byte, align bool) {
	if align {
		b.WriteString("alignas(64) ")
	}
	fmt.Fprintf(b, "const unsigned char %s[%d] = {", name, len(data))
	for i, c := range data {
		if i%24 == 0 {
			b.WriteString("\n   ")
		}
		b.WriteString(" ")
		b.WriteString(strconv.Itoa(int(c)))
		b.WriteString(",")
	}
	b.WriteString("\n};\n")
}

// cString quotes s as a C string literal: printable ASCII as itself, every
// other byte (and ? against trigraphs) as a three-digit octal escape.
func cString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f || c == '?':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// commentText makes s safe inside a C comment on one line.
func commentText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '\\' {
			c = '?'
		}
		b.WriteByte(c)
	}
	return strings.ReplaceAll(strings.ReplaceAll(b.String(), "*/", "* /"), "/*", "/ *")
}

// leafText says what a constant leaf holds.
func leafText(n *ir.Node) string {
	if n == nil {
		return ""
	}
	return n.Op.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
