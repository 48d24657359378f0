package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lumsearch/lumsearch/search"
)

// Exit codes of run.
const (
	exitOK    = 0 // success, or help that was asked for
	exitError = 1 // the command failed
	exitUsage = 2 // the command line was wrong
)

// commands lists the subcommands in the order help shows them. It is filled
// in init because the help command itself looks commands up.
var commands []*command

func init() {
	commands = []*command{optimizeCommand, corpusCommand, egraphCommand, extractCommand, rulesCommand, versionCommand, helpCommand, tunedbCommand, compileCommand, verifyCommand, runCommand, benchCommand, workerCommand, tuningServerCommand, tuneWorkerCommand, tokenizeCommand, loadgenCommand, serveCommand}
}

// lookup returns the subcommand called name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// commandNames returns the subcommand names, comma-separated.
func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// run is the whole program minus the process: it parses args (without the
// program name), runs the subcommand they name, writes its output to stdout
// and its errors to stderr, and returns the exit status. ctx is canceled on
// Ctrl-C so that long phases can stop early.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeMainHelp(stderr)
		return exitUsage
	}
	switch name := args[0]; name {
	case "-h", "-help", "--help":
		writeMainHelp(stdout)
		return exitOK
	default:
		c := lookup(name)
		if c == nil {
			fmt.Fprintf(stderr, "lumsearch: unknown command %q; the commands are: %s\n", name, commandNames())
			fmt.Fprintln(stderr, "Run 'lumsearch help' for usage.")
			return exitUsage
		}
		return c.execute(ctx, args[1:], stdout, stderr)
	}
}

// usageError is an error in the command line rather than in the work; run
// exits with exitUsage for it and points at the command's help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef makes a usageError.
func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// isUsage says whether err is (or wraps) a usageError, or an option the
// library could not use (the command line's options are its options).
func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u) || search.KindOf(err) == search.KindOption
}
