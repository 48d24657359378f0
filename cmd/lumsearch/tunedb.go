package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/tunedb"
)

// tunedbStdin is what "tunedb import -" reads; tests replace it.
var tunedbStdin io.Reader = os.Stdin

// tunedbFlags says which subcommands each flag of tunedb applies to.
var tunedbFlags = map[string][]string{
	"db":         {"stats", "export", "import", "prune", "calibrate"},
	"device":     {"export", "prune"},
	"where":      {"export"},
	"o":          {"export", "calibrate"},
	"nats":       {"export", "import"},
	"target":     {"calibrate"},
	"held-out":   {"calibrate"},
	"seed":       {"calibrate"},
	"keep":       {"prune"},
	"older-than": {"prune"},
	"dedup":      {"prune"},
}

// tunedbCommand inspects and maintains the tuning database.
var tunedbCommand = &command{
	name:     "tunedb",
	summary:  "show, export, import, prune or calibrate from the tuning database of measured kernel times",
	synopsis: "tunedb stats | export [--device NAME] [--where gpu|cpu-emulation] [-o FILE | --nats URL] | import FILE|- | import --nats URL | prune [--keep N] [--older-than AGE] [--device NAME] [--dedup] | calibrate --target NAME [--held-out F] [--seed N] [-o PROFILE]  [--db PATH]",
	doc: `
The tuning database holds kernel times measured on a GPU or under CPU
emulation, keyed by kernel SPEC, schedule, shapes, dtypes, device, driver and
compiler; measured GPU times override the cost model's predictions. It is a
file of JSON lines that several processes may append to at once. The file is
--db, else $` + tunedb.EnvPath + `, else lumsearch/tunedb.jsonl in the user's cache
folder ($XDG_CACHE_HOME or ~/.cache on Linux).

A bad line in the file, one cut short by a writer killed mid-write (torn)
or one that is not a valid record (edited by hand, damaged), is skipped
wherever it is: every other record is still used, by optimize and bench as
by these commands, which say how many lines were skipped. "tunedb prune"
removes them. A file none of whose lines is a record is refused, as it is
most likely not a tuning database.

"tunedb stats" prints the number of records, distinct keys, exact duplicates
and bad lines (with the numbers of the first bad lines and what is wrong
with each), the time span, and the records per device and place of
measurement.

"tunedb export" writes the good records (those of one --device, one --where,
or all) in the file's own format to standard output or to -o FILE.

"tunedb import FILE" (or "-" for standard input) validates every record of
an export (or another tool's output) and appends those not already present;
it is strict: a bad line stops it, naming the file and line, and nothing is
added.

With --nats URL, export and import work with a measuring fleet's shared
tuning database instead of a file (the bucket lumsearch-tunedb; see
tuning-server): "export --nats" stores the newest record of each key the
filters select there, where the bucket keeps the first record of a key
(create-if-absent), and "import --nats" appends the bucket's records that
this file lacks.

"tunedb prune" rewrites the file atomically (a temporary file, then a
rename, under the lock that writers take) without the records it drops:
all but the newest --keep N of each key and place of measurement, those
measured more than --older-than ago (a duration such as 720h or 30d), those
of --device, and with --dedup exact copies. Every bad line goes too; the
lines kept are kept byte for byte.

"tunedb calibrate --target NAME" fits the efficiency factors of a device
description (the achieved fractions of its memory bandwidth and of each
peak, and its launch overhead) to the database's GPU records of that device,
by robust least squares on all but a held-out share (--held-out, 0.25), and
reports the prediction error and Spearman rank correlation on the held-out
records; -o writes the fitted profile, which rules stats --profile uses.`,
	example: `
lumsearch tunedb stats
lumsearch tunedb export --device h200-sxm -o h200.jsonl
lumsearch tunedb import h200.jsonl --db other.jsonl
lumsearch tunedb import --nats nats://fleet.example.com:4222
lumsearch tunedb prune --keep 3 --older-than 30d
lumsearch tunedb calibrate --target h200 -o h200-profile.json`,
	setup: func(fs *flag.FlagSet) action {
		dbPath := fs.String("db", "", "the database `PATH` (default $"+tunedb.EnvPath+" or the cache folder's)")
		device := fs.String("device", "", "export: keep only, prune: drop, the records of device `NAME`")
		where := fs.String("where", "", "export: only records measured `WHERE`: gpu or cpu-emulation")
		out := fs.String("o", "", "export: write to `FILE` instead of standard output")
		natsURL := fs.String("nats", "", "export: to, import: from, the shared tuning database of the fleet at `URL` (nats://HOST:4222)")
		keep := fs.Int("keep", 0, "prune: keep the newest `N` records of each key and place of measurement")
		olderThan := fs.String("older-than", "", "prune: drop records measured more than `AGE` ago (720h, 30d)")
		dedup := fs.Bool("dedup", false, "prune: drop exact copies of a record")
		target := fs.String("target", "", "calibrate: the device description to fit (a built-in name)")
		heldOut := fs.Float64("held-out", 0.25, "calibrate: the share of records held out of the fit to test it on")
		seed := fs.Uint64("seed", 1, "calibrate: the seed of the held-out split")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) == 0 {
				return usagef("want: tunedb stats, export, import FILE, prune or calibrate")
			}
			sub, args := pos[0], pos[1:]
			if sub != "stats" && sub != "export" && sub != "import" && sub != "prune" && sub != "calibrate" {
				return usagef("unknown tunedb command %q; want stats, export, import, prune or calibrate", sub)
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
			if *natsURL != "" {
				if err := fleet.CheckURL(*natsURL); err != nil {
					return usagef("--nats: %v", err)
				}
				if *out != "" || len(args) > 0 {
					return usagef("tunedb %s --nats takes no file: the fleet's bucket is what it reads or writes", sub)
				}
			} else if sub == "import" {
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
			var dev *cost.Device
			opt := tunedb.PruneOptions{Device: *device, Dedup: *dedup}
			switch sub {
			case "calibrate":
				if *target == "" {
					return usagef("tunedb calibrate needs --target")
				}
				if !(*heldOut > 0 && *heldOut < 1) {
					return usagef("--held-out must lie between 0 and 1")
				}
				d, err := cost.LookupDevice(*target)
				if err != nil {
					return usagef("--target: %v", err)
				}
				dev = d
			case "export":
				if *where != "" && *where != tunedb.WhereGPU && *where != tunedb.WhereEmulated {
					return usagef("--where is %q, want %s or %s", *where, tunedb.WhereGPU, tunedb.WhereEmulated)
				}
			case "prune":
				if isSet(fs, "keep") {
					if *keep < 1 {
						return usagef("--keep must be at least 1 (to drop a device's records, use --device)")
					}
					opt.Keep = *keep
				}
				if *olderThan != "" {
					age, err := tunedb.ParseAge(*olderThan)
					if err != nil {
						return usagef("--older-than: %v", err)
					}
					opt.Before = time.Now().Add(-age)
				}
			}
			db, err := tunedb.Open(path)
			if err != nil {
				return err
			}
			switch sub {
			case "stats":
				return db.WriteStats(stdout)
			case "export":
				f := tunedb.Filter{Device: *device, Where: *where}
				if *natsURL != "" {
					return tunedbPush(ctx, stdout, db, *natsURL, fleet.Filter{Device: *device, Where: *where})
				}
				if *out == "" {
					_, err := db.Export(stdout, f)
					return err
				}
				n, err := db.ExportFile(*out, f)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "exported %d records to %s\n", n, *out)
				return warnSkipped(stdout, db, err)
			case "import":
				if *natsURL != "" {
					return tunedbPull(ctx, stdout, db, *natsURL)
				}
				res, err := db.ImportFile(args[0], tunedbStdin)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "imported %d of %d records into %s (%d already present)\n", res.Added, res.Read, path, res.Duplicates)
				return warnSkipped(stdout, db, err)
			case "prune":
				res, err := db.Prune(opt)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(stdout, res)
				return err
			default:
				c, err := cost.Calibrate(dev, db, *heldOut, *seed)
				if err != nil {
					return err
				}
				if err := warnSkipped(stdout, db, nil); err != nil {
					return err
				}
				if err := c.WriteText(stdout); err != nil || *out == "" {
					return err
				}
				if err := cost.SaveProfile(*out, c.Profile(time.Now().UTC())); err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "profile written to %s\n", *out)
				return err
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

// warnSkipped prints the database's warning about the bad lines Open
// skipped, if any, unless err says that printing already failed. An export
// to standard output prints none: the warning would become part of it.
func warnSkipped(stdout io.Writer, db *tunedb.DB, err error) error {
	if w := db.Warning(); err == nil && w != "" {
		_, err = fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return err
}
