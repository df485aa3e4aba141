package fulfill

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
)

// handle routes one envelope from the space.
func (f *Fulfiller) handle(env agent.Envelope) {
	if env.From == f.space.ID() {
		// The agent drops our own echoes: one in our name that it
		// delivers is someone else's (SubscribeOptions.Impersonations).
		f.onImpersonation(env)
		return
	}
	switch env.Kind {
	case agent.KindProposal:
		f.onProposal(env)
	case agent.KindWithdraw:
		f.onWithdraw(env)
	case agent.KindResponse:
		f.onResponse(env)
	case agent.KindRequest:
		f.onOtherRequest(env)
	case agent.KindReject:
		f.onOtherReject(env)
	case agent.KindWelcome:
		if env.AddressedTo(f.space.ID()) {
			f.catalog.reset()
			for _, p := range f.space.Roster() {
				f.catalog.refresh(f.base, p.ID)
			}
			f.checkOwners()
		}
	case agent.KindPresence:
		f.onPresence(env)
	case agent.KindError:
		f.onRefusal(env)
	}
}

func (f *Fulfiller) onProposal(env agent.Envelope) {
	if env.ID == "" || env.From == "" {
		f.log.Warn("proposal without id or from skipped", "id", env.ID, "from", env.From)
		return
	}
	g, seen := f.store.known(env.ID)
	if !seen {
		g, seen = f.claimingAs(env.ID)
	}
	if seen {
		// Rule 5: never reject a replayed id: the reject would name the
		// id and fail the original proposal at its proposer. Its line
		// carries the original's decision (rule 10).
		f.log.Warn("proposal id seen before; ignored", "proposal", env.ID, "from", env.From)
		f.emit(Event{Stage: StageIgnored, ProposalID: env.ID, DecisionID: g.id, Revision: g.revision, Proposer: env.From, Reason: "duplicate", Message: "proposal id seen before"})
		return
	}
	c, err := parsePayload(env.Payload)
	method := c.method
	p := &proposal{env: env, method: c.method, params: c.params, tool: c.tool, received: f.clock.Now()}
	if target, mine := f.addressee(env, p.tool); !mine {
		f.log.Debug("proposal addressed to another fulfiller; left alone", "proposal", env.ID, "to", env.To)
		f.store.markSeen(p)
		f.emit(Event{Stage: StageIgnored, ProposalID: env.ID, DecisionID: p.governor().id, Proposer: env.From, Method: method, Tool: p.tool, Reason: "addressed_elsewhere", Message: fmt.Sprintf("addressed to %v", env.To)})
		return
	} else {
		p.target = target
	}
	// Claimed off the reader: a claim is a store round trip, and the
	// reader also carries the responses that end fulfilments. Its room
	// is taken here, in the order proposals are read, so that the claim
	// workers (which finish in any order) never let a later proposal
	// take the room of an earlier one: rule 3 refuses the new ones.
	j := claimJob{p: p, parseErr: err}
	f.mu.Lock()
	f.claiming[env.ID] = p
	if err == nil {
		if j.reason, j.message = f.refusal(p); j.reason == "" {
			f.countLocked(p)
		}
	}
	f.mu.Unlock()
	// Blocks while every claim worker is busy: the reader then waits as
	// it did for a claim of its own (backpressure on a flood). Once Run
	// is stopping it claims here, so that shutdown finds the proposal
	// and answers it.
	if f.inProcess {
		f.claimAndAdmit(j)
		return
	}
	select {
	case f.claims <- j:
	case <-f.runCtx.Done():
		f.claimAndAdmit(j)
	}
}

// claimingAs reports whether a proposal with this id waits for its claim,
// and its decision: a replay meanwhile is a duplicate. (One that slips
// between this check and the store's is refused by the store's claim.)
func (f *Fulfiller) claimingAs(id string) (governing, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.claiming[id]
	if !ok {
		return governing{}, false
	}
	return *p.governor(), true
}

// claimJob is a proposal read from the space, waiting for its claim:
// invalid (parseErr), refused (reason and message: busy), or counted as
// pending (countLocked) as it was read.
type claimJob struct {
	p               *proposal
	parseErr        error
	reason, message string
}

// countLocked counts p as pending: against --max-pending, its proposer's
// limit and --max-pending-bytes, until it ends (end) or its claim is lost
// (uncountLocked). Called with f.mu held.
func (f *Fulfiller) countLocked(p *proposal) {
	p.counted = true
	f.live++
	f.liveBytes += p.size()
	f.byProposer[p.env.From]++
}

// uncountLocked undoes countLocked for a proposal that ends before it
// was pending (its claim lost, its proposer withdrew it while claimed).
// Called with f.mu held.
func (f *Fulfiller) uncountLocked(p *proposal) {
	if !p.counted {
		return
	}
	p.counted = false
	f.live--
	f.liveBytes -= p.size()
	if f.byProposer[p.env.From]--; f.byProposer[p.env.From] <= 0 {
		delete(f.byProposer, p.env.From)
	}
}

// claimAndAdmit runs on a claim worker: a won claim admits the proposal.
//
// The claim is the record (claimRecord): a proposal claimed is one a
// restart or an adopter answers, whatever the moment of a crash. Except
// for one this member rejects "busy" at once (refusal, looked at before
// the claim): it is claimed without a record (claim, one store write
// instead of three: record, seen key, delete), because under overload
// every busy reject would otherwise cost two more writes to a store that
// the overload already loads. A crash between that claim and the reject
// leaves the proposer without an answer (its own timeout), which for
// "busy" (propose again later) is the same advice; docs/design.md
// ("Restart") says so.
func (f *Fulfiller) claimAndAdmit(j claimJob) {
	p := j.p
	reason, message := j.reason, j.message
	var ours bool
	if reason != "" {
		ours = f.claim(p)
	} else {
		ours = f.claimRecord(p, j.parseErr)
	}
	if !ours {
		f.mu.Lock()
		delete(f.claiming, p.env.ID)
		f.uncountLocked(p)
		f.mu.Unlock()
		return
	}
	if reason != "" {
		// Refused as it was read, even if room was made since: the
		// claim wrote no record to admit it with.
		f.emit(p.event(StageReceived))
		f.mu.Lock()
		delete(f.claiming, p.env.ID)
		withdrawn := p.withdrawnEarly
		f.mu.Unlock()
		f.store.markSeen(p)
		if withdrawn {
			ev := p.event(StageWithdrawn)
			ev.Reason = p.withdrawReason
			f.emit(ev)
			return
		}
		f.answerReject(p, reason, message)
		return
	}
	f.admit(p, j.parseErr)
}

// refusal is the reject (reason and message) of a proposal that cannot be
// admitted now: shutting down, or busy (this member's limits, or the
// group's pending work full). Called with f.mu held.
func (f *Fulfiller) refusal(p *proposal) (reason, message string) {
	switch {
	case f.closing:
		return "other", "fulfiller is shutting down; propose again later"
	case f.live >= f.cfg.MaxPending:
		return "busy", fmt.Sprintf("%d proposals are pending (the limit); propose again later", f.cfg.MaxPending)
	case f.byProposer[p.env.From] >= f.cfg.MaxPendingPerProposer:
		return "busy", fmt.Sprintf("%d of your proposals are pending (the limit per proposer); propose again when one is answered", f.cfg.MaxPendingPerProposer)
	case f.groupFull():
		return "busy", fmt.Sprintf("the group's pending work is full (%d proposals); propose again later", f.group.capacity.Load())
	case f.liveBytes+p.size() > f.cfg.MaxPendingBytes:
		return "busy", fmt.Sprintf("pending proposals hold %d of %d bytes (the limit), too few for this %d-byte one; propose again later", f.liveBytes, f.cfg.MaxPendingBytes, p.size())
	}
	return "", ""
}

// admit takes a proposal that is this member's to answer (counted as
// pending when it was read, see onProposal): it is rejected at once
// (invalid, shutting down), ended if its proposer withdrew it while it was
// claimed, or made pending and queued for a decide worker. It leaves
// f.claiming in the same critical section that makes it pending (or
// answers it), so a withdrawal always finds it in one of the two; p's
// record (written by its claim) is ended with it, and a reject is
// recorded as its answer before it is sent (markAnswered).
func (f *Fulfiller) admit(p *proposal, err error) {
	env := p.env
	f.emit(p.event(StageReceived))

	if err != nil {
		f.mu.Lock()
		delete(f.claiming, env.ID)
		// Ended here, in the same critical section: the start-up scan
		// (resumeOne) must not send its record's reject a second time.
		f.store.markEnded(env.ID)
		f.mu.Unlock()
		f.store.markSeen(p)
		if rej := p.answeredRecord(); rej != nil {
			// Recorded by the claim (phase answered): the line, then the
			// reject under its recorded envelope id.
			ev := p.event(StageRejected)
			ev.Reason, ev.Message = rej.Reason, rej.Message
			f.recordReject(p, ev)
			f.writeReject(p, ev, *rej)
			return
		}
		f.answerReject(p, "invalid", err.Error())
		return
	}

	f.mu.Lock()
	delete(f.claiming, env.ID)
	if p.withdrawnEarly {
		f.uncountLocked(p)
		f.store.markEnded(env.ID)
		f.mu.Unlock()
		f.store.markSeen(p)
		f.dropRecord(p) // durable: a restart does not resume it
		ev := p.event(StageWithdrawn)
		ev.Reason = p.withdrawReason
		f.emit(ev)
		return
	}
	if f.closing {
		// Read before shutdown began, claimed after: shutdown answers
		// the pending store, which this proposal never joins.
		f.uncountLocked(p)
		f.store.markEnded(env.ID)
		f.mu.Unlock()
		f.store.markSeen(p)
		f.answerReject(p, "other", "fulfiller is shutting down; propose again later")
		return
	}
	p.state.Store(int32(StateDeciding))
	f.store.add(p)
	f.armTTLLocked(p)
	f.mu.Unlock()

	// Recorded before it waits for a decide worker (its claim wrote the
	// record): from here on a restart or a peer resumes it, however long
	// the queue.
	//
	// Does not block while fewer than MaxPending proposals are live (the
	// queue has room for all of them); only proposals withdrawn or expired
	// while queued can crowd it, and workers drop those at once. On
	// shutdown the proposal is in the store, so shutdown answers it.
	select {
	case f.jobs <- p:
	case <-f.runCtx.Done():
	}
}

// answeredRecord is the reject p's record holds when its claim recorded it
// answered (an invalid proposal), else nil.
func (p *proposal) answeredRecord() *state.Reject {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.rec == nil || p.rec.Phase != state.Answered || p.rec.Reject == nil {
		return nil
	}
	rej := *p.rec.Reject
	return &rej
}

// addressee applies the package's reading of `to` (see the package doc):
// whether the proposal is ours to handle, and the participant it names as
// target, if any.
func (f *Fulfiller) addressee(env agent.Envelope, tool string) (target string, mine bool) {
	if len(env.To) == 0 || slices.Contains(env.To, f.space.ID()) {
		return "", true
	}
	sawFulfiller := false
	for _, id := range env.To {
		p, ok := f.space.Participant(id)
		if !ok {
			continue
		}
		if tool != "" {
			if _, offers := f.catalog.tool(id, tool); offers {
				return id, true
			}
		}
		if agent.Permits(p.Capabilities, agent.KindRequest, json.RawMessage(`{"method":"tools/call"}`)) {
			sawFulfiller = true
			continue
		}
		return id, true
	}
	if sawFulfiller {
		return "", false
	}
	return "", true // nobody named is here: ours, and routing will say incapable
}

func (f *Fulfiller) onWithdraw(env agent.Envelope) {
	pid := env.CorrelationID.First()
	f.mu.Lock()
	p, ok := f.claiming[pid]
	if ok && env.From == p.env.From {
		// Not decided yet: admit ends it once it is claimed.
		p.withdrawnEarly, p.withdrawReason = true, reasonOf(env.Payload)
		f.mu.Unlock()
		f.log.Debug("proposal withdrawn while it was being claimed", "proposal", pid)
		return
	}
	f.mu.Unlock()
	if !ok {
		p, ok = f.store.get(pid)
	}
	if !ok {
		f.log.Debug("withdrawal of an unknown or finished proposal", "proposal", pid, "from", env.From)
		return
	}
	if env.From != p.env.From {
		f.log.Warn("withdrawal by someone other than the proposer ignored (spoof attempt?)",
			"proposal", pid, "proposer", p.env.From, "from", env.From)
		f.mu.Lock() // a decision worker may be setting p.target
		ev := p.event(StageIgnored)
		f.mu.Unlock()
		ev.Reason, ev.Message = ReasonSpoofedWithdraw, "withdrawal from "+env.From
		f.emit(ev)
		return
	}
	prev, ok := f.transition(p, StateWithdrawn, notAnsweredOrTask)
	if !ok {
		f.log.Info("late withdrawal ignored: the proposal was already answered", "proposal", pid, "state", p.State())
		f.waitWritten(p) // keep the proposal's events in order: fulfilling first
		f.mu.Lock()
		ev := p.event(StageIgnored)
		f.mu.Unlock()
		ev.Reason, ev.Message = "late_withdraw", "withdrawn after it was "+p.State().String()
		f.emit(ev)
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(pid, escalationCancel(p, "withdrawn"))
	}
	ev := p.event(StageWithdrawn)
	ev.Reason = reasonOf(env.Payload)
	if prev == StateTask {
		f.mu.Lock() // its follower may be writing the task's status
		ev.Task = p.task.info()
		f.mu.Unlock()
	}
	f.emit(ev)
	if prev == StateTask {
		// Off the reader: the owner's acknowledgement is awaited.
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.cancelTask(p, p.task)
		}()
	}
}

// onOtherRequest sees other participants' requests: a fulfilment of a
// proposal we hold supersedes ours; a tools/list_changed refreshes discovery.
func (f *Fulfiller) onOtherRequest(env agent.Envelope) {
	var req agent.RPCRequest
	if json.Unmarshal(env.Payload, &req) != nil {
		return
	}
	switch req.Method {
	case agent.MethodToolsListChanged:
		f.catalog.refresh(f.base, env.From)
		return
	case agent.MethodElicitationCreate, agent.MethodCancelled:
		return // asking or telling someone about a proposal is not fulfilling it
	case methodTaskStatus, methodTaskStatusExt:
		if env.AddressedTo(f.space.ID()) {
			f.onTaskStatus(env, req.Params)
		}
		return
	}
	if strings.HasPrefix(req.Method, "notifications/") {
		return // a notification (a tool server's progress, say) fulfils nothing
	}
	f.supersede(env, "fulfilled by "+env.From)
}

// onOtherReject: someone else already said no to a proposal we hold (an
// approver answering directly, or another fulfiller). The proposer has its
// answer; a second one from us would break rule 2.
func (f *Fulfiller) onOtherReject(env agent.Envelope) {
	f.supersede(env, "rejected by "+env.From+" ("+reasonOf(env.Payload)+")")
}

func (f *Fulfiller) supersede(env agent.Envelope, why string) {
	p, ok := f.store.get(env.CorrelationID.First())
	if !ok {
		return
	}
	prev, ok := f.transition(p, StateSuperseded, notAnswered)
	if !ok {
		if s := p.State(); s == StateFulfilling || s == StateTask {
			f.log.Warn("proposal answered by another participant after our fulfilment request", "proposal", p.env.ID, "by", env.From, "state", s)
		}
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, escalationCancel(p, "superseded"))
	}
	ev := p.event(StageSuperseded)
	ev.By, ev.Message = []string{env.From}, why
	ev.KnownFulfiller = f.knownFulfiller(env.From)
	if !ev.KnownFulfiller {
		f.log.Warn("a proposal was ended by a participant that is not a known fulfiller; nobody waits for our answer any more",
			"proposal", p.env.ID, "by", env.From, "how", why)
	}
	f.emit(ev)
}

func (f *Fulfiller) onPresence(env agent.Envelope) {
	var pr struct {
		Event       string `json:"event"`
		Participant struct {
			ID string `json:"id"`
		} `json:"participant"`
	}
	if json.Unmarshal(env.Payload, &pr) != nil || pr.Participant.ID == "" || pr.Participant.ID == f.space.ID() {
		return
	}
	switch pr.Event {
	case "join":
		f.catalog.refresh(f.base, pr.Participant.ID)
		if who, ok := f.space.Participant(pr.Participant.ID); ok {
			f.checkVetoHolders([]agent.Participant{who})
		}
		f.releaseHeld(pr.Participant.ID)
	case "leave":
		f.catalog.drop(pr.Participant.ID)
		f.mu.Lock()
		var orphans []*proposal
		for _, p := range f.byRequest {
			if p.target == pr.Participant.ID {
				orphans = append(orphans, p)
			}
		}
		f.mu.Unlock()
		for _, p := range orphans {
			f.ownerLeft(p)
		}
	}
}

// onImpersonation handles an envelope in this fulfiller's name that it did
// not send (docs/design.md rule 14): a forged reject or answer. It is logged and
// counted, and the proposer of the pending proposal it names is told, in
// a status chat, that it was not this fulfiller's — once per proposal, so
// that a flood of forgeries makes one chat each, not thousands.
func (f *Fulfiller) onImpersonation(env agent.Envelope) {
	ev := Event{Stage: StageImpersonated, Envelope: env.Kind, Message: env.ID}
	var p *proposal
	if pid := env.CorrelationID.First(); pid != "" {
		if q, ok := f.store.get(pid); ok {
			p = q
		} else {
			f.mu.Lock()
			p = f.claiming[pid]
			f.mu.Unlock()
		}
	}
	f.log.Warn("an envelope in this fulfiller's name that it did not send (impersonation)",
		"envelope", env.ID, "kind", env.Kind, "to", env.To, "correlation_id", env.CorrelationID.First())
	// The first about a proposal joins it (a decision-log line); the
	// rest are counted only.
	first := p != nil && p.impersonated.CompareAndSwap(false, true)
	if first {
		g := p.governor()
		ev.ProposalID, ev.DecisionID, ev.Revision, ev.Proposer, ev.Method, ev.Tool = p.env.ID, g.id, g.revision, p.env.From, p.method, p.tool
	}
	f.emit(ev)
	if first {
		f.sendImpersonated(p, env)
	}
}
