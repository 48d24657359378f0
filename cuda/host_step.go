package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/step"
)

// writeStepTable writes kStep, a serving step's layout and the buffers of
// its metadata inputs, which lum_set_input keeps a host copy of and
// lum_run checks as a batch (checkStep) before any launch: bad metadata
// changes no cache slot. A program that is no step has kStep.present
// false (block size 1: its check is never run, but compiled). step.LayoutOf has checked that every metadata input exists with
// integers.
func writeStepTable(b *strings.Builder, p *lower.Program) {
	b.WriteString("// A serving step's layout and metadata inputs (docs/serving.md), checked by\n// lum_run before any launch.\n")
	l := p.Step
	if l == nil {
		b.WriteString("const StepDesc kStep = {false, 0, 0, 1, 0, 1, 0, {-1, -1, -1, -1, -1, -1, -1}};\n\n")
		return
	}
	var idx []string
	for _, name := range stepInputs {
		i := slices.IndexFunc(p.Buffers, func(buf *lower.Buffer) bool { return buf.Kind == lower.Input && buf.Name == name })
		idx = append(idx, fmt.Sprint(i))
	}
	fmt.Fprintf(b, "const StepDesc kStep = {true, %dLL, %dLL, %dLL, %dLL, %dLL, %dLL, {%s}};\n\n",
		l.MaxTokens, l.MaxSeqs, l.BlockSize, l.Blocks, l.BlocksPerSeq, l.Vocab, strings.Join(idx, ", "))
}

// stepInputs are the metadata inputs in StepDesc.buffer's order.
var stepInputs = []string{step.InputIDs, step.Positions, step.QueryStarts, step.SeqLens, step.BlockTable, step.SlotMapping, step.SeqsSymbol}

// hostStepDecl declares StepDesc among model.cpp's table types.
const hostStepDecl = `
// A serving step: its maxima, pool and the buffers of its metadata inputs
// in the order ids, positions, query starts, lengths, block table, slot
// mapping, sequence count.
struct StepDesc {
    bool present;
    long long maxTokens, maxSeqs, blockSize, blocks, blocksPerSeq, vocab;
    int buffer[7];
};
`

// hostStepSource is checkStep, package step's Unpad and Check in C++ over
// the host copies of the metadata inputs: the same checks, in the same
// order, with the same words (docs/serving.md lists them).
const hostStepSource = `
enum { kIDs, kPositions, kStarts, kLens, kTable, kSlots, kSeqs };

// stepBuffer says buffer i holds a serving step's metadata, of which
// lum_set_input keeps a copy for checkStep.
bool stepBuffer(int i) {
    for (int k = 0; kStep.present && k < 7; k++) {
        if (kStep.buffer[k] == i) {
            return true;
        }
    }
    return false;
}

// stepAt is element j of step metadata input which, from its host copy.
long long stepAt(const lum_model* m, int which, long long j) {
    int i = kStep.buffer[which];
    const unsigned char* p = m->shadow[i];
    long long n = 1;
    switch (which) {
    case kIDs: case kPositions: case kSlots: n = kStep.maxTokens; break;
    case kStarts: n = kStep.maxSeqs + 1; break;
    case kLens: n = kStep.maxSeqs; break;
    case kTable: n = kStep.maxSeqs * kStep.blocksPerSeq; break;
    }
    if (kBuffers[i].bytes == (unsigned long long)(8 * n)) {
        int64_t x;
        memcpy(&x, p + 8 * j, 8);
        return x;
    }
    int32_t x;
    memcpy(&x, p + 4 * j, 4);
    return x;
}

__attribute__((format(printf, 5, 6)))
int stepFail(char* err, size_t errlen, int which, long long index, const char* format, ...) {
    char msg[512];
    va_list args;
    va_start(args, format);
    vsnprintf(msg, sizeof msg, format, args);
    va_end(args);
    const char* name = kBuffers[kStep.buffer[which]].name;
    if (which == kSeqs && index == -2) {
        name = "tokens";
    }
    if (index < 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_run: step metadata: %s: %s", name, msg);
    }
    return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_run: step metadata: %s[%lld]: %s", name, index, msg);
}

struct WrittenSlot {
    long long slot, token;
};

int bySlot(const void* a, const void* b) {
    long long x = static_cast<const WrittenSlot*>(a)->slot, y = static_cast<const WrittenSlot*>(b)->slot;
    return x < y ? -1 : x > y;
}

// checkStepSlots checks the slot mapping against the pool and the table,
// and that no written slot is a sequence's cached context; written holds
// room for every token.
int checkStepSlots(const lum_model* m, long long S, WrittenSlot* written, char* err, size_t errlen) {
    const long long B = kStep.blockSize, M = kStep.blocksPerSeq, slots = kStep.blocks * kStep.blockSize;
    long long n = 0;
    for (long long s = 0; s < S; s++) {
        for (long long t = stepAt(m, kStarts, s); t < stepAt(m, kStarts, s + 1); t++) {
            long long slot = stepAt(m, kSlots, t);
            if (slot == -1) {
                continue;
            }
            if (slot < 0 || slot >= slots) {
                return stepFail(err, errlen, kSlots, t, "slot %lld is outside the pool's slots 0..%lld (or -1 for a padding token)", slot, slots - 1);
            }
            long long pos = stepAt(m, kPositions, t);
            long long want = stepAt(m, kTable, s * M + pos / B) * B + pos % B;
            if (slot != want) {
                return stepFail(err, errlen, kSlots, t, "slot %lld; sequence %lld's block table puts position %lld at slot %lld", slot, s, pos, want);
            }
            written[n++] = WrittenSlot{slot, t};
        }
    }
    qsort(written, n, sizeof(WrittenSlot), bySlot);
    for (long long i = 1; i < n; i++) {
        if (written[i].slot == written[i - 1].slot) {
            long long a = written[i - 1].token, b = written[i].token;
            return stepFail(err, errlen, kSlots, a > b ? a : b, "slot %lld is written twice in the step (tokens %lld and %lld)",
                            written[i].slot, a < b ? a : b, a > b ? a : b);
        }
    }
    for (long long s = 0; s < S && n > 0; s++) {
        long long ctx = stepAt(m, kLens, s) - (stepAt(m, kStarts, s + 1) - stepAt(m, kStarts, s));
        for (long long j = 0; j * B < ctx; j++) {
            long long first = stepAt(m, kTable, s * M + j) * B;
            long long lo = 0, hi = n;  // the first written slot at or past first
            while (lo < hi) {
                long long mid = (lo + hi) / 2;
                if (written[mid].slot < first) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            for (long long i = lo; i < n && written[i].slot < first + B; i++) {
                long long pos = j * B + written[i].slot - first;
                if (pos < ctx) {
                    return stepFail(err, errlen, kSlots, written[i].token,
                                    "slot %lld is written by the step, but sequence %lld reads it as its cached position %lld", written[i].slot, s, pos);
                }
            }
        }
    }
    return LUM_OK;
}

// checkStep refuses a step whose metadata the program cannot run as
// stated (package step's Unpad and Check).
int checkStep(const lum_model* m, char* err, size_t errlen) {
    const long long B = kStep.blockSize, M = kStep.blocksPerSeq;
    long long S = stepAt(m, kSeqs, 0);
    if (S < 1 || S > kStep.maxSeqs) {
        return stepFail(err, errlen, kSeqs, -1, "%lld sequences; the program runs 1..%lld", S, kStep.maxSeqs);
    }
    long long T = stepAt(m, kStarts, S);
    if (T < 1 || T > kStep.maxTokens) {
        return stepFail(err, errlen, kStarts, S, "query_start[S] = %lld tokens; the program runs 1..%lld", T, kStep.maxTokens);
    }
    for (long long s = S + 1; s <= kStep.maxSeqs; s++) {
        if (stepAt(m, kStarts, s) != T) {
            return stepFail(err, errlen, kStarts, s, "%lld past the %lld sequences present; padding repeats T = %lld", stepAt(m, kStarts, s), S, T);
        }
    }
    for (long long t = 0; t < kStep.maxTokens; t++) {
        long long id = stepAt(m, kIDs, t);
        if (id < 0 || id >= kStep.vocab) {
            return stepFail(err, errlen, kIDs, t, "token id %lld is outside the vocabulary 0..%lld", id, kStep.vocab - 1);
        }
        if (t >= T && stepAt(m, kSlots, t) != -1) {
            return stepFail(err, errlen, kSlots, t, "slot %lld past the %lld tokens present; padding is -1 (nothing written)", stepAt(m, kSlots, t), T);
        }
    }
    if (stepAt(m, kStarts, 0) != 0) {
        return stepFail(err, errlen, kStarts, 0, "%lld; the first sequence starts at token 0", stepAt(m, kStarts, 0));
    }
    for (long long s = 0; s < S; s++) {
        if (stepAt(m, kStarts, s + 1) < stepAt(m, kStarts, s)) {
            return stepFail(err, errlen, kStarts, s + 1, "%lld is below the previous start %lld; query starts never decrease",
                            stepAt(m, kStarts, s + 1), stepAt(m, kStarts, s));
        }
    }
    for (long long s = 0; s < S; s++) {
        long long n = stepAt(m, kStarts, s + 1) - stepAt(m, kStarts, s), L = stepAt(m, kLens, s);
        if (L < n) {
            return stepFail(err, errlen, kLens, s, "length %lld is shorter than the sequence's %lld tokens in the step", L, n);
        }
        if (L > M * B) {
            return stepFail(err, errlen, kLens, s, "length %lld is longer than its block table row holds (%lld blocks of %lld)", L, M, B);
        }
        for (long long j = 0; j * B < L; j++) {
            long long blk = stepAt(m, kTable, s * M + j);
            if (blk < 0 || blk >= kStep.blocks) {
                return stepFail(err, errlen, kTable, s, "block %lld of the sequence is %lld, outside the pool's blocks 0..%lld", j, blk, kStep.blocks - 1);
            }
        }
        long long ctx = L - n;
        for (long long t = stepAt(m, kStarts, s); t < stepAt(m, kStarts, s + 1); t++) {
            long long want = ctx + t - stepAt(m, kStarts, s);
            if (stepAt(m, kPositions, t) != want) {
                return stepFail(err, errlen, kPositions, t, "%lld; sequence %lld has length %lld with %lld tokens in the step, so this token sits at position %lld",
                                stepAt(m, kPositions, t), s, L, n, want);
            }
        }
    }
    WrittenSlot* written = static_cast<WrittenSlot*>(malloc(sizeof(WrittenSlot) * (size_t)T));
    if (written == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "lum_run: out of host memory checking the step's slots");
    }
    int rc = checkStepSlots(m, S, written, err, errlen);
    free(written);
    return rc;
}
`
