package rules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
)

// ErrUnsound is wrapped by SoundnessReport.Err when a rule failed its
// check.
var ErrUnsound = errors.New("some rules are unsound")

// RuleCheck is the outcome of verifying one rule.
type RuleCheck struct {
	// Name and Pos are the rule's name and where its line starts.
	Name string
	Pos  Pos
	// Result is "ok", "fail" (the verifier could not check the rule) or
	// "unsound" (a counterexample).
	Result string
	// Instances is the number of valid instances checked, ByDType the
	// same by dtype.
	Instances int
	ByDType   Drawn
}

// SoundnessReport is the outcome of CheckSoundness: one RuleCheck a rule
// in load order, and the failures' texts (an error or a counterexample)
// in the same order. It is what "lumsearch rules check" prints (WriteText).
type SoundnessReport struct {
	// Rules holds one check a rule; Failures the text of each failure.
	Rules    []RuleCheck
	Failures []string
}

// CheckSoundness loads the rules of files, or the built-in rule sets when
// there are none, and verifies each with Verify and opt, Go appliers
// included. An error loading
// a file is returned; a rule that fails verification is recorded in the
// report instead.
func CheckSoundness(ctx context.Context, files []string, opt VerifyOptions) (*SoundnessReport, error) {
	var all []*Rule
	if len(files) == 0 {
		rs, err := Builtin()
		if err != nil {
			return nil, err
		}
		all = rs
	}
	for _, f := range files {
		rs, err := LoadFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	rep := &SoundnessReport{}
	for _, r := range all {
		n, cx, err := r.Verify(ctx, opt)
		result := "ok"
		switch {
		case err != nil:
			result = "fail"
			rep.Failures = append(rep.Failures, err.Error())
		case cx != nil:
			result = "unsound"
			rep.Failures = append(rep.Failures, cx.String())
		}
		rep.Rules = append(rep.Rules, RuleCheck{Name: r.Decl.Name, Pos: r.Decl.Pos, Result: result, Instances: n.Total(), ByDType: n})
	}
	return rep, nil
}

// WriteText writes a RULE, RESULT, INSTANCES, DTYPES, WHERE table, then
// after a blank line either each failure or the number of sound rules.
func (r *SoundnessReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tRESULT\tINSTANCES\tDTYPES\tWHERE")
	for _, c := range r.Rules {
		dts := c.ByDType.String()
		if dts == "" {
			dts = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Name, c.Result, c.Instances, dts, c.Pos)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Failures) > 0 {
		fmt.Fprintln(w)
		for _, f := range r.Failures {
			fmt.Fprintln(w, f)
		}
		return nil
	}
	_, err := fmt.Fprintf(w, "\n%d rules sound\n", len(r.Rules))
	return err
}

// Err wraps ErrUnsound with the number of failed and checked rules when a
// rule failed, and is nil otherwise.
func (r *SoundnessReport) Err() error {
	if len(r.Failures) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d of %d", ErrUnsound, len(r.Failures), len(r.Rules))
}
