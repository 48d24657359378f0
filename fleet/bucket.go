package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Filter selects records to copy between the local tuning database and
// the result bucket; an empty field selects all.
type Filter struct {
	Device string    // only this device
	Where  string    // only this place of measurement (tunedb.WhereGPU, tunedb.WhereEmulated)
	Since  time.Time // only records measured at or after it
}

func (f Filter) match(r tunedb.Record) bool {
	return (f.Device == "" || r.Key.Device == f.Device) && (f.Where == "" || r.Where == f.Where) && (f.Since.IsZero() || !r.At.Before(f.Since))
}

// PushResult says what Push did.
type PushResult struct {
	// Keys is the distinct keys selected; Added of them were stored and
	// Present were in the bucket already (the bucket keeps the first
	// record stored under a key).
	Keys, Added, Present int
}

// Push stores the local database's records that f selects in the result
// bucket on nc's server, the newest of each key, each with
// create-if-absent: what the bucket holds stays.
func Push(ctx context.Context, nc *nats.Conn, db *tunedb.DB, f Filter) (PushResult, error) {
	h, err := open(ctx, nc)
	if err != nil {
		return PushResult{}, err
	}
	newest := map[string]tunedb.Record{}
	var order []string
	for _, r := range db.Records() {
		if !f.match(r) {
			continue
		}
		key := RecordKey(r)
		old, ok := newest[key]
		if !ok {
			order = append(order, key)
		}
		if !ok || r.At.After(old.At) {
			newest[key] = r
		}
	}
	res := PushResult{Keys: len(order)}
	for _, key := range order {
		data, err := json.Marshal(newest[key])
		if err != nil {
			return res, err
		}
		switch _, err := h.results.Create(ctx, key, data); {
		case errors.Is(err, jetstream.ErrKeyExists):
			res.Present++
		case err != nil:
			return res, fmt.Errorf("store %s in %s: %w", key, ResultBucket, err)
		default:
			res.Added++
		}
	}
	return res, nil
}

// PullResult says what Pull did.
type PullResult struct {
	// Read is the bucket's records that f selected; Skipped the entries
	// that hold no valid record (counted, never fatal).
	Read, Skipped int
	tunedb.ImportResult
}

// Pull appends the result bucket's records that f selects to the local
// database, leaving out exact copies of records it has (tunedb.Import).
func Pull(ctx context.Context, nc *nats.Conn, db *tunedb.DB, f Filter) (PullResult, error) {
	h, err := open(ctx, nc)
	if err != nil {
		return PullResult{}, err
	}
	// One watcher delivers every entry in one pass, where listing keys
	// and getting each would cost a request per record.
	w, err := h.results.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return PullResult{}, fmt.Errorf("read %s: %w", ResultBucket, err)
	}
	defer w.Stop()
	var res PullResult
	var lines bytes.Buffer
	updates := w.Updates()
	for done := false; !done; {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case e = <-updates:
		}
		if e == nil {
			done = true // every entry that was there has come
			continue
		}
		var r tunedb.Record
		if json.Unmarshal(e.Value(), &r) != nil || r.Validate() != nil || RecordKey(r) != e.Key() {
			res.Skipped++
			continue
		}
		if !f.match(r) {
			continue
		}
		res.Read++
		line, err := json.Marshal(r)
		if err != nil {
			return res, err
		}
		lines.Write(append(line, '\n'))
	}
	imp, err := db.Import(&lines)
	if err != nil {
		return res, fmt.Errorf("append to %s: %w", db.Path(), err)
	}
	res.ImportResult = imp
	return res, nil
}
