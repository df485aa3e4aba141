package elicit_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/internal/poll"
)

// promptForm reads what an elicitation offers as its grant field and what
// its _meta says a grant would pin.
func promptForm(t *testing.T, raw []byte) (grant json.RawMessage, meta json.RawMessage) {
	t.Helper()
	var env struct {
		Payload struct {
			Params struct {
				RequestedSchema struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"requestedSchema"`
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	return env.Payload.Params.RequestedSchema.Properties["grant"], env.Payload.Params.Meta["grant"]
}

const grantable = `"grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.path:prefix"]}`

// A grantable decision with one approval needed offers the grant durations
// up to max_ttl ("" first: none by default) and says what a grant pins; an
// approval choosing an offered duration fulfils the call.
func TestE2EGrantOffered(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{offerGrants: true, escalation: `{"approvers":["alice"],` + grantable + `}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	field, meta := promptForm(t, ea.Raw)
	if want := `{"type":"string","title":"Also allow calls like this for","enum":["","15m","1h"],"default":""}`; string(field) != want {
		t.Errorf("grant field %s\nwant %s", field, want)
	}
	// The gateway is not said to authenticate senders: the policy's
	// proposer pin is not offered (TestE2EGrantForgedProposer).
	if want := `{"max_ttl":"1h","scope":["tool","arguments.path:prefix"],"offers":["15m","1h"]}`; string(meta) != want {
		t.Errorf("_meta.grant %s\nwant %s", meta, want)
	}
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"grant":"1h"}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if got := w.answers(id); len(got) != 1 {
		t.Fatalf("%d answers, want exactly the fulfilment request", len(got))
	}
	granted, ok := w.event(id, "granted")
	if !ok || granted.GrantID == "" || !slices.Equal(granted.By, []string{"alice"}) || !strings.HasPrefix(granted.Message, "anyone who may propose in this space → write_file, path under /srv/prod/ allowed for 1h, until ") {
		t.Fatalf("granted event %+v (found %v)", granted, ok)
	}

	// The next write under the same directory is fulfilled without asking
	// anyone, and its decision names the grant; one elsewhere is asked.
	next := w.propose("p-write-2", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"x"}}}`)
	if out := w.outcome(next); !out.Fulfilled {
		t.Fatalf("granted call: outcome %+v", out)
	}
	if d, _ := w.event(next, "decided"); d.GrantID != granted.GrantID {
		t.Errorf("granted call decided with grant %q, want %q", d.GrantID, granted.GrantID)
	}
	if _, asked := w.event(next, "escalated"); asked {
		t.Error("the granted call was escalated")
	}
	other := w.propose("p-write-3", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/other/x","content":"x"}}}`)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-write-3"`) { // outside the grant: asked
		t.Errorf("alice was asked %s, want p-write-3", e.Payload)
	}
	if d, _ := w.event(other, "decided"); d.GrantID != "" {
		t.Errorf("ungranted call decided with grant %q", d.GrantID)
	}

	// Revoked: asked again.
	if _, err := w.grants.Revoke(t.Context(), granted.GrantID); err != nil {
		t.Fatal(err)
	}
	w.propose("p-write-4", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"y"}}}`)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-write-4"`) {
		t.Errorf("alice was asked %s, want p-write-4", e.Payload)
	}
}

// A duration the form did not offer (or a grant that is not a string) is
// not taken, and neither is the approval it came with: reject "other".
func TestE2EGrantNotOfferedIsRefused(t *testing.T) {
	t.Parallel()
	for _, content := range []string{`{"approve":true,"grant":"9h"}`, `{"approve":true,"grant":3600}`} {
		t.Run(content, func(t *testing.T) {
			w := newWorld(t, worldOptions{offerGrants: true, escalation: `{"approvers":["alice"],` + grantable + `}`})
			id := w.propose("p-write", writeCall)
			w.answer("alice", w.ask("alice"), `{"action":"accept","content":`+content+`}`)
			out := w.outcome(id)
			if !out.Rejected || out.Reason != "other" {
				t.Fatalf("outcome %+v, want a reject other", out)
			}
			if chat := w.chat(id); !strings.Contains(chat, "alice's approval cannot be used: the grant") || !strings.Contains(chat, "was not offered") {
				t.Errorf("chat %q", chat)
			}
			if got := w.answers(id); len(got) != 1 {
				t.Errorf("%d answers, want exactly the reject", len(got))
			}
		})
	}
}

// No grant is offered while grants are off, nor when two approvals are
// needed; an approval that names one anyway is refused.
func TestE2EGrantNotOfferedWhenOffOrQuorum(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]worldOptions{
		"grants off": {escalation: `{"approvers":["alice"],` + grantable + `}`},
		"quorum 2":   {offerGrants: true, escalation: `{"approvers":["alice","bob"],"quorum":2,` + grantable + `}`},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, o)
			id := w.propose("p-write", writeCall)
			ea := w.ask("alice")
			if field, meta := promptForm(t, ea.Raw); field != nil || meta != nil {
				t.Fatalf("grant offered: field %s, _meta %s", field, meta)
			}
			w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"grant":"1h"}}`)
			if out := w.outcome(id); !out.Rejected || out.Reason != "other" {
				t.Fatalf("outcome %+v, want a reject other", out)
			}
		})
	}
}

// In a signed setup a grant rides on the approval's signature: a forged
// approval with a grant (another key's signature), and alice's own
// approval with a grant added after she signed, are both forgeries and
// make no grant. Her real approval without one fulfils the call and
// grants nothing: the next write is asked about again.
func TestE2EGrantWithBadSignatureHasNoEffect(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, worldOptions{offerGrants: true, keys: approval.Keys{"alice": pub}, humans: []string{"alice"},
		escalation: `{"approvers":["alice"],` + grantable + `}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	rpc := string(rpcID(t, ea))
	forged := func(result string) string {
		return `{"kind":"mcp/response","from":"alice","to":["fulfiller"],"correlation_id":["` + ea.ID + `"],"payload":{"jsonrpc":"2.0","id":` + rpc + `,"result":` + result + `}}`
	}
	otherSig, _ := approval.Sign(otherPriv, ea.ID, writeDigest, "accept", json.RawMessage(`{"approve":true,"grant":"1h"}`))
	w.forge("mallory", forged(`{"action":"accept","content":{"approve":true,"grant":"1h","signature":"`+otherSig+`"}}`))
	plainSig, _ := approval.Sign(priv, ea.ID, writeDigest, "accept", json.RawMessage(`{"approve":true}`))
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"grant":"1h","signature":"`+plainSig+`"}}`)
	poll.Until(t, "two forgeries", func() bool { return len(w.eventsOf(elicit.EventForgery)) == 2 })
	if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
		t.Fatalf("after the forgeries: %+v %v, want still awaiting approval", s, ok)
	}
	if n := len(w.grants.List()); n != 0 {
		t.Fatalf("%d grants after forged grants, want 0", n)
	}

	w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"signature":"`+plainSig+`"}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if _, granted := w.event(id, "granted"); granted || len(w.grants.List()) != 0 {
		t.Fatalf("a grant was made: %+v", w.grants.List())
	}
	w.propose("p-write-2", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"x"}}}`)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-write-2"`) {
		t.Errorf("alice was asked %s, want p-write-2", e.Payload)
	}
}

// A grant that expired asks again, and a grant covering a destructive
// tool (made under an older, wider policy, say) lets nothing through the
// policy that never honours grants for deletes.
func TestE2EGrantExpiredOrDestructiveStillAsks(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{offerGrants: true, escalation: `{"approvers":["alice"],` + grantable + `}`})
	now := time.Now().UTC()
	for _, g := range []grants.Grant{
		{ID: "g-expired", Proposer: "coder", Tool: "write_file", Server: "fs", GrantedBy: "alice", Created: now.Add(-2 * time.Hour), Expires: now.Add(-time.Hour)},
		{ID: "g-delete", Proposer: "coder", Tool: "delete_path", Server: "fs", GrantedBy: "alice", Created: now, Expires: now.Add(time.Hour)},
	} {
		if err := w.grants.Create(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	write := w.propose("p-write", writeCall)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-write"`) {
		t.Fatalf("alice was asked %s, want p-write", e.Payload)
	}
	if d, _ := w.event(write, "decided"); d.GrantID != "" || d.Decision.Action != "escalate" {
		t.Errorf("write under an expired grant decided %+v (grant %q), want escalate", d.Decision, d.GrantID)
	}
	del := w.propose("p-delete", `{"method":"tools/call","params":{"name":"delete_path","arguments":{"path":"/srv/prod/cache"}}}`)
	if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-delete"`) {
		t.Fatalf("alice was asked %s, want p-delete", e.Payload)
	}
	if d, _ := w.event(del, "decided"); d.GrantID != "" || d.Decision.Action != "escalate" {
		t.Errorf("delete under a grant decided %+v (grant %q), want escalate", d.Decision, d.GrantID)
	}
}

// Security round 3, item 8: a grant pinned to arguments.path:prefix
// /srv/app/ matched paths that a tool reads as paths outside it. Each of
// these proposals is decided without the grant (input.grants empty) and
// asked about; a plain path under the prefix still uses it.
func TestE2EGrantPrefixRefusesAmbiguousPaths(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{offerGrants: true, escalation: `{"approvers":["alice"],` + grantable + `}`})
	now := time.Now().UTC()
	g := grants.Grant{ID: "g-app", Tool: "write_file", Server: "fs", GrantedBy: "alice",
		Pins: []grants.Pin{{Field: "arguments.path", Prefix: "/srv/app/"}}, Created: now, Expires: now.Add(time.Hour)}
	if err := w.grants.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	for i, path := range []string{
		`/srv/app/..\\..\\etc\\passwd`,
		`/srv/app/%2e%2e/%2e%2e/etc/passwd`,
		`/srv/app/x\n/etc/passwd`,
	} {
		id := fmt.Sprintf("p-ambiguous-%d", i)
		w.propose(id, `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"`+path+`","content":"x"}}}`)
		if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"`+id+`"`) {
			t.Fatalf("%s: alice was asked %s, want %s", path, e.Payload, id)
		}
		if d, _ := w.event(id, "decided"); d.GrantID != "" || d.Decision.Action != "escalate" || len(d.Input.Grants) != 0 {
			t.Errorf("%s decided %+v under grant %q with input.grants %v, want escalate with none", path, d.Decision, d.GrantID, d.Input.Grants)
		}
	}
	ok := w.propose("p-plain", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/notes.txt","content":"x"}}}`)
	if out := w.outcome(ok); !out.Fulfilled {
		t.Fatalf("a plain path under the grant: outcome %+v", out)
	}
	if d, _ := w.event(ok, "decided"); d.GrantID != "g-app" {
		t.Errorf("a plain path under the grant decided with grant %q, want g-app", d.GrantID)
	}
}

// Security round 3, item 3: "other" posts an mcp/proposal claiming to be
// coder (the reference gateway does not authenticate from) for a call that
// alice's grant covers. Without --gateway-authenticates-from the grant
// was never pinned to coder — the card alice approved said, in words, that
// anyone who may propose in this space can use it — so the forged call is
// let through exactly as other's own is: what the grant always did in
// effect, now what alice was shown. With the flag the grant is pinned to
// coder as before: other's own call is asked about.
func TestE2EGrantForgedProposer(t *testing.T) {
	t.Parallel()
	const secret = `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/secret.key","content":"k"}}}`
	for _, tc := range []struct {
		name          string
		authenticated bool
		scope, terms  string
		grantProposer string
		otherGranted  bool // other's proposal in its own name
	}{
		{"without the flag", false, `["tool","arguments.path"]`, "anyone who may propose in this space → write_file, path = /srv/app/secret.key", "", true},
		{"with the flag", true, `["proposer","tool","arguments.path"]`, "coder → write_file, path = /srv/app/secret.key", "coder", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{offerGrants: true, authenticatesFrom: tc.authenticated,
				escalation: `{"approvers":["alice"],"grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.path"]}}`})
			id := w.propose("p-1", secret)
			ea := w.ask("alice")
			_, meta := promptForm(t, ea.Raw)
			if want := `{"max_ttl":"1h","scope":` + tc.scope + `,"offers":["15m","1h"]}`; string(meta) != want {
				t.Errorf("_meta.grant %s\nwant %s", meta, want)
			}
			card, err := approver.ParseCard(ea)
			if err != nil {
				t.Fatal(err)
			}
			if card.Grant == nil || card.Grant.Terms != tc.terms {
				t.Fatalf("the card offers %+v, want terms %q", card.Grant, tc.terms)
			}
			w.answer("alice", ea, `{"action":"accept","content":{"approve":true,"grant":"1h"}}`)
			if out := w.outcome(id); !out.Fulfilled {
				t.Fatalf("p-1: outcome %+v", out)
			}
			granted, ok := w.event(id, "granted")
			if !ok || !strings.HasPrefix(granted.Message, tc.terms+" allowed for 1h, until ") {
				t.Fatalf("granted event %+v (found %v)", granted, ok)
			}
			list := w.grants.List()
			if len(list) != 1 || list[0].ID != granted.GrantID || list[0].Proposer != tc.grantProposer || list[0].Terms() != tc.terms {
				t.Fatalf("grants %+v, want one with proposer %q", list, tc.grantProposer)
			}

			// other, in coder's name: the grant's terms are all that
			// decide, and the call goes to fs under the grant.
			w.forgeAs("other", "other-token", `{"id":"p-forged","from":"coder","kind":"mcp/proposal","payload":`+secret+`}`)
			req := w.onWire("the forged proposal's fulfilment request", func(e agent.Envelope) bool {
				return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == "p-forged"
			})
			var rpc struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if err := json.Unmarshal(req.Payload, &rpc); err != nil || !slices.Equal(req.To, []string{"fs"}) || rpc.Method != "tools/call" ||
				string(rpc.Params) != `{"name":"write_file","arguments":{"path":"/srv/app/secret.key","content":"k"}}` {
				t.Errorf("forged proposal's request %+v (payload %s), want tools/call to fs with the proposal's params", req, req.Payload)
			}
			if d, _ := w.event("p-forged", "decided"); d.GrantID != granted.GrantID || d.Decision.Action != "fulfill" || d.Proposer != "coder" {
				t.Errorf("forged proposal decided %+v under grant %q by %q, want fulfill under %s", d.Decision, d.GrantID, d.Proposer, granted.GrantID)
			}

			// other, in its own name: covered only by a grant that does
			// not rely on who proposes.
			w.forgeAs("other", "other-token", `{"id":"p-other","kind":"mcp/proposal","payload":`+secret+`}`)
			if tc.otherGranted {
				w.onWire("other's fulfilment request", func(e agent.Envelope) bool {
					return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == "p-other"
				})
				if d, _ := w.event("p-other", "decided"); d.GrantID != granted.GrantID || d.Proposer != "other" {
					t.Errorf("other's proposal decided %+v under grant %q, want %s", d.Decision, d.GrantID, granted.GrantID)
				}
				return
			}
			if e := w.ask("alice"); !strings.Contains(string(e.Payload), `"id":"p-other"`) || !strings.Contains(string(e.Payload), `"from":"other"`) {
				t.Errorf("alice was asked %s, want p-other from other", e.Payload)
			}
			if d, _ := w.event("p-other", "decided"); d.GrantID != "" || d.Decision.Action != "escalate" || len(d.Input.Grants) != 0 {
				t.Errorf("other's proposal decided %+v under grant %q with input.grants %v, want escalate with none", d.Decision, d.GrantID, d.Input.Grants)
			}
		})
	}
}
