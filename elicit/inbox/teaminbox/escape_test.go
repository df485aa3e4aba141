package teaminbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// TestPageEscapesWhatOthersWrote (issue 41, row 1): the team inbox showed
// the arguments and the message with bidirectional and invisible
// characters raw, so the page read "ls … # list the && rm -rf …" while
// the call that runs puts rm -rf first. Every text from others reaches
// the page escaped, as approve --web and the terminal card show it.
func TestPageEscapesWhatOthersWrote(t *testing.T) {
	// Raw in the JSON text, as a proposer may send them.
	params := "{\"name\":\"run\",\"arguments\":{\"command\":\"ls \u2067# list the\u2069 && r\u200bm -rf /\"}}"
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"list \u2066files\u2069\ufeff","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p\u200b1","from":"cod\u202eer","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:00:00Z"},"tool":{"name":"run","server":"sh"},"policy":{"message":"ok","quorum":2}}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{approver: "alice", cards: map[string]*entry{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = u.Ask(ctx, c) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(u.view()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	u.Notify(approver.Event{Kind: approver.EventPeers, Card: c, Peers: []approver.PeerAnswer{{Approver: "bob\u200b", Action: "approved"}}})
	views := u.view()
	if len(views) != 1 {
		t.Fatalf("%d cards", len(views))
	}
	v := views[0]
	page, _ := json.Marshal(v)
	for _, r := range "\u2066\u2067\u2069\u200b\ufeff\u202e" {
		if strings.ContainsRune(v.Message+v.Arguments+v.Summary+v.Proposal+strings.Join(v.Peers, "")+v.Progress, r) {
			t.Errorf("the page gets %U raw:\n%s", r, page)
		}
	}
	for field, want := range map[string]string{
		"message":   `list \u2066files\u2069\ufeff`,
		"arguments": "{\n  \"command\": \"ls \\u2067# list the\\u2069 && r\\u200bm -rf /\"\n}",
		"summary":   `p\u200b1: cod\u202eer → run on sh`,
		"proposal":  `p\u200b1`,
	} {
		got := map[string]string{"message": v.Message, "arguments": v.Arguments, "summary": v.Summary, "proposal": v.Proposal}[field]
		if got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if len(v.Peers) != 1 || !strings.HasPrefix(v.Peers[0], `bob\u200b approved`) {
		t.Errorf("peers %q", v.Peers)
	}
}
