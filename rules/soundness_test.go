package rules

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckSoundness(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
		return path
	}
	sound := write("sound.rules", "rule comm: (add ?a ?b) => (add ?b ?a)\nrule pe: (permute[?p] (permute[?q] ?x)) => @permute_compose\n")
	broken := write("broken.rules", "rule broken (sub ?a ?b) => ?a\n")
	tests := []struct {
		name     string
		files    []string
		want     []RuleCheck // Pos.File and Pos.Line only
		failures int
		err      string // a load error, or "" for a report
		unsound  string // the report's Err, or "" for nil
	}{
		{
			name:  "sound, a Go applier's rule checked too",
			files: []string{sound},
			want: []RuleCheck{
				{Name: "comm", Pos: Pos{File: sound, Line: 1}, Result: "ok", Instances: 3},
				{Name: "pe", Pos: Pos{File: sound, Line: 2}, Result: "ok", Instances: 3},
			},
		},
		{
			name:  "unsound after sound, in file order",
			files: []string{sound, "testdata/unsound.rules"},
			want: []RuleCheck{
				{Name: "comm", Pos: Pos{File: sound, Line: 1}, Result: "ok", Instances: 3},
				{Name: "pe", Pos: Pos{File: sound, Line: 2}, Result: "ok", Instances: 3},
				{Name: "blatant", Pos: Pos{File: "testdata/unsound.rules", Line: 4}, Result: "unsound"},
				{Name: "perm-twice", Pos: Pos{File: "testdata/unsound.rules", Line: 5}, Result: "unsound"},
			},
			failures: 2,
			unsound:  "some rules are unsound: 2 of 4",
		},
		{name: "a file that does not parse", files: []string{broken}, err: broken + ":1:"},
		{name: "a missing file", files: []string{filepath.Join(dir, "none.rules")}, err: "none.rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := CheckSoundness(context.Background(), tt.files, VerifyOptions{Instances: 3, Seed: 3})
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, rep.Rules, len(tt.want))
			for i, w := range tt.want {
				got := rep.Rules[i]
				got.Pos.Col = 0
				assert.Equal(t, got.Instances, got.ByDType.Total(), "%s: the counts by dtype add up", got.Name)
				got.ByDType = nil
				if w.Result == "unsound" {
					got.Instances = 0 // however many it took to find the counterexample
				}
				assert.Equal(t, w, got)
			}
			assert.Len(t, rep.Failures, tt.failures)
			if tt.unsound == "" {
				assert.NoError(t, rep.Err())
				return
			}
			assert.ErrorIs(t, rep.Err(), ErrUnsound)
			assert.EqualError(t, rep.Err(), tt.unsound)
			assert.Contains(t, rep.Failures[0], "rule blatant is unsound")
		})
	}
}

// TestCheckSoundnessBuiltin: without files the built-in sets are checked.
func TestCheckSoundnessBuiltin(t *testing.T) {
	rep, err := CheckSoundness(context.Background(), nil, VerifyOptions{Instances: 1, Seed: 1})
	require.NoError(t, err)
	rs, err := Builtin()
	require.NoError(t, err)
	require.Len(t, rep.Rules, len(rs))
	assert.NoError(t, rep.Err(), strings.Join(rep.Failures, "\n"))
}

func TestSoundnessReportWriteText(t *testing.T) {
	pos := func(line int) Pos { return Pos{File: "a.rules", Line: line, Col: 1} }
	tests := []struct {
		name string
		rep  SoundnessReport
		want string
	}{
		{
			name: "all sound",
			rep: SoundnessReport{Rules: []RuleCheck{
				{Name: "comm-add", Pos: pos(1), Result: "ok", Instances: 20, ByDType: Drawn{ir.F32: 8, ir.BF16: 7, ir.F16: 5}},
				{Name: "p", Pos: pos(12), Result: "ok", Instances: 3, ByDType: Drawn{ir.F16: 1, ir.F32: 2}},
			}},
			want: "RULE      RESULT  INSTANCES  DTYPES                WHERE\n" +
				"comm-add  ok      20         f32 8, bf16 7, f16 5  a.rules:1:1\n" +
				"p         ok      3          f32 2, f16 1          a.rules:12:1\n" +
				"\n2 rules sound\n",
		},
		{
			name: "failures listed",
			rep: SoundnessReport{
				Rules: []RuleCheck{
					{Name: "flip", Pos: pos(1), Result: "unsound", Instances: 1, ByDType: Drawn{ir.BF16: 1}},
					{Name: "x", Pos: pos(2), Result: "fail"},
				},
				Failures: []string{"rule flip is unsound: ...", "rule x: no instance"},
			},
			want: "RULE  RESULT   INSTANCES  DTYPES  WHERE\n" +
				"flip  unsound  1          bf16 1  a.rules:1:1\n" +
				"x     fail     0          -       a.rules:2:1\n" +
				"\nrule flip is unsound: ...\nrule x: no instance\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			require.NoError(t, tt.rep.WriteText(&b))
			assert.Equal(t, tt.want, b.String())
		})
	}
}
