package fulfill

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// handle turns one frame of the space into the core's events (or the
// catalog's, or an ignored line). It runs on Run's goroutine only.
func (s *Fulfiller) handle(env agent.Envelope) {
	if env.From == s.space.ID() {
		// The agent drops our own echoes: one in our name that it
		// delivers is someone else's (rule 14).
		s.onImpersonation(env)
		return
	}
	switch env.Kind {
	case agent.KindProposal:
		s.onProposal(env)
	case agent.KindWithdraw:
		s.onWithdraw(env)
	case agent.KindResponse:
		s.onResponse(env)
	case agent.KindRequest:
		s.onOtherRequest(env)
	case agent.KindReject:
		s.post(lifecycle.SupersededBy{ID: env.CorrelationID.First(), By: env.From, Why: "rejected by " + env.From + " (" + reasonOf(env.Payload) + ")"})
	case agent.KindWelcome:
		if env.AddressedTo(s.space.ID()) {
			s.welcomed()
		}
	case agent.KindPresence:
		s.onPresence(env)
	case agent.KindError:
		s.onRefusal(env)
	}
}

func (s *Fulfiller) onProposal(env agent.Envelope) {
	if env.ID == "" || env.From == "" {
		s.log.Warn("proposal without id or from skipped", "id", env.ID, "from", env.From)
		return
	}
	s.decideAddressee(env, true)
}

// decideAddressee hands the core a proposal that is ours (see
// addresseeOf), or sets aside one addressed to another fulfiller. One
// addressed to a participant that could be either, whose tools/list is
// being asked (it joined, or we did, a moment ago), waits for that
// discovery when mayWait (at most Config.DiscoveryWait, off the reader:
// see deferProposal), and is decided then.
func (s *Fulfiller) decideAddressee(env agent.Envelope, mayWait bool) {
	c, err := parsePayload(env.Payload)
	target, mine, asking := addresseeOf(s.space, s.catalog, env, c.tool)
	if !mine && len(asking) > 0 && mayWait {
		s.deferProposal(env, asking)
		return
	}
	if !mine {
		s.log.Debug("proposal addressed to another fulfiller; left alone", "proposal", env.ID, "to", env.To)
		s.emit(Event{Stage: StageIgnored, ProposalID: env.ID, Proposer: env.From, Method: c.method, Tool: c.tool,
			Reason: "addressed_elsewhere", Message: fmt.Sprintf("addressed to %v", env.To)})
		return
	}
	raw := env.Raw
	if raw == nil {
		raw, _ = agent.Encode(env)
	}
	ev := lifecycle.Proposed{ID: env.ID, From: env.From, Envelope: raw, Params: c.params, Size: len(raw),
		FrontEnd: FrontEndMEW, Method: c.method, Tool: c.tool, Addressee: target}
	if err != nil {
		ev.Invalid = err.Error()
	}
	s.post(ev)
}

// addresseeOf applies the package's reading of `to` (see the package
// doc): whether the proposal is ours to handle, and the participant it
// names as target, if any.
//
// asking lists the addressees that may send tools/call requests (so are
// taken for fulfillers) whose tools/list is being asked: when the
// proposal is theirs for now, it may be ours once that list is known.
func addresseeOf(space Space, cat *catalog, env agent.Envelope, tool string) (target string, mine bool, asking []string) {
	if len(env.To) == 0 || slices.Contains(env.To, space.ID()) {
		return "", true, nil
	}
	sawFulfiller := false
	for _, id := range env.To {
		p, ok := space.Participant(id)
		if !ok {
			continue
		}
		if tool != "" {
			if _, offers := cat.tool(id, tool); offers {
				return id, true, nil
			}
		}
		if agent.Permits(p.Capabilities, agent.KindRequest, json.RawMessage(`{"method":"tools/call"}`)) {
			sawFulfiller = true
			if tool != "" && cat.askingOf(id) {
				asking = append(asking, id)
			}
			continue
		}
		return id, true, nil
	}
	if sawFulfiller {
		return "", false, asking
	}
	return "", true, nil // nobody named is here: ours, and routing will say incapable
}

// deferProposal waits, off the reader, for the tools/list of the
// addressees being asked (at most Config.DiscoveryWait), then hands env
// back to the reader (Run's undecided), which decides it without waiting
// again. A withdrawal meanwhile from its proposer drops it (onWithdraw):
// the core never hears of a proposal withdrawn before it was ours.
func (s *Fulfiller) deferProposal(env agent.Envelope, asking []string) {
	if _, dup := s.deferred[env.ID]; dup {
		return // the same id again while it waits: rule 5, as the core would
	}
	s.deferred[env.ID] = env.From
	s.log.Debug("proposal addressed to a participant whose tools are being asked; decided once they are known", "proposal", env.ID, "to", env.To)
	s.deferWG.Add(1)
	go func() {
		defer s.deferWG.Done()
		ctx, cancel := context.WithTimeout(s.base, s.cfg.DiscoveryWait)
		s.catalog.waitAsked(ctx, asking)
		cancel()
		select {
		case s.undecided <- env:
		case <-s.base.Done():
		}
	}()
}

// undecidedBack decides a proposal deferProposal held, unless its
// proposer withdrew it meanwhile.
func (s *Fulfiller) undecidedBack(env agent.Envelope) {
	from, ok := s.deferred[env.ID]
	delete(s.deferred, env.ID)
	if !ok || from == "" {
		return // withdrawn while it waited
	}
	s.decideAddressee(env, false)
}

// onWithdraw hands the core a withdrawal; one of a proposal held while
// its addressee's tools are asked (deferProposal), from its proposer,
// drops that proposal there and then.
func (s *Fulfiller) onWithdraw(env agent.Envelope) {
	id := env.CorrelationID.First()
	if from, ok := s.deferred[id]; ok && from != "" && from == env.From {
		s.deferred[id] = ""
		s.emit(Event{Stage: StageIgnored, ProposalID: id, Proposer: env.From, Reason: "withdrawn",
			Message: "withdrawn while its addressee's tools were being asked, before it was ours"})
		return
	}
	s.post(lifecycle.WithdrawnBy{ID: id, From: env.From, Reason: reasonOf(env.Payload)})
}

// onResponse hands the core a response to one of its fulfilment
// requests. The gateway does not authenticate from: the core takes only
// the target's answer, with the request's JSON-RPC id or none (rule 12);
// a second, different answer to a request already answered means one of
// them was forged (checkAnswered). The response is placed on the loop's
// goroutine (Loop.Match: one hand-off, the reader does not wait for the
// loop), by matchResponse.
func (s *Fulfiller) onResponse(env agent.Envelope) {
	cid := env.CorrelationID.First()
	if s.catalog.observe(s.base, env) {
		return // an answer to our discovery
	}
	if err := s.loop.Match(s.base, func(c *lifecycle.Core) []lifecycle.Event { return s.matchResponse(c, cid, env) }); err != nil {
		s.log.Debug("response not taken: stopping", "envelope", env.ID)
	}
}

// matchResponse is onResponse on the loop's goroutine: the events that
// response env to request cid makes for core c. What it does besides
// returns at once (observers, the shell's leaf-locked caches), as
// Loop.Match asks.
func (s *Fulfiller) matchResponse(c *lifecycle.Core, cid string, env agent.Envelope) []lifecycle.Event {
	p, ok := c.ByRequest(cid)
	if !ok || p.Request == nil {
		var out []lifecycle.Event
		if a := s.cfg.Approvals; a != nil {
			// An approver's answer to one of the core's prompts, maybe:
			// the core matches it (and drops what is not one), under
			// the keys in force now.
			if a.CurrentKeys != nil {
				out = append(out, lifecycle.KeysChanged{Keys: a.CurrentKeys()})
			}
			out = append(out, answerOf(cid, env))
		}
		s.peerResps.keep(cid, env)
		s.checkAnswered(cid, env)
		return out
	}
	r := lifecycle.Responded{RequestID: cid, From: env.From}
	if env.From != p.Request.Target {
		// Not taken; logged with its raw payload (a reference-SDK
		// proposer may have taken it), once per proposal.
		r.Payload = env.Payload
		r.Message = fmt.Sprintf("response %s to fulfilment request %s came from %s, not %s", env.ID, cid, env.From, p.Request.Target)
		return []lifecycle.Event{r}
	}
	resp, err := agent.DecodeAnswer(env.Payload, strconv.AppendInt(nil, p.Request.RPCID, 10))
	switch {
	case errors.Is(err, agent.ErrWrongRPCID):
		r.HasRPCID, r.RPCID = true, wrongRPCID(resp.ID, p.Request.RPCID)
		r.Message = fmt.Sprintf("response %s to fulfilment request %s: %v", env.ID, cid, err)
		return []lifecycle.Event{r}
	case err != nil:
		s.emit(Event{Stage: StageIgnored, ProposalID: p.ID, DecisionID: p.DecisionID, Proposer: p.From, Method: p.Method, Tool: p.Tool,
			Target: p.Request.Target, Reason: ReasonMalformedResponse, By: []string{env.From},
			Message: fmt.Sprintf("response %s to fulfilment request %s: %v", env.ID, cid, err)})
		return nil
	}
	if len(resp.ID) > 0 && string(resp.ID) != "null" {
		r.HasRPCID, r.RPCID = true, p.Request.RPCID
	}
	if p.Request.Task && resp.Error == nil && s.wire.taskCreated(env.From, resp.Result, s.cfg.Clock.Now()) {
		st, spec, _ := taskHandle(resp.Result)
		r.TaskID, r.TaskStatus, r.TaskSpec, r.TaskPoll = st.TaskID, st.Status, spec, st.poll()
	}
	if r.TaskID == "" {
		r.Result = resp.Result
		if resp.Error != nil {
			r.Error = agent.MustPayload(resp.Error)
		}
	}
	s.answered.Add(cid, &answeredResponse{ev: Event{ProposalID: p.ID, DecisionID: p.DecisionID, Proposer: p.From, Method: p.Method, Tool: p.Tool, Target: p.Request.Target},
		target: p.Request.Target, response: env.ID, digest: sha256.Sum256(env.Payload)})
	return []lifecycle.Event{r}
}

// wrongRPCID is a JSON-RPC id the core can compare: the answer's when it
// is an integer, else one that is not the request's.
func wrongRPCID(id json.RawMessage, request int64) int64 {
	if n, err := strconv.ParseInt(string(bytes.TrimSpace(id)), 10, 64); err == nil {
		return n
	}
	return request + 1
}

// checkAnswered looks at a response to a fulfilment request that is no
// longer in flight: the same answer again is harmless (a re-delivery), a
// different one from the tool owner means one of the two was forged.
func (s *Fulfiller) checkAnswered(cid string, env agent.Envelope) {
	a, ok := s.answered.Get(cid)
	if !ok || env.From != a.target || sha256.Sum256(env.Payload) == a.digest {
		return
	}
	if a.conflicted {
		return // recorded once per request: a flood of forgeries must not flood the logs
	}
	a.conflicted = true
	s.log.Warn("a second, different response to an answered fulfilment request: one of them was forged (spoof attempt)",
		"proposal", a.ev.ProposalID, "target", a.target, "request", cid, "counted", a.response, "conflicting", env.ID)
	ev := a.ev
	ev.Stage, ev.Reason, ev.By, ev.Result = StageIgnored, ReasonConflictingResponse, []string{env.From}, env.Payload
	ev.Message = fmt.Sprintf("response %s to fulfilment request %s differs from response %s, which ended the proposal; one of them was forged", env.ID, cid, a.response)
	s.emit(ev)
}

// onOtherRequest sees other participants' requests: a fulfilment of a
// proposal we hold supersedes ours; a tools/list_changed refreshes
// discovery; a task's status notification wakes its follower.
func (s *Fulfiller) onOtherRequest(env agent.Envelope) {
	var req agent.RPCRequest
	if agent.Unmarshal(env.Payload, &req) != nil {
		return
	}
	switch req.Method {
	case agent.MethodToolsListChanged:
		s.catalog.refresh(s.base, env.From)
		return
	case agent.MethodElicitationCreate, agent.MethodCancelled:
		return // asking or telling someone about a proposal is not fulfilling it
	case methodTaskStatus, methodTaskStatusExt:
		if env.AddressedTo(s.space.ID()) {
			s.wire.taskNotice(env)
		}
		return
	}
	if strings.HasPrefix(req.Method, "notifications/") {
		return // a notification (a tool server's progress, say) fulfils nothing
	}
	s.post(lifecycle.SupersededBy{ID: env.CorrelationID.First(), By: env.From, Why: "fulfilled by " + env.From})
}

// welcomed: this member's (re)connect. The catalog starts again, and the
// core hears who left and who is here: leaves sent while the link was
// down reached nobody here.
func (s *Fulfiller) welcomed() {
	s.catalog.reset()
	now := map[string]bool{}
	var roster []string
	for _, p := range s.space.Roster() {
		now[p.ID] = true
		roster = append(roster, p.ID)
		s.catalog.refresh(s.base, p.ID)
	}
	// The gateway replays nothing: the core sends its open prompts
	// again to whoever is here now.
	s.post(lifecycle.Roster{Present: roster})
	for id := range s.present {
		if !now[id] {
			s.post(lifecycle.ParticipantLeft{ID: id})
		}
	}
	for id := range now {
		s.post(lifecycle.ParticipantJoined{ID: id, Welcome: true})
	}
	s.present = now
}

func (s *Fulfiller) onPresence(env agent.Envelope) {
	var pr struct {
		Event       string `json:"event"`
		Participant struct {
			ID string `json:"id"`
		} `json:"participant"`
	}
	if agent.Unmarshal(env.Payload, &pr) != nil || pr.Participant.ID == "" || pr.Participant.ID == s.space.ID() {
		return
	}
	id := pr.Participant.ID
	switch pr.Event {
	case "join":
		s.present[id] = true
		s.catalog.refresh(s.base, id)
		if who, ok := s.space.Participant(id); ok {
			s.checkVetoHolders([]agent.Participant{who})
		}
		s.post(lifecycle.ParticipantJoined{ID: id})
	case "leave":
		delete(s.present, id)
		s.catalog.drop(id)
		s.post(lifecycle.ParticipantLeft{ID: id})
	}
}

// onRefusal: the gateway refused one of our envelopes (system/error
// correlated to it). A refused reject is reported undelivered by the
// wire; a refused fulfilment request never reached the tool owner, so
// the core is told it was not written (the proposal is rejected "other").
func (s *Fulfiller) onRefusal(env agent.Envelope) {
	id, kind, ok := s.wire.refused(s.base, env)
	if !ok || kind != agent.KindRequest {
		return // a refused reject: the wire reported it undelivered
	}
	s.post(lifecycle.Refused{ID: id, EnvelopeID: env.CorrelationID.First()})
}

// onImpersonation handles an envelope in this fulfiller's name that it
// did not send (docs/design.md rule 14): logged and counted, and the
// proposer of the pending proposal it names is told, once per proposal.
func (s *Fulfiller) onImpersonation(env agent.Envelope) {
	ev := Event{Stage: StageImpersonated, Envelope: env.Kind, Message: env.ID}
	s.log.Warn("an envelope in this fulfiller's name that it did not send (impersonation)",
		"envelope", env.ID, "kind", env.Kind, "to", env.To, "correlation_id", env.CorrelationID.First())
	var p lifecycle.Proposal
	var held bool
	if pid := env.CorrelationID.First(); pid != "" {
		s.ask(s.base, func(c *lifecycle.Core) { p, held = c.Get(pid) })
	}
	first := held && !s.told.Contains(p.ID)
	if first {
		s.told.Add(p.ID, struct{}{})
		ev.ProposalID, ev.DecisionID, ev.Proposer, ev.Method, ev.Tool = p.ID, p.DecisionID, p.From, p.Method, p.Tool
		if p.Decision != nil {
			ev.Revision = p.Decision.Revision
		}
	}
	s.emit(ev)
	if first {
		s.wire.impersonated(s.base, p.ID, p.From, env)
	}
}
