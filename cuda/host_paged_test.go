package cuda

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostPagedProgram drives the host library of pagedStepProgram's step:
// it loads zeroed weights, sets every input to zeros, then runs with
// valid metadata and with each kind of metadata the op has no meaning on,
// printing each call's result; the fake driver prints the launches each
// run makes.
const hostPagedProgram = `#include "model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static void report(const char* what, int rc) {
    printf("%s: %d: %s\n", what, rc, rc == LUM_OK ? "ok" : err);
}

static int table[3 * 6], lens[3], starts[4], seqs;

static void set(lum_model* m) {
    report("table", lum_set_input(m, "table", table, sizeof table, err, sizeof err));
    report("lens", lum_set_input(m, "lens", lens, sizeof lens, err, sizeof err));
    report("starts", lum_set_input(m, "starts", starts, sizeof starts, err, sizeof err));
    report("seqs", lum_set_input(m, "seqs", &seqs, sizeof seqs, err, sizeof err));
}

/* valid: sequence 0 has 2 tokens after 3 cached positions (block 15, the
   pool's last), sequence 1 one token after none; tokens 3.. of none. */
static void valid(void) {
    memset(table, 0xff, sizeof table);
    table[0] = 15;
    lens[0] = 5; lens[1] = 1; lens[2] = 0;
    starts[0] = 0; starts[1] = 2; starts[2] = 3; starts[3] = 3;
    seqs = 2;
}

` + hostMainZeroed + `    valid();
    set(m);
    printf("run valid\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); seqs = 4; set(m);
    printf("run seqs\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); table[0] = 16; set(m);
    printf("run block\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); table[0] = -1; set(m);
    printf("run unset block\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); starts[2] = 10; starts[3] = 10; set(m);
    printf("run starts\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); lens[1] = 0; set(m);
    printf("run short\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); lens[0] = 6 * 4 + 1; set(m);
    printf("run long\n");
    report("lum_run", lum_run(m, err, sizeof err));
    valid(); set(m);
    printf("run valid again\n");
    report("lum_run", lum_run(m, err, sizeof err));
    lum_destroy(m);
    printf("done\n");
    return 0;
}
`

// TestHostLibraryChecksPagedMetadata: the host library of a serving step
// refuses, in lum_run and before any launch, metadata paged attention
// has no meaning on (too many sequences, a cached block past the pool or
// never set, starts past the tokens, a length shorter than its tokens or
// longer than a table row holds), saying what is wrong as ir.PagedTokens
// does, and runs valid metadata (the fake driver prints its launches).
func TestHostLibraryChecksPagedMetadata(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	fake := fakeDriverDir(t)
	_, lp, ks := pagedStepProgram(t)
	ptx, cubin := hostModule(t, ks)
	header, source, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
	require.NoError(t, err)
	assert.Contains(t, source, "constexpr int kNumPaged = 1;\n")
	exe := buildHostWith(t, header, source, hostPagedProgram)
	out := runHost(t, exe, "LD_LIBRARY_PATH="+fake)
	launches := expectedLaunches(lp, ks, len(lp.Prep), len(ks))
	const arg = "4: lum_run: paged attention metadata: "
	for _, c := range []struct{ run, want string }{
		{"valid", ""},
		{"seqs", arg + "4 sequences present; the block table has 3 rows"},
		{"block", arg + "sequence 0: block 0 of its table is 16, outside the pool's 16 blocks"},
		{"unset block", arg + "sequence 0: block 0 of its table is -1, outside the pool's 16 blocks"},
		{"starts", arg + "query starts of sequence 1 are 2..10; want non-decreasing starts within 9 tokens"},
		{"short", arg + "sequence 1 has length 0, shorter than its 1 tokens in the step"},
		{"long", arg + "sequence 0 has length 25, which needs 7 blocks; the block table holds 6"},
		{"valid again", ""},
	} {
		got := runSection(out, "run "+c.run)
		if c.want == "" {
			assert.Equal(t, launches, got, "run %s: the run's launches", c.run)
			assert.Contains(t, out, "run "+c.run+"\n"+strings.Join(launches, "\n")+"\nlum_run: 0: ok\n")
			continue
		}
		assert.Empty(t, got, "run %s: no launch", c.run)
		assert.Contains(t, out, "run "+c.run+"\nlum_run: "+c.want+"\n", "run %s", c.run)
	}
	assert.Contains(t, out, "fake: 0 allocations outstanding, 0 modules loaded, 0 contexts retained, context depth 0\ndone\n")
}

// runSection is the launch lines the fake driver printed between the
// line start and the next lum_run report after it.
func runSection(out, start string) []string {
	i := strings.Index(out, "\n"+start+"\n")
	if i < 0 {
		return nil
	}
	j := strings.Index(out[i+1:], "\nlum_run")
	if j < 0 {
		return nil
	}
	return launchLine.FindAllString(out[i:i+1+j], -1)
}

// hostMainZeroed opens a test program's main: it creates the model, loads
// zeroed weights, sets every input to zeros and prepares, reporting
// failures through the program's report and err.
const hostMainZeroed = `int main(void) {
    lum_model* m = NULL;
    size_t n = lum_tensor_count(), i;
    int rc = lum_create(&m, err, sizeof err);
    if (rc != LUM_OK) {
        report("lum_create", rc);
        return 0;
    }
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        unsigned char* data = calloc(1, t->bytes + 1);
        if (t->kind == LUM_WEIGHT) lum_load_weights(m, t->name, data, t->bytes, err, sizeof err);
        if (t->kind == LUM_INPUT) lum_set_input(m, t->name, data, t->bytes, err, sizeof err);
        free(data);
    }
    report("lum_prepare", lum_prepare(m, err, sizeof err));
`
