package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/state"
)

// reject ends p with an mcp/reject, unless it has already been answered.
func (f *Fulfiller) reject(p *proposal, reason, message string) {
	prev, ok := f.transition(p, StateRejected, notAnswered)
	if !ok {
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, escalationCancel(p, reason))
	}
	f.answerReject(p, reason, message)
}

// answerReject sends mcp/reject to the proposer, and a chat explaining it
// when there is a message. It reports whether the reject was written.
// The rejected line is written to the decision log once the pending record
// says answered (markAnswered) and before the reject goes out (the decision
// log has it before the proposer does): a crash before the record would
// otherwise leave a "rejected" line for a proposal that the restart decides
// again and may fulfil; a crash after it sends the same reject, and writes
// the line, again (resendReject). Observers that only watch hear of it once
// it is written (docs/design.md rule 9), and of an undelivered one
// otherwise. A refusal by the gateway, which comes later as a
// system/error, is reported by onRefusal.
func (f *Fulfiller) answerReject(p *proposal, reason, message string) bool {
	if p.fenced.Load() {
		f.notAnsweredHere(p, reason)
		return false
	}
	ev := p.event(StageRejected)
	ev.Reason, ev.Message = reason, message
	rej := state.Reject{EnvelopeID: agent.NewID(f.space.ID()), Reason: reason, Message: message}
	if !f.markAnswered(p, rej) {
		f.notAnsweredHere(p, reason)
		return false
	}
	f.recordReject(p, ev)
	return f.writeReject(p, ev, rej)
}

// recordReject writes a reject's line to the decision log. A failed write
// does not hold the reject back: denying is always safe, and the proposer
// must not be left waiting.
func (f *Fulfiller) recordReject(p *proposal, ev Event) {
	if err := f.record(ev); err != nil {
		f.log.Error("reject not recorded in the decision log; sending it anyway", "proposal", p.env.ID, "reason", ev.Reason, "err", err)
	}
}

// notAnsweredHere reports a reject this member does not send: the
// proposal's record is another member's (or its end could not be recorded
// while peers may adopt it), and whoever holds the record answers, once.
func (f *Fulfiller) notAnsweredHere(p *proposal, reason string) {
	f.log.Info("reject not sent: the proposal's record is not this member's", "proposal", p.env.ID, "reason", reason)
	ev := p.event(StageIgnored)
	ev.Reason, ev.Message = ReasonAdopted, "not answered here ("+reason+"): the proposal's record is not this member's"
	f.emit(ev)
}

// writeReject writes the reject rej (recorded by markAnswered, or resumed
// from a record in phase Answered) and then ends p's record, whether or
// not the write succeeded, and reports an unwritten reject undelivered —
// except at shutdown, where an unwritten reject's record stays in the
// store for the next run to send (keepAnswered): nobody here can send it
// any more.
func (f *Fulfiller) writeReject(p *proposal, ev Event, rej state.Reject) bool {
	reason, message := rej.Reason, rej.Message
	env := agent.Envelope{
		ID:            rej.EnvelopeID,
		To:            []string{p.env.From},
		Kind:          agent.KindReject,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(rejectPayload{Reason: reason}),
	}
	// Tracked before the write: the refusal may be read before Send
	// returns; it waits for written.
	sent := &sentReject{p: p, written: make(chan struct{})}
	f.rejects.Add(env.ID, sent)
	out, err := f.sendAndGet(env)
	kept := err != nil && f.keepAnswered(p)
	if !kept {
		f.dropRecord(p)
	}
	f.countShutdownAnswer(err == nil, kept)
	if kept {
		f.rejects.Remove(env.ID)
		close(sent.written)
		f.log.Warn("reject not written at shutdown; kept in the state store for the next run to send", "proposal", p.env.ID, "reason", reason, "envelope", env.ID, "err", err)
		return false
	}
	if err != nil {
		f.rejects.Remove(env.ID)
		close(sent.written)
		f.log.Error("reject not delivered: not written", "proposal", p.env.ID, "reason", reason, "err", err)
		f.undelivered(p, agent.KindReject, UndeliveredNotWritten, err.Error())
		return false
	}
	f.announce(ev)
	close(sent.written)
	if message == "" {
		return true
	}
	if _, err := f.sendAndGet(agent.Envelope{
		To:            []string{p.env.From},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{out.ID},
		Payload:       agent.MustPayload(chatPayload{Text: message, Format: "plain"}),
	}); err != nil {
		f.log.Warn("reject explanation not sent", "proposal", p.env.ID, "err", err)
	}
	return true
}

func (f *Fulfiller) send(env agent.Envelope) error {
	_, err := f.sendAndGet(env)
	return err
}

func (f *Fulfiller) sendAndGet(env agent.Envelope) (agent.Envelope, error) {
	ctx, cancel := f.sendContext()
	defer cancel()
	return f.space.Send(ctx, env)
}

// transition moves p into the terminal state to if allowed(current state),
// releasing whatever p held: its fulfilment slot, its place in the pending
// store. Exactly one caller can end a proposal; the others get ok=false.
func (f *Fulfiller) transition(p *proposal, to State, allowed func(State) bool) (prev State, ok bool) {
	prev, next, ok := f.end(p, to, allowed)
	if ok {
		f.release(p, to, next)
	}
	return prev, ok
}

// end is transition's part in memory: p's state, the pending counts and
// its fulfilment slot, whose next holders it returns. From here on p no
// longer counts as pending for anyone (input.pending included).
func (f *Fulfiller) end(p *proposal, to State, allowed func(State) bool) (prev State, next []*proposal, ok bool) {
	f.mu.Lock()
	prev = p.State()
	if prev.Terminal() || !allowed(prev) {
		f.mu.Unlock()
		return prev, nil, false
	}
	p.state.Store(int32(to))
	stopTimer(p.stopTTL)
	f.uncountLocked(p)
	if prev == StateFulfilling {
		next = f.freeSlotLocked(p)
	}
	if prev == StateTask {
		f.endTaskLocked(p)
	}
	// Under f.mu, ended first: resumeOne checks under f.mu that a record
	// it was handed is neither pending here nor ended here, and between a
	// removal and its mark outside the lock it found neither and decided
	// the proposal a second time (TestResumeNeverRacesAnEnd).
	if to != StateSuperseded {
		f.store.markEnded(p.env.ID)
	}
	f.store.remove(p)
	f.mu.Unlock()
	return prev, next, true
}

// release is transition's part in the store, once end has ended p: the
// end of its record (a rejected one's ends after its reject, in
// answerReject), then the requests of the proposals next in line for its
// fulfilment slot.
func (f *Fulfiller) release(p *proposal, to State, next []*proposal) {
	if to != StateRejected {
		f.dropRecord(p)
	}
	for _, q := range next {
		f.sendRequest(q)
	}
}

// Payloads fulfiller writes. Structs keep the key order of docs/protocol.md on
// the wire, which makes envelopes easy to read and to compare.
type (
	rejectPayload struct {
		Reason string `json:"reason"`
	}
	chatPayload struct {
		Text   string `json:"text"`
		Format string `json:"format"`
	}
	cancelledParams struct {
		RequestID int64  `json:"requestId"`
		Reason    string `json:"reason"`
	}
)

func notAnswered(s State) bool { return !s.answered() }

// notAnsweredOrTask: a proposal running as a task has had no answer yet
// either (its result is relayed at the end), but only its proposer, an
// operator or its deadline may end it; see StateTask.
func notAnsweredOrTask(s State) bool { return !s.answered() || s == StateTask }

func isState(want State) func(State) bool { return func(s State) bool { return s == want } }

func reasonOf(payload json.RawMessage) string {
	var r struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(payload, &r)
	return r.Reason
}

func (f *Fulfiller) emit(e Event) {
	stamp(&e)
	f.obs.Observe(e)
}

// record writes ahead the record of an answer, before the answer goes out
// (see Recorder): it blocks while the Recorders write it. The observers
// that only watch are told by announce once the answer is written, so an
// answer that never left is never reported to them as sent.
func (f *Fulfiller) record(e Event) error {
	stamp(&e)
	if r, ok := f.obs.(Recorder); ok {
		return r.Record(e)
	}
	return nil
}

// announce tells the observers that are not Recorders of an answer that
// was written; the Recorders had it from record.
func (f *Fulfiller) announce(e Event) {
	stamp(&e)
	switch o := f.obs.(type) {
	case Observers:
		o.observeWatchers(e)
	case Recorder:
	default:
		o.Observe(e)
	}
}

// stamp fills what every event carries: its time, and a decision id even
// for frames that never became a proposal (a duplicate id, another
// fulfiller's proposal): nothing decided those, so the line is its own.
func stamp(e *Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.DecisionID == "" {
		e.DecisionID = NewDecisionID()
	}
}

// auditFailedMessage is the reject message while the decision log cannot
// be written.
const auditFailedMessage = "the decision log cannot be written, so this fulfiller neither fulfils nor escalates until it can; propose again later"

// unrecorded refuses p because the record of what would happen next (an
// escalation) could not be written: fail closed, reject "other".
func (f *Fulfiller) unrecorded(p *proposal, what string, err error) {
	f.log.Error("decision log cannot be written; "+what+" refused", "proposal", p.env.ID, "err", err)
	f.reject(p, decision.ReasonOther, auditFailedMessage)
}

func (p *proposal) event(stage Stage) Event {
	g := p.governor()
	return Event{Stage: stage, ProposalID: p.env.ID, DecisionID: g.id, Revision: g.revision, Proposer: p.env.From, Method: p.method, Tool: p.tool, Target: p.target}
}
