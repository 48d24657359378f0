package nvrtc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseResources(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want map[string]Resources
	}{
		{
			name: "nvrtc 11.8 sm_80",
			log: `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 372 bytes cmem[0]
`,
			want: map[string]Resources{"k": {Registers: 10, ConstBytes: 372}},
		},
		{
			name: "nvrtc 11.8 sm_90 lists no cmem",
			log: `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers
`,
			want: map[string]Resources{"k": {Registers: 10}},
		},
		{
			name: "nvrtc 11.8 two entries, a called function, module constants and a warning",
			log: `t.cu(4): warning #177-D: variable "unused" was declared but never referenced

ptxas info    : 0 bytes gmem, 400 bytes cmem[3]
ptxas info    : Compiling entry function 'h' for 'sm_80'
ptxas info    : Function properties for h
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1gPf' for 'sm_80'
ptxas info    : Function properties for _Z1gPf
ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Function properties for _Z1fPfi
ptxas         .     96 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
`,
			want: map[string]Resources{
				"h":      {Registers: 8, ConstBytes: 360},
				"_Z1gPf": {Registers: 40, SharedBytes: 1024, ConstBytes: 360, StackBytes: 256},
			},
		},
		{
			name: "cuda 12 barriers, compile time, spills",
			log: `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'matmul_f16' for 'sm_90'
ptxas info    : Function properties for matmul_f16
    48 bytes stack frame, 44 bytes spill stores, 52 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 408 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 12.375 ms
`,
			want: map[string]Resources{"matmul_f16": {
				Registers: 255, SharedBytes: 49152, ConstBytes: 416, SpillStores: 44, SpillLoads: 52, StackBytes: 48,
			}},
		},
		{
			name: "nvcc 12 matmul epilogue: an accumulator tile on a stack frame without spills",
			log: `ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function 'k9' for 'sm_90'
ptxas info    : Function properties for k9
    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 128 bytes cumulative stack size, 34816 bytes smem
ptxas info    : Compile time = 31.104 ms
ptxas info    : Compiling entry function 'k10' for 'sm_90'
ptxas info    : Function properties for k10
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 16896 bytes smem
`,
			want: map[string]Resources{
				"k9":  {Registers: 96, SharedBytes: 34816, StackBytes: 128},
				"k10": {Registers: 40, SharedBytes: 16896},
			},
		},
		{
			name: "cuda 12 cumulative stack size beyond the frame",
			log: `ptxas info    : Compiling entry function 'attn' for 'sm_90'
ptxas info    : Function properties for attn
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 64 bytes cumulative stack size, 16384 bytes smem, 560 bytes cmem[0]
ptxas info    : Function properties for helper
    48 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
`,
			want: map[string]Resources{"attn": {Registers: 128, SharedBytes: 16384, ConstBytes: 560, StackBytes: 64}},
		},
		{
			name: "old ptxas X+Y sums, lmem, several banks",
			log: `ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_20'
ptxas info    : Function properties for _Z6kernelPf
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 63 registers, 4+0 bytes lmem, 2048+16 bytes smem, 64 bytes cmem[0], 4 bytes cmem[14], 276 bytes cmem[16]
`,
			want: map[string]Resources{"_Z6kernelPf": {Registers: 63, SharedBytes: 2064, ConstBytes: 344, StackBytes: 8}},
		},
		{
			name: "nvcc on windows: prefixes, CRLF, demangled names",
			log: "1>  ptxas info    : Compiling entry function 'searchkernel(octree, int*, double)' for 'sm_86'\r\n" +
				"1>  ptxas info    : Function properties for searchkernel(octree, int*, double)\r\n" +
				"1>      72 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\r\n" +
				"1>  ptxas info    : Used 46 registers, 176 bytes cmem[0], 16 bytes cmem[14]\r\n",
			want: map[string]Resources{"searchkernel(octree, int*, double)": {Registers: 46, ConstBytes: 192, StackBytes: 72}},
		},
		{
			name: "figures on the properties line, name ending in a digit",
			log: `ptxas info    : Compiling entry function 'k2' for 'sm_80'
ptxas info    : Function properties for k2 32 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 32 registers, 356 bytes cmem[0]
`,
			want: map[string]Resources{"k2": {Registers: 32, ConstBytes: 356, SpillStores: 4, SpillLoads: 4, StackBytes: 32}},
		},
		{
			name: "properties before the entry line",
			log: `ptxas info    : Function properties for k
ptxas         .     24 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Used 64 registers, 4096 bytes smem, 372 bytes cmem[0]
`,
			want: map[string]Resources{"k": {Registers: 64, SharedBytes: 4096, ConstBytes: 372, SpillStores: 24, SpillLoads: 20, StackBytes: 24}},
		},
		{
			name: "entry without a Used line",
			log: `ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
`,
			want: map[string]Resources{"k": {}},
		},
		{
			name: "warnings only",
			log:  "t.cu(2): warning #177-D: variable \"x\" was declared but never referenced\n\n",
			want: map[string]Resources{},
		},
		{name: "empty", log: "", want: map[string]Resources{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ParseResources(tc.log))
		})
	}
}

func TestParseDiagnostics(t *testing.T) {
	tests := []struct {
		name string
		log  string
		src  string
		want []Diagnostic
	}{
		{
			name: "nvrtc 11.8: line, no column",
			log: `kernel.cu(3): error: expected a ";"

kernel.cu(2): warning #177-D: variable "x" was declared but never referenced

1 error detected in the compilation of "kernel.cu".
`,
			src: "extern \"C\" __global__ void k(float* y) {\n  int x = 1\n  y[0] = x;\n}\n",
			want: []Diagnostic{
				{File: "kernel.cu", Line: 3, Severity: "error", Message: `expected a ";"`, Source: "  y[0] = x;"},
				{File: "kernel.cu", Line: 2, Severity: "warning", Code: "177-D", Message: `variable "x" was declared but never referenced`, Source: "  int x = 1"},
			},
		},
		{
			name: "nvrtc 12: echoed line and caret give the column",
			log: "kernel.cu(3): error: identifier \"z\" is undefined\n" +
				"      y[0] = z;\n" +
				"             ^\n\n" +
				"1 error detected in the compilation of \"kernel.cu\".\n",
			src: "extern \"C\" __global__ void k(float* y) {\n  int x = 1;\n  y[0] = z;\n}\n",
			want: []Diagnostic{
				{File: "kernel.cu", Line: 3, Column: 10, Severity: "error", Message: `identifier "z" is undefined`, Source: "  y[0] = z;"},
			},
		},
		{
			name: "catastrophic error, no source given",
			log:  "kernel.cu(1): catastrophic error: cannot open source file \"cuda_fp16.h\"\n",
			want: []Diagnostic{
				{File: "kernel.cu", Line: 1, Severity: "catastrophic error", Message: `cannot open source file "cuda_fp16.h"`},
			},
		},
		{
			name: "an option NVRTC rejects",
			log:  "nvrtc: error: invalid value for --gpu-architecture (-arch)\n",
			want: []Diagnostic{{Severity: "error", Message: "invalid value for --gpu-architecture (-arch)"}},
		},
		{
			name: "line beyond the source",
			log:  "kernel.cu(40): error: expected a declaration\n",
			src:  "int x;\n",
			want: []Diagnostic{{File: "kernel.cu", Line: 40, Severity: "error", Message: "expected a declaration"}},
		},
		{name: "ptxas lines only", log: "ptxas info    : 0 bytes gmem\n", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ParseDiagnostics(tc.log, tc.src))
		})
	}
}

func TestDiagnosticString(t *testing.T) {
	assert.Equal(t, "k.cu:3:10: error: x", Diagnostic{File: "k.cu", Line: 3, Column: 10, Severity: "error", Message: "x"}.String())
	assert.Equal(t, "k.cu:3: warning: x", Diagnostic{File: "k.cu", Line: 3, Severity: "warning", Message: "x"}.String())
	assert.Equal(t, "error: bad option", Diagnostic{Severity: "error", Message: "bad option"}.String())
}

func TestCompileErrorText(t *testing.T) {
	log := "kernel.cu(3): error: expected a \";\"\n\n1 error detected in the compilation of \"kernel.cu\".\n"
	src := "extern \"C\" __global__ void k(float* y) {\n  int x = 1\n  y[0] = x;\n}\n"
	e := &CompileError{Name: "kernel.cu", Arch: "sm_80", Status: "NVRTC_ERROR_COMPILATION", Log: log, Diagnostics: ParseDiagnostics(log, src)}
	require.Len(t, e.Diagnostics, 1)
	assert.Equal(t, "nvrtc: compile kernel.cu for sm_80: NVRTC_ERROR_COMPILATION\n"+
		"kernel.cu(3): error: expected a \";\"\n\n1 error detected in the compilation of \"kernel.cu\".\n"+
		"kernel.cu:3: y[0] = x;", e.Error())
}

func TestCompareVersions(t *testing.T) {
	dirs := []string{"/usr/local/cuda-11.8/lib64", "/usr/local/cuda-12.10/lib64", "/usr/local/cuda-12.4/lib64", "/usr/local/cuda-13.0/lib64"}
	assert.Less(t, compareVersions(dirs[0], dirs[2]), 0)
	assert.Greater(t, compareVersions(dirs[1], dirs[2]), 0)
	assert.Greater(t, compareVersions(dirs[3], dirs[1]), 0)
	assert.Equal(t, 0, compareVersions(dirs[0], dirs[0]))
}
