package nvrtc

import (
	"regexp"
	"strconv"
	"strings"
)

// Resources is what ptxas reports for one entry function, per thread except
// where it says otherwise.
type Resources struct {
	// Registers is the number of registers per thread.
	Registers int
	// SharedBytes is the static shared memory per block ("smem"); dynamic
	// shared memory is a launch parameter and is not included.
	SharedBytes int
	// ConstBytes is the constant memory the entry itself uses, summed over
	// the banks its "Used" line lists (cmem[0] holds the parameters; NVRTC
	// 11.8 lists no bank for sm_90). Module-wide __constant__ data, reported
	// on the module's "gmem" line, belongs to no entry and is not included.
	ConstBytes int
	// SpillStores and SpillLoads are the bytes of register spill traffic.
	SpillStores, SpillLoads int
	// StackBytes is the stack frame, or the cumulative stack size (the
	// frame plus that of the functions it calls) where ptxas reports one;
	// old ptxas versions' "lmem" counts too.
	StackBytes int
}

var (
	reEntry    = regexp.MustCompile(`Compiling entry function\s+'([^']+)'`)
	reProps    = regexp.MustCompile(`Function properties for\s+(.*)$`)
	reFrame    = regexp.MustCompile(`(\d+) bytes stack frame`)
	reStores   = regexp.MustCompile(`(\d+) bytes spill stores`)
	reLoads    = regexp.MustCompile(`(\d+) bytes spill loads`)
	reUsed     = regexp.MustCompile(`Used (\d+) registers`)
	reSmem     = regexp.MustCompile(`(\d+)(?:\+(\d+))? bytes smem`)
	reCmem     = regexp.MustCompile(`(\d+)(?:\+(\d+))? bytes cmem\[\d+\]`)
	reLmem     = regexp.MustCompile(`(\d+)(?:\+(\d+))? bytes lmem`)
	reCumStack = regexp.MustCompile(`(\d+) bytes cumulative stack size`)
)

// ParseResources reads the resource usage of every entry function from a
// log of ptxas -v (through NVRTC's --ptxas-options=-v or nvcc's
// -Xptxas -v), keyed by the name ptxas gives the entry. It accepts the
// formats of CUDA 11 and 12: "ptxas info    :" and "ptxas         ."
// prefixes or none, stack and spill figures on the "Function properties"
// line or the next, "used N barriers" and "cumulative stack size" on the
// "Used" line, "X+Y bytes" sums of old versions, and lines in any order.
// Lines it does not know are ignored; an entry whose figures are missing has
// zeros there.
func ParseResources(log string) map[string]Resources {
	type frame struct{ stack, stores, loads int }
	entries := map[string]*Resources{}
	var order []string
	frames := map[string]frame{}
	var entry, props string // the entry being compiled; the function whose properties follow
	for line := range strings.SplitSeq(log, "\n") {
		line = strings.TrimRight(line, "\r")
		if m := reEntry.FindStringSubmatch(line); m != nil {
			entry, props = m[1], ""
			if entries[entry] == nil {
				entries[entry] = &Resources{}
				order = append(order, entry)
			}
			continue
		}
		if m := reProps.FindStringSubmatch(line); m != nil {
			rest := m[1]
			if loc := reFrame.FindStringIndex(rest); loc != nil {
				rest = rest[:loc[0]] // the figures share the line
			}
			props = strings.Trim(strings.TrimSpace(rest), "'`\":,")
		}
		if reFrame.MatchString(line) && props != "" {
			frames[props] = frame{
				stack:  firstInt(reFrame, line),
				stores: firstInt(reStores, line),
				loads:  firstInt(reLoads, line),
			}
			continue
		}
		if m := reUsed.FindStringSubmatch(line); m != nil && entry != "" {
			r := entries[entry]
			r.Registers, _ = strconv.Atoi(m[1])
			r.SharedBytes = sumAll(reSmem, line)
			r.ConstBytes = sumAll(reCmem, line)
			r.StackBytes = max(r.StackBytes, sumAll(reLmem, line), firstInt(reCumStack, line))
		}
	}
	out := make(map[string]Resources, len(entries))
	for _, name := range order {
		r := *entries[name]
		if f, ok := frames[name]; ok {
			r.StackBytes = max(r.StackBytes, f.stack)
			r.SpillStores, r.SpillLoads = f.stores, f.loads
		}
		out[name] = r
	}
	return out
}

// firstInt returns the first group of re's first match in s, or 0.
func firstInt(re *regexp.Regexp, s string) int {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// sumAll adds up every match of re in s, both terms of "X+Y" included.
func sumAll(re *regexp.Regexp, s string) int {
	total := 0
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		for _, g := range m[1:] {
			if g != "" {
				n, _ := strconv.Atoi(g)
				total += n
			}
		}
	}
	return total
}

// Diagnostic is one error, warning or remark in an NVRTC log.
type Diagnostic struct {
	File     string // as the log names it; empty for a message about options
	Line     int    // 1-based; 0 when the message names no line
	Column   int    // 1-based, from the caret line that NVRTC 12 prints; 0 when unknown (NVRTC 11 prints none)
	Severity string // "error", "warning", "remark", "catastrophic error", ...
	Code     string // such as "177-D"; empty when the log gives none
	Message  string
	// Source is the text of line Line of the compiled source, when known.
	Source string
}

func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			b.WriteString(":" + strconv.Itoa(d.Line))
			if d.Column > 0 {
				b.WriteString(":" + strconv.Itoa(d.Column))
			}
		}
		b.WriteString(": ")
	}
	b.WriteString(d.Severity + ": " + d.Message)
	return b.String()
}

var (
	reDiag      = regexp.MustCompile(`^(.*)\((\d+)\): ((?:catastrophic |internal )?error|warning|remark)(?: #([\w-]+))?: (.*)$`)
	reOptionErr = regexp.MustCompile(`^(?:nvrtc: )?(error|warning): (.*)$`)
	reCaret     = regexp.MustCompile(`^\s*\^\s*$`)
)

// ParseDiagnostics reads the diagnostics of an NVRTC log ("file(12): error:
// expected a \";\"", "nvrtc: error: invalid value for --gpu-architecture").
// src, when not empty, is the compiled source: each diagnostic that names a
// line gets that line's text, and a caret line under NVRTC's echo of the
// source line (NVRTC 12) gives the column.
func ParseDiagnostics(log, src string) []Diagnostic {
	var srcLines []string
	if src != "" {
		srcLines = strings.Split(src, "\n")
	}
	lines := strings.Split(strings.ReplaceAll(log, "\r\n", "\n"), "\n")
	var out []Diagnostic
	for i, line := range lines {
		var d Diagnostic
		if m := reDiag.FindStringSubmatch(line); m != nil {
			d.File, d.Severity, d.Code, d.Message = m[1], m[3], m[4], m[5]
			d.Line, _ = strconv.Atoi(m[2])
		} else if m := reOptionErr.FindStringSubmatch(line); m != nil {
			d.Severity, d.Message = m[1], m[2]
		} else {
			continue
		}
		if d.Line > 0 && d.Line <= len(srcLines) {
			d.Source = strings.TrimRight(srcLines[d.Line-1], "\r")
			// NVRTC 12: the source line echoed, then a caret under the column.
			if i+2 < len(lines) && reCaret.MatchString(lines[i+2]) {
				d.Column = caretColumn(d.Source, lines[i+1], strings.Index(lines[i+2], "^"))
			}
		}
		out = append(out, d)
	}
	return out
}

// caretColumn maps a caret at byte offset caret of the echoed line back to a
// 1-based column of the source line, or 0 when the echo is not that line.
func caretColumn(source, echoed string, caret int) int {
	body := strings.TrimSpace(source)
	if body == "" {
		return 0
	}
	at := strings.Index(echoed, body)
	if at < 0 || caret < at || caret > at+len(body) {
		return 0
	}
	return strings.Index(source, body) + caret - at + 1
}
