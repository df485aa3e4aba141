package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// heldPublishes makes a log's publishes wait until release is called,
// and counts those waiting and those made.
type heldPublishes struct {
	mu       sync.Mutex
	held     chan struct{}
	waiting  int
	messages int
}

// holdPublishes holds the publishes of *pub (a log's pub).
func holdPublishes(t *testing.T, pub *func(context.Context, []byte) (uint64, error)) *heldPublishes {
	t.Helper()
	h := &heldPublishes{held: make(chan struct{})}
	next := *pub
	*pub = func(ctx context.Context, data []byte) (uint64, error) {
		h.mu.Lock()
		h.waiting++
		held := h.held
		h.mu.Unlock()
		<-held
		h.mu.Lock()
		h.messages++
		h.mu.Unlock()
		return next(ctx, data)
	}
	t.Cleanup(h.release)
	return h
}

func holdSeenLog(t *testing.T, s *Store) *heldPublishes {
	t.Helper()
	return holdPublishes(t, &s.seenLog.pub)
}

func (h *heldPublishes) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.held:
	default:
		close(h.held)
	}
}

// waitHeld waits until n publishes are held.
func (h *heldPublishes) waitHeld(t *testing.T, n int) {
	t.Helper()
	if err := eventually(10*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiting < n {
			return fmt.Errorf("%d publishes held, want %d", h.waiting, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// count is how many publishes were made.
func (h *heldPublishes) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.messages
}

// returnsWithin reports whether f returns within d, and its error.
func returnsWithin(d time.Duration, f func() error) (bool, error, chan error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return true, err, done
	case <-time.After(d):
		return false, nil, done
	}
}

// seenLogEntries reads every entry of the store's seen log.
func seenLogEntries(t *testing.T, s *Store) map[string]string {
	t.Helper()
	ctx := ctxT(t)
	info, err := s.seenLog.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.seenLog.stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("seen log message %d: %v", seq, err)
		}
		var body seenMessage
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatalf("seen log message %d: %v", seq, err)
		}
		for _, e := range body.IDs {
			got[e.Key] = e.Decision
		}
	}
	return got
}

// A claim with a record does not wait for its seen entry (the record
// refuses a replay while it lives); the record's Delete does, so that the
// id stays seen once the record is gone, a restart included.
func TestSeenLogDeleteWaitsForTheEntry(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	ctx := ctxT(t)
	h := holdSeenLog(t, s)
	p := claimRec("p1", "d1")
	if won, _, err := s.ClaimRecord(ctx, p); err != nil || !won {
		t.Fatalf("ClaimRecord = %v, %v", won, err)
	}
	if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d2")); err != nil || won || winner != "d1" {
		t.Fatalf("replay while the entry is unpublished: ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
	}
	returned, err, done := returnsWithin(200*time.Millisecond, func() error { return s.Delete(ctx, p) })
	if returned {
		t.Fatalf("Delete returned (%v) before the id's seen entry was published", err)
	}
	if _, err := s.Get(ctx, "p1"); err != nil {
		t.Fatalf("record gone before its seen entry was published: %v", err)
	}
	h.release()
	if err := <-done; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if d, ok := seenLogEntries(t, s)[key("p1")]; !ok || d != "d1" {
		t.Fatalf("seen log holds p1: %v with decision %q; want d1", ok, d)
	}
	if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d3")); err != nil || won || winner != "d1" {
		t.Fatalf("replay after the record ended: ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
	}
}

// A claim without a record (a busy at admission) returns only once its
// entry is published: the answer that follows it must not be sent twice
// after a restart. Claims that arrive while a publish is out share the
// next one.
func TestSeenLogClaimWithoutRecordWaitsAndShares(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	ctx := ctxT(t)
	h := holdSeenLog(t, s)
	const n = 20
	results := make(chan error, n)
	for i := range n {
		go func() {
			won, err := s.Claim(ctx, fmt.Sprintf("busy-%d", i))
			if err == nil && !won {
				err = errors.New("lost")
			}
			results <- err
		}()
	}
	select {
	case err := <-results:
		t.Fatalf("a claim returned (%v) before its entry was published", err)
	case <-time.After(200 * time.Millisecond):
	}
	h.release()
	for range n {
		if err := <-results; err != nil {
			t.Fatalf("Claim: %v", err)
		}
	}
	h.mu.Lock()
	messages := h.messages
	h.mu.Unlock()
	// The first claim's publish was held; the others queued behind it
	// and go in one message.
	if messages > 2 {
		t.Errorf("%d claims made %d messages; want those queued behind a publish to share one (at most 2)", n, messages)
	}
	got := seenLogEntries(t, s)
	for i := range n {
		if _, ok := got[key(fmt.Sprintf("busy-%d", i))]; !ok {
			t.Errorf("busy-%d not in the seen log", i)
		}
	}
}

// Every id stays seen until the TTL has passed, however many others come
// (no bound by count, TestSeenIsLimitedByAgeNotCount), and is forgotten
// within a generation after it.
func TestSeenLogKeepsEveryIDWithinTheTTL(t *testing.T) {
	const ttl = time.Hour
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m", SeenTTL: ttl})
	ctx := ctxT(t)
	l := s.seenLog
	now := time.Now()
	var clock sync.Mutex
	l.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	const n = 70_000 // more than the old in-process set's 65 536
	for i := range n {
		if won, _, err := l.claim(ctx, key(fmt.Sprintf("id-%d", i)), "d", false); err != nil || !won {
			t.Fatalf("claim id-%d = %v, %v", i, won, err)
		}
		if i == n/2 {
			advance(ttl / 2)
		}
	}
	if err := l.flushed(ctx, key(fmt.Sprintf("id-%d", n-1))); err != nil {
		t.Fatal(err)
	}
	advance(ttl/2 - time.Second) // the first ids are a second short of the TTL
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if won, winner, err := s.ClaimDecision(ctx, fmt.Sprintf("id-%d", i), "again"); err != nil || won || winner != "d" {
			t.Fatalf("id-%d within its TTL: ClaimDecision = %v, %q, %v; want lost to d", i, won, winner, err)
		}
	}
	advance(time.Second + ttl/seenGenerations)
	if won, err := s.Claim(ctx, "id-0"); err != nil || !won {
		t.Fatalf("id-0 a generation past its TTL: Claim = %v, %v; want claimable again", won, err)
	}
	if won, err := s.Claim(ctx, fmt.Sprintf("id-%d", n-1)); err != nil || won {
		t.Fatalf("id-%d within its TTL: Claim = %v, %v; want seen", n-1, won, err)
	}
}

// A restart reads the log back: ids claimed with a record, and without
// one, are seen, and a replay's line joins the decision that governs it.
func TestSeenLogAfterRestart(t *testing.T) {
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	p := claimRec("p1", "d1")
	if won, _, err := s.ClaimRecord(ctx, p); err != nil || !won {
		t.Fatalf("ClaimRecord = %v, %v", won, err)
	}
	if err := s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	if won, _, err := s.ClaimDecision(ctx, "p2", "d2"); err != nil || !won {
		t.Fatalf("ClaimDecision = %v, %v", won, err)
	}
	s.Close()
	s = openStore(t, cfg)
	if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d3")); err != nil || won || winner != "d1" {
		t.Fatalf("p1 after the restart: ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
	}
	if won, winner, err := s.ClaimDecision(ctx, "p2", "d4"); err != nil || won || winner != "d2" {
		t.Fatalf("p2 after the restart: ClaimDecision = %v, %q, %v; want lost to d2", won, winner, err)
	}
	if won, err := s.Claim(ctx, "p3"); err != nil || !won {
		t.Fatalf("p3 after the restart: Claim = %v, %v; want won", won, err)
	}
}

// A store alone written by an older fulfiller kept its seen ids in a KV
// bucket; Open moves the ids still within their TTL into the log and
// deletes the bucket.
func TestSeenLogMovesAnOlderSeenBucket(t *testing.T) {
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	name := bucketName("seen", "s")
	kv, err := s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, TTL: DefaultSeenTTL, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(id, decision string, at time.Time) {
		val, _ := json.Marshal(claim{Member: "m", At: at, Nonce: "n", Decision: decision})
		if _, err := kv.Create(ctx, key(id), val); err != nil {
			t.Fatal(err)
		}
	}
	put("old", "d-old", time.Now().Add(-time.Hour))
	put("expired", "d-expired", time.Now().Add(-DefaultSeenTTL-time.Minute))
	s.Close()

	s = openStore(t, cfg)
	if won, winner, err := s.ClaimDecision(ctx, "old", "d-new"); err != nil || won || winner != "d-old" {
		t.Fatalf("an id of the older bucket: ClaimDecision = %v, %q, %v; want lost to d-old", won, winner, err)
	}
	if won, err := s.Claim(ctx, "expired"); err != nil || !won {
		t.Fatalf("an id past its TTL in the older bucket: Claim = %v, %v; want won", won, err)
	}
	if _, err := s.js.Stream(ctx, "KV_"+name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("older seen bucket still there after Open (%v)", err)
	}
	s.Close()
	s = openStore(t, cfg)
	if won, winner, err := s.ClaimDecision(ctx, "old", "d-newer"); err != nil || won || winner != "d-old" {
		t.Fatalf("a moved id after another restart: ClaimDecision = %v, %q, %v; want lost to d-old", won, winner, err)
	}
}

// BenchmarkSeenLogOpen is a restart's cost of reading the seen log back:
// Open of a DIR store whose log holds 100 000 ids, claimed as a flood
// claims them (many to a message).
//
//	go test -run '^$' -bench SeenLogOpen -benchtime 5x ./state/
func BenchmarkSeenLogOpen(b *testing.B) {
	const ids = 100_000
	cfg := Config{Mode: Mode{Kind: Dir, Dir: b.TempDir()}, Space: "s", Member: "m"}
	ctx := context.Background()
	s, err := Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range ids {
		if _, _, err := s.seenLog.claim(ctx, key(fmt.Sprintf("flood-%d", i)), "decision-0123456789abcdef", false); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.seenLog.flushed(ctx, key(fmt.Sprintf("flood-%d", ids-1))); err != nil {
		b.Fatal(err)
	}
	info, _ := s.seenLog.stream.Info(ctx)
	s.Close()
	for b.Loop() {
		s, err := Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if seq, ok := s.seenLog.set.find(s.seenLog.hash(key("flood-0"))); !ok || seq == 0 {
			b.Fatal("flood-0 not read back")
		}
		s.Close()
	}
	b.ReportMetric(float64(info.State.Msgs), "messages")
}

// kill -9 after a claim with a record, before its seen entry was
// written: the record is there after the restart, its id is not in the
// log; Reclaim writes it (ours), and from then on a replay is lost to the
// record's claim, after the record has ended too.
func TestSeenLogCrashBeforeItsEntryIsWritten(t *testing.T) {
	cfg := Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	// Every write of the log fails from here, Close's last one too: the
	// process dies with the entry queued.
	s.seenLog.pub = func(context.Context, []byte) (uint64, error) { return 0, errors.New("killed") }
	if won, _, err := s.ClaimRecord(ctx, claimRec("p1", "d1")); err != nil || !won {
		t.Fatalf("ClaimRecord = %v, %v", won, err)
	}
	s.Close()

	s = openStore(t, cfg)
	if _, ok := seenLogEntries(t, s)[key("p1")]; ok {
		t.Fatal("p1's entry is in the log: the crash was not before it")
	}
	recs, err := s.Owned(ctx)
	if err != nil || len(recs) != 1 || recs[0].ID != "p1" {
		t.Fatalf("Owned = %v, %v; want p1's record", recs, err)
	}
	if ours, err := s.Reclaim(ctx, recs[0]); err != nil || !ours {
		t.Fatalf("Reclaim = %v, %v; want ours", ours, err)
	}
	if d, ok := seenLogEntries(t, s)[key("p1")]; !ok || d != "d1" {
		t.Fatalf("after Reclaim the log holds p1: %v, decision %q; want d1", ok, d)
	}
	if err := s.Delete(ctx, recs[0]); err != nil {
		t.Fatal(err)
	}
	if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d2")); err != nil || won || winner != "d1" {
		t.Fatalf("replay after the record ended: ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
	}
}
