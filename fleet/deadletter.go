package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jobKeyPattern is what a job key looks like (Job.Key).
var jobKeyPattern = regexp.MustCompile(`^(gpu|emulated)\.[0-9a-f]{64}$`)

// publishDead publishes a job's data to the dead letters of its subject
// with the reason and where it came from. The message id is the job's
// stream sequence, so that a handler that crashed after publishing and
// publishes again adds nothing.
func publishDead(ctx context.Context, js jetstream.JetStream, subject string, seq, deliveries uint64, hdr nats.Header, data []byte, reason string) error {
	m := nats.NewMsg(deadSubjectOf(subject))
	m.Data = data
	for k, v := range hdr {
		if k != nats.MsgIdHdr && k != "Nats-Expected-Stream" {
			m.Header[k] = v
		}
	}
	if key := hdr.Get(nats.MsgIdHdr); key != "" {
		m.Header.Set("Lumsearch-Job-Key", key)
	}
	m.Header.Set(HeaderReason, reason)
	m.Header.Set(HeaderSubject, subject)
	m.Header.Set(HeaderSequence, strconv.FormatUint(seq, 10))
	m.Header.Set(HeaderDeliveries, strconv.FormatUint(deliveries, 10))
	_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("dead."+strconv.FormatUint(seq, 10)), jetstream.WithExpectStream(DeadStream))
	return err
}

// DeadLetterOptions pace RunDeadLetters.
type DeadLetterOptions struct {
	// FetchWait bounds one wait for an advisory (0: 5 s).
	FetchWait time.Duration
	// FailureTTL is how long a dead job's reason stays in the fleet
	// bucket for requesters (0: one hour).
	FailureTTL time.Duration
	// Log, when set, receives a line per dead letter.
	Log func(format string, args ...any)
}

// advisory is the part of JetStream's max-deliveries advisory
// (io.nats.jetstream.advisory.v1.max_deliver) the handler reads.
type advisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// RunDeadLetters moves the jobs JetStream gave up on to the dead letters
// until ctx ends (nil then) or the connection is closed: for each
// max-deliveries advisory kept in AdvisoryStream, it republishes the job
// to lumsearch.dead.KIND.MODE with the reason (the last worker's account
// of its attempt, when one was recorded), records the reason for the
// job's requester, deletes the job from the job stream and only then
// acknowledges the advisory. Any number of handlers may run: they share
// one durable consumer, so each advisory is handled once. tuning-server
// runs one.
func RunDeadLetters(ctx context.Context, nc *nats.Conn, o DeadLetterOptions) error {
	if o.FetchWait <= 0 {
		o.FetchWait = 5 * time.Second
	}
	if o.FailureTTL <= 0 {
		o.FailureTTL = time.Hour
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	h, err := open(ctx, nc)
	if err != nil {
		return err
	}
	cons, err := h.js.CreateOrUpdateConsumer(ctx, AdvisoryStream, jetstream.ConsumerConfig{
		Durable:     DeadLetterConsumer,
		Description: "lumsearch dead-letter handlers",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("dead letters: consumer %s: %w", DeadLetterConsumer, err)
	}
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, o.FetchWait)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				if err := deadLetterOne(ctx, h, m, o); err != nil && ctx.Err() == nil {
					o.Log("dead letters: %v (the advisory is kept for another try)", err)
					_ = m.NakWithDelay(time.Second)
				}
			}
			err = batch.Error()
		}
		cancel()
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("dead letters: %w", err)
		case err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout):
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}

// deadLetterOne handles one advisory.
func deadLetterOne(ctx context.Context, h *handles, m jetstream.Msg, o DeadLetterOptions) error {
	var a advisory
	if err := json.Unmarshal(m.Data(), &a); err != nil || a.Stream != JobStream || a.StreamSeq == 0 {
		// Not an advisory this handler can act on: drop it.
		return m.Ack()
	}
	rctx, cancel := short(ctx, 5*time.Second)
	defer cancel()
	raw, err := h.jobs.GetMsg(rctx, a.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Acknowledged after all, or moved by an earlier try.
		return m.Ack()
	}
	if err != nil {
		return fmt.Errorf("job #%d: %w", a.StreamSeq, err)
	}
	key := raw.Header.Get(nats.MsgIdHdr)
	reason := deadReason(rctx, h, key, a.Deliveries)
	if err := publishDead(rctx, h.js, raw.Subject, a.StreamSeq, a.Deliveries, raw.Header, raw.Data, reason); err != nil {
		return fmt.Errorf("job #%d: publish the dead letter: %w", a.StreamSeq, err)
	}
	if jobKeyPattern.MatchString(key) {
		data, _ := json.Marshal(failure{Reason: reason, Dead: true, At: time.Now().UTC()})
		if err := h.putTTL(rctx, failedKey(key), data, o.FailureTTL); err != nil {
			return fmt.Errorf("job #%d: record the reason: %w", a.StreamSeq, err)
		}
	}
	if err := h.jobs.DeleteMsg(rctx, a.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("job #%d: delete it from %s: %w", a.StreamSeq, JobStream, err)
	}
	o.Log("job #%d (%s) dead-lettered: %s", a.StreamSeq, raw.Subject, reason)
	return m.Ack()
}

// deadReason says why the job of key died after deliveries: the last
// worker's account of its attempt when one was recorded.
func deadReason(ctx context.Context, h *handles, key string, deliveries uint64) string {
	if jobKeyPattern.MatchString(key) {
		if e, err := h.state.Get(ctx, attemptKey(key)); err == nil {
			var at attempt
			if json.Unmarshal(e.Value(), &at) == nil && at.Reason != "" {
				return fmt.Sprintf("delivered %d times without a result; the last attempt (delivery %d): %s", deliveries, at.Delivery, at.Reason)
			}
		}
	}
	return fmt.Sprintf("delivered %d times without a result: each worker died, hung past the ack wait or handed it back", deliveries)
}

// DeadLetter is a job in the dead letters.
type DeadLetter struct {
	// Subject is the job's subject, Sequence its sequence in the job
	// stream, Deliveries how many times it was delivered.
	Subject    string
	Sequence   uint64
	Deliveries uint64
	// Key is the job's key when its message carried one.
	Key string
	// Reason says why it is dead.
	Reason string
	// Data is the job message as it was published.
	Data []byte
}

// DeadLetters lists the dead letters on nc's server, oldest first.
func DeadLetters(ctx context.Context, nc *nats.Conn) ([]DeadLetter, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, DeadStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", DeadStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		num := func(h string) uint64 {
			n, _ := strconv.ParseUint(raw.Header.Get(h), 10, 64)
			return n
		}
		out = append(out, DeadLetter{Subject: raw.Header.Get(HeaderSubject), Sequence: num(HeaderSequence), Deliveries: num(HeaderDeliveries),
			Key: raw.Header.Get("Lumsearch-Job-Key"), Reason: raw.Header.Get(HeaderReason), Data: raw.Data})
	}
	return out, nil
}
