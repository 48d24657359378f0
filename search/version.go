package search

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// modulePath is lumsearch's module, looked up among a program's
// dependencies when lumsearch is used as a library.
const modulePath = "github.com/lumsearch/lumsearch"

// version is the release version; a release build sets it with
// -ldflags "-X github.com/lumsearch/lumsearch/search.version=v1.2.3".
// Otherwise the build information that the go command stamps into the
// binary is used.
var version = ""

// Version describes this build of lumsearch in one line, such as
// "lumsearch (devel) rev 0d9abb1+dirty go1.26.8 linux/amd64": plan.json,
// the prepared weights and the report record it. In a program that uses
// lumsearch as a library, the version is that of the lumsearch module it
// was built with.
func Version() string {
	v, rev := version, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Path == modulePath || info.Main.Path == "" {
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
		} else if v == "" {
			for _, d := range info.Deps {
				if d.Path == modulePath {
					v = d.Version
					if d.Replace != nil && d.Replace.Version != "" {
						v = d.Replace.Version
					}
				}
			}
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
