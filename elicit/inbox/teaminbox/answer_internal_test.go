package teaminbox

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// testCard is a prompt to alice about a write to /srv/prod/motd whose form
// offers editable content and mode, a hand-over to bob and, when grant,
// a grant of 15m, 1h or 8h.
func testCard(t *testing.T, grant bool) *approver.Card {
	t.Helper()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi","mode":"a"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	props := `"approve":{"type":"boolean"},"reason":{"type":"string"},"content":{"type":"string","default":"hi"},"mode":{"type":"string","enum":["a","w"],"default":"a"},"delegate_to":{"type":"string","enum":["bob"]}`
	meta := ``
	if grant {
		props += `,"grant":{"type":"string","enum":["","15m","1h","8h"]}`
		meta = `,"grant":{"max_ttl":"8h","scope":["tool","arguments.path:prefix"]}`
	}
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{` + props + `}},"_meta":{"proposal":{"id":"p-1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `"},"tool":{"name":"write_file","server":"fs"},"policy":{"approvers":["alice","bob"]}` + meta + `}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	if grant != (c.Grant != nil) {
		t.Fatalf("card grant %+v", c.Grant)
	}
	return c
}

// TestAnswerOfOffersOnlyWhatTheCardDoes: what the page asks to send is
// checked against the card before a passkey signs it, default deny: a
// grant only from the card's durations, with an approval of the call as
// shown; edits only of editable fields, of their type, in the form's
// order (a value as proposed is no edit); a delegate only one the card
// names; and nothing rides on a decline or a dismissal.
func TestAnswerOfOffersOnlyWhatTheCardDoes(t *testing.T) {
	withGrant, without := testCard(t, true), testCard(t, false)
	edits := func(kv ...string) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
		return m
	}
	for _, c := range []struct {
		name string
		card *approver.Card
		in   answerIn
		want approver.Answer
		err  string
	}{
		{"approve", without, answerIn{Action: "accept", Approve: true}, approver.Answer{Action: "accept", Approve: true}, ""},
		{"grant offered", withGrant, answerIn{Action: "accept", Approve: true, Grant: "1h"}, approver.Answer{Action: "accept", Approve: true, Grant: "1h"}, ""},
		{"grant not offered", without, answerIn{Action: "accept", Approve: true, Grant: "1h"}, approver.Answer{}, "that grant was not offered on this card: this card offers no grant"},
		{"duration not offered", withGrant, answerIn{Action: "accept", Approve: true, Grant: "24h"}, approver.Answer{}, `that grant was not offered on this card: "24h" is not one of its durations (15m, 1h, 8h)`},
		{"empty duration", withGrant, answerIn{Action: "accept", Approve: true, Grant: ""}, approver.Answer{Action: "accept", Approve: true}, ""},
		{"grant with edits", withGrant, answerIn{Action: "accept", Approve: true, Grant: "1h", Edits: edits("content", `"x"`)}, approver.Answer{}, "a grant comes with an approval of the call as shown, not with edits"},
		{"grant with a refusal", withGrant, answerIn{Action: "accept", Reason: "no", Grant: "1h"}, approver.Answer{}, "edits and grants come only with an approval"},
		{"grant with a delegation", withGrant, answerIn{Action: "accept", DelegateTo: "bob", Grant: "1h"}, approver.Answer{}, "a delegation carries no approval, edits or grant"},
		{"grant with a decline", withGrant, answerIn{Action: "decline", Grant: "1h"}, approver.Answer{}, "a decline carries no approval, reason, edits, delegate or grant"},
		{"grant with a dismissal", withGrant, answerIn{Action: "cancel", Grant: "1h"}, approver.Answer{}, "a cancel carries no approval, reason, edits, delegate or grant"},
		{"edits in the form's order", without, answerIn{Action: "accept", Approve: true, Edits: edits("mode", `"w"`, "content", `"bye"`)},
			approver.Answer{Action: "accept", Approve: true, Edits: []approver.Edit{{Name: "content", Value: json.RawMessage(`"bye"`)}, {Name: "mode", Value: json.RawMessage(`"w"`)}}}, ""},
		{"an edit as proposed is none", without, answerIn{Action: "accept", Approve: true, Edits: edits("content", `"hi"`)}, approver.Answer{Action: "accept", Approve: true}, ""},
		{"not editable", without, answerIn{Action: "accept", Approve: true, Edits: edits("path", `"/etc/passwd"`)}, approver.Answer{}, `"path" is not an editable argument`},
		{"not of the enum", without, answerIn{Action: "accept", Approve: true, Edits: edits("mode", `"x"`)}, approver.Answer{}, "mode must be one of a, w"},
		{"not text", without, answerIn{Action: "accept", Approve: true, Edits: edits("content", `1`)}, approver.Answer{}, "content must be text"},
		{"delegate", without, answerIn{Action: "accept", DelegateTo: "bob"}, approver.Answer{Action: "accept", DelegateTo: "bob"}, ""},
		{"delegate not named", without, answerIn{Action: "accept", DelegateTo: "mallory"}, approver.Answer{}, `"mallory" is not an approver this card may be handed to`},
		{"refusal", without, answerIn{Action: "accept", Reason: "freeze"}, approver.Answer{Action: "accept", Reason: "freeze"}, ""},
		{"decline", without, answerIn{Action: "decline"}, approver.Answer{Action: "decline"}, ""},
		{"unknown action", without, answerIn{Action: "approve"}, approver.Answer{}, `unknown action "approve": want accept, decline or cancel`},
	} {
		got, err := answerOf(c.card, c.in)
		if msg := errString(err); msg != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %q, want %+v %q", c.name, got, msg, c.want, c.err)
		}
	}
	// A card whose digest does not match the call shown takes no approval.
	bad := testCard(t, true)
	bad.DigestOK = false
	if _, err := answerOf(bad, answerIn{Action: "accept", Approve: true, Grant: "1h"}); !errors.Is(err, approver.ErrDigestMismatch) {
		t.Errorf("approving a card whose digest does not match: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
