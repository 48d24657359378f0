package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lumsearch/lumsearch/search"
)

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
			_, err := fmt.Fprintln(stdout, search.Version())
			return err
		}
	},
}
