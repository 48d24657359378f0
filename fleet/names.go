package fleet

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// The fleet's streams, subjects and buckets. They are fixed names, so
// that an operator can grant a worker exactly what it uses (see
// docs/distributed.md).
const (
	// JobStream is the work-queue stream of measurement jobs.
	JobStream = "LUMSEARCH_JOBS"
	// JobSubjects are its subjects: lumsearch.jobs.KIND.MODE.
	JobSubjects = "lumsearch.jobs.>"
	// DeadStream keeps the jobs that no worker could finish.
	DeadStream = "LUMSEARCH_DEAD"
	// DeadSubjects are its subjects: lumsearch.dead.KIND.MODE.
	DeadSubjects = "lumsearch.dead.>"
	// AdvisoryStream keeps the job consumers' max-deliveries advisories
	// until the dead-letter handler has dealt with them.
	AdvisoryStream = "LUMSEARCH_ADVISORIES"
	// AdvisorySubjects are the advisories it keeps.
	AdvisorySubjects = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + JobStream + ".*"
	// DeadLetterConsumer is the durable consumer of AdvisoryStream that
	// every dead-letter handler shares.
	DeadLetterConsumer = "dead-letters"
	// ResultBucket is the key-value bucket of measured records: the
	// shared tuning database.
	ResultBucket = "lumsearch-tunedb"
	// FleetBucket holds the kinds' environments, the workers' presence
	// and failed jobs' reasons.
	FleetBucket = "lumsearch-fleet"
)

// Headers of a dead letter, beside the job's own data.
const (
	// HeaderReason says why the job is dead.
	HeaderReason = "Lumsearch-Dead-Reason"
	// HeaderSubject is the subject the job was published on.
	HeaderSubject = "Lumsearch-Job-Subject"
	// HeaderSequence is its sequence in JobStream.
	HeaderSequence = "Lumsearch-Job-Sequence"
	// HeaderDeliveries is how many times it was delivered.
	HeaderDeliveries = "Lumsearch-Deliveries"
)

// The measurement modes a job asks for: measure's places.
const (
	ModeGPU      = measure.WhereGPU
	ModeEmulated = measure.WhereEmulated
)

// kindPattern is what a kind may be: one subject token, lower case, as the
// cost package names devices.
var kindPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ResolveKind turns a GPU kind as a user writes it (h100, H100-SXM) into
// the fleet's name for it: a built-in device's name when it names one
// (an alias included), so that every worker and requester of one device
// meets on one subject, else the name itself in lower case, which must be
// a plain token (letters, digits, - and _).
func ResolveKind(name string) (string, error) {
	if d, err := cost.LookupDevice(name); err == nil {
		return d.Name, nil
	}
	k := strings.ToLower(strings.TrimSpace(name))
	if !kindPattern.MatchString(k) || k == tunedb.WhereEmulated {
		return "", fmt.Errorf("GPU kind %q: want a built-in device (h100, a100, ...) or a name of letters, digits, - and _", name)
	}
	return k, nil
}

// checkMode refuses a mode other than gpu and emulated.
func checkMode(mode string) error {
	if mode != ModeGPU && mode != ModeEmulated {
		return fmt.Errorf("measurement mode %q: want %s or %s", mode, ModeGPU, ModeEmulated)
	}
	return nil
}

// JobSubject is the subject of the jobs of a kind and mode.
func JobSubject(kind, mode string) string { return "lumsearch.jobs." + kind + "." + mode }

// DeadSubject is the subject of the dead letters of a kind and mode.
func DeadSubject(kind, mode string) string { return "lumsearch.dead." + kind + "." + mode }

// ConsumerName is the durable pull consumer the workers of a kind and
// mode share.
func ConsumerName(kind, mode string) string { return "tune-" + kind + "-" + mode }

// Keys of FleetBucket.
func envKey(kind, mode string) string          { return "env." + kind + "." + mode }
func liveKey(kind, mode, worker string) string { return "live." + kind + "." + mode + "." + worker }
func liveFilter(kind, mode string) string      { return "live." + kind + "." + mode + ".*" }
func failedKey(jobKey string) string           { return "failed." + jobKey }
func attemptKey(jobKey string) string          { return "attempt." + jobKey }
func fleetSubject(key string) string           { return "$KV." + FleetBucket + "." + key }
func deadSubjectOf(jobSubject string) string {
	return "lumsearch.dead." + strings.TrimPrefix(jobSubject, "lumsearch.jobs.")
}
func kindModeOf(jobSubject string) (k, m string) {
	parts := strings.Split(strings.TrimPrefix(jobSubject, "lumsearch.jobs."), ".")
	if len(parts) == 2 {
		return parts[0], parts[1]
	}
	return "", ""
}

// shortKey is a job key's beginning, for log lines.
func shortKey(key string) string {
	if i := strings.IndexByte(key, '.'); i >= 0 && len(key) > i+13 {
		return key[:i+13]
	}
	return key
}

// firstLine is a kernel body's first line, for log lines.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// seconds writes a time for log lines.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).String()
}
