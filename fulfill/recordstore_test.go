package fulfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Tests of recordStore, the lifecycle core's Store over fulfill's Store:
// each runs against a state.Local and against state.Store on NATS
// JetStream, and checks the records exactly, both ways.

const (
	rsTTL    = time.Minute      // the pending TTL given to newRecordStore
	rsFulfil = 30 * time.Second // the fulfil timeout given to newRecordStore
)

var rsT0 = time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)

// eachStore runs f against a state.Local and a state.Store on NATS, both
// of member "m1". peer opens another member of the same group (NATS
// only: a Local is a group of one).
func eachStore(t *testing.T, f func(t *testing.T, st Store, peer func(member string) Store)) {
	t.Run("local", func(t *testing.T) {
		f(t, state.NewLocal("m1"), nil)
	})
	t.Run("nats", func(t *testing.T) {
		mode := natsServer(t)
		f(t, openStore(t, mode, "m1").Store, func(member string) Store { return openStore(t, mode, member).Store })
	})
}

// rsEnvelope is proposal id's frame as the record keeps it.
func rsEnvelope(t *testing.T, id, payload string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(proposalEnv(id, "agent", payload))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rsClaim is the Proposal the core claims for id (phase Deciding).
func rsClaim(t *testing.T, id, decisionID string) lifecycle.Proposal {
	return lifecycle.Proposal{V: lifecycle.RecordVersion, ID: id, From: "agent", Envelope: rsEnvelope(t, id, addCall),
		Params: json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2}}`), Size: 180, Received: rsT0,
		Method: "tools/call", Tool: "add", Addressee: "calc", Owner: "m1", Phase: lifecycle.Deciding,
		Deadline: rsT0.Add(rsTTL), DecisionID: decisionID, Claim: decisionID}
}

func cloneProposal(p lifecycle.Proposal) lifecycle.Proposal {
	b, _ := json.Marshal(p)
	var q lifecycle.Proposal
	if err := json.Unmarshal(b, &q); err != nil {
		panic(err)
	}
	q.Rev = p.Rev
	return q
}

// checkRecord fails t unless st holds exactly want for want.ID: the
// record is the Proposal, as it is.
func checkRecord(t *testing.T, st Store, want lifecycle.Proposal) {
	t.Helper()
	got, err := st.Get(context.Background(), want.ID)
	if err != nil {
		t.Fatalf("get %s: %v", want.ID, err)
	}
	if !reflect.DeepEqual(*got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("record of %s:\n%s (rev %d)\nwant:\n%s (rev %d)", want.ID, g, got.Rev, w, want.Rev)
	}
}

// checkRead fails t unless rs reads exactly want for want.ID.
func checkRead(t *testing.T, rs *recordStore, want lifecycle.Proposal) {
	t.Helper()
	got, err := rs.Read(context.Background(), want.ID)
	if err != nil {
		t.Fatalf("read %s: %v", want.ID, err)
	}
	if got == nil {
		t.Fatalf("read %s: no record", want.ID)
	}
	if !reflect.DeepEqual(*got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("proposal %s read:\n%s (rev %d)\nwant:\n%s (rev %d)", want.ID, g, got.Rev, w, want.Rev)
	}
}

// rsStep is one write of a walk through the phases: the core's record.
type rsStep struct {
	name   string
	soon   bool
	change func(p *lifecycle.Proposal)
}

// walk writes each step's record (compare-and-set on the last revision)
// and checks that the store holds it and reads it back exactly: Params
// read again from the envelope, nothing lost, nothing added.
func walk(t *testing.T, st Store, rs *recordStore, p lifecycle.Proposal, steps []rsStep) {
	t.Helper()
	ctx := context.Background()
	rev, err := rs.Write(ctx, lifecycle.Write{ID: p.ID, Seq: 1, Record: &p, Create: true})
	if err != nil {
		t.Fatalf("claim %s: %v", p.ID, err)
	}
	p.Rev = rev
	checkRecord(t, st, p)
	checkRead(t, rs, p)
	for i, s := range steps {
		p = cloneProposal(p)
		s.change(&p)
		w := lifecycle.Write{ID: p.ID, Seq: uint64(i + 2), Record: &p, Rev: p.Rev, Soon: s.soon}
		rev, err := rs.Write(ctx, w)
		if err != nil {
			t.Fatalf("%s: write: %v", s.name, err)
		}
		if rev <= p.Rev {
			t.Fatalf("%s: revision %d after %d", s.name, rev, p.Rev)
		}
		p.Rev = rev
		checkRecord(t, st, p)
		checkRead(t, rs, p)
	}
}

// TestRecordStoreWalksTheTaskPath writes a proposal through every phase
// of an escalated, edited, task-augmented call (claim, escalation,
// an approval counted, queued, fulfilling, task, a task status, its
// relayed result, delete) and checks each record exactly as stored and
// as read back.
func TestRecordStoreWalksTheTaskPath(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, _ func(string) Store) {
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		esc := coreDecision(decision.Decision{Action: decision.Escalate, Message: "ask", Approvers: []string{"alice", "bob"}, Quorum: 2,
			Timeout: 5 * time.Minute, Editable: []string{"a"}, Reminders: []time.Duration{time.Minute}, Revision: "rev-7", Task: true}, "calc", true)
		const escJSON = `{"action":"escalate","message":"ask","approvers":["alice","bob"],"quorum":2,"timeout":300000000000,"editable":["a"],"task":true,"reminders":[60000000000],"revision":"rev-7","route":"calc","deadline_by_proposer":true}`
		prompts := []lifecycle.Prompt{
			{Approver: "alice", EnvelopeID: "el-1", RPCID: 7, Chain: []string{"ops"}, Sent: rsT0.Add(time.Second), Signed: true, Payload: json.RawMessage(`{"method":"elicitation/create","id":7}`)},
			{Approver: "bob", EnvelopeID: "el-2", RPCID: 8, Sent: rsT0.Add(time.Second)},
		}
		edited := json.RawMessage(`{"name":"add","arguments":{"a":5,"b":2}}`)
		alice := lifecycle.Approval{Approver: "alice", Params: edited, Content: json.RawMessage(`{"a":5}`), SignatureVerified: true,
			Request: "req-a", Signature: "sig-a", At: rsT0.Add(2 * time.Second)}
		bob := lifecycle.Approval{Approver: "bob", At: rsT0.Add(3 * time.Second)}
		req := lifecycle.Request{EnvelopeID: "req-1", RPCID: 42, Target: "calc2", SentAt: rsT0.Add(4 * time.Second), Task: true}
		task := lifecycle.TaskRecord{ID: "task-1", Status: "working", Created: rsT0.Add(5 * time.Second), Deadline: rsT0.Add(time.Hour), Spec: TaskSpec2025, PollMS: 500}
		relay := lifecycle.RelayRecord{EnvelopeID: "relay-1", RPCID: 43, TaskID: "task-1", Result: json.RawMessage(`{"content":[{"type":"text","text":"7"}]}`)}

		walk(t, st, rs, rsClaim(t, "p-task", "d1"), []rsStep{{
			name: "escalated", soon: true,
			change: func(p *lifecycle.Proposal) {
				d := esc
				p.Phase, p.Decision, p.Deadline, p.Prompts = lifecycle.AwaitingApproval, &d, rsT0.Add(5*time.Minute), prompts
			},
		}, {
			name: "approval counted", soon: true,
			change: func(p *lifecycle.Proposal) {
				p.Prompts[0].Answered = true
				p.Approvals, p.ApprovedBy = []lifecycle.Approval{alice}, []string{"alice"}
			},
		}, {
			name: "queued", soon: true,
			change: func(p *lifecycle.Proposal) {
				p.Prompts[1].Answered = true
				p.Approvals, p.ApprovedBy = append(p.Approvals, bob), append(p.ApprovedBy, "bob")
				p.Phase, p.Deadline, p.FinalArgs, p.Decision.Target = lifecycle.Queued, rsT0.Add(3*time.Second+rsTTL), edited, "calc2"
			},
		}, {
			name: "fulfilling",
			change: func(p *lifecycle.Proposal) {
				r := req
				p.Phase, p.Request, p.Deadline = lifecycle.Fulfilling, &r, req.SentAt.Add(rsFulfil)
			}}, {
			name: "task",
			change: func(p *lifecycle.Proposal) {
				tk := task
				p.Phase, p.Task, p.Deadline = lifecycle.Task, &tk, task.Deadline
			}}, {
			name: "task status", soon: true,
			change: func(p *lifecycle.Proposal) { p.Task.Status = "input_required" },
		}, {
			name: "relay committed",
			change: func(p *lifecycle.Proposal) {
				rl := relay
				p.Phase, p.Relay = lifecycle.Answered, &rl
			}}})

		p, err := rs.Read(context.Background(), "p-task")
		if err != nil || p == nil {
			t.Fatalf("read before the delete: %v, %v", p, err)
		}
		if _, err := rs.Write(context.Background(), lifecycle.Write{ID: "p-task", Seq: 10, Rev: p.Rev}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if got, err := rs.Read(context.Background(), "p-task"); got != nil || err != nil {
			t.Fatalf("read after the delete: %+v, %v; want nil, nil", got, err)
		}
	})
}

// TestRecordStoreWalksTheRejectPath writes a fulfilment that times out:
// claim, decided fulfil (straight to its request), then the committed
// reject that cancels the request; and an invalid proposal's claim and
// reject.
func TestRecordStoreWalksTheRejectPath(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, _ func(string) Store) {
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		ful := coreDecision(decision.Decision{Action: decision.Fulfill, Revision: "rev-8", TaskTimeout: time.Minute}, "calc", false)
		const fulJSON = `{"action":"fulfill","task_timeout":60000000000,"revision":"rev-8","route":"calc","params":{"name":"add","arguments":{"a":1,"b":2}}}`
		req := lifecycle.Request{EnvelopeID: "req-2", RPCID: 9, Target: "calc", SentAt: rsT0.Add(time.Second)}
		rej := lifecycle.RejectRecord{EnvelopeID: "rej-1", Reason: "timeout", Message: "no response within 30s", CancelRequest: true, CancelTask: true}
		walk(t, st, rs, rsClaim(t, "p-rej", "d2"), []rsStep{{
			name: "fulfilling",
			change: func(p *lifecycle.Proposal) {
				d, r := ful, req
				p.Decision, p.FinalArgs = &d, p.Params
				p.Phase, p.Request, p.Deadline = lifecycle.Fulfilling, &r, req.SentAt.Add(rsFulfil)
			},
		}, {
			name: "reject committed",
			change: func(p *lifecycle.Proposal) {
				r := rej
				p.Phase, p.Reject = lifecycle.Answered, &r
			}}})

		// An invalid proposal: its claim, then its reject; Invalid is
		// what parsePayload says of the envelope, read back from it.
		const bad = `{"method":"tools/call","params":{"name":""}}`
		_, perr := parsePayload(json.RawMessage(bad))
		if perr == nil {
			t.Fatal("the test's payload parses")
		}
		// parsePayload reads nothing else of an invalid payload: no
		// method, tool or params (as fulfill's reader).
		inv := lifecycle.Proposal{V: lifecycle.RecordVersion, ID: "p-inv", From: "agent", Envelope: rsEnvelope(t, "p-inv", bad),
			Invalid: perr.Error(), Size: 90, Received: rsT0, Owner: "m1", Phase: lifecycle.Deciding,
			Deadline: rsT0.Add(rsTTL), DecisionID: "d3", Claim: "d3"}
		walk(t, st, rs, inv, []rsStep{{
			name: "invalid rejected",
			change: func(p *lifecycle.Proposal) {
				p.Phase, p.Reject = lifecycle.Answered, &lifecycle.RejectRecord{EnvelopeID: "rej-2", Reason: "invalid", Message: perr.Error()}
			}}})

		// Claimed in phase Answered at once, as fulfill's claimRecord
		// claims an invalid proposal.
		inv2 := inv
		inv2.ID, inv2.Envelope, inv2.DecisionID, inv2.Claim = "p-inv2", rsEnvelope(t, "p-inv2", bad), "d4", "d4"
		inv2.Phase, inv2.Reject = lifecycle.Answered, &lifecycle.RejectRecord{EnvelopeID: "rej-3", Reason: "invalid", Message: perr.Error()}
		walk(t, st, rs, inv2, nil)
	})
}

// TestRecordStoreClaims: a claim is won once for the group; one lost to
// its own decision id is an earlier try that was applied (won, at that
// record's revision); a claim without a record likewise; any other is
// lifecycle.ErrExists, a replay of an ended proposal's id too. The
// tests compare errors with == where the core does (Stored.Err).
func TestRecordStoreClaims(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, peer func(string) Store) {
		ctx := context.Background()
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		p := rsClaim(t, "p1", "d1")
		rev, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &p, Create: true})
		if err != nil || rev == 0 {
			t.Fatalf("claim: rev %d, %v", rev, err)
		}
		// The core tries again a claim it was told failed: applied.
		again, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &p, Create: true})
		if err != nil || again != rev {
			t.Fatalf("claim tried again: rev %d, %v; want %d, nil", again, err, rev)
		}
		// A replay (another decision id) while it is pending.
		replay := rsClaim(t, "p1", "d9")
		var lost *lifecycle.ClaimedError
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &replay, Create: true}); !errors.Is(err, lifecycle.ErrExists) || !errors.As(err, &lost) || lost.Winner != "d1" {
			t.Fatalf("replayed claim: %v; want ErrExists won by d1 (ClaimedError)", err)
		}
		// A claim without a record is refused on an id with a record.
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &replay, Create: true, ClaimOnly: true}); !errors.Is(err, lifecycle.ErrExists) {
			t.Fatalf("claim only of a claimed id: %v; want ErrExists", err)
		}
		checkRecord(t, st, func() lifecycle.Proposal { r := rsClaim(t, "p1", "d1"); r.Rev = rev; return r }())
		// Ended: a replay after the record is gone is still one.
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Rev: rev}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &replay, Create: true}); !errors.Is(err, lifecycle.ErrExists) {
			t.Fatalf("claim of an ended proposal's id: %v; want ErrExists", err)
		}
		if got, err := rs.Read(ctx, "p1"); got != nil || err != nil {
			t.Fatalf("a lost claim left a record: %+v, %v", got, err)
		}

		// Without a record: won (revision 0), won again with its own
		// decision id, lost with another; a claim then finds it taken.
		busy := rsClaim(t, "p2", "d2")
		for i := range 2 {
			if rev, err := rs.Write(ctx, lifecycle.Write{ID: "p2", Record: &busy, Create: true, ClaimOnly: true}); rev != 0 || err != nil {
				t.Fatalf("claim only, try %d: rev %d, %v; want 0, nil", i, rev, err)
			}
		}
		other := rsClaim(t, "p2", "d3")
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p2", Record: &other, Create: true, ClaimOnly: true}); !errors.Is(err, lifecycle.ErrExists) {
			t.Fatalf("claim only with another decision id: %v; want ErrExists", err)
		}
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p2", Record: &other, Create: true}); !errors.Is(err, lifecycle.ErrExists) {
			t.Fatalf("claim of an id claimed without a record: %v; want ErrExists", err)
		}
		if got, err := rs.Read(ctx, "p2"); got != nil || err != nil {
			t.Fatalf("a claim without a record left one: %+v, %v", got, err)
		}

		if peer == nil {
			return
		}

		// Another member of the group loses the claim.
		p3 := rsClaim(t, "p3", "d5")
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p3", Record: &p3, Create: true}); err != nil {
			t.Fatalf("claim p3: %v", err)
		}
		m2 := peer("m2")
		rs2 := newRecordStore(m2, rsTTL, rsFulfil, nil)
		p3b := rsClaim(t, "p3", "d6")
		p3b.Owner = "m2"
		if _, err := rs2.Write(ctx, lifecycle.Write{ID: "p3", Record: &p3b, Create: true}); !errors.Is(err, lifecycle.ErrExists) {
			t.Fatalf("peer's claim of a claimed id: %v; want ErrExists", err)
		}
		// The claim was applied, then the record was taken by the peer
		// (an operator's take): trying the claim again finds it is not
		// this member's any more.
		if _, err := m2.Take(ctx, "p3"); err != nil {
			t.Fatalf("take: %v", err)
		}
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p3", Record: &p3, Create: true}); err != lifecycle.ErrConflict {
			t.Fatalf("claim tried again after a take: %v; want ErrConflict", err)
		}
	})
}

// TestRecordStoreClaimLeftIsAppliedOnRetry: a claim whose seen key could
// not be settled, its record left (state.ErrRecordLeft), is an error the
// core tries again (unavailable), and the try again wins at the record's
// revision.
func TestRecordStoreClaimLeftIsAppliedOnRetry(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	ctx := context.Background()
	st := openStore(t, natsServer(t), "m1")
	rs := newRecordStore(st, rsTTL, rsFulfil, nil)
	p := rsClaim(t, "p1", "d1")
	st.recordLeft.Store(true)
	_, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &p, Create: true})
	if !errors.Is(err, state.ErrRecordLeft) || errors.Is(err, lifecycle.ErrExists) || errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("claim with its record left: %v; want state.ErrRecordLeft as it is", err)
	}
	left, err := st.Get(ctx, "p1")
	if err != nil {
		t.Fatalf("the record left: %v", err)
	}
	st.recordLeft.Store(false)
	rev, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &p, Create: true})
	if err != nil || rev != left.Rev {
		t.Fatalf("claim tried again: rev %d, %v; want %d, nil", rev, err, left.Rev)
	}
}

// TestRecordStoreConflicts: every update and delete compares and sets on
// the revision the core holds; a stale one, or a record gone, is
// lifecycle.ErrConflict and writes nothing.
func TestRecordStoreConflicts(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, _ func(string) Store) {
		ctx := context.Background()
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		p := rsClaim(t, "p1", "d1")
		rev1, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &p, Create: true})
		if err != nil {
			t.Fatal(err)
		}
		q := cloneProposal(p)
		q.Phase, q.Decision = lifecycle.AwaitingApproval, &lifecycle.Decision{Action: lifecycle.Escalate, Quorum: 1}
		rev2, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &q, Rev: rev1, Soon: true})
		if err != nil {
			t.Fatal(err)
		}
		want := cloneProposal(q)
		want.Rev = rev2
		stale := cloneProposal(p)
		stale.Phase = lifecycle.Queued
		for _, w := range []lifecycle.Write{
			{ID: "p1", Record: &stale, Rev: rev1},
			{ID: "p1", Record: &stale, Rev: rev1, Soon: true},
			{ID: "p1", Record: func() *lifecycle.Proposal {
				a := cloneProposal(stale)
				a.Phase, a.Reject = lifecycle.Answered, &lifecycle.RejectRecord{EnvelopeID: "rej-1", Reason: "other"}
				return &a
			}(), Rev: rev1},
			{ID: "p1", Rev: rev1}, // delete
		} {
			if _, err := rs.Write(ctx, w); err != lifecycle.ErrConflict {
				t.Fatalf("write at a stale revision (soon %v, record %v): %v; want ErrConflict", w.Soon, w.Record != nil, err)
			}
			checkRecord(t, st, want)
		}
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Rev: rev2}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		// Gone: an update, and a delete again (an earlier try applied),
		// are conflicts the core settles by reading the record back.
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Record: &q, Rev: rev2}); err != lifecycle.ErrConflict {
			t.Fatalf("update of a deleted record: %v; want ErrConflict", err)
		}
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Rev: rev2}); err != lifecycle.ErrConflict {
			t.Fatalf("delete of a deleted record: %v; want ErrConflict", err)
		}
	})
}

// callStore records which of the store's calls recordStore makes, and
// fails them with fail when set.
type callStore struct {
	Store
	mu    sync.Mutex
	calls []string
	fail  error
}

func (s *callStore) note(call string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
	return s.fail
}

func (s *callStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *callStore) ClaimRecord(ctx context.Context, p *lifecycle.Proposal) (bool, string, error) {
	if err := s.note("ClaimRecord"); err != nil {
		return false, "", err
	}
	return s.Store.ClaimRecord(ctx, p)
}

func (s *callStore) ClaimDecision(ctx context.Context, id, d string) (bool, string, error) {
	if err := s.note("ClaimDecision"); err != nil {
		return false, "", err
	}
	return s.Store.ClaimDecision(ctx, id, d)
}

func (s *callStore) Update(ctx context.Context, p *lifecycle.Proposal) error {
	if err := s.note("Update"); err != nil {
		return err
	}
	return s.Store.Update(ctx, p)
}

func (s *callStore) UpdateSoon(ctx context.Context, p *lifecycle.Proposal) error {
	if err := s.note("UpdateSoon"); err != nil {
		return err
	}
	return s.Store.UpdateSoon(ctx, p)
}

func (s *callStore) MarkAnswered(ctx context.Context, p *lifecycle.Proposal) error {
	if err := s.note("MarkAnswered"); err != nil {
		return err
	}
	return s.Store.MarkAnswered(ctx, p)
}

func (s *callStore) Delete(ctx context.Context, p *lifecycle.Proposal) error {
	if err := s.note("Delete"); err != nil {
		return err
	}
	return s.Store.Delete(ctx, p)
}

func (s *callStore) Reclaim(ctx context.Context, p *lifecycle.Proposal) (bool, error) {
	if err := s.note("Reclaim"); err != nil {
		return false, err
	}
	return s.Store.Reclaim(ctx, p)
}

// TestRecordStoreCalls: which store call each write is. Soon is
// UpdateSoon (no wait for the disk); a committed reject is MarkAnswered;
// a committed relay waits for the disk unless Soon; an unavailable store's
// error comes back as it is.
func TestRecordStoreCalls(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, real Store, _ func(string) Store) {
		ctx := context.Background()
		st := &callStore{Store: real}
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		p := rsClaim(t, "p1", "d1")
		write := func(w lifecycle.Write, want ...string) {
			t.Helper()
			rev, err := rs.Write(ctx, w)
			if err != nil {
				t.Fatalf("write %+v: %v", w, err)
			}
			if w.Record != nil && !w.ClaimOnly {
				p.Rev = rev
			}
			if got := st.take(); !reflect.DeepEqual(got, want) {
				t.Fatalf("write (soon %v, phase %s): calls %v, want %v", w.Soon, w.Record.Phase, got, want)
			}
		}
		write(lifecycle.Write{ID: "p1", Record: &p, Create: true}, "ClaimRecord")
		p.Phase = lifecycle.AwaitingApproval
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev, Soon: true}, "UpdateSoon")
		p.Phase = lifecycle.Fulfilling
		p.Request = &lifecycle.Request{EnvelopeID: "req-1", RPCID: 1, Target: "calc", SentAt: rsT0}
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev}, "Update")
		p.Phase, p.Relay = lifecycle.Answered, &lifecycle.RelayRecord{EnvelopeID: "relay-1", RPCID: 2}
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev}, "Update")
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev, Soon: true}, "UpdateSoon")
		p.Relay, p.Reject = nil, &lifecycle.RejectRecord{EnvelopeID: "rej-1", Reason: "timeout", CancelRequest: true}
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev}, "MarkAnswered")
		write(lifecycle.Write{ID: "p1", Record: &p, Rev: p.Rev, Soon: true}, "MarkAnswered")
		if _, err := rs.Write(ctx, lifecycle.Write{ID: "p1", Rev: p.Rev}); err != nil {
			t.Fatal(err)
		}
		if got := st.take(); !reflect.DeepEqual(got, []string{"Delete"}) {
			t.Fatalf("delete: calls %v", got)
		}
		busy := rsClaim(t, "p2", "d2")
		write(lifecycle.Write{ID: "p2", Record: &busy, Create: true, ClaimOnly: true}, "ClaimDecision")

		// Unavailable: the store's own error, neither ErrExists nor
		// ErrConflict (the core tries again, or reads the record back).
		st.fail = errCut
		p3 := rsClaim(t, "p3", "d3")
		for _, w := range []lifecycle.Write{
			{ID: "p3", Record: &p3, Create: true},
			{ID: "p3", Record: &p3, Create: true, ClaimOnly: true},
			{ID: "p3", Record: &p3, Rev: 5},
			{ID: "p3", Record: &p3, Rev: 5, Soon: true},
			{ID: "p3", Rev: 5},
		} {
			_, err := rs.Write(ctx, w)
			if !errors.Is(err, errCut) || errors.Is(err, lifecycle.ErrExists) || errors.Is(err, lifecycle.ErrConflict) {
				t.Fatalf("write %+v on a cut store: %v; want the store's error", w, err)
			}
		}
	})
}

// TestRecordStoreOwned: this member's records, each settled by Reclaim:
// a replay's record (its id claimed by another claim) is deleted and left
// out; a record whose proposal cannot be read is left in the store and
// out of the list; a record of an older fulfiller (no claim) is ours; a
// Reclaim that fails fails Owned, which the Loop tries again.
func TestRecordStoreOwned(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, real Store, peer func(string) Store) {
		ctx := context.Background()
		st := &callStore{Store: real}
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		claim := func(p lifecycle.Proposal) uint64 {
			t.Helper()
			rev, err := rs.Write(ctx, lifecycle.Write{ID: p.ID, Record: &p, Create: true})
			if err != nil {
				t.Fatalf("claim %s: %v", p.ID, err)
			}
			return rev
		}
		mine := rsClaim(t, "p-mine", "d1")
		mine.Rev = claim(mine)

		// A replay's record: the seen key holds d2 (the original), the
		// record another claim (d9), as a crash between ClaimRecord's
		// two writes leaves it.
		replay := rsClaim(t, "p-replay", "d2")
		rev := claim(replay)
		replay.Claim = "d9"
		if _, err := rs.Write(ctx, lifecycle.Write{ID: replay.ID, Record: &replay, Rev: rev}); err != nil {
			t.Fatal(err)
		}

		// An older fulfiller's record: claimed apart, no claim in it
		// (written as it would write it: recordStore keeps the claim).
		old := rsClaim(t, "p-old", "d3")
		claim(old)
		oldRec, err := real.Get(ctx, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		oldRec.Claim = ""
		if err := real.Update(ctx, oldRec); err != nil {
			t.Fatal(err)
		}
		old.Claim, old.Rev = "", oldRec.Rev

		// A record whose envelope is another proposal's.
		broken := rsClaim(t, "p-broken", "d4")
		broken.Envelope = rsEnvelope(t, "p-other", addCall)
		claim(broken)

		if peer != nil {
			// Another member's record is not this member's to resume.
			m2 := newRecordStore(peer("m2"), rsTTL, rsFulfil, nil)
			theirs := rsClaim(t, "p-theirs", "d5")
			theirs.Owner = "m2"
			if _, err := m2.Write(ctx, lifecycle.Write{ID: theirs.ID, Record: &theirs, Create: true}); err != nil {
				t.Fatal(err)
			}
		}
		st.take()

		got, err := rs.Owned(ctx)
		if err != nil {
			t.Fatalf("owned: %v", err)
		}
		want := map[string]lifecycle.Proposal{"p-mine": mine, "p-old": old}
		if len(got) != len(want) {
			t.Fatalf("owned %d records, want %d: %+v", len(got), len(want), got)
		}
		for _, p := range got {
			if !reflect.DeepEqual(p, want[p.ID]) {
				g, _ := json.MarshalIndent(p, "", "  ")
				w, _ := json.MarshalIndent(want[p.ID], "", "  ")
				t.Fatalf("owned %s:\n%s (rev %d)\nwant:\n%s (rev %d)", p.ID, g, p.Rev, w, want[p.ID].Rev)
			}
		}
		calls := st.take()
		if n := count(calls, "Reclaim"); n != 3 {
			t.Fatalf("calls %v: want a Reclaim of each readable record (3)", calls)
		}
		if n := count(calls, "Delete"); n != 1 {
			t.Fatalf("calls %v: want the replay's record deleted", calls)
		}
		if r, err := rs.Read(ctx, "p-replay"); r != nil || err != nil {
			t.Fatalf("replay's record after Owned: %+v, %v; want deleted", r, err)
		}
		if _, err := real.Get(ctx, "p-broken"); err != nil {
			t.Fatalf("unreadable record after Owned: %v; want it left for an operator", err)
		}
		if _, err := rs.Read(ctx, "p-broken"); err == nil {
			t.Fatal("read of an unreadable record: no error")
		}

		st.fail = errCut
		if recs, err := rs.Owned(ctx); !errors.Is(err, errCut) {
			t.Fatalf("owned with Reclaim failing: %d records, %v; want the error", len(recs), err)
		}
	})
}

func count(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

// legacyRecord is the layout records had before lifecycle.RecordVersion
// (state.Pending up to b7920f5), written here as those builds wrote it.
type legacyRecord struct {
	ProposalID       string                  `json:"proposal_id"`
	Envelope         json.RawMessage         `json:"envelope"`
	Proposer         string                  `json:"proposer"`
	Received         time.Time               `json:"received"`
	Size             int                     `json:"size"`
	Decision         json.RawMessage         `json:"decision,omitempty"`
	DecisionID       string                  `json:"decision_id,omitempty"`
	Revision         string                  `json:"revision,omitempty"`
	Phase            lifecycle.Phase         `json:"phase"`
	Owner            string                  `json:"owner"`
	Claim            string                  `json:"claim,omitempty"`
	ApprovalDeadline time.Time               `json:"approval_deadline,omitzero"`
	FulfilDeadline   time.Time               `json:"fulfil_deadline,omitzero"`
	Deadline         time.Time               `json:"deadline,omitzero"`
	Addressee        string                  `json:"addressee,omitempty"`
	Prompts          []lifecycle.Prompt      `json:"prompts,omitempty"`
	Approvals        []lifecycle.Approval    `json:"approvals,omitempty"`
	Request          *lifecycle.Request      `json:"request,omitempty"`
	Task             *legacyTask             `json:"task,omitempty"`
	Reject           *lifecycle.RejectRecord `json:"reject,omitempty"`
	Relay            *lifecycle.RelayRecord  `json:"relay,omitempty"`
}

type legacyTask struct {
	ID       string    `json:"id"`
	Spec     string    `json:"spec"`
	Status   string    `json:"status"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
	Poll     int64     `json:"poll_ms,omitzero"`
}

// TestRecordStoreMigratesOldRecords: records written in the layout of
// the builds before lifecycle.RecordVersion (as fulfill wrote them: its
// claims, escalations, fulfilments, tasks and answers, some without a
// Deadline or Addressee) read back as the Proposal they were, with the
// deadline of their phase (the pending TTL from Received while deciding
// or queued), the decision the record stored and the task's spec and
// poll interval; written back by the core, they are in the current
// layout and read back the same.
func TestRecordStoreMigratesOldRecords(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, _ func(string) Store) {
		ctx := context.Background()
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		esc := decision.Decision{Action: decision.Escalate, Message: "ask", Approvers: []string{"alice"}, Quorum: 1, Timeout: 5 * time.Minute,
			Editable: []string{"a"}, Grantable: &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}}}, NotifyArguments: true, Revision: "rev-1"}
		ful := decision.Decision{Action: decision.Fulfill, Revision: "rev-1", Task: true, TaskTimeout: time.Minute}
		params := json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2}}`)
		approval := lifecycle.Approval{Approver: "alice", Content: json.RawMessage(`{}`), At: rsT0.Add(time.Second)}
		prompt := lifecycle.Prompt{Approver: "alice", EnvelopeID: "el-1", RPCID: 3, Sent: rsT0.Add(time.Second)}
		req := lifecycle.Request{EnvelopeID: "req-1", RPCID: 4, Target: "calc", SentAt: rsT0.Add(2 * time.Second), Task: true}

		cases := []struct {
			name   string
			change func(r *legacyRecord) // fulfill's own change of its claim record
			want   func(p *lifecycle.Proposal)
		}{{
			name:   "deciding",
			change: func(r *legacyRecord) {},
			want:   func(p *lifecycle.Proposal) {},
		}, {
			name: "awaiting approval",
			change: func(r *legacyRecord) {
				r.Phase, r.Decision, r.DecisionID, r.Revision = lifecycle.AwaitingApproval, storeDecision(esc, "calc", nil, nil), "d1", "rev-1"
				r.ApprovalDeadline = rsT0.Add(5 * time.Minute)
				r.Prompts, r.Approvals = []lifecycle.Prompt{prompt}, []lifecycle.Approval{approval}
			},
			want: func(p *lifecycle.Proposal) {
				p.Phase, p.Deadline, p.DecisionID = lifecycle.AwaitingApproval, rsT0.Add(5*time.Minute), "d1"
				p.Decision = &lifecycle.Decision{Action: lifecycle.Escalate, Message: "ask", Target: "calc", Approvers: []string{"alice"}, Quorum: 1,
					Timeout: 5 * time.Minute, Revision: "rev-1", Editable: esc.Editable, Grantable: esc.Grantable, NotifyArguments: true,
					Extra: storeDecision(esc, "calc", nil, nil)}
				p.Prompts, p.Approvals = []lifecycle.Prompt{prompt}, []lifecycle.Approval{approval}
			},
		}, {
			name: "queued",
			change: func(r *legacyRecord) {
				r.Phase, r.Decision = lifecycle.Queued, storeDecision(ful, "calc", params, []string{"alice"})
			},
			want: func(p *lifecycle.Proposal) {
				p.Phase = lifecycle.Queued
				p.Decision = &lifecycle.Decision{Action: lifecycle.Fulfill, Target: "calc", Revision: "rev-1", Task: true, TaskTimeout: time.Minute,
					Extra: storeDecision(ful, "calc", params, []string{"alice"})}
				p.FinalArgs, p.ApprovedBy = params, []string{"alice"}
			},
		}, {
			name: "fulfilling, decided at once (no decision stored)",
			change: func(r *legacyRecord) {
				q := req
				r.Phase, r.Request, r.FulfilDeadline = lifecycle.Fulfilling, &q, req.SentAt.Add(10*time.Second)
			},
			want: func(p *lifecycle.Proposal) {
				q := req
				p.Phase, p.Request, p.Deadline = lifecycle.Fulfilling, &q, req.SentAt.Add(10*time.Second)
			},
		}, {
			name: "fulfilling, before fulfil deadlines were recorded",
			change: func(r *legacyRecord) {
				q := req
				r.Phase, r.Request = lifecycle.Fulfilling, &q
			},
			want: func(p *lifecycle.Proposal) {
				q := req
				p.Phase, p.Request, p.Deadline = lifecycle.Fulfilling, &q, req.SentAt.Add(rsFulfil)
			},
		}, {
			name: "task",
			change: func(r *legacyRecord) {
				q := req
				r.Phase, r.Request, r.FulfilDeadline = lifecycle.Task, &q, req.SentAt.Add(10*time.Second)
				r.Task = &legacyTask{ID: "task-1", Spec: TaskSpec2025, Status: "working", Created: rsT0.Add(3 * time.Second), Deadline: rsT0.Add(time.Hour), Poll: 250}
			},
			want: func(p *lifecycle.Proposal) {
				q := req
				p.Phase, p.Request, p.Deadline = lifecycle.Task, &q, rsT0.Add(time.Hour)
				p.Task = &lifecycle.TaskRecord{ID: "task-1", Status: "working", Created: rsT0.Add(3 * time.Second), Deadline: rsT0.Add(time.Hour), Spec: TaskSpec2025, PollMS: 250}
			},
		}, {
			name: "answered",
			change: func(r *legacyRecord) {
				r.Phase, r.Reject = lifecycle.Answered, &lifecycle.RejectRecord{EnvelopeID: "rej-1", Reason: "policy", Message: "no"}
			},
			want: func(p *lifecycle.Proposal) {
				p.Phase, p.Deadline = lifecycle.Answered, time.Time{}
				p.Reject = &lifecycle.RejectRecord{EnvelopeID: "rej-1", Reason: "policy", Message: "no"}
			},
		}}
		for i, c := range cases {
			id := "old-" + string(rune('a'+i))
			// As fulfill's claimRecord wrote it: no Deadline, no
			// Addressee; then its own change.
			old := legacyRecord{ProposalID: id, Envelope: rsEnvelope(t, id, addCall), Proposer: "agent", Received: rsT0, Size: 180,
				Phase: lifecycle.Deciding, Owner: "m1", Claim: "d0", DecisionID: "d0"}
			c.change(&old)
			raw, err := json.Marshal(old)
			if err != nil {
				t.Fatal(err)
			}
			var r lifecycle.Proposal
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("%s: read the old layout: %v", c.name, err)
			}
			if r.V != 0 || !bytes.Equal(r.Legacy, raw) {
				t.Fatalf("%s: an old record reads as version %d, legacy %q", c.name, r.V, r.Legacy)
			}
			if won, _, err := st.ClaimRecord(ctx, &r); err != nil || !won {
				t.Fatalf("%s: claim: %v, %v", c.name, won, err)
			}
			want := lifecycle.Proposal{ID: id, From: "agent", Envelope: rsEnvelope(t, id, addCall), Params: params, Size: 180, Received: rsT0,
				Method: "tools/call", Tool: "add", Owner: "m1", Phase: lifecycle.Deciding, Deadline: rsT0.Add(rsTTL),
				DecisionID: "d0", Claim: "d0", Rev: r.Rev}
			c.want(&want)
			got, err := rs.Read(ctx, id)
			if err != nil || got == nil {
				t.Fatalf("%s: read: %v, %v", c.name, got, err)
			}
			if got.V != lifecycle.RecordVersion || got.Legacy != nil {
				t.Fatalf("%s: a migrated record reads as version %d, legacy %q", c.name, got.V, got.Legacy)
			}
			want.V = lifecycle.RecordVersion
			if !reflect.DeepEqual(*got, want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(want, "", "  ")
				t.Fatalf("%s: migrated:\n%s\nwant:\n%s", c.name, g, w)
			}

			// Written back as the core would after resuming it: the
			// record is the Proposal now, in the current layout.
			rev, err := rs.Write(ctx, lifecycle.Write{ID: id, Record: got, Rev: got.Rev})
			if err != nil {
				t.Fatalf("%s: write back: %v", c.name, err)
			}
			want.Rev = rev
			checkRecord(t, st, want)
			checkRead(t, rs, want)
		}
	})
}

// countIDs mints the core's ids from a counter.
type countIDs struct{ n int }

func (c *countIDs) EnvelopeID() string { c.n++; return fmt.Sprintf("env-%d", c.n) }
func (c *countIDs) RPCID() int64       { c.n++; return int64(c.n) }
func (c *countIDs) DecisionID() string { c.n++; return fmt.Sprintf("dec-%d", c.n) }
func (c *countIDs) PromptID() string   { c.n++; return fmt.Sprintf("prompt-%d", c.n) }

// stubCodec is a lifecycle.Codec whose prompt payload names the prompt;
// answers are not read here.
type stubCodec struct{}

func (stubCodec) Prompt(p *lifecycle.Proposal, spec lifecycle.PromptSpec) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"proposal": p.ID, "prompt": spec.EnvelopeID, "id": spec.RPCID})
}

func (stubCodec) Read(*lifecycle.Proposal, lifecycle.Prompt, json.RawMessage, lifecycle.KeySet) lifecycle.Verified {
	return lifecycle.Verified{Why: "not read here"}
}

func (stubCodec) Recount(*lifecycle.Proposal, lifecycle.Approval) (json.RawMessage, string, error) {
	return nil, "", nil
}

func (stubCodec) Offers(json.RawMessage) (delegates, grants []string) { return nil, nil }

// coreOver runs a lifecycle Core's writes and reloads on rs as it steps:
// step returns the other effects.
type coreOver struct {
	t    *testing.T
	core *lifecycle.Core
	rs   *recordStore
}

func (c coreOver) step(now time.Time, ev lifecycle.Event) []lifecycle.Effect {
	c.t.Helper()
	ctx := context.Background()
	var out []lifecycle.Effect
	for queue := []lifecycle.Event{ev}; len(queue) > 0; queue = queue[1:] {
		for _, e := range c.core.Step(now, queue[0]) {
			switch e := e.(type) {
			case lifecycle.Write:
				rev, err := c.rs.Write(ctx, e)
				queue = append(queue, lifecycle.Stored{ID: e.ID, Seq: e.Seq, Rev: rev, Err: err})
			case lifecycle.Reload:
				rec, err := c.rs.Read(ctx, e.ID)
				if err != nil {
					c.t.Fatalf("reload %s: %v", e.ID, err)
				}
				queue = append(queue, lifecycle.Reloaded{ID: e.ID, Record: rec})
			default:
				out = append(out, e)
			}
		}
	}
	return out
}

func effectsOf[T lifecycle.Effect](effs []lifecycle.Effect) []T {
	var out []T
	for _, e := range effs {
		if x, ok := e.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// TestRecordStoreUnderTheCore runs the lifecycle core on recordStore: a
// fulfilment sent, an escalation asked, a fulfilment queued and an
// invalid proposal's reject committed; then the process "crashes" and a
// new core resumes what Owned reads. The request is not sent again, the
// same prompts are asked again, the same reject is sent again, and the
// proposals resumed are the ones the first core held.
func TestRecordStoreUnderTheCore(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st Store, _ func(string) Store) {
		rs := newRecordStore(st, rsTTL, rsFulfil, nil)
		cfg := lifecycle.Config{Member: "m1", MaxPending: 10, MaxInflight: 1, PendingTTL: rsTTL, FulfillTimeout: rsFulfil,
			ApprovalTimeout: 5 * time.Minute, RetryAfter: time.Second, Codec: stubCodec{}}
		ids := &countIDs{}
		first := coreOver{t: t, core: lifecycle.New(cfg, ids), rs: rs}
		propose := func(id, payload string) []lifecycle.Effect {
			env := rsEnvelope(t, id, payload)
			ev := lifecycle.Proposed{ID: id, From: "agent", Addressee: "calc", Envelope: env, Size: len(env)}
			c, err := parsePayload(json.RawMessage(payload))
			if err != nil {
				ev.Invalid = err.Error()
			}
			ev.Method, ev.Tool, ev.Params = c.method, c.tool, c.params
			return first.step(rsT0, ev)
		}
		decide := func(id string, d decision.Decision) []lifecycle.Effect {
			effs := propose(id, addCall)
			if len(effectsOf[lifecycle.Decide](effs)) != 1 {
				t.Fatalf("%s: effects %+v: want a Decide", id, effs)
			}
			return first.step(rsT0, lifecycle.Decided{ID: id, Decision: coreDecision(d, "calc", false)})
		}
		sent := effectsOf[lifecycle.SendRequest](decide("p-sent", decision.Decision{Action: decision.Fulfill, Revision: "r1"}))
		if len(sent) != 1 {
			t.Fatalf("fulfilment: sent %+v", sent)
		}
		asked := effectsOf[lifecycle.SendPrompt](decide("p-asked", decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}, Revision: "r1"}))
		if len(asked) != 1 || asked[0].Again {
			t.Fatalf("escalation: asked %+v", asked)
		}
		if effs := decide("p-queued", decision.Decision{Action: decision.Fulfill, Revision: "r1"}); len(effectsOf[lifecycle.SendRequest](effs)) != 0 {
			t.Fatalf("second fulfilment with one slot: sent %+v", effs)
		}
		rejected := effectsOf[lifecycle.SendReject](propose("p-invalid", `{"method":"tools/call"}`))
		if len(rejected) != 1 || rejected[0].Reason != "invalid" {
			t.Fatalf("invalid proposal: rejects %+v", rejected)
		}
		held := map[string]lifecycle.Proposal{}
		for _, p := range first.core.Open() {
			held[p.ID] = p
		}

		// The crash: a new core on the same store.
		recs, err := rs.Owned(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		second := coreOver{t: t, core: lifecycle.New(cfg, ids), rs: rs}
		later := rsT0.Add(10 * time.Second)
		effs := second.step(later, lifecycle.Resumed{Records: recs, How: "restart"})
		for _, r := range effectsOf[lifecycle.SendRequest](effs) {
			// p-queued may go out now: whether p-sent's slot is counted
			// before it depends on the order the records are resumed in.
			if r.ID != "p-queued" {
				t.Fatalf("resumed: request sent %+v; a committed request is never sent again", r)
			}
		}
		if got := effectsOf[lifecycle.SendReject](effs); len(got) != 1 || got[0] != rejected[0] {
			t.Fatalf("resumed: rejects %+v; want the committed one again, %+v", got, rejected)
		}
		if got := effectsOf[lifecycle.SendPrompt](effs); len(got) != 1 || !got[0].Again || got[0].EnvelopeID != asked[0].EnvelopeID || got[0].RPCID != asked[0].RPCID || !bytes.Equal(got[0].Payload, asked[0].Payload) {
			t.Fatalf("resumed: asks %+v; want the same prompt as %+v, again", got, asked)
		}
		for _, id := range []string{"p-sent", "p-asked"} {
			var got *lifecycle.Proposal
			for _, p := range second.core.Open() {
				if p.ID == id {
					got = &p
				}
			}
			want := held[id]
			// What the store adds: the claim's id, what parsePayload reads
			// of the envelope, and the decision as the record keeps it
			// (route, params).
			want.Claim, want.Method, want.Tool = want.DecisionID, "tools/call", "add"
			if got == nil || got.Decision == nil {
				t.Fatalf("%s not resumed with its decision: %+v", id, got)
			}
			want.Decision.Extra = got.Decision.Extra
			if !reflect.DeepEqual(*got, want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(want, "", "  ")
				t.Fatalf("%s resumed:\n%s\nwant:\n%s", id, g, w)
			}
			if sd, ok := policyDecision(got.Decision); !ok || sd.Revision != "r1" || sd.Route != "calc" {
				t.Fatalf("%s: stored decision %s", id, got.Decision.Extra)
			}
		}
		if p, err := rs.Read(context.Background(), "p-queued"); err != nil || p == nil || (p.Phase != lifecycle.Queued && p.Phase != lifecycle.Fulfilling) {
			t.Fatalf("queued proposal after the restart: %+v, %v", p, err)
		}
	})
}

// A record's envelope is read back after a restart as it was read when it
// arrived: keys exactly, so a "PAYLOAD" or "ID" beside the real ones (the
// gateway passes them through) never becomes the call that is resumed.
func TestMigrateReadsTheEnvelopesKeysExactly(t *testing.T) {
	t.Parallel()
	env := `{"protocol":"mew/v0.4","id":"p-1","from":"coder","kind":"mcp/proposal",` +
		`"payload":{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}},` +
		`"PAYLOAD":{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/x"}}},"ID":"p-2","FROM":""}`
	raw, _ := json.Marshal(legacyRecord{ProposalID: "p-1", Proposer: "coder", Envelope: json.RawMessage(env), Received: rsT0, Phase: lifecycle.Deciding})
	var p lifecycle.Proposal
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if string(p.Params) != `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}` {
		t.Errorf("an old record's params read as %s", p.Params)
	}
	rs := newRecordStore(state.NewLocal("m1"), rsTTL, rsFulfil, nil)
	if err := rs.migrate(&p); err != nil {
		t.Fatal(err)
	}
	if p.Method != "tools/call" || p.Tool != "write_file" || string(p.Params) != `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}` {
		t.Errorf("resumed %s %s %s", p.Method, p.Tool, p.Params)
	}
}
