package elicit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// TestCodecDelegatedPrompt pins a delegated prompt (its chain, no grant
// offered) to form.go's message and _meta.
func TestCodecDelegatedPrompt(t *testing.T) {
	t.Parallel()
	p := &lifecycle.Proposal{ID: "p-1", From: "coder", Method: "tools/list", Deadline: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Decision: &lifecycle.Decision{Action: lifecycle.Escalate, Quorum: 2, Revision: "r"}}
	got, err := Codec{}.Prompt(p, lifecycle.PromptSpec{Approver: "carol", EnvelopeID: "el-1", RPCID: 7, Chain: []string{"alice", "bob"}, Approvers: []string{"alice", "bob", "carol"}, Quorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	esc := escalation{ID: "p-1", From: "coder", Method: "tools/list", Deadline: p.Deadline,
		Decision: decision.Decision{Action: decision.Escalate, Quorum: 2, Revision: "r"}}
	digest, _ := approval.CallDigest("tools/list", nil)
	cl := parseCall("tools/list", nil)
	params := object{
		{"message", message(esc, cl, digest, 2, []string{"alice", "bob"})},
		{"requestedSchema", schema(nil, nil, nil)},
		{"_meta", meta(esc, digest, 2, []string{"alice", "bob", "carol"}, nil, []string{"alice", "bob"})},
	}
	want := mustMarshal(object{{"jsonrpc", "2.0"}, {"id", int64(7)}, {"method", agent.MethodElicitationCreate}, {"params", params}})
	if !bytes.Equal(got, want) {
		t.Errorf("delegated prompt:\n got %s\nwant %s", got, want)
	}
}

// TestCodecReadsTheProtocolTestVector verifies the signed answer of
// docs/protocol.md's test vector, and what it refuses.
func TestCodecReadsTheProtocolTestVector(t *testing.T) {
	t.Parallel()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x01}, 32))
	pub := priv.Public().(ed25519.PublicKey)
	if got := base64.RawURLEncoding.EncodeToString(pub); got != "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w" {
		t.Fatalf("public key %s", got)
	}
	keys := approval.ApproverKeys{Ed25519: approval.Keys{"alice": pub}}
	p := &lifecycle.Proposal{ID: "p-1", From: "coder", Method: "tools/call",
		Params:   json.RawMessage(`{"name":"delete_all","arguments":{"path":"/var/data","confirm":true}}`),
		Decision: &lifecycle.Decision{Action: lifecycle.Escalate}}
	if d, _ := approval.CallDigest(p.Method, p.Params); d != "029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32" {
		t.Fatalf("digest %s", d)
	}
	pr := lifecycle.Prompt{Approver: "alice", EnvelopeID: "fulfiller-elicit-7", RPCID: 3, Signed: true}
	const sig = "6AvPeETHmmFkyjDUS9kiLMzi5uL8bTfZbVZVsiHBnlSyBSRQzFvxozrjYSHd0vkxDV1FPYfKei6sow8s707CCw"
	answer := func(content string) json.RawMessage {
		return json.RawMessage(`{"jsonrpc":"2.0","id":3,"result":{"action":"accept","content":` + content + `}}`)
	}
	v := Codec{}.Read(p, pr, answer(`{"approve":true,"reason":"ok","signature":"`+sig+`"}`), keys)
	if v.Kind != lifecycle.AnswerApproved || !v.Signed || v.Signature != sig || v.Request != "fulfiller-elicit-7" ||
		string(v.Content) != `{"approve":true,"reason":"ok"}` || v.Params != nil || v.Key != "" || v.Reason != "ok" {
		t.Fatalf("vector: %+v", v)
	}
	// Another prompt's id, an altered reason, no signature: a forgery.
	other := pr
	other.EnvelopeID = "fulfiller-elicit-8"
	for name, got := range map[string]lifecycle.Verified{
		"another prompt": Codec{}.Read(p, other, answer(`{"approve":true,"reason":"ok","signature":"`+sig+`"}`), keys),
		"altered":        Codec{}.Read(p, pr, answer(`{"approve":true,"reason":"OK","signature":"`+sig+`"}`), keys),
		"unsigned":       Codec{}.Read(p, pr, answer(`{"approve":true,"reason":"ok"}`), keys),
	} {
		if got.Kind != lifecycle.AnswerForgery {
			t.Errorf("%s: %+v", name, got)
		}
	}
	// The key removed since the prompt was asked: not taken on the
	// gateway's word.
	if got := (Codec{}).Read(p, pr, answer(`{"approve":true,"reason":"ok"}`), approval.ApproverKeys{}); got.Kind != lifecycle.AnswerIgnored {
		t.Errorf("key removed: %+v", got)
	}
	// An error answer from a keyed approver cannot be signed; from an
	// unkeyed one it closes the prompt.
	errAnswer := json.RawMessage(`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no forms"}}`)
	if got := (Codec{}).Read(p, pr, errAnswer, keys); got.Kind != lifecycle.AnswerIgnored {
		t.Errorf("keyed error: %+v", got)
	}
	unkeyed := lifecycle.Prompt{Approver: "bob", EnvelopeID: "el-2", RPCID: 3}
	if got := (Codec{}).Read(p, unkeyed, errAnswer, keys); got.Kind != lifecycle.AnswerFailed || got.Why != "no forms" {
		t.Errorf("unkeyed error: %+v", got)
	}
}

// TestCodecReadsTheForm: declines, delegations, grants and edits of an
// unkeyed approver's answer, and a recorded approval read again.
func TestCodecReadsTheForm(t *testing.T) {
	t.Parallel()
	p := &lifecycle.Proposal{ID: "p-1", From: "coder", Method: "tools/call",
		Params:   json.RawMessage(`{"name":"write","arguments":{"path":"/a"}}`),
		Decision: &lifecycle.Decision{Action: lifecycle.Escalate, Editable: []string{"path"}}}
	pr := lifecycle.Prompt{Approver: "bob", EnvelopeID: "el-1", RPCID: 4}
	read := func(action, content string) lifecycle.Verified {
		return Codec{}.Read(p, pr, json.RawMessage(`{"jsonrpc":"2.0","id":4,"result":{"action":"`+action+`","content":`+content+`}}`), nil)
	}
	if v := read("decline", `{"reason":"no"}`); v.Kind != lifecycle.AnswerDeclined || v.Reason != "no" {
		t.Errorf("decline %+v", v)
	}
	if v := read("cancel", `{}`); v.Kind != lifecycle.AnswerCancelled {
		t.Errorf("cancel %+v", v)
	}
	if v := read("accept", `{"approve":false,"delegate_to":"carol"}`); v.Kind != lifecycle.AnswerDelegated || v.DelegateTo != "carol" {
		t.Errorf("delegate %+v", v)
	}
	if v := read("accept", `{"approve":true,"grant":1}`); v.Kind != lifecycle.AnswerApproved || !v.GrantBad || v.GrantRaw != "1" {
		t.Errorf("bad grant %+v", v)
	}
	v := read("accept", `{"approve":true,"path":"/b","grant":"1h"}`)
	if v.Kind != lifecycle.AnswerApproved || v.Grant != "1h" || v.Signed || string(v.Params) != `{"name":"write","arguments":{"path":"/b"}}` || v.Key == "" {
		t.Fatalf("edit %+v", v)
	}
	params, key, err := (Codec{}).Recount(p, lifecycle.Approval{Approver: "bob", Content: v.Content})
	if err != nil || !bytes.Equal(params, v.Params) || key != v.Key {
		t.Errorf("recount %s %q %v", params, key, err)
	}
	if v := read("accept", `{"approve":true,"path":7}`); v.Kind != lifecycle.AnswerApproved || v.Unusable == "" {
		t.Errorf("bad edit %+v", v)
	}
	if v := (Codec{}).Read(p, pr, json.RawMessage(`{"jsonrpc":"2.0","id":4,"result":{"action":"maybe"}}`), nil); v.Kind != lifecycle.AnswerIgnored || v.Why == "" {
		t.Errorf("unknown action %+v", v)
	}
}

// TestEventOf: a step of the core's escalation is the Observer's Event
// the decision log, metrics and notifier have always read, the call's
// arguments only when allowed.
func TestEventOf(t *testing.T) {
	t.Parallel()
	params := json.RawMessage(`{"name":"write","arguments":{"path":"/a"}}`)
	h := lifecycle.Human{ID: "p1", Kind: lifecycle.HumanOpened, DecisionID: "d1", Revision: "r1",
		Notice: &lifecycle.Notice{Proposer: "coder", Method: "tools/call", Tool: "write", Target: "fs", Params: params, Asked: []string{"alice"}, Quorum: 1}}
	ev := EventOf(h)
	digest, _ := approval.CallDigest("tools/call", params)
	if ev.Kind != EventOpened || ev.ProposalID != "p1" || ev.DecisionID != "d1" || ev.Prompt == nil || ev.Prompt.Digest != digest || ev.Prompt.Arguments != nil || ev.Prompt.Tool != "write" {
		t.Fatalf("%+v %+v", ev, ev.Prompt)
	}
	h.Notice.Arguments = params
	if got := EventOf(h).Prompt.Arguments; string(got) != `{"path":"/a"}` {
		t.Errorf("arguments %s", got)
	}
	if ev := EventOf(lifecycle.Human{ID: "p1", Kind: lifecycle.HumanForgery, Approver: "alice", From: "mallory", Action: "accept"}); ev.Kind != EventForgery || ev.From != "mallory" {
		t.Errorf("%+v", ev)
	}
}
