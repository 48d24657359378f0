package cost

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

// devicesJSON is the built-in device descriptions: a JSON list of Device.
//
//go:embed devices.json
var devicesJSON []byte

var builtin = sync.OnceValue(func() []*Device {
	ds, err := parseDevices("devices.json (embedded)", devicesJSON)
	if err != nil {
		panic("cost: the embedded device file is invalid: " + err.Error())
	}
	return ds
})

// Devices returns the built-in device descriptions, in the order of the
// embedded file. The slice and the devices are copies: callers may change
// them.
func Devices() []*Device {
	return cloneDevices(builtin())
}

// LookupDevice returns the built-in description named name, or one of its
// aliases, compared case-insensitively ("h100" is the H100 SXM).
func LookupDevice(name string) (*Device, error) {
	d, err := lookup(builtin(), name)
	if err != nil {
		return nil, err
	}
	return d.clone(), nil
}

// LoadDevices reads a user's device file: a JSON list of devices in the
// format of the built-in file (see Device). Decoding is strict (an unknown
// field is an error) and every device must validate; errors name the file
// and the device.
func LoadDevices(path string) ([]*Device, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("device file: %w", err)
	}
	return parseDevices(path, data)
}

// ResolveTarget returns the device --target name selects among the built-in
// descriptions and the devices of the given user files; a user device with
// a built-in's name (or a later file's device with an earlier one's name)
// replaces it. Name "auto" asks nvidia-smi for the GPU present and matches
// the name it reports against the descriptions' full names and aliases.
func ResolveTarget(ctx context.Context, name string, files []string) (*Device, error) {
	all := cloneDevices(builtin())
	for _, path := range files {
		user, err := LoadDevices(path)
		if err != nil {
			return nil, err
		}
		for _, u := range user {
			i := slices.IndexFunc(all, func(d *Device) bool { return strings.EqualFold(d.Name, u.Name) })
			if i >= 0 {
				all[i] = u
			} else {
				all = append(all, u)
			}
		}
	}
	name = strings.TrimSpace(name)
	if !strings.EqualFold(name, "auto") {
		return lookup(all, name)
	}
	return detect(ctx, all)
}

// runCommand runs a command and returns its standard output; tests replace
// it to stand in for nvidia-smi.
var runCommand = func(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// nvidia-smi says why on stdout ("No devices were found") or stderr.
		if msg := strings.TrimSpace(stderr.String() + " " + stdout.String()); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, firstLine(msg))
		}
		return nil, err
	}
	return stdout.Bytes(), nil
}

// detect resolves --target auto: the GPUs nvidia-smi lists must all be of
// one model, and that model must have a description.
func detect(ctx context.Context, all []*Device) (*Device, error) {
	out, err := runCommand(ctx, "nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")
	if err != nil {
		return nil, fmt.Errorf("--target auto: no NVIDIA GPU found (nvidia-smi: %v); name a target: %s", err, knownNames(all))
	}
	type gpu struct{ name, cc string }
	var gpus []gpu
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		// The compute capability follows the last comma.
		n, cc := line, ""
		if i := strings.LastIndex(line, ","); i >= 0 {
			n, cc = line[:i], line[i+1:]
		}
		gpus = append(gpus, gpu{strings.TrimSpace(n), strings.TrimSpace(cc)})
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("--target auto: no NVIDIA GPU found (nvidia-smi listed none); name a target: %s", knownNames(all))
	}
	for _, g := range gpus[1:] {
		if !strings.EqualFold(g.name, gpus[0].name) {
			var names []string
			for _, g := range gpus {
				names = append(names, g.name)
			}
			return nil, fmt.Errorf("--target auto: the GPUs present are of different models (%s); name a target: %s",
				strings.Join(names, ", "), knownNames(all))
		}
	}
	g := gpus[0]
	for _, d := range all {
		if matches(d, g.name) {
			if want := archOf(g.cc); want != "" && d.Arch != "" && !strings.EqualFold(want, d.Arch) {
				return nil, fmt.Errorf("--target auto: %s reports compute capability %s but its description %s says %s",
					g.name, g.cc, d.Name, d.Arch)
			}
			return d, nil
		}
	}
	return nil, fmt.Errorf("--target auto: no description for the GPU present, %q (compute capability %s); add a device file with its description or name a target: %s",
		g.name, g.cc, knownNames(all))
}

// archOf turns nvidia-smi's compute capability ("9.0") into the arch form
// ("sm_90"); it returns "" for what it does not recognise.
func archOf(cc string) string {
	major, minor, ok := strings.Cut(cc, ".")
	if !ok || major == "" || minor == "" || strings.Trim(major+minor, "0123456789") != "" {
		return ""
	}
	return "sm_" + major + minor
}

// matches reports whether the driver's name for a GPU is d's full name or
// one of its aliases.
func matches(d *Device, reported string) bool {
	reported = normName(reported)
	if normName(d.FullName) == reported || normName(d.Name) == reported {
		return true
	}
	for _, a := range d.Aliases {
		if normName(a) == reported {
			return true
		}
	}
	return false
}

// normName lowercases and collapses blanks.
func normName(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

// lookup finds a device by name, then by alias, case-insensitively; the
// first match wins.
func lookup(all []*Device, name string) (*Device, error) {
	n := normName(name)
	if n == "" {
		return nil, fmt.Errorf("no target named; known targets: %s", knownNames(all))
	}
	for _, d := range all {
		if normName(d.Name) == n {
			return d, nil
		}
	}
	for _, d := range all {
		for _, a := range d.Aliases {
			if normName(a) == n {
				return d, nil
			}
		}
	}
	return nil, fmt.Errorf("unknown target %q; known targets: %s", name, knownNames(all))
}

// knownNames lists the devices' names.
func knownNames(all []*Device) string {
	var names []string
	for _, d := range all {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

// parseDevices decodes and checks a device file; errors name the file
// (what) and the device.
func parseDevices(what string, data []byte) ([]*Device, error) {
	var raws []json.RawMessage
	if err := decodeStrict(data, &raws); err != nil {
		return nil, fmt.Errorf("%s: want a JSON list of devices: %w", what, err)
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("%s: no devices", what)
	}
	var ds []*Device
	seen := map[string]int{}
	for i, raw := range raws {
		var d Device
		if err := decodeStrict(raw, &d); err != nil {
			// Name the device even though it did not decode.
			var named struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(raw, &named)
			return nil, fmt.Errorf("%s: %s: %w", what, deviceLabel(i, named.Name), err)
		}
		if err := check(&d); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, deviceLabel(i, d.Name), err)
		}
		for _, n := range append([]string{d.Name}, d.Aliases...) {
			key := normName(n)
			if j, dup := seen[key]; dup {
				return nil, fmt.Errorf("%s: %s: name or alias %q is also %s's", what, deviceLabel(i, d.Name), n, ds[j].Name)
			}
			seen[key] = i
		}
		ds = append(ds, &d)
	}
	return ds, nil
}

// deviceLabel names the i-th device of a file.
func deviceLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("device %d", i+1)
	}
	return fmt.Sprintf("device %d (%s)", i+1, name)
}

// decodeStrict decodes one JSON value, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// check is Validate plus what a description file must also get right: the
// instruction classes the model knows, one peak per class and dtype, sizes
// that are not negative.
func check(d *Device) error {
	if err := d.Validate(); err != nil {
		return err
	}
	switch {
	case d.MemoryBytes < 0 || d.L2Bytes < 0 || d.BoostClockMHz < 0:
		return fmt.Errorf("device %s: memory_bytes, l2_bytes and boost_clock_mhz must not be negative", d.Name)
	case d.SharedPerBlock > d.SharedPerSM:
		return fmt.Errorf("device %s: shared_per_block %d exceeds shared_per_sm %d", d.Name, d.SharedPerBlock, d.SharedPerSM)
	case d.RegistersPerBlock > d.RegistersPerSM:
		return fmt.Errorf("device %s: registers_per_block %d exceeds registers_per_sm %d", d.Name, d.RegistersPerBlock, d.RegistersPerSM)
	case d.MemorySource == "" || d.LaunchSource == "":
		return fmt.Errorf("device %s: memory_source and launch_source must say where the numbers come from", d.Name)
	}
	seen := map[string]bool{}
	for _, p := range d.Peaks {
		switch p.Class {
		case FMA, MMA, WGMMA:
		default:
			return fmt.Errorf("device %s: peak class %q is not one of %s, %s, %s", d.Name, p.Class, FMA, MMA, WGMMA)
		}
		if p.DType == "" {
			return fmt.Errorf("device %s: peak %s without a dtype", d.Name, p.Class)
		}
		k := computeKey(p.Class, p.DType)
		if seen[k] {
			return fmt.Errorf("device %s: two peaks for %s %s", d.Name, p.Class, p.DType)
		}
		seen[k] = true
	}
	return nil
}

func (d *Device) clone() *Device {
	c := *d
	c.Aliases = slices.Clone(d.Aliases)
	c.Peaks = slices.Clone(d.Peaks)
	if d.Issue != nil {
		issue := *d.Issue
		c.Issue = &issue
	}
	return &c
}

func cloneDevices(ds []*Device) []*Device {
	out := make([]*Device, len(ds))
	for i, d := range ds {
		out[i] = d.clone()
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}
