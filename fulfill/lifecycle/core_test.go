package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// counterIDs mints ids from a counter; prefix keeps two processes' ids
// apart.
type counterIDs struct {
	prefix string
	n      int
}

func (c *counterIDs) EnvelopeID() string { c.n++; return fmt.Sprintf("%se%d", c.prefix, c.n) }
func (c *counterIDs) RPCID() int64       { c.n++; return int64(c.n) }
func (c *counterIDs) DecisionID() string { c.n++; return fmt.Sprintf("%sd%d", c.prefix, c.n) }
func (c *counterIDs) PromptID() string   { c.n++; return fmt.Sprintf("%sp%d", c.prefix, c.n) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testCore(tune ...func(*Config)) *Core {
	cfg := Config{Member: "m1", MaxPending: 10, MaxInflight: 1, PendingTTL: time.Minute, FulfillTimeout: 30 * time.Second,
		ApprovalTimeout: 5 * time.Minute, RetryAfter: time.Second, Approvers: []string{"alice"}, Codec: fakeCodec{}}
	for _, f := range tune {
		f(&cfg)
	}
	return New(cfg, &counterIDs{})
}

// kinds names the effects, without logs and timers, in order.
func kinds(effs []Effect) []string {
	var out []string
	for _, e := range effs {
		switch e := e.(type) {
		case Log, Schedule, Human:
		case Write:
			switch {
			case e.Create:
				out = append(out, "claim")
			case e.Record == nil:
				out = append(out, "delete")
			default:
				out = append(out, "write "+string(e.Record.Phase))
			}
		default:
			out = append(out, reflect.TypeOf(e).Name())
		}
	}
	return out
}

func only[T Effect](t *testing.T, effs []Effect) T {
	t.Helper()
	var found []T
	for _, e := range effs {
		if x, ok := e.(T); ok {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %T in %v, got %d", *new(T), kinds(effs), len(found))
	}
	return found[0]
}

func same(t *testing.T, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("effects %q, want %q", got, want)
	}
}

// A reject is recorded (phase answered, with its envelope id) before it
// is sent, and the record is deleted only once it was written.
func TestRejectIsRecordedBeforeItIsSent(t *testing.T) {
	c := testCore()
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	same(t, kinds(c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})), []string{"Decide"})
	effs := c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Reject, Reason: "policy", Message: "no"}})
	same(t, kinds(effs), []string{"write answered"})
	w := only[Write](t, effs)
	if w.Record.Reject == nil || w.Record.Reject.Reason != "policy" || w.Rev != 1 {
		t.Fatalf("recorded %+v (rev %d), want the reject, on revision 1", w.Record.Reject, w.Rev)
	}
	effs = c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2})
	same(t, kinds(effs), []string{"SendReject"})
	if l := only[Log](t, effs).Line; l.Stage != "rejected" || l.Reason != "policy" {
		t.Fatalf("with the reject logged %+v", l)
	}
	rej := only[SendReject](t, effs)
	if rej.EnvelopeID != w.Record.Reject.EnvelopeID || rej.To != "coder" || rej.Reason != "policy" || rej.Message != "no" {
		t.Fatalf("sent %+v, recorded %+v", rej, w.Record.Reject)
	}
	effs = c.Step(t0, Sent{ID: "p1", EnvelopeID: rej.EnvelopeID})
	same(t, kinds(effs), []string{"delete"})
	c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 3})
	if c.Pending() != 0 {
		t.Fatalf("%d pending after the reject's record was deleted", c.Pending())
	}
}

// After a restart, a record in phase answered sends the same envelope
// again; one in phase fulfilling never sends its request again, and its
// deadline, counted from when it was committed, ends it with a cancel
// and a reject "timeout".
func TestResumeSendsTheSameRejectAndNeverTheRequest(t *testing.T) {
	c := testCore()
	answered := Proposal{ID: "p1", From: "coder", Owner: "m1", Phase: Answered, DecisionID: "d1", Deadline: t0,
		Reject: &RejectRecord{EnvelopeID: "e-old", Reason: "policy"}, Rev: 7}
	sentAt := t0.Add(-20 * time.Second)
	fulfilling := Proposal{ID: "p2", From: "coder", Owner: "m1", Phase: Fulfilling, DecisionID: "d2", Deadline: sentAt.Add(30 * time.Second),
		Decision: &Decision{Action: Fulfill, Target: "fs"}, Request: &Request{EnvelopeID: "e-req", RPCID: 9, Target: "fs", SentAt: sentAt}, Rev: 8}
	effs := c.Step(t0, Resumed{Records: []Proposal{answered, fulfilling}, How: "restart"})
	same(t, kinds(effs), []string{"SendReject"})
	if r := only[SendReject](t, effs); r.EnvelopeID != "e-old" || r.Reason != "policy" {
		t.Fatalf("re-sent %+v, want envelope e-old", r)
	}
	sched := only[Schedule](t, effs)
	if sched.ID != "p2" || !sched.At.Equal(fulfilling.Deadline) {
		t.Fatalf("scheduled %+v, want p2 at %s", sched, fulfilling.Deadline)
	}
	effs = c.Step(sched.At, Fired{ID: "p2", At: sched.At, Kind: TimerDeadline})
	same(t, kinds(effs), []string{"write answered"})
	w := only[Write](t, effs)
	effs = c.Step(sched.At, Stored{ID: "p2", Seq: w.Seq, Rev: 9})
	same(t, kinds(effs), []string{"SendCancel", "SendReject"})
	if cn := only[SendCancel](t, effs); cn.RequestEnvelopeID != "e-req" || cn.RPCID != 9 || cn.To != "fs" {
		t.Fatalf("cancelled %+v", cn)
	}
	if r := only[SendReject](t, effs); r.Reason != "timeout" {
		t.Fatalf("rejected %q, want timeout", r.Reason)
	}
}

// A withdrawal read while the claim is written is taken once the claim
// is this member's: nothing is decided or sent, the record is deleted,
// and then its line is written, with the claim's decision.
func TestWithdrawalWhileClaiming(t *testing.T) {
	c := testCore()
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	same(t, kinds(c.Step(t0, WithdrawnBy{ID: "p1", From: "mallory"})), nil)
	same(t, kinds(c.Step(t0, WithdrawnBy{ID: "p1", From: "coder"})), nil)
	effs := c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})
	same(t, kinds(effs), []string{"delete"})
	// Its line says what the store holds: written once the delete is.
	effs = c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 2})
	same(t, kinds(effs), nil)
	l := only[Log](t, effs).Line
	if l.Stage != "withdrawn" || l.DecisionID != claim.Record.DecisionID {
		t.Fatalf("logged %+v, want withdrawn with decision %s", l, claim.Record.DecisionID)
	}
}

// The claim is retried while the store fails, and a proposal whose
// claim never succeeded by its deadline is left alone after the record
// is read back and found absent: nothing is sent without a record. (In
// a group: see TestClaimLandingLateAlone for a member alone on its store.)
func TestClaimThatNeverLands(t *testing.T) {
	c := testCore()
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	effs := c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Err: fmt.Errorf("timeout")})
	retry := only[Schedule](t, effs)
	retryClaim := only[Write](t, c.Step(retry.At, Fired{ID: "p1", At: retry.At, Kind: TimerRetry}))
	if !retryClaim.Create {
		t.Fatalf("retried %+v, want the claim again", retryClaim)
	}
	late := t0.Add(2 * time.Minute)
	same(t, kinds(c.Step(late, Stored{ID: "p1", Seq: retryClaim.Seq, Err: fmt.Errorf("timeout")})), []string{"Reload"})
	effs = c.Step(late, Reloaded{ID: "p1"})
	same(t, kinds(effs), nil)
	if l := only[Log](t, effs).Line; l.Reason != "store_unavailable" || c.Pending() != 0 {
		t.Fatalf("logged %+v with %d pending", l, c.Pending())
	}
}

// An approval with edited params is decided again (rule 7) under a new
// decision id, which the lines and the record after it carry, with the
// approvals recorded, and the edited call is the one fulfilled.
func TestApprovalWithAnEditIsDecidedAgain(t *testing.T) {
	w := newEscWorld(t, []string{"alice"})
	asked := prompts(w.escalate(Decision{Target: "fs", Approvers: []string{"alice"}}))
	edited := json.RawMessage(`{"name":"write","arguments":{"path":"/b"}}`)
	effs := w.answer(asked["alice"], "alice", fakeAnswer{Action: "accept", Approve: true, Params: edited})
	d := only[Decide](t, effs)
	claimedAs := d.Proposal.DecisionID
	if !d.Again || string(d.Params) != string(edited) || len(d.Approvals) != 1 || d.Approvals[0].Approver != "alice" || string(d.Approvals[0].Params) != string(edited) ||
		d.Proposal.ID != "p1" || d.DecisionID == "" || d.DecisionID == claimedAs {
		t.Fatalf("decided again with %+v", d)
	}
	effs = w.c.Step(w.now, Decided{ID: "p1", Again: true, Decision: Decision{Action: Fulfill, Target: "fs"}})
	same(t, kinds(effs), []string{"write fulfilling"})
	for _, l := range logs(effs) {
		if l.DecisionID != d.DecisionID {
			t.Fatalf("%s line under %q, want the re-check's %q", l.Stage, l.DecisionID, d.DecisionID)
		}
	}
	wr := only[Write](t, effs)
	if string(wr.Record.FinalArgs) != string(edited) || wr.Record.DecisionID != d.DecisionID || wr.Record.Claim != claimedAs || wr.Soon {
		t.Fatalf("recorded params %s under decision %s (claimed as %s, claim %s), soon %v", wr.Record.FinalArgs, wr.Record.DecisionID, claimedAs, wr.Record.Claim, wr.Soon)
	}
	if len(wr.Record.Approvals) != 1 || !reflect.DeepEqual(wr.Record.ApprovedBy, []string{"alice"}) {
		t.Fatalf("recorded approvals %+v by %v, want alice's, kept", wr.Record.Approvals, wr.Record.ApprovedBy)
	}
	req := only[SendRequest](t, w.c.Step(w.now, Stored{ID: "p1", Seq: wr.Seq, Rev: 99}))
	if string(req.Params) != string(edited) || req.To != "fs" {
		t.Fatalf("requested %+v", req)
	}
}

// Without a Codec nobody can ask the humans: a decision to escalate is
// rejected "policy" at once, and so is an escalated record resumed from
// a member that could ask, whose prompts are withdrawn.
func TestEscalationWithoutACodecRejectsPolicy(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.Codec = nil })
	w := admitted(t, c, "p1", Decision{Action: Escalate, Target: "fs"})
	if r := w.Record.Reject; w.Record.Phase != Answered || r == nil || r.Reason != "policy" || r.Message != NoApprovalsMessage {
		t.Fatalf("escalation without a codec wrote %+v", w.Record)
	}
	alice := Prompt{Approver: "alice", EnvelopeID: "x1", RPCID: 41, Payload: []byte(`{}`)}
	rec := Proposal{ID: "p2", From: "coder", Owner: "m2", Phase: AwaitingApproval, DecisionID: "d2", Deadline: t0.Add(time.Minute), Rev: 3,
		Decision: &Decision{Action: Escalate, Target: "fs", Approvers: []string{"alice"}}, Prompts: []Prompt{alice}}
	effs := c.Step(t0, Resumed{Records: []Proposal{rec}, How: "adopted from m2"})
	if ca := only[CancelAsk](t, effs); len(ca.Prompts) != 1 || ca.Prompts[0].EnvelopeID != "x1" || ca.Reason == DropReason {
		t.Fatalf("cancelled %+v, want alice's prompt withdrawn", ca)
	}
	if r := only[Write](t, effs).Record.Reject; r == nil || r.Reason != "policy" || r.Message != NoApprovalsMessage {
		t.Fatalf("resumed escalation without a codec: reject %+v", r)
	}
}

// Refusals whose claim-only writes failed wait to try them again; when
// as many as may be pending wait (the store is down), a new one is not
// kept: nothing is claimed or sent, and its line says why. Memory stays
// bounded under a flood during an outage; a burst with the store up is
// refused as usual.
func TestRefusalsWaitingForTheStoreAreBounded(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.MaxPending = 2 })
	for _, id := range []string{"p1", "p2"} {
		only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"})) // admitted, claims outstanding
	}
	var claims []Write
	for _, id := range []string{"p3", "p4", "p5"} { // a burst: more refusals than MaxPending
		w := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		if !w.ClaimOnly {
			t.Fatalf("%s written %+v, want a refusal's claim", id, w)
		}
		claims = append(claims, w)
	}
	// The store is down: two of them fail and wait to be tried again.
	for _, w := range claims[:2] {
		only[Schedule](t, c.Step(t0, Stored{ID: w.ID, Seq: w.Seq, Err: errors.New("timeout")}))
	}
	effs := c.Step(t0, Proposed{ID: "p6", From: "coder"})
	same(t, kinds(effs), nil)
	if l := only[Log](t, effs).Line; l.Stage != "ignored" || l.Reason != "store_unavailable" || c.Pending() != 5 {
		t.Fatalf("p6 logged %+v with %d pending, want ignored store_unavailable and 5 held", l, c.Pending())
	}
	// Once a waiting refusal's claim lands and its reject is out, room
	// is made.
	retry := only[Write](t, c.Step(t0.Add(time.Second), Fired{ID: "p3", At: t0.Add(time.Second), Kind: TimerRetry}))
	rej := only[SendReject](t, c.Step(t0.Add(time.Second), Stored{ID: "p3", Seq: retry.Seq, Rev: 7}))
	c.Step(t0.Add(time.Second), Sent{ID: "p3", EnvelopeID: rej.EnvelopeID})
	if w := only[Write](t, c.Step(t0.Add(time.Second), Proposed{ID: "p7", From: "coder"})); !w.ClaimOnly {
		t.Fatalf("p7 written %+v, want a refusal's claim", w)
	}
}

// Alone on its store (Config.Alone), a member tries a claim on past the
// proposal's deadline: once it lands, the proposal is rejected
// "timeout" with its record (so a crash sends the same reject), never
// given up without a word; a replay's claim is told by the store.
func TestClaimLandingLateAlone(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.Alone = true })
	// The policy is asked first; its claim waits for its answer, until
	// the deadline: then it is claimed as it is.
	only[Decide](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	late := t0.Add(2 * time.Minute)
	claim := only[Write](t, c.Step(late, Fired{ID: "p1", At: t0.Add(time.Minute), Kind: TimerDeadline}))
	if !claim.Create || claim.Record.Phase != Deciding {
		t.Fatalf("at the deadline wrote %+v, want the claim as it is", claim)
	}
	effs := c.Step(late, Stored{ID: "p1", Seq: claim.Seq, Err: fmt.Errorf("timeout")})
	retry := only[Schedule](t, effs)
	again := only[Write](t, c.Step(retry.At, Fired{ID: "p1", At: retry.At, Kind: TimerRetry}))
	if !again.Create {
		t.Fatalf("tried %+v, want the claim again", again)
	}
	effs = c.Step(retry.At, Stored{ID: "p1", Seq: again.Seq, Rev: 1})
	same(t, kinds(effs), []string{"write answered"})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "timeout" {
		t.Fatalf("recorded %+v, want a timeout reject", r)
	}

	// A replay after a restart, claimed before: the store's answer
	// makes it a duplicate, with the winner's decision. Its claim
	// carried its decision (a fulfilment's request): lost, nothing of
	// that decision is logged or kept.
	c = testCore(func(cfg *Config) { cfg.Alone = true })
	only[Decide](t, c.Step(t0, Proposed{ID: "p2", From: "coder"}))
	effs = c.Step(t0, Decided{ID: "p2", Decision: Decision{Action: Fulfill, Target: "fs"}})
	claim = only[Write](t, effs)
	if !claim.Create || claim.Record.Phase != Fulfilling || claim.Record.Request == nil || len(logs(effs)) != 0 {
		t.Fatalf("decided before its claim, wrote %+v and logged %+v; want the claim with its request, nothing logged", claim, logs(effs))
	}
	retry = only[Schedule](t, c.Step(late, Stored{ID: "p2", Seq: claim.Seq, Err: fmt.Errorf("timeout")}))
	again = only[Write](t, c.Step(retry.At, Fired{ID: "p2", At: retry.At, Kind: TimerRetry}))
	same(t, kinds(c.Step(retry.At, Stored{ID: "p2", Seq: again.Seq, Err: &ClaimedError{Winner: "d0"}})), []string{"Reload"})
	effs = c.Step(retry.At, Reloaded{ID: "p2"})
	same(t, kinds(effs), nil)
	if l := only[Log](t, effs).Line; l.Stage != "ignored" || l.Reason != "duplicate" || l.DecisionID != "d0" || l.Target != "" || c.Pending() != 0 {
		t.Fatalf("logged %+v with %d pending, want ignored duplicate under d0", l, c.Pending())
	}
	if len(c.byRequest) != 0 || c.slots.used != 0 {
		t.Fatalf("the lost claim left requests %v, %d slots used", c.byRequest, c.slots.used)
	}
}

// The fulfilment slots are shared among proposers (fulfill's slots): no
// proposer holds more than its share, even with slots free, and a freed
// slot goes to the queued proposers in turn, not to whoever queued
// first or most.
func TestSlotsAreSharedInTurn(t *testing.T) {
	run := func(maxInflight, share int) (start func(id, from string) []string, respond func(id string) []string) {
		c := testCore(func(cfg *Config) { cfg.MaxInflight, cfg.MaxInflightPerProposer = maxInflight, share })
		reqs := map[string]Request{}
		rev := uint64(0)
		// settle stores every write, and returns the proposals whose
		// request was committed.
		var settle func(effs []Effect) []string
		settle = func(effs []Effect) (started []string) {
			for _, e := range effs {
				if w, ok := e.(Write); ok {
					if w.Record != nil && w.Record.Phase == Fulfilling {
						started = append(started, w.ID)
						reqs[w.ID] = *w.Record.Request
					}
					rev++
					started = append(started, settle(c.Step(t0, Stored{ID: w.ID, Seq: w.Seq, Rev: rev}))...)
				}
			}
			return started
		}
		start = func(id, from string) []string {
			settle(c.Step(t0, Proposed{ID: id, From: from}))
			return settle(c.Step(t0, Decided{ID: id, Decision: Decision{Action: Fulfill, Target: "fs"}}))
		}
		respond = func(id string) []string {
			r := reqs[id]
			return settle(c.Step(t0, Responded{RequestID: r.EnvelopeID, From: "fs", HasRPCID: true, RPCID: r.RPCID}))
		}
		return start, respond
	}
	want := func(got []string, want ...string) {
		t.Helper()
		if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("started %v, want %v", got, want)
		}
	}
	// A share of one: coder's second call waits with a slot free, which
	// bob's call takes.
	start, respond := run(2, 1)
	want(start("c1", "coder"), "c1")
	want(start("c2", "coder"))
	want(start("b1", "bob"), "b1")
	want(respond("c1"), "c2")

	// In turn: coder queued two calls before bob's one; coder's slot
	// frees and coder's next starts, then the next slot goes to bob.
	start, respond = run(2, 2)
	want(start("c1", "coder"), "c1")
	want(start("c2", "coder"), "c2")
	want(start("c3", "coder"))
	want(start("c4", "coder"))
	want(start("b1", "bob"))
	want(respond("c1"), "c3")
	want(respond("c2"), "b1")
	want(respond("c3"), "c4")
}

// Every line says what fulfill's events say of its proposal: proposer,
// method, tool and target (the addressee until a route is decided); a
// fulfilment's line its outcome and round trip; an ignored answer's who
// sent it and what.
func TestLinesSayWhatFulfillsEventsSay(t *testing.T) {
	c := testCore()
	var lines []Line
	step := func(at time.Time, ev Event) []Effect {
		effs := c.Step(at, ev)
		for _, e := range effs {
			if l, ok := e.(Log); ok {
				lines = append(lines, l.Line)
			}
		}
		return effs
	}
	claim := only[Write](t, step(t0, Proposed{ID: "p1", From: "coder", Method: "tools/call", Tool: "write", Addressee: "fs"}))
	step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})
	w := only[Write](t, step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs2", Revision: "r7"}}))
	req := only[SendRequest](t, step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2}))
	step(t0.Add(time.Second), Responded{RequestID: req.EnvelopeID, From: "mallory", HasRPCID: true, RPCID: req.RPCID, Result: []byte(`{"forged":1}`)})
	step(t0.Add(3*time.Second), Responded{RequestID: req.EnvelopeID, From: "fs2", HasRPCID: true, RPCID: req.RPCID, Result: []byte(`{"content":[]}`)})
	var got []string
	for _, l := range lines {
		got = append(got, l.Stage)
		if l.Proposer != "coder" || l.Method != "tools/call" || l.Tool != "write" || l.ProposalID != "p1" || l.DecisionID != claim.Record.DecisionID {
			t.Fatalf("%s line %+v", l.Stage, l)
		}
		target, rev := "fs2", "r7"
		if l.Stage == "received" {
			target, rev = "fs", ""
		}
		if l.Target != target || l.Revision != rev {
			t.Fatalf("%s line to %q (revision %q), want %q (%q)", l.Stage, l.Target, l.Revision, target, rev)
		}
	}
	same(t, got, []string{"received", "decided", "fulfilling", "ignored", "fulfilled"})
	if l := lines[3]; l.Reason != "response_from_other" || !reflect.DeepEqual(l.By, []string{"mallory"}) || string(l.Result) != `{"forged":1}` {
		t.Fatalf("ignored line %+v", l)
	}
	if l := lines[4]; string(l.Result) != `{"content":[]}` || l.RPCError != nil || l.Latency != 3*time.Second || l.By != nil {
		t.Fatalf("fulfilled line %+v", l)
	}
}

// An operator's cancel rejects a proposal not yet answered "other" and
// is refused once the request is committed (the call may be running).
func TestOperatorCancel(t *testing.T) {
	c := testCore()
	for _, id := range []string{"p1", "p2"} {
		claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
	}
	w := only[Write](t, c.Step(t0, Decided{ID: "p2", Decision: Decision{Action: Fulfill, Target: "fs"}}))
	c.Step(t0, Stored{ID: "p2", Seq: w.Seq, Rev: 2})

	effs := c.Step(t0, Cancelled{ID: "p1", By: "ops"})
	same(t, kinds(effs), []string{"write answered"})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "other" || r.Message != "cancelled by the operator (ops)" {
		t.Fatalf("cancel committed %+v", r)
	}
	effs = c.Step(t0, Cancelled{ID: "p2", By: "ops"})
	same(t, kinds(effs), nil)
	if l := only[Log](t, effs).Line; l.Reason != "cancel_refused" || l.Message != "cancel by ops: already answered" {
		t.Fatalf("logged %+v", l)
	}
}

// A proposal over a limit is claimed without a record (one write) and
// rejected "busy" with fulfill's words; the per-proposer limit counts
// only the proposer's own pending work, and the byte limit the frames.
func TestBusyIsClaimedWithoutARecord(t *testing.T) {
	c := New(Config{Member: "m1", MaxPending: 10, MaxPendingPerProposer: 1, MaxPendingBytes: 1000, MaxInflight: 1,
		PendingTTL: time.Minute, RetryAfter: time.Second}, &counterIDs{})
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder", Size: 600}))
	same(t, kinds(c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})), []string{"Decide"})

	busy := func(id, from string, size int, message string) {
		t.Helper()
		w := only[Write](t, c.Step(t0, Proposed{ID: id, From: from, Size: size}))
		if !w.Create || !w.ClaimOnly || w.Record.DecisionID == "" {
			t.Fatalf("%s claimed with %+v, want a claim without a record (ClaimOnly, with its decision id)", id, w)
		}
		effs := c.Step(t0, Stored{ID: id, Seq: w.Seq, Rev: 2})
		same(t, kinds(effs), []string{"SendReject"})
		rej := only[SendReject](t, effs)
		if rej.Reason != "busy" || rej.Message != message || rej.To != from {
			t.Fatalf("%s rejected %q %q to %s, want busy %q", id, rej.Reason, rej.Message, rej.To, message)
		}
		// Written: nothing to delete, nothing left.
		same(t, kinds(c.Step(t0, Sent{ID: id, EnvelopeID: rej.EnvelopeID})), nil)
	}
	busy("p2", "coder", 10, "1 of your proposals are pending (the limit per proposer); propose again when one is answered")
	busy("p3", "coder2", 500, "pending proposals hold 600 of 1000 bytes (the limit), too few for this 500-byte one; propose again later")
	c.Step(t0, GroupLoad{Peers: 9, Capacity: 10})
	busy("p4", "coder2", 10, "the group's pending work is full (10 proposals); propose again later")
	c.Step(t0, GroupLoad{Peers: 8, Capacity: 10})
	w := only[Write](t, c.Step(t0, Proposed{ID: "p5", From: "coder2", Size: 10}))
	if w.ClaimOnly {
		t.Fatalf("p5 refused with the group at 9 of 10")
	}
	if c.Pending() != 2 || c.Live() != 2 {
		t.Fatalf("pending %d live %d, want 2 (p1, p5 claiming: each counts from its admission)", c.Pending(), c.Live())
	}
}

// A request due while its owner is away is held (neither recorded nor
// sent) and goes out, recorded first, when the owner is back; one held
// past the rejoin grace is rejected "incapable", never cancelled (it
// never went out), in fulfill's words.
func TestHeldRequestWaitsForItsOwner(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.OwnerRejoinGrace, cfg.MaxInflight = 5*time.Second, 2 })
	admit := func(id string) {
		t.Helper()
		claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
	}
	c.Step(t0, ParticipantLeft{ID: "fs"})
	admit("p1")
	effs := c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs"}})
	same(t, kinds(effs), nil)
	var grace Schedule
	for _, e := range effs {
		if s, ok := e.(Schedule); ok && s.Kind == TimerGrace {
			grace = s
		}
	}
	if !grace.At.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("grace timer %+v, want at %s", grace, t0.Add(5*time.Second))
	}
	effs = c.Step(t0.Add(time.Second), ParticipantJoined{ID: "fs"})
	same(t, kinds(effs), []string{"write fulfilling"})
	w := only[Write](t, effs)
	req := only[SendRequest](t, c.Step(t0.Add(time.Second), Stored{ID: "p1", Seq: w.Seq, Rev: 2}))
	c.Step(t0.Add(time.Second), Sent{ID: "p1", EnvelopeID: req.EnvelopeID})
	// The grace's timer, once the owner is back, changes nothing.
	same(t, kinds(c.Step(grace.At, Fired{ID: "p1", At: grace.At, Kind: TimerGrace})), nil)

	c.Step(t0, ParticipantLeft{ID: "fs"})
	admit("p2")
	c.Step(t0, Decided{ID: "p2", Decision: Decision{Action: Fulfill, Target: "fs"}})
	effs = c.Step(grace.At, Fired{ID: "p2", At: grace.At, Kind: TimerGrace})
	same(t, kinds(effs), []string{"write answered"})
	r := only[Write](t, effs).Record.Reject
	if r.Reason != "incapable" || r.CancelRequest || r.Message != "fs was not in the space to carry the call out, and did not come back within 5s" {
		t.Fatalf("held past the grace: %+v", r)
	}
	// p1's request went out before the second leave, which started its
	// grace: the owner still gone at its end (as this member heard), p1
	// is rejected "incapable", its request cancelled first: the owner may
	// be back unheard (seed 50966 of a long simulation).
	effs = c.Step(grace.At, Fired{ID: "p1", At: grace.At, Kind: TimerGrace})
	same(t, kinds(effs), []string{"write answered"})
	r = only[Write](t, effs).Record.Reject
	if r.Reason != "incapable" || !r.CancelRequest || r.Message != "fs left the space before answering" {
		t.Fatalf("sent, owner gone past the grace: %+v", r)
	}
}

// A task-augmented request answered with a task: recorded (phase task,
// its own deadline) before it is followed; its slot is freed; others'
// answers do not supersede it; its status is recorded; its end is
// relayed to the proposer, recorded first; its deadline cancels it at
// its owner before the reject "timeout"; a withdrawal cancels it too.
func TestTaskIsFollowedRelayedOrCancelled(t *testing.T) {
	start := func(c *Core, id string) (SendRequest, Write) {
		t.Helper()
		claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
		w := only[Write](t, c.Step(t0, Decided{ID: id, Decision: Decision{Action: Fulfill, Target: "fs", Task: true, TaskTimeout: time.Hour}}))
		req := only[SendRequest](t, c.Step(t0, Stored{ID: id, Seq: w.Seq, Rev: 2}))
		if !req.Task || req.TaskTTL != time.Hour {
			t.Fatalf("request %+v, want task-augmented with a ttl of an hour", req)
		}
		c.Step(t0, Sent{ID: id, EnvelopeID: req.EnvelopeID})
		effs := c.Step(t0, Responded{RequestID: req.EnvelopeID, From: "fs", HasRPCID: true, RPCID: req.RPCID, TaskID: "t-" + id, TaskStatus: "working"})
		same(t, kinds(effs), []string{"write task"})
		w = only[Write](t, effs)
		if w.Record.Task == nil || !w.Record.Deadline.Equal(t0.Add(time.Hour)) {
			t.Fatalf("task recorded as %+v, deadline %s", w.Record.Task, w.Record.Deadline)
		}
		f := only[FollowTask](t, c.Step(t0, Stored{ID: id, Seq: w.Seq, Rev: 3}))
		if f.TaskID != "t-"+id || f.To != "fs" || f.RequestEnvelopeID != req.EnvelopeID {
			t.Fatalf("follows %+v", f)
		}
		return req, w
	}
	c := testCore()
	start(c, "p1")
	// Its slot is free: p2 (MaxInflight 1) goes out while p1 runs.
	start(c, "p2")
	same(t, kinds(c.Step(t0, SupersededBy{ID: "p1", By: "alice"})), nil)
	effs := c.Step(t0, TaskStatus{ID: "p1", TaskID: "t-p1", Status: "input_required"})
	same(t, kinds(effs), []string{"write task"})
	if only[Write](t, effs).Record.Task.Status != "input_required" {
		t.Fatalf("status not recorded")
	}
	c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 4})
	effs = c.Step(t0, TaskEnded{ID: "p1", TaskID: "t-p1", Status: "completed", Result: []byte(`{"content":[]}`)})
	same(t, kinds(effs), []string{"write answered"})
	w := only[Write](t, effs)
	effs = c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 5})
	same(t, kinds(effs), []string{"SendRelay"})
	rel := only[SendRelay](t, effs)
	if rel.To != "coder" || rel.TaskID != "t-p1" || string(rel.Result) != `{"content":[]}` || rel.EnvelopeID != w.Record.Relay.EnvelopeID {
		t.Fatalf("relayed %+v, recorded %+v", rel, w.Record.Relay)
	}

	// p2's deadline: cancelled at its owner, then rejected "timeout".
	dl := t0.Add(time.Hour)
	effs = c.Step(dl, Fired{ID: "p2", At: dl, Kind: TimerDeadline})
	w = only[Write](t, effs)
	if r := w.Record.Reject; r.Reason != "timeout" || !r.CancelTask || r.Message != "task t-p2 at fs did not end within 1h0m0s" {
		t.Fatalf("deadline reject %+v", r)
	}
	same(t, kinds(c.Step(dl, Stored{ID: "p2", Seq: w.Seq, Rev: 9})), []string{"CancelTask", "SendReject"})

	// A withdrawal ends a task: cancelled at its owner, record deleted.
	c3 := testCore()
	start(c3, "p3")
	effs = c3.Step(t0, WithdrawnBy{ID: "p3", From: "coder"})
	same(t, kinds(effs), []string{"CancelTask", "delete"})
	if ct := only[CancelTask](t, effs); ct.TaskID != "t-p3" || ct.Reason != "withdrawn" {
		t.Fatalf("cancelled %+v", ct)
	}
}

// With status chats on, an escalation tells the proposer whom it waits
// for, once its record is written; its end drops a chat not written yet
// (a CancelAsk, which the shell applies to a Status too); off, none.
func TestStatusChats(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := testCore()
		c.cfg.StatusChats = on
		claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
		c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})
		w := only[Write](t, c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Escalate, Quorum: 1}}))
		effs := c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2})
		if !on {
			same(t, kinds(effs), []string{"SendPrompt"})
			continue
		}
		same(t, kinds(effs), []string{"Status", "SendPrompt"})
		st := only[Status](t, effs)
		if st.To != "coder" || st.Stage != StatusEscalated || len(st.Approvers) != 1 || st.Approvers[0] != "alice" || st.Quorum != 1 || !st.Deadline.Equal(t0.Add(5*time.Minute)) {
			t.Fatalf("status %+v", st)
		}
		effs = c.Step(t0, WithdrawnBy{ID: "p1", From: "coder"})
		same(t, kinds(effs), []string{"CancelAsk", "delete"})
	}
}

// admitted claims proposal id on c and returns the write that commits
// decision d (the core's next write after Decided).
func admitted(t *testing.T, c *Core, id string, d Decision) Write {
	t.Helper()
	claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
	c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
	return only[Write](t, c.Step(t0, Decided{ID: id, Decision: d}))
}

func logs(effs []Effect) []Line {
	var out []Line
	for _, e := range effs {
		if l, ok := e.(Log); ok {
			out = append(out, l.Line)
		}
	}
	return out
}

// A claim lost to a winner the store names (wrapped, as a store's error
// may be) logs only the ignored line, under the winner's decision (rule
// 10), and so does a replay read later in the process.
func TestLostClaimJoinsTheWinnersDecision(t *testing.T) {
	c := testCore()
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	effs := c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Err: fmt.Errorf("store: %w", &ClaimedError{Winner: "w9"})})
	ls := logs(effs)
	if len(ls) != 1 || ls[0].Stage != "ignored" || ls[0].Reason != "duplicate" || ls[0].DecisionID != "w9" {
		t.Fatalf("lost claim logged %+v, want one ignored duplicate under w9", ls)
	}
	ls = logs(c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	if len(ls) != 1 || ls[0].Reason != "duplicate" || ls[0].DecisionID != "w9" {
		t.Fatalf("replay logged %+v, want ignored duplicate under w9", ls)
	}
	if !errors.Is(&ClaimedError{Winner: "x"}, ErrExists) {
		t.Fatal("a ClaimedError is not ErrExists")
	}
}

// A fulfilling line the log cannot write: the request, recorded, is
// rejected "other" with Config.UnloggedMessage and never cancelled (it
// was never written); an escalated one: rejected, nothing cancelled.
func TestUnloggedLineFailsClosed(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.UnloggedMessage = "log down" })
	w := admitted(t, c, "p1", Decision{Action: Fulfill, Target: "fs"})
	effs := c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2})
	if l := logs(effs); len(l) != 1 || l[0].Stage != "fulfilling" || !l[0].Ahead {
		t.Fatalf("fulfilling line %+v, want one written ahead", l)
	}
	effs = c.Step(t0, Unlogged{ID: "p1", Stage: "fulfilling"})
	same(t, kinds(effs), []string{"write answered"})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "other" || r.Message != "log down" || r.CancelRequest {
		t.Fatalf("unlogged request: %+v", r)
	}
	same(t, kinds(c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 3})), []string{"SendReject"})

	w = admitted(t, c, "p2", Decision{Action: Escalate, Message: "write_file targets production"})
	effs = c.Step(t0, Stored{ID: "p2", Seq: w.Seq, Rev: 2})
	if l := logs(effs); len(l) != 1 || l[0].Stage != "escalated" || !l[0].Ahead || l[0].Message != "write_file targets production" {
		t.Fatalf("escalated line %+v, want one written ahead with the policy's message", l)
	}
	effs = c.Step(t0, Unlogged{ID: "p2", Stage: "escalated"})
	same(t, kinds(effs), []string{"write answered"})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "other" || r.Message != "log down" {
		t.Fatalf("unlogged escalation: %+v", r)
	}
}

// Answers not taken are logged once per proposal, with the raw payload
// and the shell's message.
func TestIgnoredAnswersLoggedOnce(t *testing.T) {
	c := testCore()
	w := admitted(t, c, "p1", Decision{Action: Fulfill, Target: "fs"})
	req := only[SendRequest](t, c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2}))
	var ls []Line
	for i := range 3 {
		ls = append(ls, logs(c.Step(t0, Responded{RequestID: req.EnvelopeID, From: "mallory", Payload: []byte(`{"raw":1}`), Result: []byte(`{}`), Message: fmt.Sprint("forged ", i)}))...)
	}
	ls = append(ls, logs(c.Step(t0, Responded{RequestID: req.EnvelopeID, From: "fs", HasRPCID: true, RPCID: req.RPCID + 1}))...)
	if len(ls) != 1 || ls[0].Reason != "response_from_other" || string(ls[0].Result) != `{"raw":1}` || ls[0].Message != "forged 0" {
		t.Fatalf("ignored lines %+v, want one response_from_other with the raw payload", ls)
	}
}

// A refused request is rejected "other" with nothing cancelled; one the
// wire found its owner away for is held, and sent with the same ids when
// the owner is back, or rejected "incapable" at the grace's end with
// nothing cancelled.
func TestRefusedAndAwayRequests(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.OwnerRejoinGrace, cfg.MaxInflight = 5*time.Second, 3 })
	w := admitted(t, c, "p1", Decision{Action: Fulfill, Target: "fs"})
	req := only[SendRequest](t, c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2}))
	c.Step(t0, Sent{ID: "p1", EnvelopeID: req.EnvelopeID})
	effs := c.Step(t0, Refused{ID: "p1", EnvelopeID: req.EnvelopeID})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "other" || r.Message != "the gateway refused the fulfilment request" || r.CancelRequest {
		t.Fatalf("refused: %+v", r)
	}

	w = admitted(t, c, "p2", Decision{Action: Fulfill, Target: "fs"})
	req = only[SendRequest](t, c.Step(t0, Stored{ID: "p2", Seq: w.Seq, Rev: 2}))
	effs = c.Step(t0, Sent{ID: "p2", EnvelopeID: req.EnvelopeID, Err: fmt.Errorf("wire: %w", ErrAway)})
	same(t, kinds(effs), nil)
	again := only[SendRequest](t, c.Step(t0.Add(time.Second), ParticipantJoined{ID: "fs"}))
	if again.EnvelopeID != req.EnvelopeID || again.RPCID != req.RPCID {
		t.Fatalf("held request sent as %+v, want %+v", again, req)
	}

	w = admitted(t, c, "p3", Decision{Action: Fulfill, Target: "fs"})
	req = only[SendRequest](t, c.Step(t0, Stored{ID: "p3", Seq: w.Seq, Rev: 2}))
	c.Step(t0, Sent{ID: "p3", EnvelopeID: req.EnvelopeID, Err: ErrAway})
	effs = c.Step(t0.Add(5*time.Second), Fired{ID: "p3", At: t0.Add(5 * time.Second), Kind: TimerGrace})
	if r := only[Write](t, effs).Record.Reject; r.Reason != "incapable" || r.CancelRequest || r.Message != "fs was not in the space to carry the call out, and did not come back within 5s" {
		t.Fatalf("away past the grace: %+v", r)
	}
}

// Requests are cancelled with fulfill's reasons: "timeout" at the fulfil
// timeout, "shutdown" at shutdown.
func TestCancelReasons(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.MaxInflight = 2 })
	var reqs []SendRequest
	for _, id := range []string{"p1", "p2"} {
		w := admitted(t, c, id, Decision{Action: Fulfill, Target: "fs"})
		reqs = append(reqs, only[SendRequest](t, c.Step(t0, Stored{ID: id, Seq: w.Seq, Rev: 2})))
		c.Step(t0, Sent{ID: id, EnvelopeID: reqs[len(reqs)-1].EnvelopeID})
	}
	at := t0.Add(30 * time.Second)
	w := only[Write](t, c.Step(at, Fired{ID: "p1", At: at, Kind: TimerDeadline}))
	if got := only[SendCancel](t, c.Step(at, Stored{ID: "p1", Seq: w.Seq, Rev: 3})).Reason; got != "timeout" {
		t.Fatalf("timeout cancel reason %q", got)
	}
	effs := c.Step(t0, Closing{})
	w = only[Write](t, effs)
	if got := only[SendCancel](t, c.Step(t0, Stored{ID: "p2", Seq: w.Seq, Rev: 3})).Reason; got != "shutdown" {
		t.Fatalf("shutdown cancel reason %q", got)
	}
}

// A release says why in its ignored line; a supersession's line says
// what the other participant did.
func TestReleasedAndSupersededSayWhy(t *testing.T) {
	c := testCore()
	for _, id := range []string{"p1", "p2", "p3"} {
		claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
	}
	l := only[Log](t, c.Step(t0, Released{ID: "p1"})).Line
	if l.Reason != DropReason || l.Message != "the proposal's record belongs to another member now" {
		t.Fatalf("released line %+v", l)
	}
	l = only[Log](t, c.Step(t0, Released{ID: "p2", Reason: "handed_over", Message: "handed over"})).Line
	if l.Reason != "handed_over" || l.Message != "handed over" {
		t.Fatalf("handed over line %+v", l)
	}
	w := only[Write](t, c.Step(t0, SupersededBy{ID: "p3", By: "ful2", Why: "rejected by ful2 (policy)"}))
	ls := logs(c.Step(t0, Stored{ID: "p3", Seq: w.Seq, Rev: 2}))
	if len(ls) != 1 || ls[0].Stage != "superseded" || ls[0].Message != "rejected by ful2 (policy)" {
		t.Fatalf("superseded lines %+v", ls)
	}
}

// Alone on its store, a claim carries its decision, and what the decision
// emits waits for it: nothing is logged, sent or scheduled of the
// decision before the claim lands, and then its lines come after the
// claim's, the request last. A withdrawal read while that claim is being
// written ends the proposal once it lands, the request never sent; an
// operator's cancel read while the claim is held for the decision issues
// the claim as it is and rejects the proposal once it lands.
func TestAloneClaimCarriesItsDecision(t *testing.T) {
	alone := func(cfg *Config) { cfg.Alone = true }
	stages := func(effs []Effect) []string {
		var out []string
		for _, l := range logs(effs) {
			out = append(out, l.Stage)
		}
		return out
	}

	c := testCore(alone)
	only[Decide](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	effs := c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs"}})
	claim := only[Write](t, effs)
	same(t, kinds(effs), []string{"claim"})
	if claim.Record.Phase != Fulfilling || claim.Record.Request == nil || claim.Soon {
		t.Fatalf("claimed %+v (Soon %v), want the record fulfilling with its request, not Soon", claim.Record, claim.Soon)
	}
	effs = c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})
	same(t, kinds(effs), []string{"SendRequest"})
	same(t, stages(effs), []string{"received", "decided", "fulfilling"})
	if r := only[SendRequest](t, effs); r.EnvelopeID != claim.Record.Request.EnvelopeID {
		t.Fatalf("sent request %s, want the one the claim recorded, %s", r.EnvelopeID, claim.Record.Request.EnvelopeID)
	}

	// Withdrawn while the claim that carries its request is written.
	c = testCore(alone)
	c.Step(t0, Proposed{ID: "p2", From: "coder"})
	claim = only[Write](t, c.Step(t0, Decided{ID: "p2", Decision: Decision{Action: Fulfill, Target: "fs"}}))
	same(t, kinds(c.Step(t0, WithdrawnBy{ID: "p2", From: "coder"})), nil)
	effs = c.Step(t0, Stored{ID: "p2", Seq: claim.Seq, Rev: 1})
	same(t, kinds(effs), []string{"delete"})
	same(t, stages(effs), []string{"received", "decided"})
	effs = c.Step(t0, Stored{ID: "p2", Seq: only[Write](t, effs).Seq})
	same(t, stages(effs), []string{"withdrawn"})
	if len(c.byRequest) != 0 || c.slots.used != 0 || c.Pending() != 0 {
		t.Fatalf("withdrawn, left requests %v, %d slots, %d pending", c.byRequest, c.slots.used, c.Pending())
	}

	// An operator's cancel while the claim waits for the policy.
	c = testCore(alone)
	c.Step(t0, Proposed{ID: "p3", From: "coder"})
	claim = only[Write](t, c.Step(t0, Cancelled{ID: "p3", By: "alice"}))
	if !claim.Create || claim.Record.Phase != Deciding {
		t.Fatalf("cancelled while held, wrote %+v; want the claim as it is", claim)
	}
	w := only[Write](t, c.Step(t0, Stored{ID: "p3", Seq: claim.Seq, Rev: 1}))
	if r := w.Record.Reject; w.Record.Phase != Answered || r == nil || r.Reason != "other" || r.Message != "cancelled by the operator (alice)" {
		t.Fatalf("after the claim wrote %+v, want the operator's reject", w.Record)
	}
	same(t, kinds(c.Step(t0, Decided{ID: "p3", Decision: Decision{Action: Fulfill, Target: "fs"}})), nil)
}

// The seen set forgets its oldest id first once it holds its bound, and
// only then: an id read again within the bound is still a replay.
func TestIDSetForgetsTheOldestFirst(t *testing.T) {
	s := newIDSet(3)
	for _, id := range []string{"a", "b", "c"} {
		if ev := s.add(id); ev != "" {
			t.Fatalf("add %s evicted %q under the bound", id, ev)
		}
	}
	if ev := s.add("b"); ev != "" || !s.has("a") {
		t.Fatalf("adding b again evicted %q", ev)
	}
	for _, want := range [][2]string{{"d", "a"}, {"e", "b"}, {"f", "c"}, {"g", "d"}} {
		if ev := s.add(want[0]); ev != want[1] {
			t.Fatalf("add %s evicted %q, want %q", want[0], ev, want[1])
		}
		if s.has(want[1]) || !s.has(want[0]) {
			t.Fatalf("after add %s: has %s %v, has %s %v", want[0], want[1], s.has(want[1]), want[0], s.has(want[0]))
		}
	}
	if len(s.ids) != 3 {
		t.Fatalf("%d ids held, want the bound 3", len(s.ids))
	}
}

// Awaited names the request whose response the core waits for, and only
// while it waits: not before the proposal is decided, not for a task
// (its result comes from the task's follower), not once the proposal
// ended. A front end relays an upstream's response to its client only
// when Awaited says so.
func TestAwaitedIsTheRequestOut(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.MaxInflight = 2 })
	claim := only[Write](t, c.Step(t0, Proposed{ID: "p1", From: "coder"}))
	if _, _, ok := c.Awaited("p1"); ok {
		t.Fatal("awaited while its claim is written")
	}
	c.Step(t0, Stored{ID: "p1", Seq: claim.Seq, Rev: 1})
	w := only[Write](t, c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs"}}))
	req := only[SendRequest](t, c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 2}))
	if id, target, ok := c.Awaited("p1"); !ok || id != req.EnvelopeID || target != "fs" {
		t.Fatalf("Awaited = %q, %q, %v; want the request %q to fs", id, target, ok, req.EnvelopeID)
	}
	c.Step(t0, Sent{ID: "p1", EnvelopeID: req.EnvelopeID})
	effs := c.Step(t0, Responded{RequestID: req.EnvelopeID, From: "fs", HasRPCID: true, RPCID: req.RPCID, Result: []byte(`{}`)})
	if _, _, ok := c.Awaited("p1"); ok {
		t.Fatalf("still awaited once its response was taken (%v)", kinds(effs))
	}
	if _, _, ok := c.Awaited("nobody"); ok {
		t.Fatal("an unknown proposal is awaited")
	}

	claim = only[Write](t, c.Step(t0, Proposed{ID: "p2", From: "coder"}))
	c.Step(t0, Stored{ID: "p2", Seq: claim.Seq, Rev: 1})
	w = only[Write](t, c.Step(t0, Decided{ID: "p2", Decision: Decision{Action: Fulfill, Target: "fs", Task: true, TaskTimeout: time.Hour}}))
	only[SendRequest](t, c.Step(t0, Stored{ID: "p2", Seq: w.Seq, Rev: 2}))
	if _, _, ok := c.Awaited("p2"); ok {
		t.Fatal("a task's request is awaited")
	}
}
