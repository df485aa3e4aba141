package ops_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/policies"
)

// A fulfiller joined with a wrong token gets what the reference gateway
// gives anyone: chat and mcp/response. It cannot answer, so /readyz says
// so, and no answer is recorded as sent: nothing reaches the wire, the
// events say undelivered, and the metrics count no reject.
func TestWrongTokenNotReadyAndNoAnswerCountedAsSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	wire := spacetest.RecordWire(t, srv)
	spacetest.Join(t, ctx, srv, "fs", "tool-token")
	fc := spacetest.Join(t, ctx, srv, "fulfiller", "not-the-fulfiller-token")
	prop := spacetest.NewProposer(t, spacetest.Join(t, ctx, srv, "coder", "coder-token"))

	policy := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(policy, []byte("package fulfiller\n\ndefault decision := {\"action\": \"reject\", \"reason\": \"policy\", \"message\": \"no\"}\n\ndecision := {\"action\": \"fulfill\"} if input.tool.name == \"read\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{policy}})
	if err != nil {
		t.Fatal(err)
	}
	src := &ops.Source{}
	m := ops.NewMetrics(src)
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Metrics: m}))
	defer hs.Close()

	var mu sync.Mutex
	var events []fulfill.Event
	record := fulfill.ObserverFunc(func(e fulfill.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	ful := fulfill.New(fc, engine, fulfill.Config{Observer: fulfill.Observers{m, record}})
	sub := fc.Subscribe(agent.SubscribeOptions{All: true, Buffer: 64})
	fulCtx, stopFul := context.WithCancel(context.Background())
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(fulCtx, sub.C()) }()
	defer func() { stopFul(); <-fulDone; sub.Close() }()
	src.SetGateway(fc)
	src.SetPolicy(engine)
	src.SetCounter(ful)

	code, body := do(t, "GET", hs.URL+"/readyz", "")
	if want := `{"gateway":"connected","reason":"the capabilities the gateway granted (chat, mcp/response) do not permit mcp/reject or mcp/request tools/call: check the token","revision":"` + engine.Revision() + `","status":"not_ready"}`; code != 503 || compact(t, body) != want {
		t.Fatalf("readyz: %d %s\nwant 503 %s", code, body, want)
	}

	// One the policy rejects, one it would fulfil (incapable, then).
	for _, p := range []struct{ id, call string }{
		{"p-write", `{"method":"tools/call","params":{"name":"write","arguments":{}}}`},
		{"p-read", `{"method":"tools/call","params":{"name":"read","arguments":{}}}`},
	} {
		if _, err := prop.Propose(ctx, p.id, []string{"fs"}, []byte(p.call)); err != nil {
			t.Fatal(err)
		}
	}
	undelivered := func() map[string]fulfill.Event {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]fulfill.Event{}
		for _, e := range events {
			switch e.Stage {
			case fulfill.StageUndelivered:
				out[e.ProposalID] = e
			case fulfill.StageRejected, fulfill.StageFulfilling:
				t.Errorf("%s reported as sent: %+v", e.ProposalID, e)
			}
		}
		return out
	}
	poll.Until(t, "both answers reported undelivered", func() bool { return len(undelivered()) == 2 })
	for id, e := range undelivered() {
		if e.Reason != fulfill.UndeliveredNotWritten || e.Envelope != agent.KindReject || e.Target != "fs" ||
			e.Message != "send mcp/reject: not permitted by own capabilities" {
			t.Errorf("%s: undelivered event %+v", id, e)
		}
	}
	for _, e := range wire.Envelopes() {
		if e.From == "fulfiller" {
			t.Errorf("the fulfiller got something onto the wire: %s", e.Raw)
		}
	}
	_, metrics := do(t, "GET", hs.URL+"/metrics", "")
	if !strings.Contains(metrics, "fulfiller_answers_undelivered_total{kind=\"mcp/reject\",reason=\"not_written\"} 2\n") {
		t.Errorf("metrics lack the two undelivered rejects:\n%s", metrics)
	}
	if strings.Contains(metrics, `fulfiller_proposals_total{outcome="rejected"`) || strings.Contains(metrics, `fulfiller_proposals_total{outcome="fulfilled"`) {
		t.Errorf("metrics count answers as sent:\n%s", metrics)
	}
}
