// Package search is the lumsearch compiler as a Go library: everything the
// lumsearch command does, a Go program can do through it, and the command
// line only turns its flags into these options and prints the results.
//
// # Loading a model
//
// LoadModel loads a corpus model ("llama-3-8b:layer"), an ONNX file, or a
// Hugging Face folder (config.json, optionally safetensors weights); a
// graph built with the ir package becomes a Model by filling in its Name
// and Graph. The Model's name is its provenance: plan.json records it, and
// Verify and BenchDir rebuild the graph from it.
//
// # Compiling
//
// Optimize is the product: the budgeted search. It builds the naive
// program, saturates the model's e-graph in stages of rule sets (a model
// whose layers repeat is searched on two of them and the result replayed
// on all), extracts the program the cost model of Options.Target predicts
// fastest, optionally measures the chosen kernels on a GPU or under the
// CPU emulation (through a worker process, Options.Worker, or on the
// tune-workers of a fleet over NATS JetStream, Options.Workers; see the
// fleet package) and extracts again, and finalizes the best program: lowering, CUDA, NVRTC and
// verification under the CPU emulation against the float64 reference.
// Compile runs the same pipeline once, without a budget or measurement.
// Both return a Result, whose Write puts the output folder on disk:
// kernels.cu, the host library, plan.json, the constants, the model's Go
// package, the prepared weights of a model that has its own, and (from
// Optimize) report.md with its charts, which the report package renders
// from the report.Report this package fills in.
//
// Verify re-checks such a folder from its own files; Bench and BenchDir
// time a compiled program against the naive one on a GPU (or under the
// emulation) and record the times in the tuning database; RuleStats runs
// the rule sets over a model and reports what each rule did; NaiveProgram
// gives the figures of the naive program every speed-up is reported
// against.
//
// Progress comes as Events (Options.Events); a Printer shows them as the
// command line does. Errors carry a Kind (KindOf) that says whose fault
// they are: an option, the model, a missing GPU, the output folder;
// ErrNothingVerified says the budget ended before any program verified.
//
// # The optimize loop
//
// Run is the loop itself over caller-supplied phases (Config): the
// budget, the stages, background finalization, measurement rounds and
// the fallback on rejected programs. The budget is kept by construction:
// every phase runs under one context whose deadline is the budget less a
// reserve for writing the output, and a program becomes the answer only
// once it has been finalized (verified). When a budget is set, each
// stage's better program is finalized while the next stage saturates, so
// that a later stage cut short by the clock or by Ctrl-C still leaves the
// best verified program so far. Without a budget only the final program
// is finalized, and the run depends on nothing but its input and options,
// so two runs write identical outputs.
//
// Package search imports every other package of lumsearch; none of them
// imports it.
package search
