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
// the page escaped, as approve --web and the terminal card show it: the
// tool's description and annotations, editable fields and delegates too.
func TestPageEscapesWhatOthersWrote(t *testing.T) {
	// Raw in the JSON text, as a proposer may send them.
	params := "{\"name\":\"run\",\"arguments\":{\"command\":\"ls \u2067# list the\u2069 && r\u200bm -rf /\"}}"
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"list \u2066files\u2069\ufeff","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"},"mo\u200bde":{"type":"string","enum":["f\u202east","slow"],"description":"how \u2067fast"},"delegate_to":{"type":"string","enum":["bo\u200bb"]}}},"_meta":{"proposal":{"id":"p\u200b1","from":"cod\u202eer","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2030-01-01T00:00:00Z"},"tool":{"name":"run","server":"sh","description":"runs \u202ea command","annotations":{"readOnly\u200bHint":true}},"policy":{"message":"o\u2066k","quorum":2,"approvers":["alice","bo\u200bb"]}}}}`)}
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
		shown := v.Message + v.Arguments + v.Summary + v.Proposal + strings.Join(v.Peers, "") + v.Progress + v.Proposer + v.Description +
			v.PolicyMsg + strings.Join(v.Approvers, "") + strings.Join(v.DelegateLabels, "") + v.Fields[0].Label + v.Fields[0].Description +
			strings.Join(v.Fields[0].EnumLabels, "") + v.Annotations[0].Name
		if strings.ContainsRune(shown, r) {
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
	// What the page sends back is kept exact, and the server checks it
	// against the card; only what it shows is escaped.
	if v.Fields[0].Name != "mo\u200bde" || v.Fields[0].Enum[0] != "f\u202east" || v.Delegates[0] != "bo\u200bb" {
		t.Errorf("a name or choice sent back was changed: %+v %q", v.Fields, v.Delegates)
	}
	if v.Fields[0].Label != `mo\u200bde` || v.DelegateLabels[0] != `bo\u200bb` || v.Description != `runs \u202ea command` {
		t.Errorf("labels %q %q, description %q", v.Fields[0].Label, v.DelegateLabels, v.Description)
	}
	if len(v.Peers) != 1 || !strings.HasPrefix(v.Peers[0], `bob\u200b approved`) {
		t.Errorf("peers %q", v.Peers)
	}
}
