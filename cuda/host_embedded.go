package cuda

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// EmbeddedModule reads the compiled module back out of a host library's
// source (what HostLibrary wrote as model.cpp): the PTX text and the
// CUBIN it embeds, both empty for a library compiled without NVRTC. It
// lets "lumsearch verify" check that the code a deployment runs is the
// code the folder's other copies hold.
func EmbeddedModule(source string) (ptx string, cubin []byte, err error) {
	p, err := embeddedBytes(source, "kPTX")
	if err != nil {
		return "", nil, err
	}
	c, err := embeddedBytes(source, "kCUBIN")
	if err != nil {
		return "", nil, err
	}
	return string(p), c, nil
}

// embeddedBytes reads array name, cut to the length its NameBytes
// constant declares.
func embeddedBytes(source, name string) ([]byte, error) {
	m := regexp.MustCompile(`(?m)^constexpr size_t ` + name + `Bytes = (\d+);$`).FindStringSubmatch(source)
	if m == nil {
		return nil, fmt.Errorf("host library: no %sBytes", name)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return nil, fmt.Errorf("host library: %sBytes %q", name, m[1])
	}
	decl := "const unsigned char " + name + "["
	i := strings.Index(source, decl)
	if i < 0 {
		return nil, fmt.Errorf("host library: no array %s", name)
	}
	body := source[i+len(decl):]
	open := strings.Index(body, "{")
	end := strings.Index(body, "};")
	if open < 0 || end < open {
		return nil, fmt.Errorf("host library: array %s is not closed", name)
	}
	fields := strings.FieldsFunc(body[open+1:end], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })
	if len(fields) < n {
		return nil, fmt.Errorf("host library: array %s holds %d bytes, %sBytes says %d", name, len(fields), name, n)
	}
	out := make([]byte, n)
	for j := range n {
		v, err := strconv.ParseUint(fields[j], 10, 8)
		if err != nil {
			return nil, fmt.Errorf("host library: array %s, byte %d: %q", name, j, fields[j])
		}
		out[j] = byte(v)
	}
	return out, nil
}
