// Package tunedb is the tuning database: kernel times measured on a GPU (or
// under CPU emulation), kept so that they override the cost model's
// predictions on the next extraction and the next run.
//
// # The file
//
// The database is one append-only file of JSON Lines: one JSON object per
// line, each line ending in a newline, so that other tools (jq, pandas,
// grep) read it as it is. By default it lives at $LUMSEARCH_TUNEDB, else
// tunedb.jsonl in the lumsearch folder of the user's cache folder
// ($XDG_CACHE_HOME/lumsearch/tunedb.jsonl, or ~/.cache/lumsearch/tunedb.jsonl
// on Linux; see DefaultPath). A record looks like this (on one line):
//
//	{"id":"9f2c…","key":{"spec":"…","schedule":"bm=64,bn=128,bk=32,warps=4,stages=3",
//	 "shapes":"a=[4096,4096] b=[4096,4096]","dtypes":"bf16","device":"NVIDIA H200",
//	 "driver":"570.124.06","compiler":"nvrtc 12.8"},"median_s":0.000412,
//	 "spread_s":0.0000031,"samples":50,"clock_mhz":1980,"mem_clock_mhz":3201,
//	 "where":"gpu","host":"gpu-box-1","at":"2025-06-01T12:00:00.123456789Z",
//	 "predicted_s":0.00039}
//
// The fields:
//
//   - id: the record's key id, Key.Hash: hex SHA-256 of the key's fields
//     (see Key.Hash for the exact bytes). Records measured again for the same
//     kernel share an id. Written always; on reading it is optional and,
//     when present, must match the key.
//   - key.spec: the canonical kernel body, an ir graph in text form, as
//     "lumsearch rules" prints a kernel's SPEC. Required.
//   - key.schedule: the canonical schedule string, such as
//     "bm=64,bn=128,bk=32,warps=4,stages=3"; empty for a kernel form's
//     default schedule.
//   - key.shapes, key.dtypes: the argument shapes and element types, in the
//     canonical text the compiler writes. Required.
//   - key.device: the device name as the driver reports it. Required.
//   - key.driver, key.compiler: the driver version and the kernel
//     compiler's name and version (NVRTC, or the C++ compiler of the CPU
//     emulation). Required for GPU records.
//   - median_s: the median of the timed runs, in seconds; positive.
//   - spread_s: the interquartile range (third quartile less first) of the
//     timed runs, in seconds; zero or more.
//   - samples: how many timed runs the median and spread come from; at
//     least 1.
//   - clock_mhz, mem_clock_mhz: the SM and memory clocks during the
//     measurement, in MHz; 0 when unknown (always under emulation).
//   - where: "gpu" for a time measured on the device, "cpu-emulation" for
//     one measured by running the kernel's CPU emulation. Emulated times are
//     never used as GPU times (Lookup returns only "gpu" records).
//   - host: the machine's host name; may be empty.
//   - at: when the measurement was taken, RFC 3339 with nanoseconds, in UTC
//     as written by this package (readers accept any offset).
//   - predicted_s: the cost model's prediction for the kernel when it was
//     measured, in seconds; omitted (or 0) when there was none.
//
// Unknown fields are ignored on reading, so that later versions may add
// fields; blank lines are ignored too. Any other line that is not a valid
// record is a bad line (below).
//
// # Bad lines
//
// A line that holds no valid record is a bad line: a torn line, what a
// writer killed mid-write leaves (a truncated JSON object: every proper
// prefix of a line is one; a line with NUL bytes, as some file systems
// leave after a crash, counts as torn too), or an invalid one (not JSON,
// not one object, a field of the wrong type, a record that fails
// Record.Validate, an id that does not match its key), as an edit by hand
// or another tool may leave. Open skips bad lines wherever they are and
// counts them, so that one damaged line never costs the measurements
// around it: every good record is loaded, DB.Skipped counts the bad lines,
// DB.BadLines gives the first of them with their line numbers and what is
// wrong, and DB.Warning is the message a program shows its user ("skipped
// N bad lines ...; lumsearch tunedb prune removes them"). Stats and
// "lumsearch tunedb stats" show them too. Prune removes them; Export
// writes the good records; Import alone is strict, and refuses a whole
// input that has a bad line, naming the line. A file none of whose lines
// is a record is refused by Open and Prune (unless it is one torn line, a
// first write cut short): it is most likely some other file given by
// mistake, and appending to it or pruning it would damage it.
//
// # Crashes and concurrent writers
//
// Writers only ever append, one write call per batch of whole lines, under
// an exclusive advisory lock on the file (flock(2) on Unix, LockFileEx on
// Windows), and fsync before releasing it; readers take a shared lock. A
// writer killed mid-write leaves at most a torn last line. The next Append
// first ends a file that does not end in a newline with one, so that its
// own records start on a line of their own and a fragment stays behind as
// a bad line in the middle, still skipped. A last line that lacks only its
// newline but holds a whole valid record is kept. Prune rewrites the file
// atomically (a temporary file in the same folder, fsync, rename) under
// the same exclusive lock, keeping the lines it keeps byte for byte (fields
// a later version added included) and dropping bad and blank lines; a
// writer that was waiting for the lock notices that the file was replaced
// and appends to the new one, so that no record appended during a prune is
// lost.
package tunedb
