// Command lumsearch is the command line of lumsearch, an equality-saturation
// superoptimizing compiler for ML models.
//
// Today it exposes what exists: the e-graph engine (egraph: load an
// egraph-serialize JSON file, report its size, draw it with Graphviz),
// extraction (extract: tree, greedy DAG and exact DAG extraction of such a
// file), the corpus of model graphs (corpus: list, print and run them in
// the reference interpreter, ONNX models included), and the rule verifier
// (rules check). The compiler commands (optimize, compile, ...) come with the
// packages they need.
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
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
