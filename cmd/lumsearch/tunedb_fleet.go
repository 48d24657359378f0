package main

import (
	"context"
	"fmt"
	"io"

	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/tunedb"
)

// tunedbPush is "tunedb export --nats URL": the local records into the
// fleet's bucket.
func tunedbPush(ctx context.Context, stdout io.Writer, db *tunedb.DB, url string, f fleet.Filter) error {
	nc, err := fleet.Connect(url, fleet.ConnectOptionsFromEnv())
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := fleet.Push(ctx, nc, db, f)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "exported %d of %d keys to %s at %s (%d there already)\n", res.Added, res.Keys, fleet.ResultBucket, fleet.Redact(url), res.Present)
	return warnSkipped(stdout, db, err)
}

// tunedbPull is "tunedb import --nats URL": the fleet's bucket into the
// local database.
func tunedbPull(ctx context.Context, stdout io.Writer, db *tunedb.DB, url string) error {
	nc, err := fleet.Connect(url, fleet.ConnectOptionsFromEnv())
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := fleet.Pull(ctx, nc, db, fleet.Filter{})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "imported %d of %d records from %s at %s into %s (%d already present)\n", res.Added, res.Read, fleet.ResultBucket, fleet.Redact(url), db.Path(), res.Duplicates)
	if err == nil && res.Skipped > 0 {
		_, err = fmt.Fprintf(stdout, "warning: %d entries of %s hold no valid record and were skipped\n", res.Skipped, fleet.ResultBucket)
	}
	return warnSkipped(stdout, db, err)
}
