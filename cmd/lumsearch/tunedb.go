package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/tunedb"
)

// tunedbStdin is what "tunedb import -" reads; tests replace it.
var tunedbStdin io.Reader = os.Stdin

// tunedbFlags says which subcommands each flag of tunedb applies to.
var tunedbFlags = map[string][]string{
	"db":         {"stats", "export", "import", "prune"},
	"device":     {"export", "prune"},
	"where":      {"export"},
	"o":          {"export"},
	"keep":       {"prune"},
	"older-than": {"prune"},
	"dedup":      {"prune"},
}

// tunedbCommand inspects and maintains the tuning database.
var tunedbCommand = &command{
	name:     "tunedb",
	summary:  "show, export, import or prune the tuning database of measured kernel times",
	synopsis: "tunedb stats | export [--device NAME] [--where gpu|cpu-emulation] [-o FILE] | import FILE|- | prune [--keep N] [--older-than AGE] [--device NAME] [--dedup]  [--db PATH]",
	doc: `
The tuning database holds kernel times measured on a GPU or under CPU
emulation, keyed by kernel SPEC, schedule, shapes, dtypes, device, driver and
compiler; measured GPU times override the cost model's predictions. It is a
file of JSON lines that several processes may append to at once. The file is
--db, else $` + tunedb.EnvPath + `, else lumsearch/tunedb.jsonl in the user's cache
folder ($XDG_CACHE_HOME or ~/.cache on Linux).

"tunedb stats" prints the number of records, distinct keys, exact duplicates
and torn lines (left by a writer killed mid-write, and ignored), the time
span, and the records per device and place of measurement.

"tunedb export" writes the records (those of one --device, one --where, or
all) in the file's own format to standard output or to -o FILE.

"tunedb import FILE" (or "-" for standard input) validates every record of
an export (or another tool's output) and appends those not already present;
an invalid line stops it, naming the line, and nothing is added.

"tunedb prune" rewrites the file atomically without the records it drops:
all but the newest --keep N of each key and place of measurement, those
measured more than --older-than ago (a duration such as 720h or 30d), those
of --device, and with --dedup exact copies. Torn lines go too.`,
	example: `
lumsearch tunedb stats
lumsearch tunedb export --device "NVIDIA H200" -o h200.jsonl
lumsearch tunedb import h200.jsonl --db other.jsonl
lumsearch tunedb prune --keep 3 --older-than 30d`,
	setup: func(fs *flag.FlagSet) action {
		dbPath := fs.String("db", "", "the database `PATH` (default $"+tunedb.EnvPath+" or the cache folder's)")
		device := fs.String("device", "", "export: keep only, prune: drop, the records of device `NAME`")
		where := fs.String("where", "", "export: only records measured `WHERE`: gpu or cpu-emulation")
		out := fs.String("o", "", "export: write to `FILE` instead of standard output")
		keep := fs.Int("keep", 0, "prune: keep the newest `N` records of each key and place of measurement")
		olderThan := fs.String("older-than", "", "prune: drop records measured more than `AGE` ago (720h, 30d)")
		dedup := fs.Bool("dedup", false, "prune: drop exact copies of a record")
		return func(_ context.Context, pos []string, stdout io.Writer) error {
			if len(pos) == 0 {
				return usagef("want: tunedb stats, export, import FILE or prune")
			}
			sub, args := pos[0], pos[1:]
			if sub != "stats" && sub != "export" && sub != "import" && sub != "prune" {
				return usagef("unknown tunedb command %q; want stats, export, import or prune", sub)
			}
			var misplaced error
			fs.Visit(func(f *flag.Flag) {
				for _, s := range tunedbFlags[f.Name] {
					if s == sub {
						return
					}
				}
				if misplaced == nil {
					dash := "--"
					if len(f.Name) == 1 {
						dash = "-"
					}
					misplaced = usagef("%s%s does not apply to tunedb %s", dash, f.Name, sub)
				}
			})
			if misplaced != nil {
				return misplaced
			}
			if sub == "import" {
				if len(args) != 1 {
					return usagef("want: tunedb import FILE (or - for standard input)")
				}
			} else if len(args) > 0 {
				return usagef("tunedb %s takes no arguments, got: %s", sub, strings.Join(args, " "))
			}
			path := *dbPath
			if path == "" {
				p, err := tunedb.DefaultPath()
				if err != nil {
					return err
				}
				path = p
			}
			switch sub {
			case "stats":
				return tunedbStats(path, stdout)
			case "export":
				if *where != "" && *where != tunedb.WhereGPU && *where != tunedb.WhereEmulated {
					return usagef("--where is %q, want %s or %s", *where, tunedb.WhereGPU, tunedb.WhereEmulated)
				}
				return tunedbExport(path, tunedb.Filter{Device: *device, Where: *where}, *out, stdout)
			case "import":
				return tunedbImport(path, args[0], stdout)
			default:
				opt := tunedb.PruneOptions{Device: *device, Dedup: *dedup}
				if isSet(fs, "keep") {
					if *keep < 1 {
						return usagef("--keep must be at least 1 (to drop a device's records, use --device)")
					}
					opt.Keep = *keep
				}
				if *olderThan != "" {
					age, err := parseAge(*olderThan)
					if err != nil {
						return usagef("--older-than: %v", err)
					}
					opt.Before = time.Now().Add(-age)
				}
				return tunedbPrune(path, opt, stdout)
			}
		}
	},
}

// isSet says whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseAge reads a positive duration: Go's syntax (720h, 90m) or whole
// days (30d).
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 720h or 30d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 720h or 30d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

func tunedbStats(path string, stdout io.Writer) error {
	db, err := tunedb.Open(path)
	if err != nil {
		return err
	}
	s := db.Stats()
	note := ""
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		note = " (no file yet)"
	}
	fmt.Fprintf(stdout, "database:   %s%s\n", path, note)
	fmt.Fprintf(stdout, "records:    %d\n", s.Records)
	fmt.Fprintf(stdout, "keys:       %d\n", s.Keys)
	fmt.Fprintf(stdout, "remeasured: %d\n", s.Remeasured)
	fmt.Fprintf(stdout, "duplicates: %d\n", s.Duplicates)
	fmt.Fprintf(stdout, "torn lines: %d\n", s.Skipped)
	if s.Records == 0 {
		return nil
	}
	fmt.Fprintf(stdout, "measured:   %s to %s\n\n", s.Oldest.Format(time.RFC3339), s.Newest.Format(time.RFC3339))
	devices := make([]string, 0, len(s.ByDevice))
	for d := range s.ByDevice {
		devices = append(devices, d)
	}
	sort.Strings(devices)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tGPU\tCPU-EMULATION")
	for _, d := range devices {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", d, s.ByDevice[d][tunedb.WhereGPU], s.ByDevice[d][tunedb.WhereEmulated])
	}
	fmt.Fprintf(tw, "all\t%d\t%d\n", s.ByWhere[tunedb.WhereGPU], s.ByWhere[tunedb.WhereEmulated])
	return tw.Flush()
}

func tunedbExport(path string, f tunedb.Filter, out string, stdout io.Writer) error {
	db, err := tunedb.Open(path)
	if err != nil {
		return err
	}
	if out == "" {
		_, err := db.Export(stdout, f)
		return err
	}
	file, err := os.Create(out)
	if err != nil {
		return err
	}
	n, err := db.Export(file, f)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "exported %d records to %s\n", n, out)
	return err
}

func tunedbImport(path, from string, stdout io.Writer) error {
	db, err := tunedb.Open(path)
	if err != nil {
		return err
	}
	in, name := tunedbStdin, "standard input"
	if from != "-" {
		file, err := os.Open(from)
		if err != nil {
			return err
		}
		defer file.Close()
		in, name = file, from
	}
	res, err := db.Import(in)
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	_, err = fmt.Fprintf(stdout, "imported %d of %d records into %s (%d already present)\n", res.Added, res.Read, path, res.Duplicates)
	return err
}

func tunedbPrune(path string, opt tunedb.PruneOptions, stdout io.Writer) error {
	db, err := tunedb.Open(path)
	if err != nil {
		return err
	}
	n, err := db.Prune(opt)
	if err != nil {
		return err
	}
	left := db.Len()
	_, err = fmt.Fprintf(stdout, "pruned %d of %d records from %s; %d left\n", n, n+left, path, left)
	return err
}
