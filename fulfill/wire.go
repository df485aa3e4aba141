package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies"
)

// wire is lifecycle.Wire over a Space and an Escalator: the envelopes
// of the core's effects (rejects and their chats, fulfilment requests,
// cancellations, relays, status chats). The ids on the wire are the
// effect's (the recorded ones), so an effect carried out again after a
// crash writes the same envelopes.
type wire struct {
	space Space
	esc   Escalator // nil: escalation is not configured
	// approvals: the core's own escalation (Config.Approvals): the wire
	// writes its prompts and cancellations, reports its steps, makes
	// its grants.
	approvals *Approvals
	grants    *grantstore.Registry
	cfg       wireConfig
	hooks     wireHooks
	log       *slog.Logger

	// sent maps the envelope ids of recent rejects and fulfilment
	// requests to what they answered, for refused (deliver.go's
	// rejectLog and byRequest).
	sent *lru.Cache[string, *wireSent]
	// asks keeps what an escalation needs after Ask returned: the
	// status chat's deadline_by, and the grant its approvers chose,
	// made once the proposal's request goes out. Bounded: a proposal
	// that ends without a word to the wire (superseded, say) is
	// forgotten in turn.
	asks *lru.Cache[string, *wireAsk]

	mu      sync.Mutex
	waiting map[uint64]*ackWait // PromptRecorded and ApprovalRecorded awaiting their Acked
	// escalating: the Escalate calls running, by proposal; wg waits
	// for them.
	escalating map[string]escalateCall
	wg         sync.WaitGroup
	tokens     atomic.Uint64

	// Task followers, by owner and task id (taskNotice), and what the
	// reader saw of each task handle, by the task-augmented request's
	// envelope id (taskCreated).
	followers map[string]*taskFollower
	handles   *lru.Cache[string, wireTaskHandle]
}

// wireConfig is what the wire needs of the Fulfiller's Config.
type wireConfig struct {
	SpaceID string // names grants (makeGrant's id)
	// FulfillTimeout bounds one task request (tasks/get, tasks/result).
	FulfillTimeout time.Duration
	// Tracked bounds what the wire remembers per proposal (escalations,
	// task handles) and per envelope (refusals); 0: rejectsTracked.
	Tracked int
}

// wireEvents is what the shell's journal and observers hear from the
// wire: what was written, what could not be, and the other events.
type wireEvents interface {
	// written: the envelope whose decision-log line the journal wrote
	// ahead (rejected, fulfilling, fulfilled for a relay) was written;
	// the journal announces that line to the observers that only watch.
	written(proposalID, envelopeID string)
	// undelivered: an answer was not written (reason
	// UndeliveredNotWritten) or the gateway refused it
	// (UndeliveredRefused); kind is the lost envelope's kind. The shell
	// reports it as a StageUndelivered event with the proposal's fields.
	undelivered(proposalID, kind, reason, detail string)
	// observe: an event that is no decision-log line of the core
	// (StageGranted), with the fields the wire knows filled in.
	observe(Event)
}

// wireHooks are what the shell gives the wire.
type wireHooks struct {
	events wireEvents
	// post hands the core an event (Loop.Post): PromptRecorded,
	// ApprovalRecorded and the Verdict of the escalator.
	post func(ctx context.Context, ev lifecycle.Event) error
	// method is the JSON-RPC method of proposal id's call (its
	// Proposal.Method), which SendRequest does not carry.
	method func(proposalID string) string
	// describe is what the humans are shown of p's tool: the policy's
	// input.tool for it (toolInput), and the tool's input schema from
	// its owner's tools/list when known.
	describe func(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage)
}

// wireSent is a reject or fulfilment request handed to the link.
type wireSent struct {
	proposalID, kind string
	written          chan struct{} // closed once the write's outcome has been reported
}

// wireAsk is an escalation the wire handed to the Escalator.
type wireAsk struct {
	proposal lifecycle.Proposal // as Ask carried it
	round    uint64             // Ask.Round: a verdict of another escalation leaves it alone
	decision storedDecision
	// The grant the approvers chose (Verdict.Grant > 0), until the
	// proposal's request goes out; content is their form content.
	grant    time.Duration
	evidence *grants.Evidence
	by       []string
	content  json.RawMessage
	approved bool
}

// escalateCall is one Escalate call running for a proposal.
type escalateCall struct {
	round    uint64        // its Ask.Round
	returned chan struct{} // closed when Escalate returns
}

type ackWait struct {
	proposalID string
	done       chan error // buffered, 1
}

// newWire makes the wire. esc and reg may be nil.
func newWire(space Space, esc Escalator, reg *grantstore.Registry, cfg wireConfig, hooks wireHooks, log *slog.Logger) *wire {
	if cfg.Tracked <= 0 {
		cfg.Tracked = rejectsTracked
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sent, err := lru.New[string, *wireSent](cfg.Tracked)
	if err != nil {
		panic(err) // only for a size below 1
	}
	asks, _ := lru.New[string, *wireAsk](cfg.Tracked)
	handles, _ := lru.New[string, wireTaskHandle](cfg.Tracked)
	return &wire{space: space, esc: esc, grants: reg, cfg: cfg, hooks: hooks, log: log,
		sent: sent, asks: asks, waiting: map[uint64]*ackWait{}, escalating: map[string]escalateCall{}, followers: map[string]*taskFollower{}, handles: handles}
}

var _ lifecycle.Wire = (*wire)(nil)

// sendAndGet writes env, bounded by sendTimeout under ctx.
func (w *wire) sendAndGet(ctx context.Context, env agent.Envelope) (agent.Envelope, error) {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return w.space.Send(ctx, env)
}

func (w *wire) send(ctx context.Context, env agent.Envelope) error {
	_, err := w.sendAndGet(ctx, env)
	return err
}

// sendOrQueue writes env through the Space's Queuer when it has one (a
// cancellation lost in an outage would leave a tool owner working on a
// call nobody waits for), else as any envelope. what names it in logs.
func (w *wire) sendOrQueue(ctx context.Context, env agent.Envelope, what string, attrs ...any) error {
	q, ok := w.space.(Queuer)
	if !ok {
		if err := w.send(ctx, env); err != nil {
			w.log.Warn(what+" not sent", append(attrs, "err", err)...)
			return err
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	_, queued, err := q.SendOrQueue(ctx, env)
	switch {
	case err != nil:
		w.log.Warn(what+" not sent", append(attrs, "err", err)...)
	case queued:
		w.log.Warn(what+" kept until the link is back", attrs...)
	}
	return err
}

// track registers an envelope about to be written, for refused: the
// refusal may be read before Send returns, and waits for written.
func (w *wire) track(envelopeID, proposalID, kind string) *wireSent {
	s := &wireSent{proposalID: proposalID, kind: kind, written: make(chan struct{})}
	w.sent.Add(envelopeID, s)
	return s
}

// SendReject writes the mcp/reject to the proposer, correlated to the
// proposal, then, when there is a message, the chat explaining it,
// correlated to the reject (answer.go's writeReject). The error is the
// reject's write's; the chat is best effort.
func (w *wire) SendReject(ctx context.Context, r lifecycle.SendReject) error {
	w.forgetAsk(r.ID)
	env := agent.Envelope{
		ID:            r.EnvelopeID,
		To:            []string{r.To},
		Kind:          agent.KindReject,
		CorrelationID: agent.CorrelationIDs{r.ID},
		Payload:       agent.MustPayload(rejectPayload{Reason: r.Reason}),
	}
	sent := w.track(env.ID, r.ID, agent.KindReject)
	out, err := w.sendAndGet(ctx, env)
	if err != nil {
		w.sent.Remove(env.ID)
		close(sent.written)
		w.log.Error("reject not delivered: not written", "proposal", r.ID, "reason", r.Reason, "err", err)
		w.hooks.events.undelivered(r.ID, agent.KindReject, UndeliveredNotWritten, err.Error())
		return fmt.Errorf("reject %s of proposal %s: %w", r.EnvelopeID, r.ID, err)
	}
	w.hooks.events.written(r.ID, r.EnvelopeID)
	close(sent.written)
	if r.Message == "" {
		return nil
	}
	if _, err := w.sendAndGet(ctx, agent.Envelope{
		To:            []string{r.To},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{out.ID},
		Payload:       agent.MustPayload(chatPayload{Text: r.Message, Format: "plain"}),
	}); err != nil {
		w.log.Warn("reject explanation not sent", "proposal", r.ID, "err", err)
	}
	return nil
}

// SendRequest writes the fulfilment mcp/request (fulfil.go's
// sendRequest): to the route, correlated to the proposal unless
// task-augmented, the proposal's method with its final params (a
// tools/call's through requestParams). A write the link lost midway
// (agent.ErrSessionLost) may have reached the owner: it counts as
// written, and its response or the deadline ends the proposal. The
// grant its approvers chose is made just before the write.
func (w *wire) SendRequest(ctx context.Context, r lifecycle.SendRequest) error {
	if _, ok := w.space.Participant(r.To); !ok {
		// The gateway replays nothing: written now, it would be lost.
		// The core holds it until its owner is back (or the grace ends).
		return fmt.Errorf("fulfilment request %s of proposal %s to %s: %w", r.EnvelopeID, r.ID, r.To, lifecycle.ErrAway)
	}
	method := w.hooks.method(r.ID)
	payload := agent.RPCRequest{JSONRPC: "2.0", ID: json.RawMessage(strconv.FormatInt(r.RPCID, 10)), Method: method, Params: r.Params}
	env := agent.Envelope{
		ID:            r.EnvelopeID,
		To:            []string{r.To},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{r.ID},
	}
	if method == agent.MethodToolsCall {
		payload.Params = requestParams(r.Params, r.Task, r.TaskTTL)
	}
	if r.Task {
		// Not named after the proposal: its answer is a task handle,
		// which an SDK proposer would take for the call's result.
		env.CorrelationID = nil
	}
	env.Payload = agent.MustPayload(payload)
	// The grant the approvers chose is made with the committed call,
	// before it goes out: the proposer's next call may
	// follow its answer at once, and must find the grant.
	w.makeGrant(ctx, r)
	sent := w.track(env.ID, r.ID, agent.KindRequest)
	err := w.send(ctx, env)
	if err != nil && !errors.Is(err, agent.ErrSessionLost) {
		w.sent.Remove(env.ID)
		close(sent.written)
		w.forgetAsk(r.ID)
		w.log.Error("fulfilment request not delivered: not written", "proposal", r.ID, "target", r.To, "err", err)
		w.hooks.events.undelivered(r.ID, agent.KindRequest, UndeliveredNotWritten, err.Error())
		return fmt.Errorf("fulfilment request %s of proposal %s: %w", r.EnvelopeID, r.ID, err)
	}
	if err != nil {
		w.log.Warn("fulfilment request may not have been sent; waiting for its response or the fulfil timeout", "proposal", r.ID, "target", r.To, "err", err)
	}
	w.hooks.events.written(r.ID, r.EnvelopeID)
	close(sent.written)
	return nil
}

// SendCancel tells the tool owner to stop working on the fulfilment
// request (fulfil.go's cancelRequest).
func (w *wire) SendCancel(ctx context.Context, c lifecycle.SendCancel) {
	params := agent.MustPayload(cancelledParams{RequestID: c.RPCID, Reason: c.Reason})
	env := agent.Envelope{
		To:            []string{c.To},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{c.RequestEnvelopeID},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", Method: agent.MethodCancelled, Params: params}),
	}
	_ = w.sendOrQueue(ctx, env, "cancellation", "proposal", c.ID, "target", c.To)
}

// refused handles a gateway's system/error about one of the wire's
// rejects or fulfilment requests (deliver.go's onRefusal): it waits for
// the write's outcome to be reported, then reports the envelope
// undelivered. It returns the proposal and the refused envelope's kind;
// ok is false when env refuses nothing of the wire's. A refused
// fulfilment request never reached its owner: the shell ends the
// proposal (fulfill rejects it "other", "the gateway refused the
// fulfilment request").
func (w *wire) refused(ctx context.Context, env agent.Envelope) (proposalID, kind string, ok bool) {
	r, ok := agent.RefusalOf(env, w.space.ID())
	if !ok {
		return "", "", false
	}
	s, ok := w.sent.Peek(r.EnvelopeID)
	if !ok {
		return "", "", false
	}
	w.sent.Remove(r.EnvelopeID)
	select {
	case <-s.written:
	case <-ctx.Done():
	}
	what := "reject"
	if s.kind == agent.KindRequest {
		what = "fulfilment request"
	}
	w.log.Error(what+" not delivered: refused by the gateway", "proposal", s.proposalID, "err", r.String())
	w.hooks.events.undelivered(s.proposalID, s.kind, UndeliveredRefused, r.String())
	return s.proposalID, s.kind, true
}

// Status writes a status chat (status.go's sendStatus): a chat to the
// proposer, correlated to the proposal, its text for people and
// _meta[StatusMetaKey] for programs. Best effort.
func (w *wire) Status(ctx context.Context, s lifecycle.Status) {
	st := ProposalStatus{Version: 1, Proposal: s.ID}
	var text string
	switch s.Stage {
	case lifecycle.StatusEscalated:
		st.Stage, st.Approvers, st.Deadline, st.Quorum = StatusEscalated, s.Approvers, s.Deadline.UTC(), max(s.Quorum, 1)
		if a, ok := w.asks.Peek(s.ID); ok && a.decision.DeadlineByProposer {
			st.DeadlineBy = "proposer"
		} else if sd, ok := policyDecision(s.Decision); ok && sd.DeadlineByProposer {
			st.DeadlineBy = "proposer"
		}
		text = fmt.Sprintf("Waiting for approval by %s (%d needed) until %s.", strings.Join(st.Approvers, ", "), st.Quorum, st.Deadline.Format(time.RFC3339))
	case lifecycle.StatusQueued:
		st.Stage = StatusQueued
		text = "Allowed; waiting for a free fulfilment slot."
	case lifecycle.StatusTask:
		info := w.taskInfo(s)
		st.Stage, st.Task, st.Deadline = StatusTask, info, info.Deadline.UTC()
		text = fmt.Sprintf("Running as task %s at %s (%s) until %s.", info.ID, s.Target, info.Status, st.Deadline.Format(time.RFC3339))
	default:
		return
	}
	w.statusChat(ctx, s.ID, s.To, st, text)
}

// impersonated tells the proposer of proposalID that env, in this
// fulfiller's name, was not sent by it (status.go's sendImpersonated):
// whether or not status chats are on (rule 14). Best effort.
func (w *wire) impersonated(ctx context.Context, proposalID, proposer string, env agent.Envelope) {
	me := w.space.ID()
	st := ProposalStatus{Version: 1, Proposal: proposalID, Stage: StatusImpersonated, Forged: env.ID, ForgedKind: env.Kind}
	text := fmt.Sprintf("The %s in %s's name (envelope %s) was not sent by %s: someone else wrote it. Your proposal is still pending; %s's answer follows.",
		env.Kind, me, env.ID, me, me)
	w.statusChat(ctx, proposalID, proposer, st, text)
}

func (w *wire) statusChat(ctx context.Context, proposalID, to string, st ProposalStatus, text string) {
	chat := agent.Envelope{
		To:            []string{to},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{proposalID},
		Payload:       agent.MustPayload(statusChat{Text: text, Format: "plain", Meta: map[string]ProposalStatus{StatusMetaKey: st}}),
	}
	if err := w.send(ctx, chat); err != nil {
		w.log.Warn("status chat not sent", "proposal", proposalID, "stage", st.Stage, "err", err)
	}
}

// Ask hands the proposal to the Escalator (escalate.go's askHumans),
// with the prompts and approvals recorded so far: the Escalator asks the
// open prompts again with the same ids and counts the approvals as
// given. Each prompt and approval is recorded through the core
// (PromptRecorded, ApprovalRecorded) before the Escalator acts on it;
// the verdict comes back to the core as a Verdict.
func (w *wire) Ask(ctx context.Context, a lifecycle.Ask) {
	if w.esc == nil {
		// Nobody can ask the humans here (a record resumed from a
		// member that could): rejected "policy" at once, as fulfill's
		// escalate and resumeOne do, rather than at the deadline.
		w.postVerdict(ctx, lifecycle.Verdict{ID: a.ID, Round: a.Round, Reason: "policy", Message: noEscalatorMessage})
		return
	}
	p := a.Proposal
	sd, _ := policyDecision(p.Decision)
	env, err := agent.Decode(p.Envelope)
	if err != nil {
		// The proposal was decoded when it was read; its record carries
		// the frame as received. Fail closed: nobody is asked about a
		// proposal that cannot be shown.
		w.log.Error("escalated proposal cannot be decoded; nobody is asked", "proposal", a.ID, "err", err)
		w.postVerdict(ctx, lifecycle.Verdict{ID: a.ID, Round: a.Round, Reason: decision.ReasonOther, Message: "the proposal cannot be shown to an approver"})
		return
	}
	w.asks.Add(a.ID, &wireAsk{proposal: p, round: a.Round, decision: sd})
	esc := Escalation{Proposal: env, DecisionID: p.DecisionID, Method: p.Method, Params: p.Params, Target: sd.Route,
		Decision: sd.decision(), Deadline: a.Deadline, DeadlineByProposer: sd.DeadlineByProposer,
		Prompts: p.Prompts, Approvals: p.Approvals}
	if p.Tool != "" && w.hooks.describe != nil {
		esc.Tool, esc.InputSchema = w.hooks.describe(&p)
	}
	esc.RecordPrompt = func(pr state.Prompt) error {
		return w.record(ctx, a.ID, func(token uint64) lifecycle.Event {
			return lifecycle.PromptRecorded{ID: a.ID, Prompt: pr, Token: token, Round: a.Round}
		})
	}
	esc.RecordApproval = func(ap state.Approval) error {
		return w.record(ctx, a.ID, func(token uint64) lifecycle.Event {
			return lifecycle.ApprovalRecorded{ID: a.ID, Approval: ap, Token: token, Round: a.Round}
		})
	}
	// Off the proposal's lane: an Escalator may record its first
	// prompt before Escalate returns, and the core's answer to that
	// (Acked) comes through the same lane. CancelAsk waits for it to
	// return, so the Escalator never hears Cancel before Escalate.
	returned := make(chan struct{})
	w.mu.Lock()
	w.escalating[a.ID] = escalateCall{round: a.Round, returned: returned}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(returned)
		w.esc.Escalate(ctx, esc, func(v Verdict) { w.verdict(ctx, a.ID, a.Round, v) })
	}()
}

// wait waits for the Escalate calls still running (Ask); they end with
// the context the Loop gave them.
func (w *wire) wait() { w.wg.Wait() }

// noEscalatorMessage is the reject message of an escalation without an
// Escalator, new or resumed.
const noEscalatorMessage = "the policy asks for human approval, but escalation is not configured on this fulfiller"

// errAskEnded is what a recording waits for in vain: the proposal's
// escalation was cancelled before the core answered.
var errAskEnded = errors.New("the escalation ended before it was recorded")

// record posts the event ev makes with a fresh token and waits for the
// core's Acked with that token (Acked hands it over).
func (w *wire) record(ctx context.Context, proposalID string, ev func(token uint64) lifecycle.Event) error {
	token := w.tokens.Add(1)
	wt := &ackWait{proposalID: proposalID, done: make(chan error, 1)}
	w.mu.Lock()
	w.waiting[token] = wt
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiting, token)
		w.mu.Unlock()
	}()
	if err := w.hooks.post(ctx, ev(token)); err != nil {
		return fmt.Errorf("proposal %s: not recorded: %w", proposalID, err)
	}
	select {
	case err := <-wt.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("proposal %s: not recorded: %w", proposalID, ctx.Err())
	}
}

// Acked hands the escalator waiting on a PromptRecorded or
// ApprovalRecorded its answer. The core's ErrConflict (the proposal is
// another member's) also wraps state.ErrConflict, which is how the
// Escalator knows to drop its prompts without a word.
func (w *wire) Acked(_ context.Context, a lifecycle.Acked) {
	w.mu.Lock()
	wt := w.waiting[a.Token]
	delete(w.waiting, a.Token)
	w.mu.Unlock()
	if wt == nil || wt.proposalID != a.ID {
		return // its waiter gave up (its context ended)
	}
	err := a.Err
	if errors.Is(err, lifecycle.ErrConflict) {
		err = fmt.Errorf("proposal %s: %w (%w)", a.ID, err, state.ErrConflict)
	} else if err != nil {
		err = fmt.Errorf("proposal %s: not recorded: %w", a.ID, err)
	}
	wt.done <- err
}

// verdict posts the Escalator's verdict to the core and keeps the
// grant its approvers chose until the proposal's request goes out.
func (w *wire) verdict(ctx context.Context, proposalID string, round uint64, v Verdict) {
	// The escalation is over: no CancelAsk follows a verdict. One of
	// an escalation cancelled before (its proposal asked again since)
	// touches nothing of the next one; the core ignores it.
	w.mu.Lock()
	if w.escalating[proposalID].round == round {
		delete(w.escalating, proposalID)
	}
	w.mu.Unlock()
	if a, ok := w.asks.Peek(proposalID); ok && v.Approved && a.round == round {
		w.mu.Lock()
		a.approved, a.by, a.content = true, v.By, v.Content
		a.grant, a.evidence = v.Grant, v.Evidence
		w.mu.Unlock()
	}
	w.postVerdict(ctx, lifecycle.Verdict{ID: proposalID, Round: round, Approved: v.Approved, By: v.By, Params: v.Params,
		Reason: v.Reason, Message: v.Message, Superseded: v.Superseded})
}

func (w *wire) postVerdict(ctx context.Context, v lifecycle.Verdict) {
	if err := w.hooks.post(ctx, v); err != nil {
		w.log.Warn("verdict not handed to the core", "proposal", v.ID, "err", err)
	}
}

// approvalContent is the form content of the approval that ended
// proposal id's escalation (input.approval.content of the edited call's
// re-check), nil when none is known.
func (w *wire) approvalContent(id string) json.RawMessage {
	a, ok := w.asks.Peek(id)
	if !ok {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return a.content
}

// CancelAsk stops the proposal's escalation: the Escalator sends
// notifications/cancelled for the prompts still open, or, with
// DropReason, drops them without a word (another member asks them now).
// A recording still waiting for the core gets an error.
func (w *wire) CancelAsk(ctx context.Context, c lifecycle.CancelAsk) {
	if w.approvals != nil {
		w.cancelPrompts(ctx, c)
		return
	}
	if c.Reason != "approved" {
		// Approved: the grant waits for the request.
		w.forgetAsk(c.ID)
	}
	w.mu.Lock()
	for token, wt := range w.waiting {
		if wt.proposalID == c.ID {
			err := fmt.Errorf("proposal %s: %w (%s)", c.ID, errAskEnded, c.Reason)
			if c.Reason == lifecycle.DropReason {
				err = fmt.Errorf("proposal %s: %w (%w)", c.ID, errAskEnded, state.ErrConflict)
			}
			wt.done <- err
			delete(w.waiting, token)
		}
	}
	returned := w.escalating[c.ID].returned
	delete(w.escalating, c.ID)
	w.mu.Unlock()
	if returned != nil {
		select {
		case <-returned:
		case <-ctx.Done():
		}
	}
	if w.esc == nil {
		return
	}
	w.esc.Cancel(c.ID, c.Reason)
}

func (w *wire) forgetAsk(id string) { w.asks.Remove(id) }

// makeGrant makes the grant the approvers of r's proposal chose, pinned
// to the call just sent (grant.go's makeGrant): the proposer is the
// proposal's, the server r's route, tool and arguments r's params (the
// edited call, when edited); the offer is the escalated decision's
// (what the approver was shown). A grant that cannot be made is reported
// and the approval stands.
func (w *wire) makeGrant(ctx context.Context, r lifecycle.SendRequest) {
	a, ok := w.asks.Peek(r.ID)
	if !ok {
		return
	}
	w.asks.Remove(r.ID)
	w.mu.Lock()
	ttl, evidence, by := a.grant, a.evidence, a.by
	approved := a.approved
	w.mu.Unlock()
	if !approved || ttl <= 0 || w.grants == nil {
		return
	}
	p := a.proposal
	ev := Event{Stage: StageGranted, ProposalID: p.ID, DecisionID: p.DecisionID, Revision: a.decision.Revision,
		Proposer: p.From, Method: p.Method, Tool: p.Tool, Target: a.decision.Route, By: by}
	name, args := toolCall(r.Params)
	call := grantCall(p.From, &policies.Tool{Name: name, Server: r.To, Arguments: args})
	// The id is the proposal's (in its space): a restart that makes the
	// grant again finds it made.
	sum := sha256.Sum256([]byte(w.cfg.SpaceID + "\x00" + p.ID))
	id := "grant-" + hex.EncodeToString(sum[:8])
	granter := ""
	if len(by) > 0 {
		granter = by[0]
	}
	g, err := grants.New(id, a.decision.Grantable, call, ttl, granter, time.Now().UTC())
	if err == nil {
		g.Evidence = evidence
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		err = w.grants.Create(sctx, g)
		cancel()
	}
	if err != nil {
		w.log.Warn("grant not made; the approval stands", "proposal", p.ID, "by", granter, "err", err)
		ev.Message = fmt.Sprintf("no grant made: %v", err)
		w.observe(ev)
		return
	}
	w.log.Info("grant made", "grant", g.ID, "proposal", p.ID, "by", granter, "proposer", g.Proposer, "tool", g.Tool, "expires", g.Expires)
	ev.GrantID, ev.Message = g.ID, fmt.Sprintf("%s allowed for %s, until %s", g.Terms(), decision.FormatGrantDuration(ttl), g.Expires.Format(time.RFC3339))
	w.observe(ev)
}

func (w *wire) observe(ev Event) {
	stamp(&ev)
	w.hooks.events.observe(ev)
}

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
