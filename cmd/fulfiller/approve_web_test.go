package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// approve --web prints the page's URL as its first line (docs/design.md "Approval
// inbox"); the page answers 401 without the URL's secret, shows the prompt
// with it, and an approval posted from the page is the approver's answer
// on the wire.
func TestApproveWebServesTheInbox(t *testing.T) {
	for _, name := range []string{"ID", "TOKEN", "CONFIG", "FULFILLER", "AUTO", "COUNT", "GATEWAY", "WEB"} {
		t.Setenv(envName(strings.ToLower(name)), "")
		os.Unsetenv(envName(strings.ToLower(name)))
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	root := newRootCmd()
	root.SetArgs([]string{"approve", "--gateway", srv.URL(), "--token", "human-token", "--id", "alice",
		"--web", "127.0.0.1:0", "--count", "1", "--log-level", "error"})
	var screen spacetest.Screen
	root.SetOut(&screen)
	root.SetErr(&screen)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	spacetest.WaitText(t, "approve's greeting", screen.String, "Waiting for approval requests from fulfiller.")
	first, _, _ := strings.Cut(screen.String(), "\n")
	if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{48}$`).MatchString(first) {
		t.Fatalf("first line %q, want the page's URL with its secret", first)
	}
	base, _, _ := strings.Cut(first, "/?token=")
	for _, path := range []string{"/", "/events"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the secret: %s, want 401", path, resp.Status)
		}
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(first)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the printed URL: %s", resp.Status)
	}

	ful, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: "fulfiller", Token: "fulfiller-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer ful.Close()
	answers := ful.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindResponse}, All: true})
	defer answers.Close()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	prompt, err := ful.Send(ctx, agent.Envelope{To: []string{"alice"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},"_meta":{"proposal":{"id":"p-1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `"}}}}`)})
	if err != nil {
		t.Fatal(err)
	}

	// The page's feed shows the card; the page answers it.
	poll.Until(t, "the card in the page's feed", func() bool {
		return slices.ContainsFunc(openCards(ctx, browser, base), func(c card) bool { return c.ID == prompt.ID })
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/answer", strings.NewReader(`{"id":"`+prompt.ID+`","action":"approve"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", base)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /answer: %s", resp.Status)
	}
	select {
	case a := <-answers.C():
		if a.From != "alice" || a.CorrelationID.First() != prompt.ID || !strings.Contains(string(a.Payload), `"action":"accept","content":{"approve":true}`) {
			t.Errorf("answer %+v %s", a, a.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("no answer on the wire\n%s", screen.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("approve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("approve did not stop after --count 1")
	}
}
