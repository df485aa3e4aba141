package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/policies"
)

// escalateAll sends every proposal to the approvers.
const escalateAll = "package fulfiller\n\ndecision := {\"action\": \"escalate\", \"message\": \"a human decides\"}\n"

// world is a space with a human (alice, who never answers), a tool owner
// (fs, who offers nothing) and a proposer (coder), and a sidecar
// configuration for it: a memory store, a decision log, the HTTP
// listener on a free port, escalating to alice.
type world struct {
	srv   *space.Server
	wire  *spacetest.Wire
	cfg   Config
	dlog  string
	coder *proposer.Proposer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.rego")
	if err := os.WriteFile(policy, []byte(escalateAll), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	w := &world{srv: srv, wire: spacetest.RecordWire(t, srv), dlog: filepath.Join(dir, "decisions.jsonl")}
	w.cfg = Config{
		Gateway: srv.URL(), Space: space.DefaultSpaceID, Token: "fulfiller-token", ID: "fulfiller",
		// A minute per evaluation: a loaded CI machine must not turn the
		// escalation into a fail-closed reject.
		Policy:    policies.Options{Policies: []string{policy}, Timeout: time.Minute},
		State:     &StateConfig{Mode: state.Mode{Kind: state.Memory}},
		Approvers: []string{"alice"},
		Ops:       OpsConfig{DecisionLog: w.dlog, Sync: decisionlog.SyncAlways, HTTP: "127.0.0.1:0"},
	}
	return w
}

// join connects the world's other participants; they leave when the
// test ends.
func (w *world) join(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	spacetest.Join(t, ctx, w.srv, "alice", "human-token")
	spacetest.Join(t, ctx, w.srv, "fs", "human-token")
	w.coder = spacetest.NewProposer(t, spacetest.Join(t, ctx, w.srv, "coder", "coder-token"))
}

// checkNoLeak fails the test when a goroutine started after it was
// called is still running once the test and its cleanups are done. It
// runs last: registered first, its cleanup is the last to run. The
// pending proposals' expirable LRU (fulfill) is the one exception, as in
// every leak check of the repository: golang-lru v2.0.7 never stops its
// expiry goroutine.
func checkNoLeak(t *testing.T) {
	t.Helper()
	ignore := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1")}
	t.Cleanup(func() {
		if err := goleak.Find(ignore...); err != nil {
			t.Errorf("goroutines left behind: %v", err)
		}
	})
}

func get(addr, path string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Stop runs in reverse order of Start, as `fulfiller run` always has: the
// fulfiller answers its pending proposal (reject "other") and cancels
// the prompt while the client is still joined; only then does it leave
// the space; the decision log holds the final outcome (it is flushed
// after the fulfiller stopped); the store's lease is gone, and the
// listener is closed. Nothing it started is left running.
func TestStopAnswersThenLeavesInReverseOrder(t *testing.T) {
	checkNoLeak(t)
	w := newWorld(t)
	w.join(t)
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	addr := sc.OpsAddr()
	poll.Until(t, "/readyz says ready", func() bool { code, _, _ := get(addr, "/readyz"); return code == 200 })
	poll.Until(t, "the fulfiller sees coder", func() bool {
		return slices.ContainsFunc(sc.Client().Roster(), func(p agent.Participant) bool { return p.ID == "coder" })
	})
	if _, err := w.coder.Propose(t.Context(), "p-1", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`)); err != nil {
		t.Fatal(err)
	}
	w.wire.WaitFor(t, "the prompt to alice", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && slices.Equal(e.To, []string{"alice"}) && strings.Contains(string(e.Payload), `"method":"elicitation/create"`)
	})
	members, err := sc.Store().Members(t.Context())
	if err != nil || len(members) != 1 {
		t.Fatalf("members before stop: %v, %v; want this sidecar's lease", members, err)
	}

	if err := sc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// The space announces the leave once it has seen the socket close,
	// which may be after Stop returns (seen once under a full -race run).
	isLeave := func(e agent.Envelope) bool {
		return e.Kind == agent.KindPresence && strings.Contains(string(e.Payload), `"event":"leave"`) && strings.Contains(string(e.Payload), `"id":"fulfiller"`)
	}
	w.wire.WaitFor(t, "the fulfiller's leave", isLeave)
	envs := w.wire.Envelopes()
	at := func(what string, pred func(agent.Envelope) bool) int {
		t.Helper()
		i := slices.IndexFunc(envs, pred)
		if i < 0 {
			t.Fatalf("no %s on the wire", what)
		}
		return i
	}
	reject := at("reject of p-1", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindReject && slices.Equal(e.CorrelationID, []string{"p-1"}) && strings.Contains(string(e.Payload), `"reason":"other"`)
	})
	cancelled := at("the prompt's cancellation", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && slices.Equal(e.To, []string{"alice"}) && strings.Contains(string(e.Payload), `"method":"notifications/cancelled"`)
	})
	left := at("the fulfiller's leave", isLeave)
	if !(reject < left && cancelled < left) {
		t.Errorf("wire order: reject %d, cancellation %d, leave %d; want the answers before the leave", reject, cancelled, left)
	}
	// The decision log was flushed and closed after the fulfiller
	// stopped: it holds the shutdown's answer.
	if !slices.ContainsFunc(records(t, w.dlog), func(r map[string]any) bool {
		return r["stage"] == "rejected" && r["reason"] == "other" && r["proposal_id"] == "p-1"
	}) {
		t.Errorf("the decision log lacks p-1's shutdown reject:\n%v", records(t, w.dlog))
	}
	if code, _, err := get(addr, "/healthz"); err == nil {
		t.Errorf("/healthz answers %d after Stop: the listener is still up", code)
	}
	if err := sc.Store().Ping(context.Background()); err == nil {
		t.Error("the store still answers after Stop")
	}
	if err := sc.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// records are the decision log's JSON lines.
func records(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("decision log line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// Every part on at once (store, decision log, listener, shadow policy,
// tool metadata, a notification target): Stop leaves no goroutine the
// sidecar started behind, and the listener's port is free again.
func TestStopReleasesEverything(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer hook.Close()
	checkNoLeak(t)
	w := newWorld(t)
	dir := t.TempDir()
	meta := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(meta, []byte("fs:\n  read_file: {annotations: {readOnlyHint: true}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target, err := notify.ParseTarget(hook.URL, notify.Options{Secret: []byte("test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	shadow := w.cfg.Policy
	w.cfg.Shadow, w.cfg.ToolMetadata, w.cfg.Notify = &shadow, meta, []notify.Target{target}
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	addr := sc.OpsAddr()
	if code, body, err := get(addr, "/metrics"); err != nil || code != 200 || !strings.Contains(body, "fulfiller_state_lease_renewals_total") && !strings.Contains(body, "fulfiller_state_op_duration_seconds") {
		t.Errorf("/metrics: %d %v, want the store's metrics:\n%.500s", code, err, body)
	}
	if err := sc.Stop(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the listener's port is still taken after Stop: %v", err)
	}
	ln.Close()
}

// A part that fails to start stops what started before it: here the
// policy does not load, after the decision log and the listener
// started. The error names the part and keeps the loader's message.
func TestStartFailureStopsWhatStarted(t *testing.T) {
	checkNoLeak(t)
	w := newWorld(t)
	missing := filepath.Join(t.TempDir(), "no-such-policy.rego")
	w.cfg.Policy.Policies = []string{missing}
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = sc.Start(t.Context())
	var se *StartError
	if !errors.As(err, &se) || se.Part != PartPolicy || !strings.Contains(err.Error(), missing) {
		t.Fatalf("start: %v; want a policy StartError naming %s", err, missing)
	}
	if slices.Contains(w.srv.Participants(), "fulfiller") {
		t.Error("the fulfiller joined although its policy did not load")
	}
	if err := sc.Stop(); err != nil {
		t.Errorf("stop after a failed start: %v", err)
	}
	select {
	case <-sc.Done():
	default:
		t.Error("Done is not closed after a failed start")
	}
}

// Run runs until its context ends (SIGTERM for `fulfiller run`), then
// stops everything and returns nil after a clean shutdown.
func TestRunStopsWhenContextEnds(t *testing.T) {
	checkNoLeak(t)
	w := newWorld(t)
	w.cfg.Ops = OpsConfig{}
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	poll.Until(t, "the fulfiller joins", func() bool { return slices.Contains(w.srv.Participants(), "fulfiller") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(spacetest.Timeout):
		t.Fatal("Run did not return after its context ended")
	}
	poll.Until(t, "the fulfiller leaves", func() bool { return !slices.Contains(w.srv.Participants(), "fulfiller") })
}

// An interrupt before the sidecar has joined is a clean stop: Run
// returns nil and leaves nothing running.
func TestRunInterruptedWhileStartingIsCleanStop(t *testing.T) {
	checkNoLeak(t)
	w := newWorld(t)
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := sc.Run(ctx); err != nil {
		t.Fatalf("run interrupted while starting: %v", err)
	}
	if slices.Contains(w.srv.Participants(), "fulfiller") {
		t.Error("the fulfiller joined after the interrupt")
	}
}

// The last part that can fail is the join: when it does, every part
// started before it (the listener, the decision log, the notifier, the
// store and its probe) is stopped again, nothing is left running, and
// the error names the join.
func TestJoinFailureStopsEveryPartBeforeIt(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer hook.Close()
	checkNoLeak(t)
	w := newWorld(t)
	target, err := notify.ParseTarget(hook.URL, notify.Options{Secret: []byte("test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Notify = []notify.Target{target}
	// A gateway that is gone: its port refuses the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Gateway = "ws://" + ln.Addr().String() + "/"
	ln.Close()
	sc, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = sc.Start(t.Context())
	var se *StartError
	if !errors.As(err, &se) || se.Part != PartJoin {
		t.Fatalf("start: %v; want a join StartError", err)
	}
	if err := sc.Store().Ping(context.Background()); err == nil {
		t.Error("the store still answers after a failed start")
	}
	if addr := sc.OpsAddr(); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("the listener's port is still taken after a failed start: %v", err)
		} else {
			ln.Close()
		}
	}
	select {
	case <-sc.Done():
	default:
		t.Error("Done is not closed after a failed start")
	}
	if err := sc.Stop(); err != nil {
		t.Errorf("stop after a failed start: %v", err)
	}
}
