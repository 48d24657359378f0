package search_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/search"
)

// Compile a decoder layer of a tiny corpus model for an H100 by the cost
// model, verify it under the CPU emulation, and write its output folder.
func ExampleCompile() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lumsearch-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	m, err := search.LoadModel("tiny-llama:layer", search.ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := search.Compile(ctx, m, search.Options{
		Target: "h100",
		TuneDB: filepath.Join(dir, "tunedb.jsonl"), // not the user's own
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := res.Write(ctx, filepath.Join(dir, "out")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Plan.Model, res.Plan.Target, res.Plan.Arch)
	_, err = os.Stat(filepath.Join(dir, "out", search.KernelsFile))
	fmt.Println("kernels.cu written:", err == nil)
	// Output:
	// tiny-llama:layer h100-sxm sm_90
	// kernels.cu written: true
}

// Optimize a tiny layer with small work limits instead of a time budget,
// printing progress as the command line does, then compare the result
// with the naive program (one kernel per op).
func ExampleOptimize() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lumsearch-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	m, err := search.LoadModel("tiny-llama:mlp", search.ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	var phases []string
	res, err := search.Optimize(ctx, m, search.Options{
		IterLimit: 5,
		NoVerify:  true, // Compile's example verifies
		TuneDB:    filepath.Join(dir, "tunedb.jsonl"),
		Events: func(e search.Event) {
			if e.Kind == "phase" {
				phases = append(phases, e.Phase)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := res.Write(ctx, filepath.Join(dir, "out")); err != nil {
		log.Fatal(err)
	}
	s := res.Report.Summary
	fmt.Println("phases:", phases)
	fmt.Println("ended by:", res.Search.EndedBy)
	fmt.Println("fewer launches than the naive program:", s.Launches < s.NaiveLaunches)
	// Output:
	// phases: [naive saturate saturate finalize write]
	// ended by: saturation (every stage ran out of rewrites)
	// fewer launches than the naive program: true
}

// Verify an output folder from its own files, as "lumsearch verify DIR"
// does: every kernel printed again from its body and schedule and run
// under the CPU emulation, and the whole program against the model.
func ExampleVerify() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lumsearch-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := search.LoadModel("tiny-llama:rmsnorm", search.ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := search.Compile(ctx, m, search.Options{NoVerify: true, TuneDB: filepath.Join(dir, "tunedb.jsonl")})
	if err != nil {
		log.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := res.Write(ctx, out); err != nil {
		log.Fatal(err)
	}
	var last string
	err = search.Verify(ctx, out, func(e search.Event) { last = e.Message })
	fmt.Println(err == nil, last == "verified "+out)
	// Output: true true
}
