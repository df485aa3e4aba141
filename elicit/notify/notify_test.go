package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0       = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	deadline = t0.Add(15 * time.Minute)
)

// opened is the escalation's event for a write_file escalation to alice and
// bob; args are set only when the decision said notify_arguments.
func opened(args string) elicit.Event {
	p := &elicit.Prompt{Proposer: "coder", Method: "tools/call", Tool: "write_file", Target: "fs",
		Digest: "56dcae76b714dbaa642acc38da0ecd147d6fe2a25a07e5745b5fac7f2c0c0264", Asked: []string{"alice", "bob"}, Quorum: 1, Deadline: deadline}
	if args != "" {
		p.Arguments = json.RawMessage(args)
	}
	return elicit.Event{Time: t0, Kind: elicit.EventOpened, ProposalID: "p-write", Prompt: p}
}

func ended(outcome, reason string) elicit.Event {
	e := opened("")
	e.Kind, e.Time, e.Outcome, e.Reason = elicit.EventEnded, t0.Add(time.Minute), outcome, reason
	return e
}

// receiver is a webhook endpoint that checks the signature as
// docs/operations.md tells receivers to, and keeps the bodies it
// accepted.
type receiver struct {
	secret []byte
	mu     sync.Mutex
	bodies []string
	events []string
	got    chan struct{}
	// fail, when set, answers an accepted request with this status
	// (attempt counts from 1).
	fail     func(attempt int) int
	attempts atomic.Int32
}

func newReceiver(t *testing.T, secret string) (*receiver, *httptest.Server) {
	r := &receiver{secret: []byte(secret), got: make(chan struct{}, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.attempts.Add(1))
		body, _ := io.ReadAll(req.Body)
		mac := hmac.New(sha256.New, r.secret)
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(req.Header.Get("X-Fulfiller-Signature")), []byte(want)) || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if r.fail != nil {
			if code := r.fail(n); code != 0 {
				w.WriteHeader(code)
				return
			}
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, string(body))
		r.events = append(r.events, req.Header.Get("X-Fulfiller-Event"))
		r.mu.Unlock()
		r.got <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) wait(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-r.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("the receiver got %d of %d events", len(r.bodies), n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string{}, r.bodies...)
}

// counts is a notify.Metrics that remembers.
type counts struct {
	mu      sync.Mutex
	results map[string]int
	retries map[string]int
}

func newCounts() *counts { return &counts{results: map[string]int{}, retries: map[string]int{}} }

func (c *counts) Notification(kind, result string) {
	c.mu.Lock()
	c.results[kind+" "+result]++
	c.mu.Unlock()
}

func (c *counts) NotificationRetry(kind string) {
	c.mu.Lock()
	c.retries[kind]++
	c.mu.Unlock()
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[key]
}

// run starts n and stops it at the end of the test.
func run(t *testing.T, n *notify.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func target(t *testing.T, raw string, opts notify.Options) notify.Target {
	t.Helper()
	tg, err := notify.ParseTarget(raw, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

const wantOpened = `{"type":"prompt.opened","time":"2026-11-22T10:00:00Z","space":"ops","proposal":"p-write","proposer":"coder","method":"tools/call","tool":"write_file","server":"fs","digest":"56dcae76b714","approvers":["alice","bob"],"quorum":1,"deadline":"2026-11-22T10:15:00Z","url":"https://inbox.example/approve#proposal=p-write"}`

func TestWebhookSignedExactBody(t *testing.T) {
	r, srv := newReceiver(t, "s3cret")
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, srv.URL+"/hook", notify.Options{Secret: []byte("s3cret")})},
		Space: "ops", InboxURL: "https://inbox.example/approve", Metrics: c})
	run(t, n)
	n.Observe(opened(""))
	n.Observe(elicit.Event{Kind: elicit.EventAsked, ProposalID: "p-write", Approver: "alice"}) // per approver: not a notification
	n.Observe(ended("disagree", "not during the freeze"))
	got := r.wait(t, 2)
	if got[0] != wantOpened {
		t.Errorf("prompt.opened body\n got %s\nwant %s", got[0], wantOpened)
	}
	wantEnded := `{"type":"prompt.ended","time":"2026-11-22T10:01:00Z","space":"ops","proposal":"p-write","proposer":"coder","method":"tools/call","tool":"write_file","server":"fs","digest":"56dcae76b714","approvers":["alice","bob"],"quorum":1,"deadline":"2026-11-22T10:15:00Z","url":"https://inbox.example/approve#proposal=p-write","outcome":"disagree","reason":"not during the freeze"}`
	if got[1] != wantEnded {
		t.Errorf("prompt.ended body\n got %s\nwant %s", got[1], wantEnded)
	}
	if strings.Join(r.events, ",") != "prompt.opened,prompt.ended" {
		t.Errorf("X-Fulfiller-Event headers %v", r.events)
	}
	poll.Until(t, "the sends counted", func() bool { return c.get("webhook sent") == 2 })
}

func TestWebhookArgumentsOnlyWhenTheDecisionSaysSo(t *testing.T) {
	r, srv := newReceiver(t, "s3cret")
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, srv.URL, notify.Options{Secret: []byte("s3cret")})}, Space: "ops", InboxURL: "https://inbox.example/approve"})
	run(t, n)
	n.Observe(opened(`{"path":"/srv/prod/motd","content":"hi"}`))
	got := r.wait(t, 1)
	want := strings.TrimSuffix(wantOpened, "}") + `,"arguments":{"path":"/srv/prod/motd","content":"hi"}}`
	if got[0] != want {
		t.Errorf("body\n got %s\nwant %s", got[0], want)
	}
}

func TestWebhookWrongSecretIsRefusedNotRetried(t *testing.T) {
	r, srv := newReceiver(t, "the receiver's")
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, srv.URL, notify.Options{Secret: []byte("another")})}, Metrics: c, Backoff: time.Millisecond})
	run(t, n)
	n.Observe(opened(""))
	poll.Until(t, "the failure counted", func() bool { return c.get("webhook failed") == 1 })
	if a := r.attempts.Load(); a != 1 {
		t.Errorf("%d attempts; a 401 is not retried", a)
	}
}

func TestRetriesUntilDelivered(t *testing.T) {
	r, srv := newReceiver(t, "k")
	r.fail = func(attempt int) int {
		if attempt <= 2 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, srv.URL, notify.Options{Secret: []byte("k")})}, Metrics: c, Backoff: 5 * time.Millisecond})
	run(t, n)
	n.Observe(opened(""))
	r.wait(t, 1)
	poll.Until(t, "the send counted", func() bool { return c.get("webhook sent") == 1 })
	if a := r.attempts.Load(); a != 3 {
		t.Errorf("%d attempts, want 3 (two failures, then delivered)", a)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retries["webhook"] != 2 || c.results["webhook failed"] != 0 {
		t.Errorf("retries %v, results %v", c.retries, c.results)
	}
}

func TestRetriesGiveUp(t *testing.T) {
	r, srv := newReceiver(t, "k")
	r.fail = func(int) int { return http.StatusBadGateway }
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, srv.URL, notify.Options{Secret: []byte("k")})}, Metrics: c, Attempts: 4, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	run(t, n)
	n.Observe(opened(""))
	poll.Until(t, "the failure counted", func() bool { return c.get("webhook failed") == 1 })
	if a := r.attempts.Load(); a != 4 {
		t.Errorf("%d attempts, want the 4 configured", a)
	}
}

// A full queue drops its oldest job, counted, and Observe never waits.
func TestFullQueueDropsOldest(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 16)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev notify.Event
		_ = json.NewDecoder(r.Body).Decode(&ev)
		arrived <- ev.Proposal
		<-release
	}))
	t.Cleanup(hang.Close)
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{target(t, hang.URL, notify.Options{Secret: []byte("k")})}, Metrics: c, QueueSize: 2, Timeout: time.Minute})
	run(t, n)
	t.Cleanup(func() { close(release) }) // before run's cleanup: the last delivery returns
	observe := func(id string) {
		e := opened("")
		e.ProposalID = id
		start := time.Now()
		n.Observe(e)
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("Observe took %s with a hanging receiver", d)
		}
	}
	observe("p1")
	if id := <-arrived; id != "p1" { // the worker now hangs on p1
		t.Fatalf("first delivery %s", id)
	}
	for _, id := range []string{"p2", "p3", "p4", "p5"} {
		observe(id)
	}
	// Of p2..p5 the queue (2) keeps the newest, p4 and p5.
	if d := c.get("webhook dropped"); d != 2 {
		t.Errorf("%d dropped, want 2", d)
	}
	release <- struct{}{} // p1 answered: next comes p4
	if id := <-arrived; id != "p4" {
		t.Errorf("after p1 the worker took %s, want p4 (p2 and p3 were the oldest)", id)
	}
	release <- struct{}{}
	if id := <-arrived; id != "p5" {
		t.Errorf("then %s, want p5", id)
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
