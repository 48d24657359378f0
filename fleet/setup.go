package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config says how Setup makes the fleet's streams and buckets. The zero
// value suits one machine; a cluster wants Replicas 3.
type Config struct {
	// Duplicates is the job stream's duplicate window: a job published
	// again within it (the same key) is dropped by the server (0: 10
	// minutes). Beyond it, the result bucket answers.
	Duplicates time.Duration
	// Replicas is how many servers keep each stream and bucket (0: 1).
	Replicas int
	// DeadAge is how long dead letters are kept (0: 30 days).
	DeadAge time.Duration
	// Memory keeps everything in memory instead of files (tests).
	Memory bool
}

func (c Config) withDefaults() Config {
	if c.Duplicates <= 0 {
		c.Duplicates = 10 * time.Minute
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.DeadAge <= 0 {
		c.DeadAge = 30 * 24 * time.Hour
	}
	return c
}

// Setup makes (or updates to c) the fleet's streams and buckets on nc's
// server: the work-queue job stream, the dead letters, the kept
// max-deliveries advisories, the result bucket and the fleet bucket. It is
// idempotent; tuning-server runs it at start.
func Setup(ctx context.Context, nc *nats.Conn, c Config) error {
	c = c.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	storage := jetstream.FileStorage
	if c.Memory {
		storage = jetstream.MemoryStorage
	}
	streams := []jetstream.StreamConfig{
		{
			Name:        JobStream,
			Description: "lumsearch measurement jobs, lumsearch.jobs.KIND.MODE; a job leaves once a worker stored its result",
			Subjects:    []string{JobSubjects},
			Retention:   jetstream.WorkQueuePolicy,
			Duplicates:  c.Duplicates,
		},
		{
			Name:        DeadStream,
			Description: "lumsearch jobs no worker could finish, with the reason in " + HeaderReason,
			Subjects:    []string{DeadSubjects},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      c.DeadAge,
			// A dead letter republished after a handler's crash is
			// dropped: its id is the job's sequence.
			Duplicates: 10 * time.Minute,
		},
		{
			Name:        AdvisoryStream,
			Description: "max-deliveries advisories of the job consumers, until the dead-letter handler has moved their jobs",
			Subjects:    []string{AdvisorySubjects},
			Retention:   jetstream.WorkQueuePolicy,
		},
	}
	for _, sc := range streams {
		sc.Storage, sc.Replicas = storage, c.Replicas
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	buckets := []jetstream.KeyValueConfig{
		{
			Bucket:      ResultBucket,
			Description: "the shared tuning database: one measured record per job key, stored once",
			History:     1,
		},
		{
			Bucket:      FleetBucket,
			Description: "the kinds' environments, the live workers and failed jobs' reasons",
			History:     1,
			// Presence and failures expire by a per-message TTL, which
			// the bucket allows only with limit markers.
			LimitMarkerTTL: time.Minute,
		},
	}
	for _, kc := range buckets {
		kc.Storage, kc.Replicas = storage, c.Replicas
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}
