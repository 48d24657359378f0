package search

import "github.com/lumsearch/lumsearch/gpu"

// UseGraphs makes the step's runs replay a CUDA graph per row bucket on
// stream (gpu.Program.UseGraphs; nil turns graphs off and destroys them).
// The caller keeps stream alive until graphs are off or the step is
// closed.
func (s *StepGPU) UseGraphs(stream *gpu.Stream) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog.UseGraphs(stream)
}

// CaptureBuckets captures the graph of every row bucket a step can fall
// in now, so that no step pays a capture (gpu.Program.CaptureBuckets).
func (s *StepGPU) CaptureBuckets() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog.CaptureBuckets()
}

// Graphs says how the step's runs went with graphs on.
func (s *StepGPU) Graphs() gpu.GraphStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog.Graphs()
}
