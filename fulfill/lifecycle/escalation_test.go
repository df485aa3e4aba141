package lifecycle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// escWorld drives one Core through escalations, carrying out its writes
// at once (each durable) and collecting the rest.
type escWorld struct {
	t   *testing.T
	c   *Core
	rev uint64
	now time.Time
}

func newEscWorld(t *testing.T, present []string, tune ...func(*Config)) *escWorld {
	w := &escWorld{t: t, c: testCore(tune...), now: t0}
	w.step(Roster{Present: present})
	return w
}

// step applies ev, then the results of the writes it asks for, and
// returns every other effect.
func (w *escWorld) step(ev Event) []Effect {
	var out []Effect
	for queue := []Event{ev}; len(queue) > 0; queue = queue[1:] {
		for _, e := range w.c.Step(w.now, queue[0]) {
			if wr, ok := e.(Write); ok {
				w.rev++
				queue = append(queue, Stored{ID: wr.ID, Seq: wr.Seq, Rev: w.rev})
				continue
			}
			out = append(out, e)
		}
	}
	return out
}

// escalate proposes p1 and decides d; it returns the effects of the
// decision.
func (w *escWorld) escalate(d Decision) []Effect {
	effs := w.step(Proposed{ID: "p1", From: "coder", Method: "tools/call", Tool: "write", Params: json.RawMessage(`{"name":"write"}`)})
	only[Decide](w.t, effs)
	d.Action = Escalate
	return w.step(Decided{ID: "p1", Decision: d})
}

// prompts are the first sends of effs, by approver.
func prompts(effs []Effect) map[string]SendPrompt {
	out := map[string]SendPrompt{}
	for _, e := range effs {
		if p, ok := e.(SendPrompt); ok {
			out[p.To] = p
		}
	}
	return out
}

func humans(effs []Effect, kind HumanKind) []Human {
	var out []Human
	for _, e := range effs {
		if h, ok := e.(Human); ok && h.Kind == kind {
			out = append(out, h)
		}
	}
	return out
}

func (w *escWorld) answer(p SendPrompt, from string, a fakeAnswer) []Effect {
	return w.step(Answer{PromptID: p.EnvelopeID, From: from, HasRPCID: true, RPCID: p.RPCID, Payload: answerOf(a)})
}

func rejectOf(t *testing.T, effs []Effect) SendReject {
	t.Helper()
	return only[SendReject](t, effs)
}

// A quorum of two counts distinct approvers approving the same call;
// approvals of different edits cannot make it, and end "disagree" once
// no quorum can come.
func TestEscalationQuorumOfTheSameCall(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob", "carol"})
	asked := prompts(w.escalate(Decision{Approvers: []string{"alice", "bob", "carol"}, Quorum: 2}))
	if len(asked) != 3 {
		t.Fatalf("asked %v", asked)
	}
	edit := func(v string) json.RawMessage {
		return json.RawMessage(`{"name":"write","arguments":{"v":"` + v + `"}}`)
	}
	w.answer(asked["alice"], "alice", fakeAnswer{Action: "accept", Approve: true, Params: edit("a"), Signed: true})
	// The same answer again: its prompt is answered, it counts once.
	if ig := humans(w.answer(asked["alice"], "alice", fakeAnswer{Action: "accept", Approve: true, Params: edit("a"), Signed: true}), HumanIgnored); len(ig) != 1 || ig[0].Reason != "already answered" {
		t.Fatalf("second answer: %+v", ig)
	}
	w.answer(asked["bob"], "bob", fakeAnswer{Action: "accept", Approve: true, Params: edit("b")})
	effs := w.answer(asked["carol"], "carol", fakeAnswer{Action: "accept", Approve: true, Params: edit("c")})
	if r := rejectOf(t, effs); r.Reason != "disagree" || r.Message != "the approvers approved different edits of the call" {
		t.Fatalf("reject %+v", r)
	}

	w = newEscWorld(t, []string{"alice", "bob", "carol"})
	asked = prompts(w.escalate(Decision{Approvers: []string{"alice", "bob", "carol"}, Quorum: 2}))
	w.answer(asked["alice"], "alice", fakeAnswer{Action: "accept", Approve: true, Params: edit("a"), Signed: true})
	effs = w.answer(asked["bob"], "bob", fakeAnswer{Action: "accept", Approve: true, Params: edit("a")})
	d := only[Decide](t, effs)
	if !d.Again || string(d.Params) != string(edit("a")) {
		t.Fatalf("re-check %+v", d)
	}
	// carol's prompt is cancelled "approved".
	ca := only[CancelAsk](t, effs)
	if ca.Reason != "approved" || len(ca.Prompts) != 1 || ca.Prompts[0].Approver != "carol" {
		t.Fatalf("cancel %+v", ca)
	}
	if end := humans(effs, HumanEnded); len(end) != 1 || end[0].Outcome != OutcomeApproved {
		t.Fatalf("ended %+v", end)
	}
}

// A decline vetoes with the approver's reason; a cancel ends "other";
// the proposer is never asked; too few approvers present ends at once.
func TestEscalationVetoAndPresence(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob", "coder"})
	effs := w.escalate(Decision{Approvers: []string{"alice", "bob", "coder"}, Quorum: 2})
	asked := prompts(effs)
	if _, ok := asked["coder"]; ok || len(asked) != 2 {
		t.Fatalf("asked %v", asked)
	}
	if sk := humans(effs, HumanSkipped); len(sk) != 1 || sk[0].Approver != "coder" {
		t.Fatalf("skipped %+v", sk)
	}
	effs = w.answer(asked["bob"], "bob", fakeAnswer{Action: "decline", Reason: "too risky"})
	if r := rejectOf(t, effs); r.Reason != "disagree" || r.Message != "bob declined: too risky" {
		t.Fatalf("reject %+v", r)
	}

	w = newEscWorld(t, []string{"alice"})
	effs = w.escalate(Decision{Approvers: []string{"alice"}})
	effs = w.answer(prompts(effs)["alice"], "alice", fakeAnswer{Action: "cancel", Signed: true})
	if r := rejectOf(t, effs); r.Reason != "other" || r.Message != "alice dismissed the approval request without deciding" {
		t.Fatalf("reject %+v", r)
	}

	w = newEscWorld(t, []string{"alice"})
	effs = w.escalate(Decision{Approvers: []string{"alice", "bob"}, Quorum: 2})
	if r := rejectOf(t, effs); r.Reason != "incapable" || r.Message != "2 approvals needed, but only 1 of the approvers (alice, bob) is in the space: alice" {
		t.Fatalf("reject %+v", r)
	}
	if len(prompts(effs)) != 0 {
		t.Fatal("prompted though too few are present")
	}
}

// Rule 12 and the keys: an answer from another participant, with
// another JSON-RPC id, or unsigned for a keyed approver does not count;
// a prompt asked while its approver was keyed stays signed-only.
func TestEscalationForgedAnswers(t *testing.T) {
	w := newEscWorld(t, []string{"alice"}, func(c *Config) { c.Keys = fakeKeys{"alice"} })
	p := prompts(w.escalate(Decision{Approvers: []string{"alice"}}))["alice"]
	ok := fakeAnswer{Action: "accept", Approve: true, Signed: true}
	if ig := humans(w.answer(p, "mallory", ok), HumanIgnored); len(ig) != 1 || ig[0].Reason != "not addressed to mallory" {
		t.Fatalf("from another: %+v", ig)
	}
	if ig := humans(w.step(Answer{PromptID: p.EnvelopeID, From: "alice", HasRPCID: true, RPCID: p.RPCID + 1, Payload: answerOf(ok)}), HumanIgnored); len(ig) != 1 {
		t.Fatalf("another id: %+v", ig)
	}
	if f := humans(w.answer(p, "alice", fakeAnswer{Action: "accept", Approve: true}), HumanForgery); len(f) != 1 {
		t.Fatalf("unsigned: %+v", f)
	}
	w.step(KeysChanged{Keys: fakeKeys{}})
	if ig := humans(w.answer(p, "alice", ok), HumanIgnored); len(ig) != 1 || !strings.Contains(ig[0].Reason, "key was removed") {
		t.Fatalf("key removed: %+v", ig)
	}
	w.step(KeysChanged{Keys: fakeKeys{"alice"}})
	effs := w.answer(p, "alice", ok)
	only[SendRequest](t, effs)
}

// Delegation: to one the form offered, never back along the chain, the
// same deadline; to one it did not offer, the answer counts as none.
func TestEscalationDelegation(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob"})
	p := prompts(w.escalate(Decision{Approvers: []string{"alice", "bob"}}))
	var spec PromptSpec
	_ = json.Unmarshal(p["alice"].Payload, &spec)
	if !slices.Equal(spec.Delegates, []string{"bob"}) {
		t.Fatalf("alice offered %v", spec.Delegates)
	}
	effs := w.answer(p["alice"], "alice", fakeAnswer{Action: "accept", DelegateTo: "bob"})
	bob := prompts(effs)["bob"]
	if bob.EnvelopeID == "" || bob.EnvelopeID == p["bob"].EnvelopeID {
		t.Fatalf("delegated: %v", kinds(effs))
	}
	_ = json.Unmarshal(bob.Payload, &spec)
	if !slices.Equal(spec.Chain, []string{"alice"}) || len(spec.Delegates) != 0 {
		t.Fatalf("delegated prompt %+v", spec)
	}
	effs = w.answer(bob, "bob", fakeAnswer{Action: "accept", Approve: true})
	only[SendRequest](t, effs)

	// Quorum above one: those asked already are not offered (a second
	// prompt would cost a distinct approval).
	w = newEscWorld(t, []string{"alice", "bob", "carol"})
	p = prompts(w.escalate(Decision{Approvers: []string{"alice", "bob", "carol"}, Quorum: 2}))
	for a, pr := range p {
		_ = json.Unmarshal(pr.Payload, &spec)
		if len(spec.Delegates) != 0 {
			t.Fatalf("%s offered %v", a, spec.Delegates)
		}
	}

	w = newEscWorld(t, []string{"alice"})
	p = prompts(w.escalate(Decision{Approvers: []string{"alice"}}))
	effs = w.answer(p["alice"], "alice", fakeAnswer{Action: "accept", DelegateTo: "mallory"})
	if r := rejectOf(t, effs); r.Reason != "incapable" || r.Message != "1 approval needed, but only 0 can still come: alice handed the request to mallory, who cannot take it" {
		t.Fatalf("reject %+v", r)
	}
}

// Reminders announce, tiers ask (and a tier to come keeps the escalation
// open); steps after the deadline are dropped; the deadline rejects
// "timeout" naming whom it waited for, and cancels what is open.
func TestEscalationRemindersTiersAndDeadline(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob"})
	effs := w.escalate(Decision{Approvers: []string{"alice"}, Timeout: time.Minute,
		Reminders: []time.Duration{10 * time.Second, time.Hour}, EscalateTo: []decision.Tier{{After: 20 * time.Second, Approvers: []string{"bob"}}}})
	if d := humans(effs, HumanStepDropped); len(d) != 1 || d[0].After != time.Hour {
		t.Fatalf("dropped %+v", d)
	}
	alice := prompts(effs)["alice"]
	w.now = t0.Add(10 * time.Second)
	effs = w.step(Fired{ID: "p1", At: w.now, Kind: TimerStep})
	if r := humans(effs, HumanReminded); len(r) != 1 || !slices.Equal(r[0].Notice.Asked, []string{"alice"}) {
		t.Fatalf("reminded %+v", effs)
	}
	// A failed client closes alice's prompt; the tier still to come
	// keeps the escalation open.
	effs = w.answer(alice, "alice", fakeAnswer{Error: "no forms here"})
	if len(effectsOf[SendReject](effs)) != 0 {
		t.Fatalf("ended with a tier to come: %v", kinds(effs))
	}
	w.now = t0.Add(20 * time.Second)
	effs = w.step(Fired{ID: "p1", At: w.now, Kind: TimerStep})
	if len(humans(effs, HumanEscalated)) != 1 || prompts(effs)["bob"].EnvelopeID == "" {
		t.Fatalf("tier: %v", kinds(effs))
	}
	w.now = t0.Add(time.Minute)
	effs = w.step(Fired{ID: "p1", At: w.now, Kind: TimerDeadline})
	if r := rejectOf(t, effs); r.Reason != "timeout" || r.Message != "no approval within 1m0s (no answer from bob)" {
		t.Fatalf("reject %+v", r)
	}
	if ca := only[CancelAsk](t, effs); ca.Reason != "timeout" || len(ca.Prompts) != 1 || ca.Prompts[0].Approver != "bob" {
		t.Fatalf("cancel %+v", ca)
	}
}

// A grant is offered only when the decision is grantable, the quorum is
// one and grants are on; one chosen is made once the approved call is
// committed; a grant not offered refuses the approval.
func TestEscalationGrants(t *testing.T) {
	g := &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}}}
	w := newEscWorld(t, []string{"alice"}, func(c *Config) { c.OfferGrants = true })
	p := prompts(w.escalate(Decision{Approvers: []string{"alice"}, Grantable: g}))["alice"]
	var spec PromptSpec
	_ = json.Unmarshal(p.Payload, &spec)
	if !slices.Equal(spec.Grants, []string{"15m", "1h"}) {
		t.Fatalf("offered %v", spec.Grants)
	}
	effs := w.answer(p, "alice", fakeAnswer{Action: "accept", Approve: true, Grant: "1h"})
	cg := only[CreateGrant](t, effs)
	if cg.Duration != time.Hour || cg.Approver != "alice" {
		t.Fatalf("grant %+v", cg)
	}
	if i, j := slices.IndexFunc(effs, func(e Effect) bool { _, ok := e.(CreateGrant); return ok }), slices.IndexFunc(effs, func(e Effect) bool { _, ok := e.(SendRequest); return ok }); i > j {
		t.Fatal("grant after the request")
	}

	w = newEscWorld(t, []string{"alice"}, func(c *Config) { c.OfferGrants = true })
	p = prompts(w.escalate(Decision{Approvers: []string{"alice"}, Grantable: g}))["alice"]
	effs = w.answer(p, "alice", fakeAnswer{Action: "accept", Approve: true, Grant: "8h"})
	if r := rejectOf(t, effs); r.Reason != "other" || r.Message != `alice's approval cannot be used: the grant "8h" was not offered` {
		t.Fatalf("reject %+v", r)
	}

	w = newEscWorld(t, []string{"alice", "bob"}, func(c *Config) { c.OfferGrants = true })
	p = prompts(w.escalate(Decision{Approvers: []string{"alice", "bob"}, Quorum: 2, Grantable: g}))["alice"]
	_ = json.Unmarshal(p.Payload, &spec)
	if len(spec.Grants) != 0 {
		t.Fatalf("quorum 2 offered %v", spec.Grants)
	}
}

// A resumed record asks its open prompts again with the same ids and
// bytes, counts its recorded approvals once, and a new welcome re-sends
// every open prompt while an approver who comes in is asked.
func TestEscalationResumeAndPresence(t *testing.T) {
	w := newEscWorld(t, []string{"alice", "bob"})
	asked := prompts(w.escalate(Decision{Approvers: []string{"alice", "bob", "carol"}, Quorum: 2}))
	w.answer(asked["alice"], "alice", fakeAnswer{Action: "accept", Approve: true, Signed: true})
	rec := w.c.Open()[0]

	// The crash: a new core resumes the record.
	w2 := newEscWorld(t, []string{"bob", "carol"})
	w2.now = t0.Add(time.Second)
	effs := w2.step(Resumed{Records: []Proposal{rec}, How: "restart"})
	again := prompts(effs)
	if b := again["bob"]; !b.Again || b.EnvelopeID != asked["bob"].EnvelopeID || string(b.Payload) != string(asked["bob"].Payload) {
		t.Fatalf("bob asked again %+v", b)
	}
	if _, ok := again["alice"]; ok {
		t.Fatal("alice, who approved, asked again")
	}
	c := again["carol"] // listed, here now, never asked: asked
	if c.EnvelopeID == "" || c.Again {
		t.Fatalf("carol %+v", c)
	}
	// A new welcome: the open prompts again, byte for byte.
	effs = w2.step(Roster{Present: []string{"bob", "carol"}})
	if r := prompts(effs); len(r) != 2 || !r["bob"].Again || string(r["carol"].Payload) != string(c.Payload) {
		t.Fatalf("after the welcome %+v", r)
	}
	// alice's approval counts once: bob's makes the quorum.
	effs = w2.answer(again["bob"], "bob", fakeAnswer{Action: "accept", Approve: true})
	only[SendRequest](t, effs)
}

func effectsOf[T Effect](effs []Effect) []T {
	var out []T
	for _, e := range effs {
		if x, ok := e.(T); ok {
			out = append(out, x)
		}
	}
	return out
}
