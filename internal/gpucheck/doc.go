// Package gpucheck holds the tests of scripts/gpu-check.sh, the one-command
// comparison of lumsearch against PyTorch eager and torch.compile on a
// machine with an NVIDIA GPU. The tests run it in dry mode (no GPU), which
// still builds and runs the lumsearch binary, compiles the corpus graphs and
// probes the PyTorch side. The package has no code of its own.
package gpucheck
