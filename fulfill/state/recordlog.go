package state

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// recordLog keeps the pending records of a store alone: the embedded
// server (memory or DIR), which no other process reaches, so that this
// process's memory is the one copy anybody reads, and the disk needs only
// what a restart reads back.
//
// A group keeps each record under a key of a KV bucket (kvRecords): every
// create, update and delete is a message of its own, with its own
// acknowledgement, and the server's stream work on it (the subject's
// index, a purge marker, the marker's expiry). A proposal's claim and
// delete cost about as much CPU again as deciding it (docs/performance.md).
// Here the writes are appended to one stream, every write made while a
// publish is out going in the next message (group commit, as the seen log
// does), and the records are kept in memory; a restart reads the stream
// back, applying the writes in order. Each write carries the whole record,
// so the last write of a key is its state.
//
// The stream would grow with every proposal, so once it holds
// recordSnapshotMin writes (and four times as many as there are records),
// the publisher writes every live record again after its batch (a
// snapshot, in as many messages as it takes) and purges the stream below
// the snapshot's first message. A crash before the purge leaves writes
// the snapshot repeats: reading them twice changes nothing.
//
// A write returns once the message carrying it is acknowledged: it is in
// the kernel (it survives the process), and the store's sync makes it
// survive the machine, as a KV write. A publish that fails leaves memory
// ahead of the stream (or not: a lost acknowledgement may have stored
// it). The log then fails every write queued with it and reads the stream
// back before the next call: memory is the stream's again, and the
// callers, told the write may have been applied, read the record to know,
// as they do after a KV write's error.
type recordLog struct {
	stream  jetstream.Stream
	subject string
	bucket  string // what entries report as their Bucket
	log     *slog.Logger
	now     func() time.Time
	// pub publishes one message and returns its sequence; purge removes
	// the messages below a sequence. Tests replace them.
	pub   func(ctx context.Context, data []byte) (uint64, error)
	purge func(ctx context.Context, below uint64) error

	mu      sync.Mutex
	recs    map[string]logRecord
	rev     uint64     // the last revision handed out
	queue   []recordOp // applied to recs, not yet published
	waiters []chan error
	running bool
	closed  bool
	// stale: a publish failed; memory may be ahead of the stream until
	// it is read back (refresh).
	stale   error
	written int // writes in the stream since the last snapshot (or try)
	idle    sync.WaitGroup
}

// logRecord is a live record: its JSON, its revision, when it was written.
type logRecord struct {
	val []byte
	rev uint64
	at  time.Time
}

// recordOp is one write: the record at rev (val nil: removed).
type recordOp struct {
	k   string
	rev uint64
	val []byte
}

// recordMessage is one message of the log: writes in the order they were
// made. An op without V removes its key. Rev, in a snapshot's first
// message, is the last revision handed out: the writes that reached it
// may all be purged, and revisions must not be handed out again.
type recordMessage struct {
	Rev uint64 `json:"rev,omitempty"`
	Ops []struct {
		K string          `json:"k"`
		R uint64          `json:"r"`
		V json.RawMessage `json:"v,omitempty"`
	} `json:"ops"`
}

// recordBatchBytes bounds the records one message carries (one larger
// record goes alone): far under the embedded server's payload limit,
// which a single record is bounded by too (embeddedMaxPayload).
const recordBatchBytes = 1 << 20

// recordSnapshotMin is how many writes the stream holds before the first
// snapshot: what a restart reads back at most, beyond four times the
// records live. Tests lower it.
var recordSnapshotMin = 1 << 14

// errLogRevision: an update or remove found the record at another
// revision, or none. isWrongLastSeq reports it.
var errLogRevision = errors.New("state: record log: wrong last revision")

func openRecordLog(ctx context.Context, js jetstream.JetStream, name string, storage jetstream.StorageType, log *slog.Logger, timed func(op string, start time.Time, err *error)) (*recordLog, error) {
	l := &recordLog{
		subject: "fulfiller.records." + name, bucket: name, log: log, now: time.Now,
		recs: map[string]logRecord{},
	}
	l.pub = func(ctx context.Context, data []byte) (_ uint64, err error) {
		defer timed("records", time.Now(), &err)
		ack, err := js.Publish(ctx, l.subject, data)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	l.purge = func(ctx context.Context, below uint64) error {
		return l.stream.Purge(ctx, jetstream.WithPurgeSequence(below))
	}
	cfg := jetstream.StreamConfig{
		Name:        name,
		Description: "fulfiller's pending records, for a store alone",
		Subjects:    []string{l.subject},
		Storage:     storage,
		Replicas:    1,
		// Every message is needed until a snapshot replaces it: no
		// limit may drop one.
		Discard:    jetstream.DiscardNew,
		MaxMsgSize: embeddedMaxPayload,
	}
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("state: record log %s: %w", name, err)
	}
	l.stream = st
	if err := l.load(ctx); err != nil {
		return nil, fmt.Errorf("state: record log %s: read back: %w", name, err)
	}
	return l, nil
}

// load reads the stream into memory, replacing what memory held.
func (l *recordLog) load(ctx context.Context) error {
	recs := map[string]logRecord{}
	var rev uint64
	written := 0
	err := readAll(ctx, l.stream, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		var body recordMessage
		if err := json.Unmarshal(m.Data(), &body); err != nil {
			// Not one this code wrote: nothing in it is a record.
			l.log.Warn("record log message unreadable; skipped", "seq", md.Sequence.Stream, "err", err)
			return
		}
		rev = max(rev, body.Rev)
		for _, op := range body.Ops {
			written++
			rev = max(rev, op.R)
			if op.V == nil {
				delete(recs, op.K)
				continue
			}
			recs[op.K] = logRecord{val: op.V, rev: op.R, at: md.Timestamp}
		}
	})
	if err != nil {
		return err
	}
	l.recs, l.rev, l.written = recs, rev, written
	return nil
}

// readyLocked reads the stream back after a failed publish, so that memory is
// what the stream holds. Called with l.mu held.
func (l *recordLog) readyLocked(ctx context.Context) error {
	if l.closed {
		return ErrClosed
	}
	if l.stale == nil {
		return nil
	}
	if err := l.load(ctx); err != nil {
		return fmt.Errorf("state: record log: read back after %v: %w", l.stale, err)
	}
	l.log.Warn("record log read back after a failed write", "err", l.stale, "records", len(l.recs))
	l.stale = nil
	return nil
}

func (l *recordLog) create(ctx context.Context, k string, val []byte) (uint64, error) {
	l.mu.Lock()
	if err := l.readyLocked(ctx); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	if _, ok := l.recs[k]; ok {
		l.mu.Unlock()
		return 0, jetstream.ErrKeyExists
	}
	return l.writeUnlock(ctx, k, val)
}

func (l *recordLog) update(ctx context.Context, k string, val []byte, last uint64) (uint64, error) {
	l.mu.Lock()
	if err := l.readyLocked(ctx); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	if cur, ok := l.recs[k]; !ok || cur.rev != last {
		l.mu.Unlock()
		return 0, errLogRevision
	}
	return l.writeUnlock(ctx, k, val)
}

func (l *recordLog) remove(ctx context.Context, k string, last uint64) error {
	l.mu.Lock()
	if err := l.readyLocked(ctx); err != nil {
		l.mu.Unlock()
		return err
	}
	if cur, ok := l.recs[k]; !ok || cur.rev != last {
		l.mu.Unlock()
		return errLogRevision
	}
	_, err := l.writeUnlock(ctx, k, nil)
	return err
}

// writeUnlock applies a write (val nil: a removal) to memory and queues
// it, unlocks, and returns once the publish that carries it is done: its
// own when no publish was running, else the log goroutine's.
func (l *recordLog) writeUnlock(ctx context.Context, k string, val []byte) (uint64, error) {
	l.rev++
	rev := l.rev
	if val == nil {
		delete(l.recs, k)
	} else {
		l.recs[k] = logRecord{val: val, rev: rev, at: l.now()}
	}
	l.queue = append(l.queue, recordOp{k: k, rev: rev, val: val})
	ch := make(chan error, 1)
	l.waiters = append(l.waiters, ch)
	if !l.running {
		// Nobody is publishing: this writer publishes what is queued
		// (its own write, and any made meanwhile) rather than wake a
		// goroutine and wait for it; at a few writes a second every
		// write is such a one. What is queued after its batch, and a
		// snapshot due, go to a goroutine: no writer waits longer
		// than for its own batch.
		l.running = true
		l.idle.Add(1)
		if more, snap, snapRev := l.publishBatchLocked(); more || snap != nil {
			go l.publishLoop(snap, snapRev)
		} else {
			l.running = false
			l.idle.Done()
		}
	}
	l.mu.Unlock()
	select {
	case err := <-ch:
		if err != nil {
			return 0, err
		}
		return rev, nil
	case <-ctx.Done():
		// Queued, maybe published: as a KV write whose ack is lost.
		return 0, fmt.Errorf("state: record log: %w", ctx.Err())
	}
}

func (l *recordLog) get(ctx context.Context, k string) (jetstream.KeyValueEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readyLocked(ctx); err != nil {
		return nil, err
	}
	r, ok := l.recs[k]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return logEntry{bucket: l.bucket, key: k, rec: r}, nil
}

func (l *recordLog) all(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readyLocked(ctx); err != nil {
		return nil, err
	}
	out := make([]jetstream.KeyValueEntry, 0, len(l.recs))
	for k, r := range l.recs {
		out = append(out, logEntry{bucket: l.bucket, key: k, rec: r})
	}
	slices.SortFunc(out, func(x, y jetstream.KeyValueEntry) int { return cmp.Compare(x.Revision(), y.Revision()) })
	return out, nil
}

// publishLoop publishes what is queued, then again while more was queued
// meanwhile, writing a snapshot when one is due; snap is one due already
// (handed over by a writer that published its own batch). It owns one
// count of l.idle and l.running until it returns.
func (l *recordLog) publishLoop(snap []recordOp, snapRev uint64) {
	defer l.idle.Done()
	for {
		if snap != nil {
			l.snapshot(snap, snapRev)
		}
		l.mu.Lock()
		more, next, nextRev := l.publishBatchLocked()
		if !more && next == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		snap, snapRev = next, nextRev
		l.mu.Unlock()
	}
}

// publishBatchLocked publishes what is queued, if anything, and hands
// each of its writers the result. It reports whether more was queued
// meanwhile, and the snapshot due after the batch (nil: none), with the
// last revision handed out. Called, and returns, with l.mu held (which it
// releases while it publishes); the caller holds l.running.
func (l *recordLog) publishBatchLocked() (more bool, snap []recordOp, snapRev uint64) {
	if len(l.queue) == 0 {
		return false, nil, 0
	}
	out, waiters := l.queue, l.waiters
	l.queue, l.waiters = nil, nil
	if l.written+len(out) >= max(recordSnapshotMin, 4*len(l.recs)) {
		// Memory is now exactly the stream with out: what a snapshot
		// after out must hold.
		snap, snapRev = l.snapshotLocked(), l.rev
	}
	l.mu.Unlock()
	err := l.publish(out)
	for _, ch := range waiters {
		ch <- err
	}
	l.mu.Lock()
	if err != nil {
		// Memory holds these writes and those queued since, the stream
		// maybe not: fail the later ones too, and read the stream back
		// before the next call (readyLocked).
		l.stale = err
		for _, ch := range l.waiters {
			ch <- err
		}
		l.queue, l.waiters = nil, nil
		return false, nil, 0
	}
	l.written += len(out)
	return len(l.queue) > 0, snap, snapRev
}

// snapshotLocked is every live record as writes, oldest first (not nil).
func (l *recordLog) snapshotLocked() []recordOp {
	snap := make([]recordOp, 0, len(l.recs))
	for k, r := range l.recs {
		snap = append(snap, recordOp{k: k, rev: r.rev, val: r.val})
	}
	slices.SortFunc(snap, func(x, y recordOp) int { return cmp.Compare(x.rev, y.rev) })
	return snap
}

// snapshot writes every live record again, rev (the last revision
// handed out) first, and purges the stream below them. Run by the
// publisher between two batches, so no write comes between the snapshot
// and the state it copies. A failure costs nothing but the stream's
// length: the next snapshot is tried as many writes later.
func (l *recordLog) snapshot(snap []recordOp, rev uint64) {
	first, err := l.publishSeq(rev, snap)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), defaultOpTimeout)
		err = l.purge(ctx, first)
		cancel()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.written = 0
		l.log.Warn("record log snapshot not written; the log stays longer until the next", "err", err)
		return
	}
	l.written = len(snap) // the stream from first on: no batch came between
}

// publish writes ops in as few messages as recordBatchBytes allows.
func (l *recordLog) publish(ops []recordOp) error {
	if len(ops) == 0 {
		return nil
	}
	_, err := l.publishSeq(0, ops)
	return err
}

// publishSeq is publish that writes rev (unless 0) in the first message,
// and at least that message, and returns its sequence.
func (l *recordLog) publishSeq(rev uint64, ops []recordOp) (first uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultOpTimeout)
	defer cancel()
	var buf []byte
	for wrote := false; !wrote || len(ops) > 0; wrote = true {
		buf = append(buf[:0], '{')
		if !wrote && rev != 0 {
			buf = append(buf, `"rev":`...)
			buf = strconv.AppendUint(buf, rev, 10)
			buf = append(buf, ',')
		}
		buf = append(buf, `"ops":[`...)
		n := 0
		for n < len(ops) && (n == 0 || len(buf)+len(ops[n].val) < recordBatchBytes) {
			if n > 0 {
				buf = append(buf, ',')
			}
			buf = appendOp(buf, ops[n])
			n++
		}
		buf = append(buf, "]}"...)
		seq, err := l.pub(ctx, buf)
		if err != nil {
			return 0, fmt.Errorf("state: record log: %w", err)
		}
		if !wrote {
			first = seq
		}
		ops = ops[n:]
	}
	return first, nil
}

// appendOp encodes one write as recordMessage reads it. val is a record
// json.Marshal wrote (valid, compact JSON), carried as it is.
func appendOp(buf []byte, op recordOp) []byte {
	buf = append(buf, `{"k":`...)
	buf = appendKey(buf, op.k)
	buf = append(buf, `,"r":`...)
	buf = strconv.AppendUint(buf, op.rev, 10)
	if op.val != nil {
		buf = append(buf, `,"v":`...)
		buf = append(buf, op.val...)
	}
	return append(buf, '}')
}

// appendKey writes k as a JSON string. Keys are base64url or hex (key),
// which need no escaping; anything else goes through encoding/json.
func appendKey(buf []byte, k string) []byte {
	if strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0 {
		buf = append(buf, '"')
		buf = append(buf, k...)
		return append(buf, '"')
	}
	b, _ := json.Marshal(k) // a string always encodes
	return append(buf, b...)
}

// importRecords writes records moved from an older store's KV bucket,
// with their revisions. Called only by Open, before any other write.
func (l *recordLog) importRecords(entries []jetstream.KeyValueEntry) error {
	ops := make([]recordOp, 0, len(entries))
	for _, e := range entries {
		ops = append(ops, recordOp{k: e.Key(), rev: e.Revision(), val: e.Value()})
	}
	if err := l.publish(ops); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range entries {
		l.recs[e.Key()] = logRecord{val: e.Value(), rev: e.Revision(), at: e.Created()}
		l.rev = max(l.rev, e.Revision())
	}
	l.written += len(ops)
	return nil
}

// close publishes what is queued and stops the publishing goroutine.
func (l *recordLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.idle.Wait()
}

// logEntry is a live record of the log as a KV entry. Its Value is the
// log's own copy: callers decode it, never change it.
type logEntry struct {
	bucket, key string
	rec         logRecord
}

func (e logEntry) Bucket() string                  { return e.bucket }
func (e logEntry) Key() string                     { return e.key }
func (e logEntry) Value() []byte                   { return e.rec.val }
func (e logEntry) Revision() uint64                { return e.rec.rev }
func (e logEntry) Created() time.Time              { return e.rec.at }
func (e logEntry) Delta() uint64                   { return 0 }
func (e logEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// moveRecordBucket moves the pending records of a store alone written by
// an older fulfiller (a KV bucket, one key per record) into the log, then
// deletes the bucket. A crash before the delete moves them again at the
// next start, over the same keys with the same revisions: nothing else
// was written meanwhile.
func (s *Store) moveRecordBucket(ctx context.Context) error {
	name := bucketName("pending", s.cfg.Space)
	kv, err := s.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: older pending bucket %s: %w", name, err)
	}
	entries, err := s.snapshot(ctx, kv)
	if err != nil {
		return fmt.Errorf("state: older pending bucket %s: %w", name, err)
	}
	if err := s.recordLog.importRecords(entries); err != nil {
		return err
	}
	if err := s.retireBucket(ctx, name); err != nil {
		return err
	}
	s.log.Info("pending records moved from the older pending bucket to the record log", "records", len(entries))
	return nil
}
