// Package fleet spreads kernel measurements over many GPU machines through
// NATS JetStream: the embedded server (or any NATS cluster), the job
// stream, the tune-workers that measure jobs through the measure
// package's isolated worker process, the dead letters, and a key-value
// bucket that is the shared tuning database.
//
// Everything durable is JetStream's, nothing is home-made where JetStream
// provides it:
//
//   - Jobs go to the work-queue stream JobStream, on the subject
//     lumsearch.jobs.KIND.MODE (JobSubject): KIND is a GPU kind (a cost
//     device's name, such as h100-sxm), MODE is gpu or emulated. The
//     workers of one kind and mode share one durable pull consumer
//     (ConsumerName), so that a job goes to one worker at a time; a work
//     queue allows one consumer per subject, and a worker of another kind
//     never sees the job.
//   - A job is keyed (Job.Key) by the kernel (its body, schedule, shapes
//     and dtypes), the device kind, driver, compiler and measurement mode,
//     so that an emulated time never answers a GPU's lookup. The key is
//     the job message's Nats-Msg-Id: the stream's duplicate window drops
//     a job that is already queued, and the result bucket (ResultBucket)
//     stores each result with create-if-absent under the same key, which
//     serves every later search beyond the window.
//   - A worker acknowledges a job only after its result is stored, sends
//     in-progress acknowledgements while it measures, and hands a job back
//     (a negative acknowledgement) when its measuring process hung or
//     died. JetStream redelivers a job whose worker vanished once its ack
//     wait runs out, and stops after MaxDeliver deliveries with a
//     max-deliveries advisory. The advisories are kept in a stream of
//     their own (AdvisoryStream), so none is lost while no one listens;
//     the dead-letter handler (RunDeadLetters) republishes each such job
//     to lumsearch.dead.KIND.MODE (DeadStream) with the reason and removes
//     it from the job stream. A malformed job is dead-lettered at once.
//   - The fleet bucket (FleetBucket) holds what the workers say about
//     themselves: each kind's driver and compiler (what a requester needs
//     to compute a key), a presence entry per live worker that expires
//     unless refreshed (a per-message TTL), and the reasons of failed jobs
//     (also with a TTL).
//
// The requester (Client) looks every job up in the result bucket, publishes
// the rest at once (so that N workers keep min(N, ready jobs) in flight),
// and waits for their results through a bucket watcher, never longer than
// its context allows; when the server is unreachable or no worker of the
// kind is alive for a while it returns ErrUnavailable and the caller goes
// on with the cost model.
//
// This package imports measure (the request a worker measures), tunedb (the
// records it stores), cost (GPU kinds) and gpu and cuda/nvrtc (a worker's
// driver and compiler); it must not import search or cmd.
package fleet
