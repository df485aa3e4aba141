package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// recordLogMessages is how many messages the store's record log holds.
func recordLogMessages(t *testing.T, s *Store) uint64 {
	t.Helper()
	info, err := s.recordLog.stream.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A store alone reads its records back from the log after a restart: the
// last write of each, at its revision, and none that ended; revisions go
// on growing from there, and a compare-and-set at a revision from before
// the restart holds.
func TestRecordLogAfterRestart(t *testing.T) {
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	a, b, c := samplePending("a", "m"), samplePending("b", "m"), samplePending("c", "m")
	for _, p := range []*lifecycle.Proposal{a, b, c} {
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	b.Approvals = []Approval{{Approver: "alice", At: b.Received}}
	if err := s.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openStore(t, cfg)
	got, err := s.Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("Owned after the restart = %d records %v, want a then b", len(got), ids(got))
	}
	assertSamePending(t, got[0], a)
	assertSamePending(t, got[1], b)
	if got[1].Rev != b.Rev || got[0].Rev != a.Rev {
		t.Fatalf("revisions after the restart: a %d b %d, want %d %d", got[0].Rev, got[1].Rev, a.Rev, b.Rev)
	}
	if _, err := s.Get(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of the deleted record after the restart = %v, want ErrNotFound", err)
	}
	d := samplePending("d", "m")
	if err := s.Put(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d.Rev <= b.Rev {
		t.Fatalf("a new record's revision %d, want past %d (the last before the restart)", d.Rev, b.Rev)
	}
	stale := *b
	stale.Rev = a.Rev
	if err := s.Update(ctx, &stale); !errors.Is(err, ErrConflict) {
		t.Fatalf("Update at another record's revision = %v, want ErrConflict", err)
	}
	a.Phase = Queued
	if err := s.Update(ctx, a); err != nil {
		t.Fatalf("Update at the revision read before the restart: %v", err)
	}
}

func ids(ps []*lifecycle.Proposal) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

// Writes made while a publish is out share the next message.
func TestRecordLogSharesMessages(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"})
	ctx := ctxT(t)
	first := samplePending("first", "m")
	h := holdPublishes(t, &s.recordLog.pub)
	done := make(chan error, 21)
	go func() { done <- s.Put(ctx, first) }()
	h.waitHeld(t, 1)
	for i := range 20 {
		go func() { done <- s.Put(ctx, samplePending(fmt.Sprintf("p%d", i), "m")) }()
	}
	if err := eventually(10*time.Second, func() error {
		s.recordLog.mu.Lock()
		defer s.recordLog.mu.Unlock()
		if n := len(s.recordLog.queue); n != 20 {
			return fmt.Errorf("%d writes queued", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.release()
	for range 21 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := h.count(); n != 2 {
		t.Fatalf("%d messages for 21 writes, want 2 (the first, then the 20 made while it was out)", n)
	}
	if got := recordLogMessages(t, s); got != 2 {
		t.Fatalf("the stream holds %d messages, want 2", got)
	}
}

// Past recordSnapshotMin writes the log writes its live records again and
// purges what came before: the stream stays bounded by the records live,
// not by the proposals that ever were, and a restart reads the same
// records back.
func TestRecordLogSnapshotBoundsTheStream(t *testing.T) {
	s, cfg := snapshottingStore(t, 50)
	live := putThenEnd(t, s, 400, func(i int) bool { return i%40 == 0 }) // 10 stay
	// 790 writes, one message each (nothing else was out): without
	// snapshots the stream would hold them all.
	if n := recordLogMessages(t, s); n > 60 {
		t.Fatalf("the stream holds %d messages after 790 writes, want at most 60 (a snapshot every 50)", n)
	}
	s.Close()
	ownedAfterRestart(t, cfg, live)
}

// A snapshot that fails half way purges nothing: a restart reads the
// writes and the part of the snapshot written, and the records are the
// same.
func TestRecordLogSnapshotCutShort(t *testing.T) {
	s, cfg := snapshottingStore(t, 1<<30)
	ctx := ctxT(t)
	want := putThenEnd(t, s, 30, func(i int) bool { return i%3 == 0 }) // 10 stay, after 50 writes
	big1, big := samplePending("big1", "m"), samplePending("big2", "m")
	big1.Envelope = json.RawMessage(`{"pad":"` + stringOf('x', recordBatchBytes/2) + `"}`)
	big.Envelope = big1.Envelope
	if err := s.Put(ctx, big1); err != nil {
		t.Fatal(err)
	}
	want = append(want, big1)
	// The next write makes a snapshot due (52 writes, 12 records); the
	// two large records take it to a second message, which fails.
	recordSnapshotMin = 1
	pub := s.recordLog.pub
	var calls int
	var mu sync.Mutex
	s.recordLog.pub = func(ctx context.Context, data []byte) (uint64, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 3 { // the batch, the snapshot's first message, then this
			return 0, errors.New("disk full")
		}
		return pub(ctx, data)
	}
	if err := s.Put(ctx, big); err != nil {
		t.Fatalf("the write before the snapshot: %v", err)
	}
	want = append(want, big)
	if err := eventually(10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls < 3 {
			return fmt.Errorf("%d publishes", calls)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ownedAfterRestart(t, cfg, want)
}

// snapshottingStore opens a DIR store whose record log snapshots after n
// writes (recordSnapshotMin, as it was again after the test).
func snapshottingStore(t *testing.T, n int) (*Store, Config) {
	t.Helper()
	old := recordSnapshotMin
	recordSnapshotMin = n
	t.Cleanup(func() { recordSnapshotMin = old })
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	return openStore(t, cfg), cfg
}

// putThenEnd puts the records p0 to p(n-1) one after the other, deleting
// at once each that keep does not keep, and returns those it keeps.
func putThenEnd(t *testing.T, s *Store, n int, keep func(i int) bool) []*lifecycle.Proposal {
	t.Helper()
	ctx := ctxT(t)
	var kept []*lifecycle.Proposal
	for i := range n {
		p := samplePending(fmt.Sprintf("p%d", i), "m")
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
		if keep(i) {
			kept = append(kept, p)
		} else if err := s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return kept
}

// ownedAfterRestart opens the store of cfg again and checks that its
// records are want, in order, each at its revision.
func ownedAfterRestart(t *testing.T, cfg Config, want []*lifecycle.Proposal) {
	t.Helper()
	got, err := openStore(t, cfg).Owned(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Owned after the restart = %v, want %d records", ids(got), len(want))
	}
	for i, p := range got {
		assertSamePending(t, p, want[i]) // the revision too
	}
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

// A publish that fails leaves memory ahead of the stream; the log reads
// the stream back before the next call, so that what it answers is what
// a restart would read: a write refused is gone, one whose
// acknowledgement alone was lost is there.
func TestRecordLogReadsBackAfterAFailedPublish(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	ctx := ctxT(t)
	pub := s.recordLog.pub
	fail := func(store bool) {
		s.recordLog.pub = func(ctx context.Context, data []byte) (uint64, error) {
			s.recordLog.pub = pub
			if store {
				if _, err := pub(ctx, data); err != nil {
					return 0, err
				}
			}
			return 0, errors.New("no ack")
		}
	}
	fail(false)
	refused := samplePending("refused", "m")
	if err := s.Put(ctx, refused); err == nil || errors.Is(err, ErrExists) {
		t.Fatalf("Put with its publish refused = %v, want the publish's error", err)
	}
	if _, err := s.Get(ctx, "refused"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of the refused write = %v, want ErrNotFound (the stream does not have it)", err)
	}
	if err := s.Put(ctx, refused); err != nil {
		t.Fatalf("Put again: %v", err)
	}

	fail(true)
	lost := samplePending("lost-ack", "m")
	if err := s.Put(ctx, lost); err == nil {
		t.Fatal("Put with its ack lost succeeded")
	}
	got, err := s.Get(ctx, "lost-ack")
	if err != nil {
		t.Fatalf("Get of the write whose ack was lost = %v, want it (the stream has it)", err)
	}
	if got.Rev == 0 {
		t.Fatal("the record read back has no revision")
	}
	lost.Rev = got.Rev
	assertSamePending(t, got, lost)
	got.Phase = Queued
	if err := s.Update(ctx, got); err != nil {
		t.Fatalf("Update at the revision read back: %v", err)
	}
}

// A store alone written by an older fulfiller kept its records in a KV
// bucket; Open moves them into the log, with their revisions, and
// deletes the bucket.
func TestRecordLogMovesAnOlderPendingBucket(t *testing.T) {
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	name := bucketName("pending", "s")
	kv, err := s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	old := samplePending("old", "m")
	val, _ := json.Marshal(old)
	if old.Rev, err = kv.Create(ctx, key("old"), val); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openStore(t, cfg)
	got, err := s.Get(ctx, "old")
	if err != nil {
		t.Fatalf("the older bucket's record after Open: %v", err)
	}
	assertSamePending(t, got, old)
	if got.Rev != old.Rev {
		t.Fatalf("moved at revision %d, want %d", got.Rev, old.Rev)
	}
	if _, err := s.js.Stream(ctx, "KV_"+name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("older pending bucket still there after Open (%v)", err)
	}
	if err := s.Update(ctx, got); err != nil {
		t.Fatalf("Update of the moved record: %v", err)
	}
	s.Close()
	s = openStore(t, cfg)
	if again, err := s.Get(ctx, "old"); err != nil || again.Rev != got.Rev {
		t.Fatalf("after another restart: %v at %v, want revision %d", err, again, got.Rev)
	}
}

// A snapshot with no record live purges every write, and a restart still
// hands out revisions past the last one: a record's compare-and-set must
// never meet a revision it had before.
func TestRecordLogRevisionsGrowPastASnapshot(t *testing.T) {
	s, cfg := snapshottingStore(t, 20)
	ctx := ctxT(t)
	var last uint64
	for i := range 10 { // 20 writes: the last makes the snapshot due
		p := samplePending(fmt.Sprintf("p%d", i), "m")
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
		last = p.Rev + 1 // the delete's
	}
	if err := eventually(10*time.Second, func() error {
		if n := recordLogMessages(t, s); n != 1 {
			return fmt.Errorf("%d messages, want the snapshot's alone", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("no snapshot purged the 20 writes: %v", err)
	}
	s.Close()
	s = openStore(t, cfg)
	p := samplePending("after", "m")
	if err := s.Put(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Rev <= last {
		t.Fatalf("revision %d after the restart, want past %d", p.Rev, last)
	}
}

// BenchmarkRecordLogOpen is a restart's cost of reading the record log
// back at its longest: 10 000 records live (a flood's --max-pending) and
// the writes of 14 999 proposals ended since, one write short of the
// 40 000 that make a snapshot due.
//
//	go test -run '^$' -bench RecordLogOpen -benchtime 5x ./state/
func BenchmarkRecordLogOpen(b *testing.B) {
	const live, ended = 10_000, 14_999
	cfg := Config{Mode: Mode{Kind: Dir, Dir: b.TempDir()}, Space: "s", Member: "m"}
	ctx := context.Background()
	s, err := Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // writes share messages as under load
	for i := range live + ended {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := samplePending(fmt.Sprintf("p%d", i), "m")
			if err := s.Put(ctx, p); err != nil {
				b.Error(err)
				return
			}
			if i >= live {
				if err := s.Delete(ctx, p); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	info, _ := s.recordLog.stream.Info(ctx)
	s.Close()
	for b.Loop() {
		s, err := Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if n := len(s.recordLog.recs); n != live {
			b.Fatalf("%d records read back, want %d", n, live)
		}
		s.Close()
	}
	b.ReportMetric(float64(info.State.Msgs), "messages")
	b.ReportMetric(float64(info.State.Bytes)/1e6, "MB")
}

// Writers at work while snapshots are written and the stream is purged
// under them: after a restart every record is as its last write left it,
// at its revision, and none that ended is back.
func TestRecordLogConcurrentWritesAcrossSnapshots(t *testing.T) {
	s, cfg := snapshottingStore(t, 64)
	ctx := ctxT(t)
	const writers, each = 8, 60
	final := make([][]*lifecycle.Proposal, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				p := samplePending(fmt.Sprintf("w%d-%d", w, i), "m")
				if err := s.Put(ctx, p); err != nil {
					t.Error(err)
					return
				}
				p.Phase = Queued
				if err := s.Update(ctx, p); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					final[w] = append(final[w], p)
					continue
				}
				if err := s.Delete(ctx, p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// 8×60×(put, update) and 8×40 deletes, 1 280 writes leaving 160
	// records: a snapshot was due by 640 writes at the latest, and its
	// purge removed the stream's first message.
	info, err := s.recordLog.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq <= 1 {
		t.Fatalf("the stream still starts at message %d after 1 280 writes: no snapshot purged it", info.State.FirstSeq)
	}
	s.Close()
	got, err := openStore(t, cfg).Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*lifecycle.Proposal{}
	for _, ps := range final {
		for _, p := range ps {
			want[p.ID] = p
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d records after the restart, want %d", len(got), len(want))
	}
	for _, p := range got {
		w, ok := want[p.ID]
		if !ok {
			t.Fatalf("%s is back after the restart: it ended", p.ID)
		}
		assertSamePending(t, p, w)
	}
}
