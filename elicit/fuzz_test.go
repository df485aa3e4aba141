package elicit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// fuzzCall is the call the answer fuzz target pretends to ask about:
// path, force and count are editable, mode and secret are not, and
// approve (a form field's name) is asked for but can never be edited.
var fuzzCall = parseCall("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/tmp/x","mode":"0644","force":false,"count":2,"secret":"s"}}`))

var fuzzFields = editableFields(fuzzCall,
	json.RawMessage(`{"properties":{"path":{"type":"string"},"count":{"type":"integer"},"mode":{"type":"string","enum":["0600","0644"]}}}`),
	[]string{"path", "force", "count", "approve"}, slog.New(slog.DiscardHandler))

var fuzzKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x07}, 32))

// FuzzParseAnswer feeds arbitrary mcp/response payloads to parseAnswer,
// the function that decides what an approver's answer amounts to.
// Properties: it never panics and is deterministic; only an `accept` whose
// content holds approve: true (and no delegate_to) is an approval, so
// unknown, malformed, decline, cancel and accept-without-approve answers
// never count as one; an unknown action is ignored; an approval's edits
// change only editable arguments, each to a value of its type; and a
// signature binds the action: content signed for one action never verifies
// for another.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"reason":"ok"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":false,"reason":"no"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":"true"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"approve":false}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"delegate_to":"bob"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"delegate_to":7}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"path":"/etc/x","count":3,"force":true,"secret":"edited","mode":"0600"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"count":1.5}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"decline","content":{"approve":true}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"cancel"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"ACCEPT","content":{"approve":true}}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"cannot show"},"result":{"action":"accept","content":{"approve":true}}}`,
		`{"jsonrpc":"2.0","id":1,"error":null,"result":{"action":"accept","content":{"approve":true}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"approve":true,"signature":"AAAA"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":null}`,
		`{"jsonrpc":"2.0","id":1}`,
		`{"result":"accept"}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		a := parseAnswer(payload)
		if again := parseAnswer(payload); again.outcome != a.outcome || again.action != a.action {
			t.Fatal("parseAnswer is not deterministic")
		}
		switch a.outcome {
		case outcomeIgnored:
			if a.why == "" {
				t.Fatal("ignored without a reason")
			}
			return
		case outcomeError:
			if a.rpcErr == nil {
				t.Fatal("error outcome without the error")
			}
			return
		}
		switch a.action {
		case approval.ActionAccept, approval.ActionDecline, approval.ActionCancel:
		default:
			t.Fatalf("action %q was not ignored", a.action)
		}
		if (a.outcome == outcomeCancel) != (a.action == approval.ActionCancel) {
			t.Fatalf("action %s gave outcome %d", a.action, a.outcome)
		}
		if a.action == approval.ActionDecline && a.outcome != outcomeDecline {
			t.Fatalf("decline gave outcome %d", a.outcome)
		}
		approveTrue := contentSays(a.content, approval.FieldApprove, func(v any) bool { return v == true })
		if a.action == approval.ActionAccept && !approveTrue && a.outcome != outcomeDecline && a.outcome != outcomeDelegate {
			t.Fatalf("accept without approve:true gave outcome %d", a.outcome)
		}
		if a.outcome == outcomeApprove {
			// An independent reading of the same payload must agree.
			var m map[string]json.RawMessage
			if json.Unmarshal(payload, &m) != nil {
				t.Fatalf("approval from a payload that is not an object: %q", payload)
			}
			if a.action != approval.ActionAccept || !approveTrue || !a.form.approve {
				t.Fatalf("approval from action %q content %s", a.action, a.content)
			}
			if contentSays(a.content, approval.FieldDelegateTo, func(v any) bool { s, ok := v.(string); return ok && s != "" }) {
				t.Fatalf("approval that also delegates: %s", a.content)
			}
			checkEdits(t, a.form)
		}
		checkSignatureBindsAction(t, a)
	})
}

// contentSays reports whether the answer's content is an object whose key
// holds a value that satisfies ok, read with encoding/json (last duplicate
// wins, as everywhere in Go).
func contentSays(content json.RawMessage, key string, ok func(any) bool) bool {
	var m map[string]any
	if json.Unmarshal(content, &m) != nil {
		return false
	}
	v, present := m[key]
	return present && ok(v)
}

// checkEdits applies an approval's content to fuzzCall: only the editable
// arguments may change, each to a value of its type.
func checkEdits(t *testing.T, f form) {
	t.Helper()
	params, key, err := applyEdits(fuzzCall, fuzzFields, f)
	if err != nil || params == nil {
		return // refused, or nothing edited: the call as proposed
	}
	var p struct {
		Name      string                     `json:"name"`
		Arguments map[string]json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		t.Fatalf("edited params %s: %v", params, err)
	}
	if p.Name != "write_file" || key == "" {
		t.Fatalf("edited call %s (key %q)", params, key)
	}
	editable := map[string]field{}
	for _, fl := range fuzzFields {
		editable[fl.name] = fl
	}
	if _, ok := editable[approval.FieldApprove]; ok {
		t.Fatal("a form field's name was offered for editing")
	}
	orig := map[string]json.RawMessage{}
	for _, m := range fuzzCall.args {
		orig[m.key], _ = fuzzCall.args.raw(m.key)
	}
	for k, v := range p.Arguments {
		if fl, ok := editable[k]; ok {
			if err := checkValue(fl, v); err != nil {
				t.Fatalf("edited %s to an invalid value %s: %v", k, v, err)
			}
			continue
		}
		if !bytes.Equal(v, orig[k]) {
			t.Fatalf("approval changed non-editable argument %s: %s -> %s", k, orig[k], v)
		}
	}
	for k := range orig {
		if _, ok := p.Arguments[k]; !ok {
			t.Fatalf("approval dropped argument %s", k)
		}
	}
}

// checkSignatureBindsAction signs the answer's content for its action and
// checks the signature verifies for that action only.
func checkSignatureBindsAction(t *testing.T, a answerPayload) {
	t.Helper()
	rest, _, err := approval.SplitSignature(a.content)
	if err != nil {
		return
	}
	sig, err := approval.Sign(fuzzKey, "req-1", "digest", a.action, rest)
	if err != nil {
		t.Fatalf("content %s splits but does not sign: %v", a.content, err)
	}
	signed, err := decodeObject(rest)
	if err != nil {
		t.Fatalf("canonical rest %s: %v", rest, err)
	}
	signed.set(approval.FieldSignature, sig)
	content := mustMarshal(signed)
	pub := fuzzKey.Public().(ed25519.PublicKey)
	if err := approval.Verify(pub, "req-1", "digest", a.action, content); err != nil {
		t.Fatalf("own signature over %s does not verify: %v", content, err)
	}
	for _, other := range []string{approval.ActionAccept, approval.ActionDecline, approval.ActionCancel} {
		if other != a.action && approval.Verify(pub, "req-1", "digest", other, content) == nil {
			t.Fatalf("signature for %s verifies for %s", a.action, other)
		}
	}
	if approval.Verify(pub, "req-2", "digest", a.action, content) == nil {
		t.Fatal("signature for one request verifies for another")
	}
}
