package fulfill

import (
	"context"
	"errors"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
)

// ErrUndelivered is wrapped by Run's error when answers owed at shutdown
// could not be delivered.
var ErrUndelivered = errors.New("answers not delivered")

// Queuer is implemented by a Space that can keep an envelope while the
// link is down and write it after the reconnect (*agent.Client does).
// Cancellations go through it: one lost in an outage would leave a tool
// owner working on a call nobody waits for.
type Queuer interface {
	SendOrQueue(ctx context.Context, env agent.Envelope) (sent agent.Envelope, queued bool, err error)
}

// rejectsTracked is how many recent rejects can still be matched to a
// refusal. The gateway refuses within one round trip of the write, so a
// few thousand cover any burst.
const rejectsTracked = 4096

// sentReject is a reject handed to the link, for onRefusal.
type sentReject struct {
	p       *proposal
	written chan struct{} // closed once the write's outcome has been reported
}

// rejectLog maps the envelope ids of recent rejects to what they answered.
type rejectLog = lru.Cache[string, *sentReject]

func newRejectLog() *rejectLog {
	c, err := lru.New[string, *sentReject](rejectsTracked)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// undelivered reports an answer that never reached the gateway's other
// participants.
func (f *Fulfiller) undelivered(p *proposal, kind, reason, msg string) {
	ev := p.event(StageUndelivered)
	ev.Envelope, ev.Reason, ev.Message = kind, reason, msg
	f.emit(ev)
}

// waitWritten waits until the write of p's fulfilment request has been
// reported, so that its outcome is never reported before it.
func (f *Fulfiller) waitWritten(p *proposal) {
	if p.written == nil {
		return
	}
	select {
	case <-p.written:
	case <-f.base.Done():
	}
}

// onRefusal handles the gateway refusing one of our envelopes
// (system/error correlated to it; the agent has already dropped errors
// about envelopes the gateway accepted, which someone else forged). A
// refused reject is reported undelivered; a refused fulfilment request
// never reached the tool owner, so the proposal is rejected "other".
func (f *Fulfiller) onRefusal(env agent.Envelope) {
	r, ok := agent.RefusalOf(env, f.space.ID())
	if !ok {
		return
	}
	f.mu.Lock()
	p, isRequest := f.byRequest[r.EnvelopeID]
	f.mu.Unlock()
	if isRequest {
		f.waitWritten(p)
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); !ok {
			return
		}
		f.log.Error("fulfilment request not delivered: refused by the gateway", "proposal", p.env.ID, "target", p.target, "err", r.String())
		f.undelivered(p, agent.KindRequest, UndeliveredRefused, r.String())
		f.answerReject(p, "other", "the gateway refused the fulfilment request")
		return
	}
	sent, ok := f.rejects.Peek(r.EnvelopeID)
	if !ok {
		return
	}
	f.rejects.Remove(r.EnvelopeID)
	select {
	case <-sent.written:
	case <-f.base.Done():
	}
	f.log.Error("reject not delivered: refused by the gateway", "proposal", sent.p.env.ID, "err", r.String())
	f.undelivered(sent.p, agent.KindReject, UndeliveredRefused, r.String())
}

// ShutdownAnswers reports how many answers were owed once shutdown began
// (rejects of pending proposals, of cancelled fulfilments, of proposals
// arriving meanwhile) and how many of them were neither written nor kept
// for the next run (ShutdownKept). Both are final once Run has returned.
func (f *Fulfiller) ShutdownAnswers() (owed, lost int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owed, f.lost
}

// ShutdownKept reports how many of the answers owed at shutdown could not
// be written and were left in the state store instead, for the next run on
// it to send (keepAnswered). Final once Run has returned.
func (f *Fulfiller) ShutdownKept() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kept
}

// countShutdownAnswer counts a reject owed once shutdown has begun:
// written, kept in the store for the next run, or lost.
func (f *Fulfiller) countShutdownAnswer(written, kept bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closing {
		return
	}
	f.owed++
	switch {
	case kept:
		f.kept++
	case !written:
		f.lost++
	}
}

// keepAnswered reports whether p's reject, which could not be written,
// stays owed in the store: only at shutdown, with a store, and when p's
// answered record (markAnswered) is in it. That record is then left
// there instead of deleted, and forgotten here: the next run on the store
// (or a peer adopting this member's work) resumes it and writes this very
// envelope (resendReject), without deciding the proposal again. Outside
// shutdown the process is still here to answer, so nothing is kept.
func (f *Fulfiller) keepAnswered(p *proposal) bool {
	f.mu.Lock()
	closing := f.closing
	f.mu.Unlock()
	if !closing || !f.cfg.Store.Persistent() {
		return false
	}
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.rec == nil || p.rec.Phase != state.Answered || p.rec.Reject == nil {
		return false
	}
	p.rec, p.recEnded = nil, true
	return true
}

// sendContext bounds one send: sendTimeout, and the shutdown deadline
// once shutdown has begun (sends from before then are cut off by it).
func (f *Fulfiller) sendContext() (context.Context, context.CancelFunc) {
	f.mu.Lock()
	parent := f.stopCtx
	if parent == nil {
		parent = f.sendsCtx
	}
	f.mu.Unlock()
	return context.WithTimeout(parent, sendTimeout)
}
