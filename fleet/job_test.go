package fleet

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validJob(t testing.TB) Job {
	return Job{Version: JobVersion, Kind: testKind, Mode: ModeGPU, Driver: "12.4", Compiler: "nvrtc 12.4", Body: body(t, 3),
		Schedule: "threads=128", Shapes: "[4,8] [8]", DTypes: "f32 f32", Seed: 7}
}

func TestParseJob(t *testing.T) {
	good, err := validJob(t).Encode()
	require.NoError(t, err)
	j, err := ParseJob(good)
	require.NoError(t, err)
	assert.Equal(t, validJob(t), j)

	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		require.NoError(t, json.Unmarshal(good, &m))
		f(m)
		data, err := json.Marshal(m)
		require.NoError(t, err)
		return string(data)
	}
	tests := []struct {
		name, data, want string
	}{
		{"empty", "", "not a job message"},
		{"not json", "measure this", "not a job message"},
		{"an array", "[1,2]", "not a job message"},
		{"data after it", string(good) + " {}", "data after the JSON object"},
		{"unknown field", edit(func(m map[string]any) { m["priority"] = 1 }), "unknown field"},
		{"newer version", edit(func(m map[string]any) { m["v"] = 2 }), "job version 2"},
		{"no version", edit(func(m map[string]any) { delete(m, "v") }), "job version 0"},
		{"kind not a token", edit(func(m map[string]any) { m["kind"] = "h100.>" }), "not a GPU kind"},
		{"bad mode", edit(func(m map[string]any) { m["mode"] = "fpga" }), "measurement mode"},
		{"gpu without driver", edit(func(m map[string]any) { delete(m, "driver") }), "needs a driver"},
		{"no compiler", edit(func(m map[string]any) { m["compiler"] = "" }), "no compiler"},
		{"no body", edit(func(m map[string]any) { m["body"] = "" }), "no kernel body"},
		{"body not ir", edit(func(m map[string]any) { m["body"] = "graph {" }), "kernel body"},
		{"bad schedule", edit(func(m map[string]any) { m["schedule"] = "warps=banana" }), "schedule"},
		{"no shapes", edit(func(m map[string]any) { m["shapes"] = "" }), "no shapes"},
		{"negative repeats", edit(func(m map[string]any) { m["repeats"] = -1 }), "repeats"},
		{"negative prediction", edit(func(m map[string]any) { m["predicted_s"] = -1 }), "predicted_s"},
		{"wrong type", edit(func(m map[string]any) { m["seed"] = "seven" }), "not a job message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJob([]byte(tt.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// JSON decoding replaces invalid UTF-8; a job made in Go is checked.
	bad := validJob(t)
	bad.Compiler = "nvrtc \xff"
	assert.ErrorContains(t, bad.Check(), "compiler is not valid UTF-8")
}

// FuzzParseJob: whatever a job message holds, ParseJob returns a job or an
// error and never panics, and a job it accepts encodes to a message it
// reads back to the same job and key.
func FuzzParseJob(f *testing.F) {
	good, err := validJob(f).Encode()
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte(`{"v":1,"kind":"a","mode":"emulated","compiler":"g++","body":"x","shapes":"s","dtypes":"d","seed":0}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Add([]byte("{\"v\":1,\"body\":\"\\u0000\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJob(data)
		if err != nil {
			return
		}
		again, err := j.Encode()
		require.NoError(t, err)
		k, err := ParseJob(again)
		require.NoError(t, err)
		assert.Equal(t, j, k)
		assert.Equal(t, j.Key(), k.Key())
		assert.Regexp(t, jobKeyPattern, j.Key())
	})
}

// TestJobKey: the key separates what the issue says it must (kernel,
// kind, driver, compiler, mode) and is the key of the record a worker
// stores for the job.
func TestJobKey(t *testing.T) {
	base := validJob(t)
	emulated := base
	emulated.Mode, emulated.Driver = ModeEmulated, ""
	keys := map[string]string{"base": base.Key(), "emulated": emulated.Key()}
	for name, f := range map[string]func(*Job){
		"body":     func(j *Job) { j.Body = body(t, 4) },
		"schedule": func(j *Job) { j.Schedule = "threads=256" },
		"shapes":   func(j *Job) { j.Shapes = "[5,8] [8]" },
		"kind":     func(j *Job) { j.Kind = "a100-sxm-80gb" },
		"driver":   func(j *Job) { j.Driver = "12.8" },
		"compiler": func(j *Job) { j.Compiler = "nvrtc 12.8" },
	} {
		j := base
		f(&j)
		keys[name] = j.Key()
	}
	seen := map[string]string{}
	for name, k := range keys {
		assert.Regexp(t, jobKeyPattern, k)
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s share key %s", name, other, k)
		}
		seen[k] = name
	}
	seed := base
	seed.Seed, seed.Predicted = 99, 1e-3
	assert.Equal(t, base.Key(), seed.Key(), "the seed and the prediction do not make another kernel")
	assert.True(t, strings.HasPrefix(emulated.Key(), "emulated."))
	assert.True(t, strings.HasPrefix(base.Key(), "gpu."))
	for _, j := range []Job{base, emulated} {
		rec := tunedb.Record{Key: j.tuneKey(), Where: j.where()}
		assert.Equal(t, j.Key(), RecordKey(rec))
	}
	assert.Equal(t, tunedb.WhereEmulated, emulated.tuneKey().Device, "emulated times are kept apart from every device's")
}

func TestResolveKind(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{in: "h100", want: "h100-sxm"},
		{in: "H100-SXM", want: "h100-sxm"},
		{in: "a100", want: "a100-sxm-80gb"},
		{in: "mi300x", want: "mi300x"},
		{in: "b200_nvl", want: "b200_nvl"},
		{in: "h100.sxm", err: "GPU kind"},
		{in: "", err: "GPU kind"},
		{in: "cpu-emulation", err: "GPU kind"},
		{in: "gpu>", err: "GPU kind"},
	}
	for _, tt := range tests {
		got, err := ResolveKind(tt.in)
		if tt.err != "" {
			require.Error(t, err, tt.in)
			assert.Contains(t, err.Error(), tt.err)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestCheckURL(t *testing.T) {
	for _, u := range []string{"nats://127.0.0.1:4222", "tls://fleet.example.com:4222", "nats://a:1,nats://b:2", "nats://user:pw@host:4222"} {
		assert.NoError(t, CheckURL(u), u)
	}
	for _, u := range []string{"", "http://host:4222", "127.0.0.1:4222", "nats://"} {
		assert.Error(t, CheckURL(u), u)
	}
	assert.Equal(t, "nats://user:xxxxx@host:4222", Redact("nats://user:pw@host:4222"))
}
