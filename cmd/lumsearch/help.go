package main

import (
	"context"
	"flag"
	"io"
)

// helpCommand prints the overview or one command's help.
var helpCommand = &command{
	name:     "help",
	summary:  "show the command list, or one command's flags and an example",
	synopsis: "help [COMMAND]",
	doc: `
Without an argument, print what lumsearch is and the list of commands. With a
command's name, print that command's usage, flags and an example (the same as
"lumsearch COMMAND -h").`,
	example: `
lumsearch help
lumsearch help egraph`,
	setup: func(fs *flag.FlagSet) action {
		return func(_ context.Context, pos []string, stdout io.Writer) error {
			switch len(pos) {
			case 0:
				writeMainHelp(stdout)
				return nil
			case 1:
				c := lookup(pos[0])
				if c == nil {
					return usagef("unknown command %q; the commands are: %s", pos[0], commandNames())
				}
				c.writeHelp(stdout)
				return nil
			default:
				return usagef("help takes at most one command name, got %d", len(pos))
			}
		}
	},
}
