package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// hostileIDs are proposal ids a hostile proposer might choose: subject
// separators and wildcards, whitespace, unicode, an empty id, and ids past
// the plain-key limit.
var hostileIDs = []string{
	"a.b", "*", ">", "a.>", "has space", "tab\there", "nl\nx", "ünïcødé-✓", "", ".", "..",
	"$KV.x.y", strings.Repeat("x", maxPlainID), strings.Repeat("y", maxPlainID+1), strings.Repeat("z", 10<<10),
	"\x00\xff", "b" + "aGVsbG8", // looks like an encoded key
}

func TestKeysOfHostileIDsAreValidAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, id := range hostileIDs {
		k := key(id)
		for _, r := range k {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				t.Errorf("key(%q) = %q has %q", truncate(id), k, r)
			}
		}
		if len(k) > 256 {
			t.Errorf("key(%q) is %d bytes", truncate(id), len(k))
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("ids %q and %q share key %q", truncate(prev), truncate(id), k)
		}
		seen[k] = id
	}
	if id, ok := idOf(key("a.b")); !ok || id != "a.b" {
		t.Errorf("idOf(key(a.b)) = %q, %v", id, ok)
	}
	if bucketName("kind", "a.b") == bucketName("kind", "a_b") {
		t.Error("spaces a.b and a_b share a bucket")
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		err  string
	}{
		{in: "memory", want: Mode{Kind: Memory}},
		{in: "fulfiller.state", want: Mode{Kind: Dir, Dir: "fulfiller.state"}},
		{in: "./memory", want: Mode{Kind: Dir, Dir: "memory"}},
		{in: "/var/lib/f/", want: Mode{Kind: Dir, Dir: "/var/lib/f"}},
		{in: "nats://h:4222", want: Mode{Kind: External, URLs: []string{"nats://h:4222"}}},
		{in: "nats://a:4222, tls://b:4222", want: Mode{Kind: External, URLs: []string{"nats://a:4222", "tls://b:4222"}}},
		{in: "", err: "empty"},
		{in: "nats://user:secret@h:4222", err: "carries credentials"},
		{in: "nats://tok@h:4222", err: "carries credentials"},
		{in: "http://h:4222", err: "scheme must be"},
		{in: "nats://", err: "no host"},
		{in: "nats://h:4222/x", err: "only scheme://host"},
		{in: "nats://h:4222?x=1", err: "only scheme://host"},
	} {
		got, err := ParseMode(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMode(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseMode(%q) error leaks the secret: %v", tc.in, err)
			}
			continue
		}
		if err != nil || got.String() != tc.want.String() || got.Kind != tc.want.Kind {
			t.Errorf("ParseMode(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestClaim(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			for _, id := range hostileIDs {
				won, err := s.Claim(ctx, id)
				if err != nil || !won {
					t.Fatalf("first Claim(%q) = %v, %v; want won", truncate(id), won, err)
				}
			}
			for _, id := range hostileIDs {
				if won, err := s.Claim(ctx, id); err != nil || won {
					t.Fatalf("second Claim(%q) = %v, %v; want lost", truncate(id), won, err)
				}
			}
			// Concurrent claimers of one id: exactly one wins.
			var wins atomic.Int32
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					won, err := s.Claim(ctx, "contended")
					if err != nil {
						t.Error(err)
					}
					if won {
						wins.Add(1)
					}
				})
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d winners, want 1", wins.Load())
			}
		})
	}
}

// TestClaimOneWinnerAcrossMembers: several members, each on its own
// connection to a different server of the cluster, claim the same ids at
// once; each id has exactly one winner.
func TestClaimOneWinnerAcrossMembers(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	var stores []*Store
	for i := range 3 {
		stores = append(stores, clusterStore(t, space, fmt.Sprintf("m%d", i)))
	}
	ctx := ctxT(t)
	const ids = 50
	wins := make([]atomic.Int32, ids)
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for i := range ids {
				won, err := s.Claim(ctx, fmt.Sprintf("p-%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				if won {
					wins[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i := range wins {
		if n := wins[i].Load(); n != 1 {
			t.Errorf("id p-%d: %d winners, want 1", i, n)
		}
	}
}

// TestClaimReplayAfterManyIDs is the red-team flood of issue 14: a fulfilled
// proposal's id replayed after 100 000 other ids, and after a restart of
// the store's server, is still seen. The server is a nats-server process
// with a file store, as an operator runs it (testenv.NATSServer; name a
// nats-server binary in FULFILLER_TEST_NATS_SERVER_BIN to keep the race
// detector out of it). It is a soak run, skipped with -short; what keeps it passing,
// a seen bucket limited by age and not by count, is checked in every run by
// TestSeenIsLimitedByAgeNotCount.
func TestClaimReplayAfterManyIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("soak run (100 000 claims); go test without -short runs it")
	}
	t.Parallel() // a server process of its own
	srv := startNATSProcess(t)
	cfg := Config{Mode: Mode{Kind: External, URLs: []string{srv.url}}, Space: "flood", Member: "m"}
	s := openStore(t, cfg)
	if won, err := s.Claim(ctxT(t), "victim"); err != nil || !won {
		t.Fatalf("Claim(victim) = %v, %v", won, err)
	}
	// The flood has a deadline of its own: on a slow machine it can take
	// more than the minute of ctxT (seen in CI: a deadline at id 59 631),
	// which says nothing about the store.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The flood is written as Claim writes (create-if-absent on the seen
	// key), pipelined so that 100 000 of them fit in a test's time on a
	// busy machine; Claim itself is tested one id at a time elsewhere.
	const n = 100_000
	subject := "$KV." + bucketName("seen", "flood") + "."
	const window = 1000 // under the client's limit of outstanding acks
	for start := 0; start < n; start += window {
		acks := make([]jetstream.PubAckFuture, 0, window)
		for i := start; i < start+window; i++ {
			m := nats.NewMsg(subject + key(fmt.Sprintf("flood-%d", i)))
			m.Data = []byte(`{"member":"flooder"}`)
			f, err := s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(0))
			if err != nil {
				t.Fatalf("flood %d: %v", i, err)
			}
			acks = append(acks, f)
		}
		for i, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("flood %d: %v", start+i, err)
			case <-ctx.Done():
				t.Fatalf("flood %d: %v", start+i, ctx.Err())
			}
		}
	}
	ctx = ctxT(t)
	if won, err := s.Claim(ctx, "victim"); err != nil || won {
		t.Fatalf("replayed Claim(victim) = %v, %v; want not won", won, err)
	}
	s.Close()
	srv.restart(t)
	s = openStore(t, cfg)
	for _, id := range []string{"victim", "flood-0", fmt.Sprintf("flood-%d", n-1)} {
		if won, err := s.Claim(ctx, id); err != nil || won {
			t.Fatalf("Claim(%s) after the restart = %v, %v; want not won", id, won, err)
		}
	}
	if won, err := s.Claim(ctx, "fresh"); err != nil || !won {
		t.Fatalf("Claim(fresh) after the restart = %v, %v; want won", won, err)
	}
}

// natsProcess is a nats-server process with JetStream in a directory of
// the test's, on a loopback port.
type natsProcess struct {
	bin, dir, addr, url string
	cmd                 *exec.Cmd
}

func startNATSProcess(t *testing.T) *natsProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &natsProcess{bin: testenv.NATSServer(t), dir: t.TempDir(), addr: addr, url: "nats://" + addr}
	p.start(t)
	t.Cleanup(p.stop)
	return p
}

func (p *natsProcess) start(t *testing.T) {
	t.Helper()
	_, port, _ := net.SplitHostPort(p.addr)
	p.cmd = exec.Command(p.bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", p.dir)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", p.addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s did not listen within 20s", p.addr)
		}
	}
}

// stop ends the server as an operator's restart would (SIGTERM: it
// flushes its file store).
func (p *natsProcess) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

func (p *natsProcess) restart(t *testing.T) {
	t.Helper()
	p.stop()
	p.start(t)
}

func TestClaimSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Mode: Mode{Kind: Dir, Dir: dir}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	if won, err := s.Claim(ctx, "p1"); err != nil || !won {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	s.Close()
	s = openStore(t, cfg)
	if won, err := s.Claim(ctx, "p1"); err != nil || won {
		t.Fatalf("Claim after restart = %v, %v; want not won", won, err)
	}
}

// TestSeenIsLimitedByAgeNotCount is the fast half of
// TestClaimReplayAfterManyIDs (a soak run): the seen ids are forgotten
// only by age (MaxAge = SeenTTL), never to make room, so no number of
// other ids can push a claimed one out. The old in-process seen set was an
// LRU of 65 536 ids, and a flood of 65 546 replayed the first. A store
// alone keeps them in its seen log (TestSeenLogKeepsEveryIDWithinTheTTL
// checks its memory); the embedded modes are checked here, the cluster's
// replicated open would only add time.
func TestSeenIsLimitedByAgeNotCount(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	const ttl = 90 * time.Minute
	for _, b := range backends(t)[:2] { // memory, dir
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m", func(c *Config) { c.SeenTTL = ttl })
			ctx := ctxT(t)
			st, err := s.js.Stream(ctx, bucketName("seenlog", s.cfg.Space))
			if err != nil {
				t.Fatal(err)
			}
			c := st.CachedInfo().Config
			if c.MaxAge != ttl {
				t.Errorf("seen log MaxAge %v, want the SeenTTL %v", c.MaxAge, ttl)
			}
			if c.MaxMsgs > 0 || c.MaxBytes > 0 || c.MaxMsgsPerSubject > 0 || c.Discard != jetstream.DiscardOld {
				t.Errorf("seen log limits max_msgs %d, max_bytes %d, max_msgs_per_subject %d: want no bound on the number of ids",
					c.MaxMsgs, c.MaxBytes, c.MaxMsgsPerSubject)
			}
			if _, err := s.js.Stream(ctx, "KV_"+bucketName("seen", s.cfg.Space)); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("a store alone has a seen bucket too (%v): its ids would be kept twice", err)
			}
		})
	}
}

// TestClaimableAgainAfterSeenTTL documents the window of rule 5: an id is
// seen for SeenTTL after its claim, then forgotten.
func TestClaimableAgainAfterSeenTTL(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m", SeenTTL: time.Second})
	ctx := ctxT(t)
	if won, err := s.Claim(ctx, "p1"); err != nil || !won {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	if won, err := s.Claim(ctx, "p1"); err != nil || won {
		t.Fatalf("Claim within TTL = %v, %v; want not won", won, err)
	}
	err := eventually(30*time.Second, func() error {
		won, err := s.Claim(ctx, "p1")
		if err != nil {
			return err
		}
		if !won {
			return errors.New("still seen")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("id not claimable after SeenTTL: %v", err)
	}
}

func samplePending(id, owner string) *lifecycle.Proposal {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &lifecycle.Proposal{
		ID:         id,
		Envelope:   json.RawMessage(`{"protocol":"mew/v0.4","id":"` + "x" + `","kind":"mcp/proposal","payload":{"method":"tools/call"}}`),
		From:       "agent-1",
		Received:   now,
		Size:       123,
		Decision:   &lifecycle.Decision{Action: lifecycle.Escalate, Approvers: []string{"alice"}, Revision: "rev-abc"},
		DecisionID: "d-1",
		Phase:      AwaitingApproval,
		Owner:      owner,
		Deadline:   now.Add(30 * time.Second),
		Prompts:    []Prompt{{Approver: "alice", EnvelopeID: "e-1", RPCID: 7, Chain: []string{"alice"}, Sent: now}},
	}
}

func TestPendingRecords(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			if err := s.Put(ctx, samplePending("\xff", "m1")); err == nil || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("Put of a non-UTF-8 id = %v, want a UTF-8 error", err)
			}
			for _, id := range hostileIDs {
				if !utf8.ValidString(id) {
					continue
				}
				p := samplePending(id, "m1")
				if err := s.Put(ctx, p); err != nil {
					t.Fatalf("Put(%q): %v", truncate(id), err)
				}
				got, err := s.Get(ctx, id)
				if err != nil {
					t.Fatalf("Get(%q): %v", truncate(id), err)
				}
				assertSamePending(t, got, p)
			}
			if err := s.Put(ctx, samplePending("a.b", "m1")); !errors.Is(err, ErrExists) {
				t.Fatalf("second Put = %v, want ErrExists", err)
			}
			all, err := s.List(ctx)
			if err != nil || len(all) != len(hostileIDs)-1 {
				t.Fatalf("List = %d records, %v; want %d", len(all), err, len(hostileIDs)-1)
			}

			p, _ := s.Get(ctx, "a.b")
			stale := *p
			p.Phase = Fulfilling
			p.Request = &Request{EnvelopeID: "req-1", RPCID: 9, Target: "tools", SentAt: time.Now().UTC()}
			if err := s.Update(ctx, p); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if p.Rev == stale.Rev {
				t.Fatal("Update did not advance Rev")
			}
			stale.Phase = Queued
			if err := s.Update(ctx, &stale); !errors.Is(err, ErrConflict) {
				t.Fatalf("Update at stale revision = %v, want ErrConflict", err)
			}
			cleared := *p
			cleared.Request = nil
			if err := s.Update(ctx, &cleared); !errors.Is(err, ErrRequestRewritten) {
				t.Fatalf("Update clearing Request = %v, want ErrRequestRewritten", err)
			}
			changed := *p
			changed.Request = &Request{EnvelopeID: "req-2", RPCID: 10, Target: "tools", SentAt: p.Request.SentAt}
			if err := s.Update(ctx, &changed); !errors.Is(err, ErrRequestRewritten) {
				t.Fatalf("Update changing Request = %v, want ErrRequestRewritten", err)
			}
			// UpdateSoon keeps the same rules; only the wait for the
			// disk differs.
			if err := s.UpdateSoon(ctx, &changed); !errors.Is(err, ErrRequestRewritten) {
				t.Fatalf("UpdateSoon changing Request = %v, want ErrRequestRewritten", err)
			}
			if err := s.UpdateSoon(ctx, &stale); !errors.Is(err, ErrConflict) {
				t.Fatalf("UpdateSoon at stale revision = %v, want ErrConflict", err)
			}
			noted := *p
			noted.Approvals = []Approval{{Approver: "alice", At: time.Now().UTC()}}
			if err := s.UpdateSoon(ctx, &noted); err != nil || noted.Rev == p.Rev {
				t.Fatalf("UpdateSoon = %v (revision %d, was %d)", err, noted.Rev, p.Rev)
			}
			*p = noted
			got, _ := s.Get(ctx, "a.b")
			if got.Phase != Fulfilling || got.Request == nil || got.Request.EnvelopeID != "req-1" {
				t.Fatalf("record after refused updates = %+v", got)
			}

			if err := s.Delete(ctx, &stale); !errors.Is(err, ErrConflict) {
				t.Fatalf("Delete at stale revision = %v, want ErrConflict", err)
			}
			if err := s.Delete(ctx, p); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := s.Get(ctx, "a.b"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
			}
			if err := s.Update(ctx, p); !errors.Is(err, ErrConflict) {
				t.Fatalf("Update after Delete = %v, want ErrConflict", err)
			}
			// A finished proposal's record can be created again only by a
			// new claim winner; the store itself allows it.
			if err := s.Put(ctx, samplePending("a.b", "m1")); err != nil {
				t.Fatalf("Put after Delete: %v", err)
			}
		})
	}
}

func assertSamePending(t *testing.T, got, want *lifecycle.Proposal) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) || got.Rev != want.Rev {
		t.Fatalf("record differs:\n got %s (rev %d)\nwant %s (rev %d)", g, got.Rev, w, want.Rev)
	}
}

// MarkAnswered moves a record to phase Answered with its reject, by
// compare-and-set like Update: the record reads back with the reject, a
// stale revision is ErrConflict, a record without a reject is refused,
// an operator's Take refuses an answered record (its reject is being
// written), and Delete then ends it.
func TestMarkAnswered(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			p := samplePending("p.9", "m1")
			if err := s.Put(ctx, p); err != nil {
				t.Fatal(err)
			}
			stale := *p
			bad := *p
			bad.Phase = Answered
			if err := s.MarkAnswered(ctx, &bad); err == nil || errors.Is(err, ErrConflict) {
				t.Errorf("MarkAnswered without a reject = %v, want a refusal", err)
			}
			ans := *p
			ans.Phase, ans.Reject = Answered, &Reject{EnvelopeID: "rej-1", Reason: "policy", Message: "no"}
			if err := s.MarkAnswered(ctx, &ans); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "p.9")
			if err != nil || got.Phase != Answered || got.Reject == nil || *got.Reject != *ans.Reject || got.Rev != ans.Rev {
				t.Fatalf("Get after MarkAnswered = %+v, %v", got, err)
			}
			stale.Phase, stale.Reject = Answered, &Reject{EnvelopeID: "rej-2", Reason: "other"}
			if err := s.MarkAnswered(ctx, &stale); !errors.Is(err, ErrConflict) {
				t.Errorf("MarkAnswered at a stale revision = %v, want ErrConflict", err)
			}
			if _, err := s.Take(ctx, "p.9"); !errors.Is(err, ErrAnswered) {
				t.Errorf("Take of an answered record = %v, want ErrAnswered", err)
			}
			if err := s.Delete(ctx, &ans); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "p.9"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get after Delete = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			env := []byte(`{"kind":"mcp/reject","correlation_id":["p.1"],"payload":{"reason":"timeout"}}`)
			if err := s.Enqueue(ctx, "p.1", env); err != nil {
				t.Fatal(err)
			}
			if err := s.Enqueue(ctx, "p.1", env); !errors.Is(err, ErrExists) {
				t.Fatalf("second answer to one proposal = %v, want ErrExists", err)
			}
			as, err := s.Outbox(ctx)
			if err != nil || len(as) != 1 || as[0].ProposalID != "p.1" || string(as[0].Envelope) != string(env) || as[0].Owner != "m1" {
				t.Fatalf("Outbox = %+v, %v", as, err)
			}
			if err := s.Ack(ctx, "p.1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Ack(ctx, "p.1"); err != nil {
				t.Fatalf("second Ack: %v", err)
			}
			if as, err := s.Outbox(ctx); err != nil || len(as) != 0 {
				t.Fatalf("Outbox after Ack = %+v, %v", as, err)
			}
		})
	}
}

func TestRestartKeepsRecordsAndIDs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fulfiller.state")
	cfg := Config{Mode: Mode{Kind: Dir, Dir: dir}, Space: "s", Member: "m"}
	s := openStore(t, cfg)
	ctx := ctxT(t)
	var want []*lifecycle.Proposal
	for i := range 5 {
		p := samplePending(fmt.Sprintf("p%d", i), "m")
		p.Deadline = p.Received.Add(time.Duration(i) * time.Minute)
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	if err := s.Enqueue(ctx, "p9", []byte(`{"kind":"mcp/reject"}`)); err != nil {
		t.Fatal(err)
	}
	last, err := s.NextRPCID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openStore(t, cfg)
	got, err := s.Owned(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("Owned after restart = %d, %v; want %d", len(got), err, len(want))
	}
	for _, w := range want {
		g, err := s.Get(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertSamePending(t, g, w)
	}
	if as, err := s.Outbox(ctx); err != nil || len(as) != 1 {
		t.Fatalf("Outbox after restart = %+v, %v", as, err)
	}
	next, err := s.NextRPCID(ctx)
	if err != nil || next <= last {
		t.Fatalf("NextRPCID after restart = %d, %v; want > %d", next, err, last)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
}
