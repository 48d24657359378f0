// Command lumsearch is the command line of lumsearch, an equality-saturation
// superoptimizing compiler for ML models.
//
// The main command is optimize (the budgeted search: saturation, extraction,
// measurement, lowering, CUDA, verification, and the output folder with its
// report); compile runs the same pipeline once; bench times a compiled
// program on a GPU; worker measures candidates for the search; verify
// re-checks an output folder. The others expose the parts: the e-graph
// engine (egraph), extraction (extract), the corpus of model graphs
// (corpus), the rules and their statistics (rules), the tuning database
// (tunedb) and a model's tokenizer (tokenize).
//
// Usage:
//
//	lumsearch <command> [arguments]
//
// Run "lumsearch help" for the list of commands and "lumsearch help <command>"
// or "lumsearch <command> -h" for a command's flags and an example.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second Ctrl-C kills at once: an output folder is swapped in
		// whole, so it is then left as it was.
		stop()
		fmt.Fprintln(os.Stderr, "lumsearch: interrupted: finishing what is under way (optimize keeps what is verified so far, serve drains its requests); Ctrl-C again quits at once, leaving an output folder as it was")
	}()
	stopProfile := startProfile(os.Getenv("LUMSEARCH_CPUPROFILE"))
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	os.Exit(code)
}

// startProfile writes a CPU profile of the whole run to path when it is
// not empty (for people finding where a slow compile spends its time: go
// tool pprof reads it) and returns what ends it.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lumsearch: LUMSEARCH_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
