package fulfill

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/state"
)

// fulfil sends the fulfilment request, or queues it when --max-inflight
// requests are already out.
func (f *Fulfiller) fulfil(p *proposal, target string, params json.RawMessage) {
	f.mu.Lock()
	s := p.State()
	if s != StateDeciding && s != StateAwaitingApproval {
		f.mu.Unlock()
		return
	}
	p.target = target
	p.finalParams = params
	p.taskAug = f.callsAsTask(p, target)
	if !f.slots.free(p.env.From) || f.closing {
		p.state.Store(int32(StateQueued))
		f.slots.enqueue(p)
		d, by := p.decision, p.approvedBy
		f.mu.Unlock()
		if err := f.noteRecord(p, func(r *state.Pending) {
			// A dequeue may have recorded its request first: that
			// record stands (a request written is never written again).
			if r.Request == nil {
				r.Phase, r.Decision = state.Queued, storeDecision(d, target, params, by)
			}
		}); err != nil {
			f.storeFailed(p, "queued fulfilment", err)
			return
		}
		ev := p.event(StageQueued)
		f.emit(ev)
		f.sendStatus(p, ev)
		return
	}
	f.startLocked(p)
	f.mu.Unlock()
	f.sendRequest(p)
}

// startLocked claims a fulfilment slot for p. Called with f.mu held.
func (f *Fulfiller) startLocked(p *proposal) {
	f.slots.take(p.env.From)
	p.state.Store(int32(StateFulfilling))
	p.rpcID = f.space.NextRPCID()
	p.requestID = agent.NewID(f.space.ID())
	p.requestSent = f.clock.Now()
	p.written = make(chan struct{})
	f.byRequest[p.requestID] = p
	p.stopFulfil = f.clock.AfterFunc(f.cfg.FulfillTimeout, func() { f.fulfilTimedOut(p) })
}

// sendRequest puts the fulfilment mcp/request on the wire: to the target,
// correlated to the proposal, method and params as proposed (or as edited
// by an approver and re-checked by the policy).
func (f *Fulfiller) sendRequest(p *proposal) {
	if _, here := f.space.Participant(p.target); !here {
		// The gateway replays nothing: a request sent while the owner is
		// away (its link dropped, the space restarting) would be lost and
		// the proposer would wait for the fulfil timeout. Hold it for the
		// owner's rejoin grace instead; see releaseHeld and ownerGone.
		f.mu.Lock()
		p.held = true
		f.mu.Unlock()
		f.log.Info("tool owner not in the space; fulfilment request held until it is back", "proposal", p.env.ID, "target", p.target)
		f.ownerLeft(p)
		return
	}
	payload := agent.RPCRequest{JSONRPC: "2.0", ID: json.RawMessage(strconv.FormatInt(p.rpcID, 10)), Method: p.method, Params: p.finalParams}
	env := agent.Envelope{
		ID:            p.requestID,
		To:            []string{p.target},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
	}
	if p.method == agent.MethodToolsCall {
		payload.Params = requestParams(p.finalParams, p.taskAug, f.taskTimeout(p))
	}
	if p.taskAug {
		// Not named after the proposal: its answer is a task handle,
		// which an SDK proposer would take for the call's result. The
		// task's end is relayed under the proposal's name (relay).
		env.CorrelationID = nil
	}
	env.Payload = agent.MustPayload(payload)
	// Recorded before it is written (never written twice): whoever
	// resumes the proposal awaits this request's response.
	if err := f.saveRecord(p, func(r *state.Pending) {
		r.Phase = state.Fulfilling
		r.Request = &state.Request{EnvelopeID: p.requestID, RPCID: p.rpcID, Target: p.target, SentAt: p.requestSent.UTC(), Task: p.taskAug}
		r.FulfilDeadline = p.requestSent.Add(f.cfg.FulfillTimeout).UTC()
	}); err != nil {
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
			close(p.written)
			if p.fenced.Load() {
				ev := p.event(StageIgnored)
				ev.Reason, ev.Message = ReasonAdopted, "fulfilment request not sent: the proposal's record belongs to another member now"
				f.emit(ev)
				return
			}
			f.log.Error("pending-work store cannot record the fulfilment request; not sent, proposal rejected", "proposal", p.env.ID, "err", err)
			f.answerReject(p, decision.ReasonOther, storeUnavailable)
		}
		return
	}
	// Written ahead (fail closed): no call is carried out without its
	// record. Observers that only watch hear of it once it is written.
	ev := p.event(StageFulfilling)
	if err := f.record(ev); err != nil {
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
			f.log.Error("decision log cannot be written; fulfilment refused", "proposal", p.env.ID, "err", err)
			close(p.written)
			f.answerReject(p, decision.ReasonOther, auditFailedMessage)
		}
		return
	}
	err := f.send(env)
	if err == nil || errors.Is(err, agent.ErrSessionLost) {
		// Reported once written (or maybe written), and before the
		// response or a refusal can be: they wait for p.written.
		f.announce(ev)
		close(p.written)
	}
	if err == nil {
		return
	}
	if errors.Is(err, agent.ErrSessionLost) {
		// The link died during the write: the request may have reached
		// the tool owner. Sending it again could run the call twice,
		// and rejecting now could contradict a request that did go
		// out; so wait as if sent. Its response, or the fulfil
		// timeout, ends the proposal.
		f.log.Warn("fulfilment request may not have been sent; waiting for its response or the fulfil timeout", "proposal", p.env.ID, "target", p.target, "err", err)
		return
	}
	f.log.Error("fulfilment request not delivered: not written", "proposal", p.env.ID, "target", p.target, "err", err)
	f.undelivered(p, agent.KindRequest, UndeliveredNotWritten, err.Error())
	close(p.written)
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
		f.answerReject(p, "other", "the fulfilment request could not be sent")
	}
}

// onResponse ends a fulfilment when its target answers. The gateway does
// not authenticate from, and everyone sees our request (its envelope id
// and JSON-RPC id), so a participant can answer in the tool owner's name
// before the owner does. That first answer cannot be told from a real one;
// what can be seen is a second, different answer to the same request, so
// answered requests are remembered (boundedly) and a conflict is logged,
// counted and recorded as a spoof attempt.
func (f *Fulfiller) onResponse(env agent.Envelope) {
	cid := env.CorrelationID.First()
	if f.catalog.observe(f.base, env) {
		return // an answer to our discovery
	}
	f.mu.Lock()
	p, ok := f.byRequest[cid]
	if !ok {
		// Under f.mu, as awaitResumed registers an adopted request and
		// looks here: a response is either matched or kept for it.
		f.peerResps.keep(cid, env)
	}
	f.mu.Unlock()
	if !ok {
		f.checkAnswered(cid, env)
		return // not a fulfilment of ours (the agent matches its own requests)
	}
	if env.From != p.target {
		// Not taken. But a proposer on the reference SDK takes any
		// response to the request that fulfils its proposal, from anyone:
		// this one may have fooled it, so it is recorded and counted as a
		// spoof attempt.
		f.ignoreResponse(p, env, ReasonResponseFromOther,
			fmt.Sprintf("response %s to fulfilment request %s came from %s, not %s", env.ID, cid, env.From, p.target), env.Payload)
		return
	}
	// Matched by correlation and sender, as MEW does (rule 12): the
	// reference SDK's tool servers (mew bridge) echo no JSON-RPC id, so an
	// id is checked only when the answer carries one.
	resp, err := agent.DecodeAnswer(env.Payload, strconv.AppendInt(nil, p.rpcID, 10))
	if err != nil {
		reason := ReasonWrongRPCID
		if !errors.Is(err, agent.ErrWrongRPCID) {
			reason = ReasonMalformedResponse
		}
		f.ignoreResponse(p, env, reason, fmt.Sprintf("response %s to fulfilment request %s: %v", env.ID, cid, err), nil)
		return
	}
	f.waitWritten(p)
	if p.taskAug {
		f.answered.Add(cid, &answeredRequest{p: p, response: env.ID, digest: sha256.Sum256(env.Payload)})
		f.taskAnswered(p, resp)
		return
	}
	// Ended here, on the reader, so that what it reads next (a new
	// proposal from the same proposer) no longer counts this one as
	// pending; the store's part (the record's end, the request of a
	// proposal queued for the freed slot) is not done on the reader, or
	// every frame of the space would wait for those writes.
	_, next, ok := f.end(p, StateFulfilled, isState(StateFulfilling))
	if !ok {
		return
	}
	f.answered.Add(cid, &answeredRequest{p: p, response: env.ID, digest: sha256.Sum256(env.Payload)})
	ev := p.event(StageFulfilled)
	ev.Result, ev.Latency = resp.Result, f.clock.Now().Sub(p.requestSent)
	if resp.Error != nil {
		ev.RPCError = agent.MustPayload(resp.Error)
	}
	ev.By = p.approvedBy
	f.emit(ev)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.release(p, StateFulfilled, next)
	}()
}

// ignoreResponse records a response to p's fulfilment request that is not
// taken (from another participant, another JSON-RPC id, unreadable) as a
// StageIgnored event: once per proposal, so that a flood of them does not
// flood the decision log; the rest are only logged at debug.
func (f *Fulfiller) ignoreResponse(p *proposal, env agent.Envelope, reason, message string, result json.RawMessage) {
	if p.spoofed.Swap(true) {
		f.log.Debug("another response for our fulfilment ignored", "proposal", p.env.ID, "from", env.From, "envelope", env.ID, "reason", reason)
		return
	}
	f.log.Warn("response for our fulfilment ignored (spoof attempt?)",
		"proposal", p.env.ID, "target", p.target, "from", env.From, "envelope", env.ID, "reason", reason, "detail", message)
	ev := p.event(StageIgnored)
	ev.Reason, ev.By, ev.Message, ev.Result = reason, []string{env.From}, message, result
	f.emit(ev)
}

// Reasons of StageIgnored events about answers that claim to come from a
// tool owner: spoof attempts, counted and recorded in the decision log.
const (
	ReasonConflictingResponse = "conflicting_response" // a second, different response to a fulfilment request already answered
	ReasonWrongRPCID          = "wrong_rpc_id"         // a response to our request with a JSON-RPC id that is not the request's
	ReasonMalformedResponse   = "malformed_response"   // a response to our request that is not a JSON-RPC response object
	ReasonResponseFromOther   = "response_from_other"  // a response to our request from a participant it was not sent to
	ReasonSpoofedWithdraw     = "spoofed_withdraw"     // a withdrawal from someone other than the proposer
)

// answeredRequest is a fulfilment request that got its response, kept so
// that a second, different response to it is noticed.
type answeredRequest struct {
	p          *proposal
	response   string // envelope id of the response that counted
	digest     [sha256.Size]byte
	conflicted atomic.Bool // recorded once; later conflicts are only counted in the log
}

// answeredRequests bounds the record of answered fulfilment requests:
// entries are made only by our own fulfilments, and a late conflicting
// answer normally comes within seconds of the first.
const answeredRequests = 4096

// checkAnswered looks at a response to a fulfilment request that is no
// longer in flight: the same answer again is harmless (a re-delivery), a
// different one from the tool owner means one of the two was forged.
func (f *Fulfiller) checkAnswered(cid string, env agent.Envelope) {
	a, ok := f.answered.Get(cid)
	if !ok || env.From != a.p.target || sha256.Sum256(env.Payload) == a.digest {
		return
	}
	if a.conflicted.Swap(true) {
		f.log.Debug("another conflicting response ignored", "proposal", a.p.env.ID, "envelope", env.ID)
		return // recorded once per request: a flood of forgeries must not flood the logs
	}
	f.log.Warn("a second, different response to an answered fulfilment request: one of them was forged (spoof attempt)",
		"proposal", a.p.env.ID, "target", a.p.target, "request", cid, "counted", a.response, "conflicting", env.ID)
	ev := a.p.event(StageIgnored)
	ev.Reason, ev.By = ReasonConflictingResponse, []string{env.From}
	ev.Message = fmt.Sprintf("response %s to fulfilment request %s differs from response %s, which ended the proposal; one of them was forged", env.ID, cid, a.response)
	ev.Result = env.Payload
	f.emit(ev)
}

// fulfilTimedOut applies rule 4: cancel at the tool owner, reject "timeout".
func (f *Fulfiller) fulfilTimedOut(p *proposal) {
	f.mu.Lock()
	held := p.held
	f.mu.Unlock()
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); !ok {
		return
	}
	if !held { // a held request never went out: nothing to cancel
		f.cancelRequest(p, "timeout")
	}
	f.answerReject(p, "timeout", fmt.Sprintf("%s did not answer within %s", p.target, f.cfg.FulfillTimeout))
}

// cancelRequest tells the tool owner to stop working on our request.
func (f *Fulfiller) cancelRequest(p *proposal, reason string) {
	if p.fenced.Load() {
		return // the adopter awaits this request's response: do not cancel it
	}
	params := agent.MustPayload(cancelledParams{RequestID: p.rpcID, Reason: reason})
	env := agent.Envelope{
		To:            []string{p.target},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{p.requestID},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", Method: agent.MethodCancelled, Params: params}),
	}
	if q, ok := f.space.(Queuer); ok {
		ctx, cancel := f.sendContext()
		defer cancel()
		if _, queued, err := q.SendOrQueue(ctx, env); err != nil {
			f.log.Warn("cancellation not sent", "proposal", p.env.ID, "target", p.target, "err", err)
		} else if queued {
			f.log.Warn("cancellation kept until the link is back", "proposal", p.env.ID, "target", p.target)
		}
		return
	}
	if err := f.send(env); err != nil {
		f.log.Warn("cancellation not sent", "proposal", p.env.ID, "target", p.target, "err", err)
	}
}

// freeSlotLocked gives up p's fulfilment slot once its request was
// answered or p ended (a task runs without one: --max-inflight bounds
// calls in flight, --max-pending the tasks) and returns the queued
// proposals that take it. Called with f.mu held.
func (f *Fulfiller) freeSlotLocked(p *proposal) []*proposal {
	stopTimer(p.stopFulfil)
	stopTimer(p.stopGone)
	p.stopGone = nil
	delete(f.byRequest, p.requestID)
	f.slots.give(p.env.From)
	return f.dequeueLocked()
}

// dequeueLocked starts queued fulfilments while slots are free, the
// proposers in turn (see slots). Called with
// f.mu held; the caller sends the returned requests after unlocking.
func (f *Fulfiller) dequeueLocked() []*proposal {
	var started []*proposal
	for !f.closing {
		q := f.slots.next(func(q *proposal) bool { return q.State() == StateQueued })
		if q == nil {
			break
		}
		f.startLocked(q)
		started = append(started, q)
	}
	return started
}
