package elicit_test

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/poll"
)

// keySet is a reloadable key set as approverkeys.Watcher holds one: an
// immutable value swapped whole.
type keySet struct {
	cur atomic.Pointer[approval.ApproverKeys]
}

func newKeySet(keys approval.Keys) *keySet {
	k := &keySet{}
	k.set(keys)
	return k
}

func (k *keySet) set(keys approval.Keys) {
	k.cur.Store(&approval.ApproverKeys{Ed25519: keys})
}

func (k *keySet) get() approval.ApproverKeys { return *k.cur.Load() }

// signedAccept is alice's accept of prompt, signed with priv.
func signedAccept(t *testing.T, priv ed25519.PrivateKey, prompt agent.Envelope) string {
	t.Helper()
	sig, err := approval.Sign(priv, prompt.ID, writeDigest, "accept", json.RawMessage(`{"approve":true}`))
	if err != nil {
		t.Fatal(err)
	}
	return `{"action":"accept","content":{"approve":true,"signature":"` + sig + `"}}`
}

// awaiting fails the test unless proposal id still waits for a human.
func (w *world) awaiting(id string) {
	w.t.Helper()
	if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
		w.t.Fatalf("proposal %s: %+v %v, want awaiting_approval", id, s, ok)
	}
	if a := w.answers(id); len(a) != 0 {
		w.t.Fatalf("proposal %s answered: %v", id, a)
	}
}

// An approver who lost her device enrols again while a prompt is open:
// from the reload on, only the new key verifies her answers, to that
// prompt too, and an answer signed with the old key is a forgery.
func TestE2EReplacedKeyVerifiesOpenPromptWithTheNewKeyOnly(t *testing.T) {
	t.Parallel()
	oldPub, oldPriv, _ := ed25519.GenerateKey(nil)
	newPub, newPriv, _ := ed25519.GenerateKey(nil)
	keys := newKeySet(approval.Keys{"alice": oldPub})
	w := newWorld(t, worldOptions{currentKeys: keys.get, humans: []string{"alice"}, escalation: `{"approvers":["alice"]}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	keys.set(approval.Keys{"alice": newPub})

	w.answer("alice", ea, signedAccept(t, oldPriv, ea))
	poll.Until(t, "the old key's answer refused as a forgery", func() bool { return len(w.eventsOf(elicit.EventForgery)) == 1 })
	w.awaiting(id)

	w.answer("alice", ea, signedAccept(t, newPriv, ea))
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if got := w.approvedBy(id); len(got) != 1 || got[0] != "alice" {
		t.Errorf("approved by %v", got)
	}
}

// An approver enrolled after she was asked must sign her answer to that
// prompt: the keys in force when the answer arrives decide, and an
// unsigned answer is now a forgery.
func TestE2EKeyAddedAfterPromptAnswerMustBeSigned(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := newKeySet(nil)
	w := newWorld(t, worldOptions{currentKeys: keys.get, humans: []string{"alice"}, escalation: `{"approvers":["alice"]}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	keys.set(approval.Keys{"alice": pub})

	w.answer("alice", ea, `{"action":"accept","content":{"approve":true}}`)
	poll.Until(t, "the unsigned answer refused as a forgery", func() bool { return len(w.eventsOf(elicit.EventForgery)) == 1 })
	w.awaiting(id)

	w.answer("alice", ea, signedAccept(t, priv, ea))
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
}

// Removing an approver's key does not make her answers to a prompt sent
// while she was keyed acceptable unsigned (anyone could then answer for
// her): no answer to it counts — unsigned, signed with the removed key,
// or a decline that would veto — until a key is back. Prompts sent after
// the removal take her answer on the gateway's word, as for anyone
// without a key.
func TestE2EKeyRemovedAfterPromptNoAnswerCounts(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := newKeySet(approval.Keys{"alice": pub})
	w := newWorld(t, worldOptions{currentKeys: keys.get, humans: []string{"alice"}, escalation: `{"approvers":["alice"]}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	keys.set(nil)

	w.answer("alice", ea, `{"action":"accept","content":{"approve":true}}`)
	w.answer("alice", ea, signedAccept(t, priv, ea))
	w.answer("alice", ea, `{"action":"decline"}`)
	poll.Until(t, "three answers ignored", func() bool { return len(w.eventsOf(elicit.EventIgnored)) == 3 })
	for _, e := range w.eventsOf(elicit.EventIgnored) {
		if e.Reason != "alice's key was removed after they were asked: the answer cannot be verified" || e.RequestID != ea.ID {
			t.Errorf("ignored: %+v", e)
		}
	}
	if n := len(w.eventsOf(elicit.EventAnswered)); n != 0 {
		t.Errorf("%d answers counted", n)
	}
	w.awaiting(id)
	if logs := w.logs.String(); !strings.Contains(logs, "answer ignored: alice's key was removed after they were asked") {
		t.Errorf("logs:\n%s", logs)
	}

	// A second proposal, asked after the removal: alice is unkeyed now.
	id2 := w.propose("p-write-2", writeCall)
	ea2 := w.ask("alice")
	w.answer("alice", ea2, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id2); !out.Fulfilled {
		t.Fatalf("second proposal: %+v", out)
	}
	w.awaiting(id)

	// Her key back: her signed answer to the first prompt counts.
	keys.set(approval.Keys{"alice": pub})
	w.answer("alice", ea, signedAccept(t, priv, ea))
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("first proposal after the key came back: %+v", out)
	}
}
