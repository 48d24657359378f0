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
// scale (less its zero point) in f32, rounded once to the operand dtype
// by the packing, as the reference rounds it (ir/dequant.go). Rows past N
// are zero-filled. A thread's tasks (p = threadIdx.x + j * threads):
//
//   - mxfp4 ([N, K/32, 16] bytes, a tile of 32 k one block of each row):
//     half a row's block, 8 bytes, 16 values, and the block's e8m0 scale;
//   - fp8 ([N, K] bytes): half a row's 32 bytes, one 16-byte load, and its
//     f32 scale (one a tile: Group a multiple of 32, or all of K);
//   - awq ([K, N/8] words, eight columns a word in AWQ's order): one word
//     column of two adjacent k's, 8 columns' values a k pair, with the
//     group's word of zero points and eight scales;
//   - gptq ([K/8, N] words, eight k's a word): one word, 8 k's of one
//     column, with its zero point (stored minus one) and scale.
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

func newQuantTile(body *ir.Graph, q cost.GEMVQuant, BN, threads int, suffix string) quantTile {
	p := q.Parts[0]
	t := quantTile{q: q, codes: paramName(body, p.Codes), scales: paramName(body, p.Scales), sdt: body.Node(p.Scales).DType,
		threads: threads, BN: BN, N: q.N, K: q.K, pack: "lum_pack_" + suffix + "x2"}
	if p.Zeros >= 0 {
		t.zeros = paramName(body, p.Zeros)
	}
	switch q.Format {
	case quant.MXFP4, quant.FP8:
		t.tasks = BN * 2
	case quant.AWQ:
		t.tasks = BN / 8 * 16
	default:
		t.tasks = BN * 4
	}
	t.per = (t.tasks + threads - 1) / threads
	return t
}

// decl prints the registers a tile's codes wait in.
func (t quantTile) decl(b *strings.Builder) {
	switch t.q.Format {
	case quant.MXFP4:
		fmt.Fprintf(b, "  uint2 qv[%d];\n  unsigned qs[%d];\n", t.per, t.per)
	case quant.FP8:
		fmt.Fprintf(b, "  uint4 qv[%d];\n  float qs[%d];\n", t.per, t.per)
	case quant.AWQ:
		fmt.Fprintf(b, "  unsigned qa[%d], qb[%d], qz[%d];\n  float qs[%d][8];\n", t.per, t.per, t.per, t.per)
	default:
		fmt.Fprintf(b, "  unsigned qa[%d], qz[%d];\n  float qs[%d];\n", t.per, t.per, t.per)
	}
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

// fetch prints the loads of the tile at k0 (of columns n0..) into the
// registers.
func (t quantTile) fetch(b *strings.Builder, indent string) {
	t.task(b, indent)
	in := indent + "  "
	N, K := t.N, t.K
	switch t.q.Format {
	case quant.MXFP4:
		fmt.Fprintf(b, "%sconst long long qn = n0 + p / 2;\n", in)
		fmt.Fprintf(b, "%sqv[j] = make_uint2(0u, 0u); qs[j] = 0u;\n", in)
		fmt.Fprintf(b, "%sif (qn < %dLL) {\n", in, N)
		fmt.Fprintf(b, "%s  const long long blk = qn * %dLL + k0 / 32;\n", in, K/32)
		fmt.Fprintf(b, "%s  qv[j] = lum_ld8(%s + blk * 16 + p %% 2 * 8);\n", in, t.codes)
		fmt.Fprintf(b, "%s  qs[j] = %s[blk];\n%s}\n", in, t.scales, in)
	case quant.FP8:
		sk := (K + t.q.Group - 1) / t.q.Group
		fmt.Fprintf(b, "%sconst long long qn = n0 + p / 2;\n", in)
		fmt.Fprintf(b, "%sqv[j] = make_uint4(0u, 0u, 0u, 0u); qs[j] = 0.0f;\n", in)
		fmt.Fprintf(b, "%sif (qn < %dLL) {\n", in, N)
		fmt.Fprintf(b, "%s  qv[j] = lum_ld16(%s + qn * %dLL + k0 + p %% 2 * 16);\n", in, t.codes, K)
		fmt.Fprintf(b, "%s  qs[j] = %s;\n%s}\n", in, load(t.sdt, fmt.Sprintf("%s[qn / %dLL * %dLL + k0 / %dLL]", t.scales, t.q.GroupN, sk, t.q.Group)), in)
	case quant.AWQ:
		W, G := t.BN/8, t.q.Group
		fmt.Fprintf(b, "%sconst long long qc = n0 / 8 + p %% %d, qk = k0 + p / %d * 2, qg = k0 / %dLL;\n", in, W, W, G)
		fmt.Fprintf(b, "%sqa[j] = qb[j] = qz[j] = 0u;\n", in)
		fmt.Fprintf(b, "%sfor (int c = 0; c < 8; c++) qs[j][c] = 0.0f;\n", in)
		fmt.Fprintf(b, "%sif (qc < %dLL) {\n", in, N/8)
		fmt.Fprintf(b, "%s  qa[j] = (unsigned)%s[qk * %dLL + qc];\n", in, t.codes, N/8)
		fmt.Fprintf(b, "%s  qb[j] = (unsigned)%s[(qk + 1) * %dLL + qc];\n", in, t.codes, N/8)
		fmt.Fprintf(b, "%s  qz[j] = (unsigned)%s[qg * %dLL + qc];\n", in, t.zeros, N/8)
		fmt.Fprintf(b, "%s  for (int c = 0; c < 8; c++) qs[j][c] = %s;\n%s}\n", in, load(t.sdt, fmt.Sprintf("%s[qg * %dLL + qc * 8 + c]", t.scales, N)), in)
	default: // gptq
		G := t.q.Group
		fmt.Fprintf(b, "%sconst long long qn = n0 + p %% %d, qw = k0 / 8 + p / %d, qg = k0 / %dLL;\n", in, t.BN, t.BN, G)
		fmt.Fprintf(b, "%sqa[j] = qz[j] = 0u; qs[j] = 0.0f;\n", in)
		fmt.Fprintf(b, "%sif (qn < %dLL) {\n", in, N)
		fmt.Fprintf(b, "%s  qa[j] = (unsigned)%s[qw * %dLL + qn];\n", in, t.codes, N)
		fmt.Fprintf(b, "%s  qz[j] = (unsigned)%s[qg * %dLL + qn / 8];\n", in, t.zeros, N/8)
		fmt.Fprintf(b, "%s  qs[j] = %s;\n%s}\n", in, load(t.sdt, fmt.Sprintf("%s[qg * %dLL + qn]", t.scales, N)), in)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

// store prints the decode of the registers into buffer s of Bs. A row
// past N stores zeros (its registers were left zero, which would decode
// to zeros too but for gptq's zero point, stored minus one).
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
		W := t.BN / 8
		fmt.Fprintf(b, "%sconst int wc = p %% %d, kp = p / %d;\n", in, W, W)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int c = 0; c < 8; c++) {\n", in, in)
		fmt.Fprintf(b, "%s  const int rr = wc * 8 + c;\n", in)
		fmt.Fprintf(b, "%s  const int z = (int)lum_awq_nibble(qz[j], (unsigned)c);\n", in)
		fmt.Fprintf(b, "%s  %s = n0 + rr < %dLL ? %s((float)((int)lum_awq_nibble(qa[j], (unsigned)c) - z) * qs[j][c], (float)((int)lum_awq_nibble(qb[j], (unsigned)c) - z) * qs[j][c]) : 0u;\n", in, word("rr", "kp"), N, t.pack)
		fmt.Fprintf(b, "%s}\n", in)
	default: // gptq
		fmt.Fprintf(b, "%sconst int rr = p %% %d, kq = p / %d * 4;\n", in, t.BN, t.BN)
		fmt.Fprintf(b, "%sconst int z = (int)(lum_gptq_nibble(qz[j], (unsigned)(rr %% 8)) + 1u);\n", in)
		fmt.Fprintf(b, "%s#pragma unroll\n%sfor (int i = 0; i < 4; i++)\n", in, in)
		fmt.Fprintf(b, "%s  %s = n0 + rr < %dLL ? %s((float)((int)lum_gptq_nibble(qa[j], (unsigned)(2 * i)) - z) * qs[j], (float)((int)lum_gptq_nibble(qa[j], (unsigned)(2 * i + 1)) - z) * qs[j]) : 0u;\n", in, word("rr", "kq + i"), N, t.pack)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}
