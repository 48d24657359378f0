package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
)

// Env is what a worker's times depend on beyond the kernel and the device
// kind: the driver and the kernel compiler, as the tuning database keys
// records by them.
type Env struct {
	// Driver is the CUDA driver's version ("" under the emulation).
	Driver string `json:"driver,omitempty"`
	// Compiler is the kernel compiler's name and version ("nvrtc 12.4",
	// or the emulation's C++ compiler).
	Compiler string `json:"compiler"`
}

// String writes the environment for people: "driver 12.4, nvrtc 12.4".
func (e Env) String() string {
	if e.Driver == "" {
		return e.Compiler
	}
	return "driver " + e.Driver + ", " + e.Compiler
}

// LocalEnv is this machine's environment for measuring in mode: the CUDA
// driver's and NVRTC's versions for ModeGPU (an error without them), the
// C++ compiler the emulation builds with for ModeEmulated.
func LocalEnv(ctx context.Context, mode string) (Env, error) {
	switch mode {
	case ModeGPU:
		d, err := gpu.Open()
		if err != nil {
			return Env{}, fmt.Errorf("measuring on the GPU: %w", err)
		}
		lib, err := nvrtc.Load()
		if err != nil {
			return Env{}, fmt.Errorf("measuring on the GPU needs NVRTC: %w", err)
		}
		major, minor := lib.Version()
		// The format bench records the driver in.
		return Env{Driver: fmt.Sprintf("%d.%d", d.Version()/1000, d.Version()%1000/10), Compiler: fmt.Sprintf("nvrtc %d.%d", major, minor)}, nil
	case ModeEmulated:
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "g++", "-dumpfullversion").Output()
		if err != nil {
			return Env{}, fmt.Errorf("measuring under the emulation needs g++: %w", err)
		}
		return Env{Compiler: "g++ " + strings.TrimSpace(string(out))}, nil
	}
	return Env{}, checkMode(mode)
}
