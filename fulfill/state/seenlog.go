package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// seenLog keeps the seen ids of rule 5 for a store alone: the embedded
// server (memory or DIR), which no other process can reach, so that this
// process is the only one that claims ids and its memory can answer
// "seen?" without a round trip.
//
// A group shares its seen ids in a KV bucket, one key per id, written by a
// create-if-absent each member's claim races on. Alone, that costs a
// publish per proposal, and the embedded server indexes every key: about
// 120 bytes of its memory per id, 110 MB of a million-proposal flood
// (docs/performance.md). Here the ids are appended to one stream, many to
// a message (group commit: every id claimed while a publish is out goes in
// the next one), and kept in memory as hashes (seenSet: about 16 bytes an
// id); a restart reads the stream back. The stream's MaxAge is the seen
// TTL, so the disk forgets an id when rule 5 does.
//
// When an id's entry must be on disk: a claim with a record (ClaimRecord)
// needs none while the record lives, because the record itself refuses a
// replay, and a restart resumes the record and claims its id again
// (Reclaim). So it is appended in the background, and Delete waits for it
// (flushed) before the record ends. A claim without a record (a busy at
// admission) waits for its entry before the answer goes out, as the
// bucket's create did.
//
// The hashes use seeds of this process's, never written anywhere: ids are
// chosen by proposers, and a collision would make a new proposal look
// seen (ignored, never answered). Two 64-bit hashes, of which 96 bits are
// kept: no proposer can aim at a secret seed, and by chance a collision
// among a day's million ids is about one in 10^17.
type seenLog struct {
	stream  jetstream.Stream
	subject string
	seeds   [2]maphash.Seed
	log     *slog.Logger
	now     func() time.Time
	// pub publishes one message and returns its sequence: js.Publish;
	// tests hold it to see who waits for it.
	pub func(ctx context.Context, data []byte) (uint64, error)

	mu  sync.Mutex
	set *seenSet
	// queue is what the next publish writes; out is what the publish
	// running now writes (nil when none runs).
	queue   []seenQueued
	out     []seenQueued
	waiters []chan error // for the publish after the running one
	running bool
	closed  bool
	idle    sync.WaitGroup // the publishing goroutine
}

// seenBatch bounds the ids one message carries: keys are at most 245
// bytes, so a batch stays far under the embedded server's payload limit.
const seenBatch = 4096

// seenQueued is an entry waiting to be published, with where it is kept.
type seenQueued struct {
	entry seenEntry
	h     seenHash
	gen   *seenGen
}

// seenEntry is one id in a log message: its key (key(id)), the decision
// id its claim recorded, and, for entries moved from an older store's
// seen bucket, when it was claimed (Unix ns; else the message's time).
type seenEntry struct {
	Key      string `json:"k"`
	Decision string `json:"d,omitempty"`
	At       int64  `json:"t,omitempty"`
}

// seenMessage is the body of one log message.
type seenMessage struct {
	IDs []seenEntry `json:"ids"`
}

// openSeenLog creates (or binds) the log stream of a store alone and reads
// it back. storage is the store's; name is the stream's name.
func openSeenLog(ctx context.Context, js jetstream.JetStream, name string, storage jetstream.StorageType, ttl time.Duration, log *slog.Logger, timed func(op string, start time.Time, err *error)) (*seenLog, error) {
	l := &seenLog{
		subject: "fulfiller.seen." + name, set: newSeenSet(ttl),
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, log: log, now: time.Now,
	}
	l.pub = func(ctx context.Context, data []byte) (_ uint64, err error) {
		defer timed("seen", time.Now(), &err)
		ack, err := js.Publish(ctx, l.subject, data)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	cfg := jetstream.StreamConfig{
		Name:        name,
		Description: "fulfiller's seen proposal ids (rule 5), for a store alone",
		Subjects:    []string{l.subject},
		Storage:     storage,
		MaxAge:      ttl,
		Replicas:    1,
		Discard:     jetstream.DiscardOld,
	}
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("state: seen log %s: %w", name, err)
	}
	l.stream = st
	if err := l.load(ctx); err != nil {
		return nil, fmt.Errorf("state: seen log %s: read back: %w", name, err)
	}
	return l, nil
}

// load reads every message of the log into the generations.
func (l *seenLog) load(ctx context.Context) error {
	return readAll(ctx, l.stream, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		var body seenMessage
		if err := json.Unmarshal(m.Data(), &body); err != nil {
			// A message this code did not write: nothing to keep.
			l.log.Warn("seen log message unreadable; skipped", "seq", md.Sequence.Stream, "err", err)
		}
		for _, e := range body.IDs {
			at := md.Timestamp
			if e.At != 0 {
				at = time.Unix(0, e.At)
			}
			l.addAt(at, e.Key, md.Sequence.Stream)
		}
	})
}

// readAll hands each message of st, oldest first, to fn: those stored
// when it starts, but for any that expire meanwhile. Each batch is read
// to its end (no_wait: the server answers with what it has at once), so
// no fetch is left waiting when it returns.
func readAll(ctx context.Context, st jetstream.Stream, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	for {
		batch, err := c.FetchNoWait(256)
		if err != nil {
			return err
		}
		n, last := 0, uint64(0)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			n, last = n+1, md.Sequence.Stream
			fn(m, md)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 || last >= info.State.LastSeq {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (l *seenLog) hash(k string) seenHash {
	return seenHash{maphash.String(l.seeds[0], k), maphash.String(l.seeds[1], k)}
}

// addAt keeps an entry read back from the log (claimed at at, in the
// message seq) unless it is past the TTL. Called only by Open, before any
// claim.
func (l *seenLog) addAt(at time.Time, k string, seq uint64) {
	l.set.add(l.now(), at, l.hash(k), seq)
}

// claim marks k seen with the claim's decision id, unless it already is:
// then won is false and winner the decision id the first claim recorded
// ("" if it can no longer be read). wait: return only once the entry is
// in the log (a claim nothing else records); else it is published soon,
// and flushed waits for it.
func (l *seenLog) claim(ctx context.Context, k, decision string, wait bool) (won bool, winner string, err error) {
	h := l.hash(k)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, "", ErrClosed
	}
	now := l.now()
	l.set.tidy(now)
	if seq, ok := l.set.find(h); ok {
		return false, l.winnerUnlock(ctx, h, seq, k), nil
	}
	g := l.set.add(now, now, h, 0)
	l.queue = append(l.queue, seenQueued{entry: seenEntry{Key: k, Decision: decision}, h: h, gen: g})
	if !wait {
		l.startLocked()
		l.mu.Unlock()
		return true, decision, nil
	}
	ch := l.waitLocked()
	l.mu.Unlock()
	if err := l.await(ctx, ch); err != nil {
		return false, "", err
	}
	return true, decision, nil
}

// peek reports whether k is seen, and the decision id of its claim, without
// claiming it.
func (l *seenLog) peek(ctx context.Context, k string) (seen bool, winner string, err error) {
	h := l.hash(k)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, "", ErrClosed
	}
	l.set.tidy(l.now())
	seq, ok := l.set.find(h)
	if !ok {
		l.mu.Unlock()
		return false, "", nil
	}
	return true, l.winnerUnlock(ctx, h, seq, k), nil
}

// winnerUnlock is the decision id of the claim of a seen entry (h, in the
// message seq or still queued), read after unlocking l.mu.
func (l *seenLog) winnerUnlock(ctx context.Context, h seenHash, seq uint64, k string) string {
	if seq == 0 {
		winner := l.queuedDecisionLocked(h)
		l.mu.Unlock()
		return winner
	}
	l.mu.Unlock()
	return l.decisionAt(ctx, seq, k)
}

// flushed returns once k's entry, if it was claimed here, is in the log:
// at once if it is, else after the publish that carries it.
func (l *seenLog) flushed(ctx context.Context, k string) error {
	h := l.hash(k)
	for {
		l.mu.Lock()
		seq, ok := l.set.find(h)
		if !ok || seq != 0 {
			l.mu.Unlock()
			return nil
		}
		ch := l.waitLocked()
		l.mu.Unlock()
		if err := l.await(ctx, ch); err != nil {
			return err
		}
	}
}

// queuedDecisionLocked is the decision of an entry not yet published.
func (l *seenLog) queuedDecisionLocked(h seenHash) string {
	for _, qs := range [][]seenQueued{l.out, l.queue} {
		for _, q := range qs {
			if q.h == h {
				return q.entry.Decision
			}
		}
	}
	return ""
}

// decisionAt reads the decision id of k from the log message seq: only a
// duplicate pays for it, so that the log need not be held in memory.
func (l *seenLog) decisionAt(ctx context.Context, seq uint64, k string) string {
	m, err := l.stream.GetMsg(ctx, seq)
	if err != nil {
		return "" // expired meanwhile, or unreadable: the line has no decision
	}
	var body seenMessage
	if json.Unmarshal(m.Data, &body) != nil {
		return ""
	}
	for _, e := range body.IDs {
		if e.Key == k {
			return e.Decision
		}
	}
	return ""
}

// waitLocked registers a waiter for the publish that carries what is
// queued now, and makes sure one will run.
func (l *seenLog) waitLocked() chan error {
	ch := make(chan error, 1)
	l.waiters = append(l.waiters, ch)
	l.startLocked()
	return ch
}

func (l *seenLog) await(ctx context.Context, ch chan error) error {
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("state: seen log: %w", ctx.Err())
	}
}

// startLocked starts the publishing goroutine unless it runs: it
// publishes what is queued, then again while more was queued meanwhile.
func (l *seenLog) startLocked() {
	if l.running || len(l.queue) == 0 && len(l.waiters) == 0 {
		return
	}
	l.running = true
	l.idle.Add(1)
	go l.publishLoop()
}

func (l *seenLog) publishLoop() {
	defer l.idle.Done()
	l.mu.Lock()
	for len(l.queue) > 0 || len(l.waiters) > 0 {
		n := min(len(l.queue), seenBatch)
		l.out = l.queue[:n:n]
		l.queue = l.queue[n:]
		waiters := l.waiters
		if len(l.queue) == 0 {
			l.waiters = nil
		} else {
			// Those waiting may have queued entries past this batch.
			waiters = nil
		}
		out := l.out
		l.mu.Unlock()
		seq, err := l.publish(out)
		l.mu.Lock()
		l.out = nil
		if err != nil {
			// Kept to be published again: the entries are seen here
			// either way, and a lost ack may have stored them.
			l.queue = append(out, l.queue...)
		} else {
			for _, q := range out {
				l.set.published(q.gen, q.h, seq)
			}
		}
		for _, ch := range waiters {
			ch <- err
		}
		if err != nil {
			// The waiters of later batches hear of it too, rather than
			// wait for a store that refuses writes.
			for _, ch := range l.waiters {
				ch <- err
			}
			l.waiters = nil
			break
		}
	}
	l.running = false
	l.mu.Unlock()
}

// publish writes one message of entries; 0 entries is a no-op.
func (l *seenLog) publish(out []seenQueued) (uint64, error) {
	if len(out) == 0 {
		return 0, nil
	}
	body := seenMessage{IDs: make([]seenEntry, len(out))}
	for i, q := range out {
		body.IDs[i] = q.entry
	}
	data, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("state: seen log: encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultOpTimeout)
	defer cancel()
	seq, err := l.pub(ctx, data)
	if err != nil {
		return 0, fmt.Errorf("state: seen log: %w", err)
	}
	return seq, nil
}

// close publishes what is queued (a clean stop keeps every id it
// claimed) and stops the publishing goroutine.
func (l *seenLog) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.startLocked()
	l.mu.Unlock()
	l.idle.Wait()
}

// moveSeenBucket moves the seen ids of a store alone written by an older
// fulfiller (a KV bucket, one key per id) into the log, then deletes the
// bucket: the ids it holds stay seen for the rest of their TTL, and the
// bucket's per-key index leaves the server's memory. A crash before the
// delete moves them again at the next start (an id twice in the log is
// harmless).
func (s *Store) moveSeenBucket(ctx context.Context) error {
	name := bucketName("seen", s.cfg.Space)
	st, err := s.js.Stream(ctx, "KV_"+name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: older seen bucket %s: %w", name, err)
	}
	prefix := "$KV." + name + "."
	var entries []seenEntry
	err = readAll(ctx, st, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		k, ok := strings.CutPrefix(m.Subject(), prefix)
		if !ok || m.Headers().Get("KV-Operation") != "" {
			return
		}
		var c claim
		_ = json.Unmarshal(m.Data(), &c) // a key whose value is unreadable is still seen
		at := c.At
		if at.IsZero() {
			at = md.Timestamp
		}
		entries = append(entries, seenEntry{Key: k, Decision: c.Decision, At: at.UnixNano()})
	})
	if err != nil {
		return fmt.Errorf("state: older seen bucket %s: %w", name, err)
	}
	if err := s.seenLog.importEntries(entries); err != nil {
		return err
	}
	if err := s.retireBucket(ctx, name); err != nil {
		return err
	}
	s.log.Info("seen ids moved from the older seen bucket to the seen log", "ids", len(entries))
	return nil
}

// importEntries publishes entries moved from an older store (each with its
// claim time) and keeps those still within the TTL. Called only by Open.
func (l *seenLog) importEntries(entries []seenEntry) error {
	now := l.now()
	live := entries[:0]
	for _, e := range entries {
		if l.set.within(now, time.Unix(0, e.At)) {
			live = append(live, e)
		}
	}
	for len(live) > 0 {
		n := min(len(live), seenBatch)
		out := make([]seenQueued, n)
		for i, e := range live[:n] {
			out[i] = seenQueued{entry: e}
		}
		seq, err := l.publish(out)
		if err != nil {
			return err
		}
		for _, e := range live[:n] {
			l.addAt(time.Unix(0, e.At), e.Key, seq)
		}
		live = live[n:]
	}
	return nil
}

// retireBucket deletes an older store's bucket whose contents were moved
// into a log, once what was moved is on disk (DIR): a crash before the
// delete moves them again at the next start.
func (s *Store) retireBucket(ctx context.Context, name string) error {
	if s.durable != nil {
		if err := s.synced(ctx); err != nil {
			return err
		}
	}
	if err := s.js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("state: delete older bucket %s (what it held is moved): %w", name, err)
	}
	return nil
}
