package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lumsearch/lumsearch/search"
)

// action is a subcommand's work once its flags are parsed: pos holds the
// positional arguments.
type action func(ctx context.Context, pos []string, stdout io.Writer) error

// command is one subcommand: its help text and how to run it.
type command struct {
	name     string // what the user types
	summary  string // one line for the command list
	synopsis string // usage line, without "Usage: "
	doc      string // what it does, a paragraph or two
	example  string // one or more example command lines
	// setup defines the command's flags on fs and returns the action that
	// reads them, so that help can list the flags without running anything.
	setup func(fs *flag.FlagSet) action
}

// flagSet returns a fresh flag set for c with its flags defined, and the
// action bound to them. The set prints nothing itself: execute reports
// errors and help.
func (c *command) flagSet() (*flag.FlagSet, action) {
	fs := flag.NewFlagSet("lumsearch "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	act := c.setup(fs)
	return fs, act
}

// execute parses args (flags may come before or after the positional
// arguments), then runs the command and turns its result into an exit code.
func (c *command) execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, act := c.flagSet()
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.writeHelp(stdout)
		return exitOK
	}
	if err == nil {
		err = checkSizeFlags(fs)
	}
	if err == nil {
		err = act(ctx, pos, stdout)
	}
	switch {
	case err == nil:
		return exitOK
	case isUsage(err):
		fmt.Fprintf(stderr, "lumsearch: %s: %v\n", c.name, err)
		if c == helpCommand {
			fmt.Fprintln(stderr, "Run 'lumsearch help' for the list of commands.")
		} else {
			fmt.Fprintf(stderr, "Run 'lumsearch %s -h' for usage.\n", c.name)
		}
		return exitUsage
	default:
		fmt.Fprintf(stderr, "lumsearch: %s: %v\n", c.name, err)
		if search.KindOf(err) == search.KindInternal {
			return exitInternal // whatever code the command gave it
		}
		var coded *codedError
		if errors.As(err, &coded) {
			return coded.code
		}
		return exitError
	}
}

// parseInterspersed parses flags anywhere among args, as in
// "lumsearch egraph f.json --json", and returns the positional arguments in
// order. A "--" ends the flags: everything after it is positional. Flag
// errors come back as usageError; a request for help as flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// writeHelp prints c's usage, description, flags and example.
func (c *command) writeHelp(w io.Writer) {
	fs, _ := c.flagSet()
	fmt.Fprintf(w, "Usage: lumsearch %s\n\n", c.synopsis)
	fmt.Fprintf(w, "%s\n", strings.TrimSpace(c.doc))
	var flags bytes.Buffer
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nFlags (one dash or two, before or after the arguments):\n%s", flags.String())
	}
	fmt.Fprintf(w, "\nExample:\n")
	for _, line := range strings.Split(strings.TrimSpace(c.example), "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace(line))
	}
	fmt.Fprintf(w, "\nExit status:\n")
	for _, line := range exitStatuses(c.name) {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// exitStatuses lists what a command's exit statuses mean, in its help:
// the ones every command shares, and the few of its own (exitCodes).
func exitStatuses(name string) []string {
	own := map[string][]string{
		"optimize": {
			"3  the model cannot be read or is unsupported (unreadable file, unsupported op, unbound dimension)",
			"4  no GPU for --measure gpu",
			"5  DIR cannot be written",
			"6  nothing was verified within the budget",
		},
		"compile":     {"3  the model cannot be read or is unsupported (unreadable file, unsupported op, unbound dimension)"},
		"verify":      {"3  the folder, its plan or its model cannot be read"},
		"tokenize":    {"3  the tokenizer cannot be read or is unsupported"},
		"loadgen":     {"3  the workload file cannot be read or is invalid"},
		"serve":       {"3  the folder or its model cannot be read, or the folder is not a serving step"},
		"tune-worker": {"4  no GPU (or no NVRTC) for --measure gpu"},
	}
	lines := []string{"0  done", "1  the command failed", "2  the command line was wrong"}
	lines = append(lines, own[name]...)
	return append(lines, "7  an internal error: a bug in lumsearch (its message names the failing term; please report it)")
}

// writeMainHelp prints the program's overview and its command list.
func writeMainHelp(w io.Writer) {
	fmt.Fprint(w, `lumsearch is an equality-saturation superoptimizing compiler for ML models.
"optimize" searches a model's fastest verified program within a time budget
(saturation, extraction by the cost model, measurement on a GPU or under the
CPU emulation, lowering, CUDA, NVRTC and verification under the emulation)
and writes it with a report; "compile" runs the same pipeline once, without
a budget or measurement.

Usage: lumsearch <command> [arguments]

Commands:
`)
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'lumsearch help <command>' or 'lumsearch <command> -h' for a command's
flags and an example.

Example:
  lumsearch egraph egraph/testdata/ac4.json
`)
}
