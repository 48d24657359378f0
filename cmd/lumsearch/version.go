package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is the release version; a release build sets it with
// -ldflags "-X main.version=v1.2.3". Otherwise the build information that
// the go command stamps into the binary is used.
var version = ""

// versionCommand prints the version.
var versionCommand = &command{
	name:     "version",
	summary:  "print the version of lumsearch and of Go that built it",
	synopsis: "version",
	doc: `
Print lumsearch's version, the source revision it was built from when the go
command recorded one, and the Go version, OS and architecture of the build.`,
	example: `lumsearch version`,
	setup: func(fs *flag.FlagSet) action {
		return func(_ context.Context, pos []string, stdout io.Writer) error {
			if len(pos) > 0 {
				return usagef("version takes no arguments, got: %s", strings.Join(pos, " "))
			}
			_, err := fmt.Fprintln(stdout, versionString())
			return err
		}
	},
}

// versionString describes this build in one line, such as
// "lumsearch (devel) rev 0d9abb1+dirty go1.26.8 linux/amd64".
func versionString() string {
	v, rev := version, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified {
			rev += "+dirty"
		}
	}
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"lumsearch", v}
	if rev != "" && !strings.Contains(v, rev) {
		parts = append(parts, "rev", rev)
	}
	parts = append(parts, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, " ")
}
