package nvrtc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/lumsearch/lumsearch/internal/dl"
)

// EnvPath names the environment variable that points Load at one libnvrtc.
const EnvPath = "LUMSEARCH_NVRTC"

// sonames are the library names Load asks the dynamic linker for, newest
// first. Every NVRTC 11.x from 11.2 on carries the soname libnvrtc.so.11.2.
var sonames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// installHint ends the error of a Load that found nothing.
const installHint = "install libnvrtc (Debian: libnvrtc11.2 and libnvrtc-builtins11.8 from non-free) or set " + EnvPath

// nvrtcResult is NVRTC's status code; 0 is NVRTC_SUCCESS.
type nvrtcResult = int32

// Library is a loaded NVRTC. Its methods are safe for concurrent use.
type Library struct {
	path         string
	major, minor int

	version           func(major, minor *int32) nvrtcResult
	getErrorString    func(r nvrtcResult) string
	createProgram     func(prog *uintptr, src, name *byte, numHeaders int32, headers, includeNames unsafe.Pointer) nvrtcResult
	destroyProgram    func(prog *uintptr) nvrtcResult
	compileProgram    func(prog uintptr, numOptions int32, options unsafe.Pointer) nvrtcResult
	getProgramLogSize func(prog uintptr, size *uintptr) nvrtcResult
	getProgramLog     func(prog uintptr, log *byte) nvrtcResult
	getPTXSize        func(prog uintptr, size *uintptr) nvrtcResult
	getPTX            func(prog uintptr, ptx *byte) nvrtcResult
	getCUBINSize      func(prog uintptr, size *uintptr) nvrtcResult // nil when absent
	getCUBIN          func(prog uintptr, cubin *byte) nvrtcResult   // nil when absent
	getNumArchs       func(n *int32) nvrtcResult                    // nil when absent
	getArchs          func(archs *int32) nvrtcResult                // nil when absent

	archsOnce sync.Once
	archs     []int
}

var (
	loadOnce sync.Once
	loadLib  *Library
	loadErr  error
)

// Load opens NVRTC once per process and returns the same Library (or error)
// on every call. The package comment lists where it looks.
func Load() (*Library, error) {
	loadOnce.Do(func() { loadLib, loadErr = load(os.Getenv(EnvPath)) })
	return loadLib, loadErr
}

// load tries the library named by env alone when it is set, and the usual
// places otherwise.
func load(env string) (*Library, error) {
	if env != "" {
		lib, err := open(env)
		if err != nil {
			return nil, fmt.Errorf("NVRTC not loaded from %s=%s: %w", EnvPath, env, err)
		}
		return lib, nil
	}
	tried := slices.Clone(sonames)
	var problems []string
	try := func(path string) *Library {
		lib, err := open(path)
		if err == nil {
			return lib
		}
		if !isNotFound(err) {
			problems = append(problems, path+": "+err.Error())
		}
		return nil
	}
	for _, name := range sonames {
		if lib := try(name); lib != nil {
			return lib, nil
		}
	}
	for _, dir := range cudaDirs(&tried) {
		for _, name := range sonames {
			path := filepath.Join(dir, name)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			if lib := try(path); lib != nil {
				return lib, nil
			}
		}
	}
	msg := "NVRTC not found: tried " + strings.Join(tried, ", ")
	if len(problems) > 0 {
		msg += " (" + strings.Join(problems, "; ") + ")"
	}
	return nil, errors.New(msg + "; " + installHint)
}

// cudaDirs returns the toolkit library directories to search, newest first,
// and adds their descriptions to tried.
func cudaDirs(tried *[]string) []string {
	var dirs []string
	if home := os.Getenv("CUDA_HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, "lib64"))
		*tried = append(*tried, filepath.Join(home, "lib64", "libnvrtc.so*"))
	}
	dirs = append(dirs, "/usr/local/cuda/lib64")
	versioned, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	slices.SortFunc(versioned, func(a, b string) int { return compareVersions(b, a) })
	dirs = append(dirs, versioned...)
	*tried = append(*tried, "/usr/local/cuda/lib64/libnvrtc.so*", "/usr/local/cuda-*/lib64/libnvrtc.so*")
	return dirs
}

var digits = regexp.MustCompile(`\d+`)

// compareVersions orders paths such as /usr/local/cuda-12.4/lib64 by the
// numbers in them.
func compareVersions(a, b string) int {
	na, nb := digits.FindAllString(a, -1), digits.FindAllString(b, -1)
	for i := 0; i < len(na) && i < len(nb); i++ {
		x, _ := strconv.Atoi(na[i])
		y, _ := strconv.Atoi(nb[i])
		if x != y {
			return x - y
		}
	}
	if len(na) != len(nb) {
		return len(na) - len(nb)
	}
	return strings.Compare(a, b)
}

// isNotFound reports whether a dlopen error only says the file is absent.
func isNotFound(err error) bool {
	s := err.Error()
	return strings.Contains(s, "No such file") || strings.Contains(s, "cannot open shared object file")
}

// open loads one libnvrtc and resolves its functions.
func open(path string) (*Library, error) {
	h, err := dl.Open(path)
	if err != nil {
		return nil, err
	}
	lib := &Library{path: path}
	required := []struct {
		name string
		fptr any
	}{
		{"nvrtcVersion", &lib.version},
		{"nvrtcGetErrorString", &lib.getErrorString},
		{"nvrtcCreateProgram", &lib.createProgram},
		{"nvrtcDestroyProgram", &lib.destroyProgram},
		{"nvrtcCompileProgram", &lib.compileProgram},
		{"nvrtcGetProgramLogSize", &lib.getProgramLogSize},
		{"nvrtcGetProgramLog", &lib.getProgramLog},
		{"nvrtcGetPTXSize", &lib.getPTXSize},
		{"nvrtcGetPTX", &lib.getPTX},
	}
	for _, f := range required {
		sym := dl.Sym(h, f.name)
		if sym == 0 {
			dl.Close(h)
			return nil, fmt.Errorf("%s has no %s: not an NVRTC library", path, f.name)
		}
		dl.Bind(f.fptr, sym)
	}
	optional := []struct {
		name string
		fptr any
	}{
		{"nvrtcGetCUBINSize", &lib.getCUBINSize},
		{"nvrtcGetCUBIN", &lib.getCUBIN},
		{"nvrtcGetNumSupportedArchs", &lib.getNumArchs},
		{"nvrtcGetSupportedArchs", &lib.getArchs},
	}
	for _, f := range optional {
		if sym := dl.Sym(h, f.name); sym != 0 {
			dl.Bind(f.fptr, sym)
		}
	}
	if lib.getCUBINSize == nil || lib.getCUBIN == nil {
		lib.getCUBINSize, lib.getCUBIN = nil, nil
	}
	if lib.getNumArchs == nil || lib.getArchs == nil {
		lib.getNumArchs, lib.getArchs = nil, nil
	}
	var major, minor int32
	if r := lib.version(&major, &minor); r != 0 {
		dl.Close(h)
		return nil, fmt.Errorf("nvrtcVersion: %s", lib.errorString(r))
	}
	lib.major, lib.minor = int(major), int(minor)
	if lib.major < 11 || lib.major == 11 && lib.minor < 2 {
		dl.Close(h)
		return nil, fmt.Errorf("NVRTC %d.%d is older than 11.2", major, minor)
	}
	// The handle stays open for the life of the process.
	return lib, nil
}

// Version returns NVRTC's version, such as 11, 8 for Debian 12's libnvrtc11.2.
func (l *Library) Version() (major, minor int) { return l.major, l.minor }

// Path returns the name or path the library was loaded from.
func (l *Library) Path() string { return l.path }

// SupportedArchs returns the compute capabilities NVRTC can compile for
// (80 for sm_80), ascending, or nil when this NVRTC cannot tell.
func (l *Library) SupportedArchs() []int {
	l.archsOnce.Do(func() {
		if l.getNumArchs == nil {
			return
		}
		var n int32
		if l.getNumArchs(&n) != 0 || n <= 0 {
			return
		}
		buf := make([]int32, n)
		if l.getArchs(&buf[0]) != 0 {
			return
		}
		for _, a := range buf {
			l.archs = append(l.archs, int(a))
		}
		slices.Sort(l.archs)
	})
	return slices.Clone(l.archs)
}

func (l *Library) errorString(r nvrtcResult) string {
	if s := l.getErrorString(r); s != "" {
		return s
	}
	return "NVRTC error " + strconv.Itoa(int(r))
}

// Options are the target and extra options of one compilation.
type Options struct {
	// Arch is the target: a real architecture such as "sm_80" or "sm_90"
	// (PTX, a CUBIN and resource usage) or a virtual one such as
	// "compute_80" (PTX only).
	Arch string
	// Extra options go to NVRTC after the ones the package comment lists.
	Extra []string
}

// Result is the output of a successful compilation.
type Result struct {
	// PTX is the PTX text, without the terminating NUL.
	PTX string
	// CUBIN is the device binary, for a real architecture only.
	CUBIN []byte
	// Log is NVRTC's log: warnings and the ptxas resource lines.
	Log string
	// Kernels holds the resource usage of each entry function, by the name
	// ptxas gives it (the mangled name unless the kernel is extern "C").
	Kernels map[string]Resources
	// Options are the options NVRTC compiled with, Opt's and those
	// Compile adds: with NVRTC's version, what makes the same source
	// compile to the same PTX and CUBIN again.
	Options []string
}

// compileMu serializes compilations (see Compile).
var compileMu sync.Mutex

var archRE = regexp.MustCompile(`^(sm|compute)_(\d+)([a-z]?)$`)

// Compile compiles one translation unit. name is the file name that the log
// and errors cite ("kernel.cu" when empty). A compile error is a
// *CompileError that holds the log and each diagnostic's line. When ctx ends
// first Compile returns ctx.Err() at once, and NVRTC finishes the abandoned
// compilation in the background.
func (l *Library) Compile(ctx context.Context, src, name string, opt Options) (*Result, error) {
	if name == "" {
		name = "kernel.cu"
	}
	m := archRE.FindStringSubmatch(opt.Arch)
	if m == nil {
		return nil, fmt.Errorf("nvrtc: compile %s: architecture %q is not sm_NN or compute_NN", name, opt.Arch)
	}
	if archs := l.SupportedArchs(); len(archs) > 0 {
		cc, _ := strconv.Atoi(m[2])
		if !slices.Contains(archs, cc) {
			return nil, fmt.Errorf("nvrtc: compile %s: NVRTC %d.%d cannot compile for %s (it supports %s)",
				name, l.major, l.minor, opt.Arch, archList(archs))
		}
	}
	if strings.ContainsRune(src, 0) {
		return nil, fmt.Errorf("nvrtc: compile %s: source contains a NUL byte", name)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	options := []string{"--gpu-architecture=" + opt.Arch}
	isReal := m[1] == "sm"
	if isReal {
		options = append(options, "--ptxas-options=-v")
	}
	options = append(options, "-default-device")
	if !slices.ContainsFunc(opt.Extra, setsStd) {
		options = append(options, "--std=c++17")
	}
	options = append(options, opt.Extra...)

	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		// One compilation at a time in the process: NVRTC 11.8 was seen
		// to give different PTX for the same source while another
		// compilation ran beside it, and a folder's PTX must be what its
		// kernels.cu compiles to.
		compileMu.Lock()
		defer compileMu.Unlock()
		res, err := l.compile(src, name, opt.Arch, options, isReal)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.res != nil {
			o.res.Options = options
		}
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func setsStd(o string) bool { return strings.HasPrefix(o, "-std=") || strings.HasPrefix(o, "--std=") }

func archList(archs []int) string {
	s := make([]string, len(archs))
	for i, a := range archs {
		s[i] = "sm_" + strconv.Itoa(a)
	}
	return strings.Join(s, " ")
}

// cstr returns s as a NUL-terminated byte string.
func cstr(s string) []byte { return append([]byte(s), 0) }

// compile runs one NVRTC program from creation to destruction.
func (l *Library) compile(src, name, arch string, options []string, isReal bool) (*Result, error) {
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	if r := l.createProgram(&prog, &csrc[0], &cname[0], 0, nil, nil); r != 0 {
		return nil, fmt.Errorf("nvrtc: create program %s: %s", name, l.errorString(r))
	}
	defer l.destroyProgram(&prog)

	copts := make([][]byte, len(options))
	ptrs := make([]*byte, len(options))
	for i, o := range options {
		copts[i] = cstr(o)
		ptrs[i] = &copts[i][0]
	}
	saveSignals()
	r := l.compileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	restoreSignals()
	runtime.KeepAlive(copts)
	log, logErr := l.read(prog, l.getProgramLogSize, l.getProgramLog)
	logText := strings.TrimRight(string(log), "\x00")
	if r != 0 {
		if logErr != nil {
			logText = "(no log: " + logErr.Error() + ")"
		}
		return nil, &CompileError{
			Name: name, Arch: arch, Status: l.errorString(r), Log: logText,
			Diagnostics: ParseDiagnostics(logText, src),
		}
	}
	if logErr != nil {
		return nil, fmt.Errorf("nvrtc: compile %s: log: %w", name, logErr)
	}
	ptx, err := l.read(prog, l.getPTXSize, l.getPTX)
	if err != nil {
		return nil, fmt.Errorf("nvrtc: compile %s: PTX: %w", name, err)
	}
	res := &Result{
		PTX:     strings.TrimRight(string(ptx), "\x00"),
		Log:     logText,
		Kernels: ParseResources(logText),
	}
	if isReal && l.getCUBINSize != nil {
		cubin, err := l.read(prog, l.getCUBINSize, l.getCUBIN)
		if err != nil {
			return nil, fmt.Errorf("nvrtc: compile %s: CUBIN: %w", name, err)
		}
		if len(cubin) > 0 {
			res.CUBIN = cubin
		}
	}
	return res, nil
}

// read fetches one of a program's outputs through its size and copy calls.
func (l *Library) read(prog uintptr, size func(uintptr, *uintptr) nvrtcResult, get func(uintptr, *byte) nvrtcResult) ([]byte, error) {
	var n uintptr
	if r := size(prog, &n); r != 0 {
		return nil, errors.New(l.errorString(r))
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, n)
	if r := get(prog, &buf[0]); r != 0 {
		return nil, errors.New(l.errorString(r))
	}
	return buf, nil
}

// CompileError is a compilation that NVRTC rejected.
type CompileError struct {
	Name   string // the file name given to Compile
	Arch   string
	Status string // NVRTC's status, such as NVRTC_ERROR_COMPILATION
	Log    string // NVRTC's whole log
	// Diagnostics are the errors and warnings found in Log.
	Diagnostics []Diagnostic
}

func (e *CompileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nvrtc: compile %s for %s: %s", e.Name, e.Arch, e.Status)
	if e.Log != "" {
		b.WriteString("\n")
		b.WriteString(strings.TrimRight(e.Log, "\n"))
	}
	// Quote the offending source lines: generated code has no editor open.
	for _, d := range e.Diagnostics {
		if strings.Contains(d.Severity, "error") && d.Source != "" {
			fmt.Fprintf(&b, "\n%s:%d: %s", d.File, d.Line, strings.TrimSpace(d.Source))
		}
	}
	return b.String()
}
