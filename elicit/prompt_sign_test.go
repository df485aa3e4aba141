package elicit_test

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// With a prompt key, every elicitation/create carries the fulfiller's
// signature in params._meta["fulfiller/signature"]: it verifies for the
// approver it is addressed to and no other, and a prompt asked again after
// a restart is the same signed bytes, so the approver's client still takes
// it (docs/design.md "Proposer identity and grants").
func TestE2EPromptsAreSigned(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := approval.Keys{"fulfiller": pub}
	w := newWorld(t, worldOptions{stateDir: t.TempDir(), promptKey: priv})
	id := w.propose("p-write", writeCall)
	ea, eb := w.ask("alice"), w.ask("bob")
	for who, e := range map[string]string{"alice": string(ea.Payload), "bob": string(eb.Payload)} {
		if !strings.Contains(e, `,"fulfiller/signature":{"signer":"fulfiller","signature":"`) {
			t.Errorf("%s's prompt carries no signature in _meta: %s", who, e)
		}
	}
	if signer, err := approval.VerifyPrompt(keys, ea.ID, "alice", ea.Payload); err != nil || signer != "fulfiller" {
		t.Fatalf("alice's prompt: signer %q, %v", signer, err)
	}
	if _, err := approval.VerifyPrompt(keys, eb.ID, "bob", eb.Payload); err != nil {
		t.Fatalf("bob's prompt: %v", err)
	}
	if _, err := approval.VerifyPrompt(keys, ea.ID, "bob", ea.Payload); !errors.Is(err, approval.ErrPromptBadSignature) {
		t.Errorf("alice's prompt verified for bob: %v", err)
	}

	w.crashFulfiller()
	w.startFulfiller()
	again := w.ask("alice")
	if again.ID != ea.ID || string(again.Payload) != string(ea.Payload) {
		t.Fatalf("asked again as %s %s, not as first asked", again.ID, again.Payload)
	}
	if _, err := approval.VerifyPrompt(keys, again.ID, "alice", again.Payload); err != nil {
		t.Fatalf("prompt asked again: %v", err)
	}
	w.answer("alice", again, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
}
