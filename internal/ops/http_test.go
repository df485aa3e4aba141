package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/policies"
)

const token = "s3cret-token"

func do(t *testing.T, method, url, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasSuffix(url, "/metrics") && ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	return resp.StatusCode, string(body)
}

// compact re-encodes a JSON body without indentation, for exact comparison.
func compact(t *testing.T, body string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestOperatorCancelsPendingEscalation runs a real space, agent, policy
// engine and fulfiller (asking through elicit) behind the ops handler: a proposal
// escalated to a human who never answers is listed, shown and cancelled
// over HTTP, and its proposer receives the reject; the metrics follow.
func TestOperatorCancelsPendingEscalation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	spacetest.Join(t, ctx, srv, "alice", "human-token") // present, never answers
	spacetest.Join(t, ctx, srv, "fs", "human-token")
	fc := spacetest.Join(t, ctx, srv, "fulfiller", "fulfiller-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	policy := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(policy, []byte("package fulfiller\n\ndecision := {\"action\": \"escalate\", \"message\": \"a human decides\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A minute, not the 100 ms default: these tests assert decisions, and
	// under -race on a loaded machine a slow evaluation would fail closed.
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{policy}})
	if err != nil {
		t.Fatal(err)
	}

	src := &ops.Source{}
	m := ops.NewMetrics(src)
	h := ops.NewHandler(ops.Options{Source: src, Metrics: m, Token: token})
	hs := httptest.NewServer(h)
	defer hs.Close()

	if code, body := do(t, "GET", hs.URL+"/readyz", ""); code != 503 || compact(t, body) != `{"gateway":"unknown","reason":"not joined to the space yet; no policy loaded","status":"not_ready"}` {
		t.Fatalf("readyz before wiring: %d %s", code, body)
	}

	approvals := elicit.Config{Observer: m.ObserveApproval}.Approvals(fc.ID())
	ful := fulfill.New(fc, engine, fulfill.Config{Approvals: approvals, Approvers: []string{"alice"}, Observer: m})
	sub := fc.Subscribe(agent.SubscribeOptions{All: true, Buffer: 64})
	fulCtx, stopFul := context.WithCancel(context.Background())
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(fulCtx, sub.C()) }()
	defer func() {
		stopFul()
		<-fulDone
		sub.Close()
	}()
	src.SetGateway(fc)
	src.SetPolicy(engine)
	src.SetCounter(ful)
	h.SetOperator(ful)

	if code, body := do(t, "GET", hs.URL+"/readyz", ""); code != 200 || compact(t, body) != `{"gateway":"connected","revision":"`+engine.Revision()+`","status":"ready"}` {
		t.Fatalf("readyz: %d %s", code, body)
	}

	if _, err := prop.Propose(ctx, "p-1", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"delete","arguments":{"path":"/x"}}}`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the escalation is open", func() bool {
		s, ok := ful.Get("p-1")
		return ok && s.State == "awaiting_approval"
	})

	// Without the token: 401, and nothing is cancelled.
	for _, tok := range []string{"", "wrong"} {
		if code, body := do(t, "GET", hs.URL+"/v1/proposals", tok); code != 401 || compact(t, body) != `{"error":"missing or wrong bearer token"}` {
			t.Fatalf("token %q: %d %s", tok, code, body)
		}
		if code, _ := do(t, "DELETE", hs.URL+"/v1/proposals/p-1", tok); code != 401 {
			t.Fatalf("DELETE with token %q: %d", tok, code)
		}
	}

	code, body := do(t, "GET", hs.URL+"/v1/proposals", token)
	var list ops.ProposalList
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Proposals) != 1 {
		t.Fatalf("list: %d %v %s", code, err, body)
	}
	p := list.Proposals[0]
	if p.ID != "p-1" || p.From != "coder" || p.Method != "tools/call" || p.Tool != "delete" || p.Target != "fs" || p.Owner != "fulfiller" ||
		p.State != "awaiting_approval" || p.Revision != engine.Revision() || p.AgeSeconds < 0 ||
		p.Deadline.Sub(p.Received) < 4*time.Minute || p.Deadline.Sub(p.Received) > 5*time.Minute+time.Second {
		t.Fatalf("listed %+v", p)
	}
	if code, body := do(t, "GET", hs.URL+"/v1/proposals/p-1", token); code != 200 || !strings.Contains(body, `"state": "awaiting_approval"`) || !strings.Contains(body, `"owner": "fulfiller"`) || !strings.Contains(body, `"age_seconds": `) {
		t.Fatalf("show: %d %s", code, body)
	}
	if code, body := do(t, "GET", hs.URL+"/v1/proposals/nope", token); code != 404 || compact(t, body) != `{"error":"no pending proposal nope"}` {
		t.Fatalf("show unknown: %d %s", code, body)
	}
	if _, metrics := do(t, "GET", hs.URL+"/metrics", ""); !strings.Contains(metrics, "\nfulfiller_escalations_open 1\n") {
		t.Fatalf("open escalations not 1:\n%s", metrics)
	}

	if code, body := do(t, "DELETE", hs.URL+"/v1/proposals/p-1", token); code != 200 || compact(t, body) != `{"id":"p-1","reason":"other","status":"rejected"}` {
		t.Fatalf("cancel: %d %s", code, body)
	}
	out, err := prop.Wait(ctx, "p-1")
	if err != nil || !out.Rejected || out.Reason != "other" || out.RejectedBy != "fulfiller" {
		t.Fatalf("proposer got %+v, %v", out, err)
	}
	if chat := prop.WaitChat(ctx, "p-1"); !strings.HasPrefix(chat, "cancelled by the operator (http ") {
		t.Fatalf("explanation %q", chat)
	}
	// The record ends once the reject is written, a moment after the
	// proposer has it (until then a cancel is told it was answered).
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := do(t, "GET", hs.URL+"/v1/proposals", token)
		if code == 200 && compact(t, body) == `{"proposals":[]}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list after: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A second cancel rejects nothing more: 409 while the core still
	// holds the answered proposal (its record's delete may still be on
	// its way after the list is empty), then 404.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := do(t, "DELETE", hs.URL+"/v1/proposals/p-1", token)
		if code == 404 && compact(t, body) == `{"error":"no pending proposal p-1"}` {
			break
		}
		if code != 409 || compact(t, body) != `{"error":"proposal p-1 was already answered, or its fulfilment request is out"}` || time.Now().After(deadline) {
			t.Fatalf("cancel again: %d %s", code, body)
		}
	}
	if code, body := do(t, "GET", hs.URL+"/v1/policy", token); code != 200 || compact(t, body) != `{"default":false,"files":["`+policy+`"],"revision":"`+engine.Revision()+`"}` {
		t.Fatalf("policy: %d %s", code, body)
	}

	// The metrics saw it all.
	_, metrics := do(t, "GET", hs.URL+"/metrics", "")
	for _, want := range []string{
		`fulfiller_proposals_received_total 1`,
		`fulfiller_decisions_total{action="escalate",failed="0"} 1`,
		`fulfiller_proposals_total{outcome="rejected",reason="other"} 1`,
		`fulfiller_escalations_open 0`,
		`fulfiller_approval_wait_seconds_count{outcome="rejected"} 1`,
		`fulfiller_decision_duration_seconds_count 1`,
		`fulfiller_gateway_connected 1`,
		`fulfiller_proposals_pending 0`,
		`fulfiller_requests_inflight 0`,
		`fulfiller_policy_info{default="false",revision="` + engine.Revision() + `"} 1`,
		`fulfiller_policy_reload_failing 0`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}

	// The gateway goes away: not ready, with the reason.
	srv.Close()
	poll.Until(t, "readyz turns 503", func() bool {
		code, _ := do(t, "GET", hs.URL+"/readyz", "")
		return code == 503
	})
	if _, body := do(t, "GET", hs.URL+"/readyz", ""); compact(t, body) != `{"gateway":"disconnected","reason":"no welcome from the gateway (reconnecting)","revision":"`+engine.Revision()+`","status":"not_ready"}` {
		t.Fatalf("readyz after the gateway left: %s", body)
	}
	if code, _ := do(t, "GET", hs.URL+"/healthz", ""); code != 200 {
		t.Fatalf("healthz %d", code)
	}
}

type fakeGateway struct{ connected atomic.Bool }

func (g *fakeGateway) Connected() bool    { return g.connected.Load() }
func (g *fakeGateway) Stats() agent.Stats { return agent.Stats{Reconnects: 3, SessionsLost: 4} }

type fakePolicy struct {
	err error
}

func (fakePolicy) Revision() string         { return "sha256:abc" }
func (fakePolicy) Files() []string          { return []string{"/etc/fulfiller/policy.rego"} }
func (fakePolicy) IsDefault() bool          { return false }
func (p fakePolicy) LastReloadError() error { return p.err }

// TestReadyzFlips walks /readyz through every state: nothing known, a
// policy but no session, a session that is lost and comes back, and a
// failed reload (still ready: the last good policy is in force).
func TestReadyzFlips(t *testing.T) {
	src := &ops.Source{}
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src}))
	defer hs.Close()
	check := func(wantCode int, want string) {
		t.Helper()
		code, body := do(t, "GET", hs.URL+"/readyz", "")
		if code != wantCode || compact(t, body) != want {
			t.Fatalf("readyz = %d %s, want %d %s", code, compact(t, body), wantCode, want)
		}
	}
	check(503, `{"gateway":"unknown","reason":"not joined to the space yet; no policy loaded","status":"not_ready"}`)
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	check(503, `{"gateway":"connected","reason":"no policy loaded","status":"not_ready"}`)
	src.SetPolicy(fakePolicy{})
	check(200, `{"gateway":"connected","revision":"sha256:abc","status":"ready"}`)
	gw.connected.Store(false)
	check(503, `{"gateway":"disconnected","reason":"no welcome from the gateway (reconnecting)","revision":"sha256:abc","status":"not_ready"}`)
	gw.connected.Store(true)
	src.SetPolicy(fakePolicy{err: errors.New("policy.rego:3: rego_parse_error")})
	check(200, `{"gateway":"connected","reload_error":"policy.rego:3: rego_parse_error","revision":"sha256:abc","status":"ready"}`)
}
