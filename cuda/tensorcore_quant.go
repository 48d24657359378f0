package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The tensor-core matmul's quantized B tiles (cost.TileQuantOperand says
// which weights): rather than compute every value through the scalar
// prologue (an index and a one-byte load a value, cuda/dequant.go), the
// block's threads load a tile's packed codes whole, one tile ahead into
// registers while the warps multiply the current tile, and decode them as
// they store the tile: two K-adjacent values a word, the code times its
// scale (less its zero point) in f32 (exact but for f32 scales, rounded
// to f32 there as the reference's product is), rounded to the operand
// dtype by the packing, as the reference rounds it (ir/dequant.go). Rows
// past N are zero-filled. A thread has at most cost.TileQuantMaxTasks
// tasks (a schedule past it reads the weight through the scalar path). A thread's tasks (p = threadIdx.x + j * threads):
//
//   - mxfp4 ([N, K/32, 16] bytes, a tile of 32 k one block of each row):
//     half a row's block, 8 bytes, 16 values, and the block's e8m0 scale;
//   - fp8 ([N, K] bytes): half a row's 32 bytes, one 16-byte load, and its
//     f32 scale (one a tile: Group a multiple of 32, or all of K);
//   - awq ([K, N/8] words, eight columns a word in AWQ's order): one word
//     column of two adjacent k's, 8 columns' values a k pair, with the
//     group's word of zero points and eight scales (the k pairs fastest
//     across the threads);
//   - gptq ([K/8, N] words, eight k's a word): two words, 16 k's of one
//     column, with its zero point (stored minus one) and scale.
//
// awq's and gptq's codes are split into bytes of their own (a word's
// low and high nibbles masked) and each put in the mantissa of 128
// (lum_q4_128, no integer conversion): (128 + q) - (128 + z) is q - z
// exactly, then times its scale as the reference multiplies it, for any
// scale (the fused multiply-add of the matrix-vector kernel would need a
// second path for scales whose biased zero point is not finite).
//
// Each task's loads are aligned: K a multiple of 32, N of 8 (awq, gptq).

// quantTile prints the loads and stores of one quantized B operand.
type quantTile struct {
	q                    cost.GEMVQuant
	codes, scales, zeros string
	sdt                  ir.DType // the scales'
	tasks, per, threads  int      // tasks a tile, a thread's, the block's threads
	BN                   int
	N, K                 int64
	pack                 string // lum_pack_bf16x2 or lum_pack_f16x2
}

func newQuantTile(body *ir.Graph, q cost.GEMVQuant, s cost.Schedule, suffix string) quantTile {
	p := q.Parts[0]
	t := quantTile{q: q, codes: paramName(body, p.Codes), scales: paramName(body, p.Scales), sdt: body.Node(p.Scales).DType,
		tasks: 2 * s.BN, per: cost.TileQuantTasks(s), threads: s.Threads, BN: s.BN, N: q.N, K: q.K, pack: "lum_pack_" + suffix + "x2"}
	if p.Zeros >= 0 {
		t.zeros = paramName(body, p.Zeros)
	}
	return t
}

// decl prints, before the pipeline, the registers a tile's codes wait
// in and each task's pointers into the packed operands at k0 = 0 (a step
// adds k0's offset), with whether its columns are within N.
func (t quantTile) decl(b *strings.Builder) {
	// Zeros once: a task past N (qok false) never loads, so its
	// registers stay zero through every step.
	switch t.q.Format {
	case quant.MXFP4:
		fmt.Fprintf(b, "  uint2 qv[%d] = {};\n  unsigned qs[%d] = {};\n", t.per, t.per)
	case quant.FP8:
		fmt.Fprintf(b, "  uint4 qv[%d] = {};\n  float qs[%d] = {};\n", t.per, t.per)
	case quant.AWQ:
		fmt.Fprintf(b, "  unsigned qa[%d] = {}, qb[%d] = {}, qz[%d] = {};\n  float qs[%d][8] = {};\n", t.per, t.per, t.per, t.per)
	default:
		fmt.Fprintf(b, "  unsigned qa[%d] = {}, qb[%d] = {}, qz[%d] = {};\n  float qs[%d] = {};\n", t.per, t.per, t.per, t.per)
	}
	codeT := map[quant.Format]string{quant.MXFP4: "unsigned char", quant.FP8: "unsigned char", quant.AWQ: "int", quant.GPTQ: "int"}[t.q.Format]
	fmt.Fprintf(b, "  const %s* qcp[%d];\n  const %s* qsp[%d];\n  bool qok[%d];\n", codeT, t.per, storageType(t.sdt), t.per, t.per)
	if t.zeros != "" {
		fmt.Fprintf(b, "  const int* qzp[%d];\n", t.per)
	}
	N, K := t.N, t.K
	b.WriteString("  #pragma unroll\n  for (int j = 0; j < " + fmt.Sprint(t.per) + "; j++) {\n")
	fmt.Fprintf(b, "    const int p = threadIdx.x + j * %d;\n", t.threads)
	switch t.q.Format {
	case quant.MXFP4:
		fmt.Fprintf(b, "    const long long qn = n0 + p / 2;\n    qok[j] = p < %d && qn < %dLL;\n", t.tasks, N)
		fmt.Fprintf(b, "    const long long qr = qok[j] ? qn : 0LL;\n")
		fmt.Fprintf(b, "    qcp[j] = %s + qr * %dLL + p %% 2 * 8;\n", t.codes, K/2)
		fmt.Fprintf(b, "    qsp[j] = %s + qr * %dLL;\n", t.scales, K/32)
	case quant.FP8:
		sk := (K + t.q.Group - 1) / t.q.Group
		fmt.Fprintf(b, "    const long long qn = n0 + p / 2;\n    qok[j] = p < %d && qn < %dLL;\n", t.tasks, N)
		fmt.Fprintf(b, "    const long long qr = qok[j] ? qn : 0LL;\n")
		fmt.Fprintf(b, "    qcp[j] = %s + qr * %dLL + p %% 2 * 16;\n", t.codes, K)
		fmt.Fprintf(b, "    qsp[j] = %s + qr / %dLL * %dLL;\n", t.scales, t.q.GroupN, sk)
	case quant.AWQ:
		fmt.Fprintf(b, "    const long long qc = n0 / 8 + p / 16;\n    qok[j] = p < %d && qc < %dLL;\n", t.tasks, N/8)
		fmt.Fprintf(b, "    const long long qr = qok[j] ? qc : 0LL;\n")
		fmt.Fprintf(b, "    qcp[j] = %s + (long long)(p %% 16 * 2) * %dLL + qr;\n", t.codes, N/8)
		fmt.Fprintf(b, "    qzp[j] = %s + qr;\n", t.zeros)
		fmt.Fprintf(b, "    qsp[j] = %s + qr * 8;\n", t.scales)
	default: // gptq
		fmt.Fprintf(b, "    const long long qn = n0 + p %% %d;\n    qok[j] = p < %d && qn < %dLL;\n", t.BN, t.tasks, N)
		fmt.Fprintf(b, "    const long long qr = qok[j] ? qn : 0LL;\n")
		fmt.Fprintf(b, "    qcp[j] = %s + (long long)(p / %d * 2) * %dLL + qr;\n", t.codes, t.BN, N)
		fmt.Fprintf(b, "    qzp[j] = %s + qr / 8;\n", t.zeros)
		fmt.Fprintf(b, "    qsp[j] = %s + qr;\n", t.scales)
	}
	b.WriteString("  }\n")
}

// task prints the opening of the loop over a thread's tasks, with p the
// task and, when the tasks do not fill the threads evenly, a guard.
func (t quantTile) task(b *strings.Builder, indent string) {
	fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int j = 0; j < %d; j++) {\n", indent, indent, t.per)
	fmt.Fprintf(b, "%s  const int p = threadIdx.x + j * %d;\n", indent, t.threads)
	if t.per*t.threads > t.tasks {
		fmt.Fprintf(b, "%s  if (p >= %d) break;\n", indent, t.tasks)
	}
}

// fetch prints the loads of the tile at k0 into the registers (a task
// past N keeps the zeros decl gave them).
func (t quantTile) fetch(b *strings.Builder, indent string) {
	t.task(b, indent)
	in := indent + "  "
	N, G := t.N, t.q.Group
	switch t.q.Format {
	case quant.MXFP4:
		fmt.Fprintf(b, "%sif (qok[j]) { qv[j] = lum_ld8(qcp[j] + k0 / 2); qs[j] = qsp[j][k0 / 32]; }\n", in)
	case quant.FP8:
		fmt.Fprintf(b, "%sif (qok[j]) { qv[j] = lum_ld16(qcp[j] + k0); qs[j] = %s; }\n", in, load(t.sdt, fmt.Sprintf("qsp[j][k0 / %dLL]", G)))
	case quant.AWQ:
		fmt.Fprintf(b, "%sif (qok[j]) {\n", in)
		fmt.Fprintf(b, "%s  qa[j] = (unsigned)qcp[j][k0 * %dLL];\n", in, N/8)
		fmt.Fprintf(b, "%s  qb[j] = (unsigned)qcp[j][k0 * %dLL + %dLL];\n", in, N/8, N/8)
		fmt.Fprintf(b, "%s  qz[j] = (unsigned)qzp[j][k0 / %dLL * %dLL];\n", in, G, N/8)
		if t.sdt == ir.F16 || t.sdt == ir.BF16 {
			// Eight 2-byte scales in one 16-byte load (N a multiple
			// of 8 keeps it aligned).
			fmt.Fprintf(b, "%s  const uint4 sv = lum_ld16(qsp[j] + k0 / %dLL * %dLL);\n", in, G, N)
			fmt.Fprintf(b, "%s  const unsigned sw[4] = {sv.x, sv.y, sv.z, sv.w};\n", in)
			fmt.Fprintf(b, "%s  #pragma unroll\n%s  for (int c = 0; c < 8; c++) qs[j][c] = %s;\n", in, in, load(t.sdt, fmt.Sprintf("(%s)(sw[c / 2] >> (c %% 2 * 16))", storageType(t.sdt))))
		} else {
			fmt.Fprintf(b, "%s  for (int c = 0; c < 8; c++) qs[j][c] = %s;\n", in, load(t.sdt, fmt.Sprintf("qsp[j][k0 / %dLL * %dLL + c]", G, N)))
		}
		fmt.Fprintf(b, "%s}\n", in)
	default: // gptq
		fmt.Fprintf(b, "%sif (qok[j]) {\n", in)
		fmt.Fprintf(b, "%s  qa[j] = (unsigned)qcp[j][k0 / 8 * %dLL];\n", in, N)
		fmt.Fprintf(b, "%s  qb[j] = (unsigned)qcp[j][k0 / 8 * %dLL + %dLL];\n", in, N, N)
		fmt.Fprintf(b, "%s  qz[j] = (unsigned)qzp[j][k0 / %dLL * %dLL];\n", in, G, N/8)
		fmt.Fprintf(b, "%s  qs[j] = %s;\n%s}\n", in, load(t.sdt, fmt.Sprintf("qsp[j][k0 / %dLL * %dLL]", G, N)), in)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

// store prints the decode of the registers into buffer s of Bs. A row
// past N stores zeros (its registers are zero, which would decode to
// zeros too but for gptq's zero point, stored minus one).
func (t quantTile) store(b *strings.Builder, indent string) {
	t.task(b, indent)
	in := indent + "  "
	N := t.N
	word := func(rr, kp string) string { return fmt.Sprintf("Bs[s][%s][%s]", rr, tcSwz(rr, kp)) }
	switch t.q.Format {
	case quant.MXFP4:
		// Byte i of the half block holds k 2i (low nibble) and 2i + 1:
		// nibbles 2i and 2i + 1 of its word, decoded in place
		// (lum_e2m1_in, exact).
		fmt.Fprintf(b, "%sconst int rr = p / 2, kq = p %% 2 * 8;\n", in)
		fmt.Fprintf(b, "%sconst float sc = lum_e8m0_to_f32(qs[j]);\n", in)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int i = 0; i < 8; i++) {\n", in, in)
		fmt.Fprintf(b, "%s  const unsigned qw = i < 4 ? qv[j].x : qv[j].y;\n", in)
		fmt.Fprintf(b, "%s  %s = n0 + rr < %dLL ? %s(lum_e2m1_in(qw, 2 * (i %% 4)) * sc, lum_e2m1_in(qw, 2 * (i %% 4) + 1) * sc) : 0u;\n", in, word("rr", "kq + i"), N, t.pack)
		fmt.Fprintf(b, "%s}\n", in)
	case quant.FP8:
		fmt.Fprintf(b, "%sconst int rr = p / 2, kq = p %% 2 * 8;\n", in)
		fmt.Fprintf(b, "%sconst unsigned qw4[4] = {qv[j].x, qv[j].y, qv[j].z, qv[j].w};\n", in)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int i = 0; i < 8; i++)\n", in, in)
		fmt.Fprintf(b, "%s  %s = n0 + rr < %dLL ? %s(lum_e4m3_in(qw4[i / 2], i %% 2 * 2) * qs[j], lum_e4m3_in(qw4[i / 2], i %% 2 * 2 + 1) * qs[j]) : 0u;\n", in, word("rr", "kq + i"), N, t.pack)
	case quant.AWQ:
		// Column c's nibble is byte (c >> 2) | (c & 1) << 1 of the
		// word's low (c >> 1 even) or high nibbles, each in a byte of
		// its own (AWQ's order 0 2 4 6 1 3 5 7).
		// A warp's lanes take the 16 k pairs of two word columns, so
		// that a store's words fall in 16 banks (2-way) rather than
		// W lanes of one k pair in one bank; the scales and zero
		// points of a column are then one address for 16 lanes.
		fmt.Fprintf(b, "%sconst int wc = p / 16, kp = p %% 16;\n", in)
		fmt.Fprintf(b, "%sconst unsigned m4 = 0x0f0f0f0fu;\n", in)
		fmt.Fprintf(b, "%sconst unsigned al = qa[j] & m4, ah = (qa[j] >> 4) & m4, bl = qb[j] & m4, bh = (qb[j] >> 4) & m4, zl = qz[j] & m4, zh = (qz[j] >> 4) & m4;\n", in)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int c = 0; c < 8; c++) {\n", in, in)
		fmt.Fprintf(b, "%s  const int rr = wc * 8 + c;\n", in)
		fmt.Fprintf(b, "%s  const unsigned by = (unsigned)((c >> 2) | (c & 1) << 1), hi = (c >> 1) & 1;\n", in)
		fmt.Fprintf(b, "%s  const float zf = lum_q4_128(hi ? zh : zl, by);\n", in)
		fmt.Fprintf(b, "%s  %s = n0 + rr < %dLL ? %s((lum_q4_128(hi ? ah : al, by) - zf) * qs[j][c], (lum_q4_128(hi ? bh : bl, by) - zf) * qs[j][c]) : 0u;\n", in, word("rr", "kp"), N, t.pack)
		fmt.Fprintf(b, "%s}\n", in)
	default: // gptq
		// k 2i and 2i + 1 of a word are byte i of its low and high
		// nibbles; the zero point is stored less one. Word qa holds
		// the task's first 8 k's, qb the next.
		fmt.Fprintf(b, "%sconst int rr = p %% %d, kq = p / %d * 8;\n", in, t.BN, t.BN)
		fmt.Fprintf(b, "%sconst float zf = (float)(129u + lum_gptq_nibble(qz[j], (unsigned)(rr %% 8)));\n", in)
		fmt.Fprintf(b, "%sconst unsigned wq[2] = {qa[j], qb[j]};\n", in)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int w = 0; w < 2; w++) {\n", in, in)
		fmt.Fprintf(b, "%s  const unsigned lo = wq[w] & 0x0f0f0f0fu, hi = (wq[w] >> 4) & 0x0f0f0f0fu;\n", in)
		fmt.Fprintf(b, "%s  #pragma unroll\n%s  for (int i = 0; i < 4; i++)\n", in, in)
		fmt.Fprintf(b, "%s    %s = n0 + rr < %dLL ? %s((lum_q4_128(lo, (unsigned)i) - zf) * qs[j], (lum_q4_128(hi, (unsigned)i) - zf) * qs[j]) : 0u;\n", in, word("rr", "kq + w * 4 + i"), N, t.pack)
		fmt.Fprintf(b, "%s}\n", in)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}
