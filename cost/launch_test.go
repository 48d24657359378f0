package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// TestBuiltinGraphLaunch: every built-in device prices a launch inside a
// CUDA graph below one issued on its own, with a source that says it is
// an estimate and cites NVIDIA's published times.
func TestBuiltinGraphLaunch(t *testing.T) {
	for _, d := range Devices() {
		t.Run(d.Name, func(t *testing.T) {
			assert.Positive(t, d.GraphLaunch)
			assert.Less(t, d.GraphLaunch, d.Launch)
			assert.Contains(t, d.GraphLaunchSource, "estimate")
			assert.Contains(t, d.GraphLaunchSource, "https://developer.nvidia.com/blog/cuda-graphs/")
			assert.Equal(t, d.GraphLaunch, d.LaunchCost(true))
			assert.Equal(t, d.Launch, d.LaunchCost(false))
		})
	}
}

// TestGraphLaunchOfAUserFile: a user's description may leave the figure
// out (a launch in a graph then costs launch_seconds) and must keep it
// within [0, launch_seconds].
func TestGraphLaunchOfAUserFile(t *testing.T) {
	tests := []struct {
		name, extra string
		inGraph     float64 // LaunchCost(true); 0 when invalid
		err         string
	}{
		{"left out", "", 2e-6, ""},
		{"given", ` "graph_launch_seconds": 5e-7, "graph_launch_source": "measured",`, 5e-7, ""},
		{"zero", ` "graph_launch_seconds": 0,`, 2e-6, ""},
		{"negative", ` "graph_launch_seconds": -1e-6,`, 0, "graph_launch_seconds must be in [0, launch_seconds]"},
		{"above a launch", ` "graph_launch_seconds": 3e-6,`, 0, "graph_launch_seconds must be in [0, launch_seconds]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "mine.json", "["+userDevice("my-gpu", 10, tt.extra)+"]")
			ds, err := LoadDevices(path)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				assert.ErrorContains(t, err, "my-gpu")
				return
			}
			require.NoError(t, err)
			require.Len(t, ds, 1)
			assert.Equal(t, tt.inGraph, ds[0].LaunchCost(true))
			assert.Equal(t, 2e-6, ds[0].LaunchCost(false))
		})
	}
}

// TestInGraph: a model pricing launches inside a CUDA graph charges a
// launch the device's graph figure (added to a kernel's largest bound),
// so a kernel costs the difference less, and leaves the model it came
// from as it was.
func TestInGraph(t *testing.T) {
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	b := ir.NewBuilder("kernel")
	b.Output("out0", b.Neg(b.Input("$0", ir.F32, 4)))
	body, err := b.Build()
	require.NoError(t, err)
	alone, err := m.Kernel(body)
	require.NoError(t, err)
	g := m.InGraph()
	inGraph, err := g.Kernel(body)
	require.NoError(t, err)
	assert.InDelta(t, d.LaunchCost(false)-d.LaunchCost(true), alone.Seconds-inGraph.Seconds, 1e-12)
	again, err := m.Kernel(body)
	require.NoError(t, err)
	assert.Equal(t, alone.Seconds, again.Seconds)
}
