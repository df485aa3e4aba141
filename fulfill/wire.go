package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// wire is lifecycle.Wire over a Space: the envelopes of the core's
// effects (rejects and their chats, fulfilment requests, cancellations,
// relays, status chats, prompts and their cancellations). The ids on the
// wire are the effect's (the recorded ones), so an effect carried out
// again after a crash writes the same envelopes.
type wire struct {
	space Space
	cfg   wireConfig
	// hooks are the engine's journal (mewFront.attach); set before
	// anything is sent.
	hooks wireHooks
	log   *slog.Logger

	// sent maps the envelope ids of recent rejects and fulfilment
	// requests to what they answered, for refused (deliver.go's
	// rejectLog and byRequest).
	sent *lru.Cache[string, *wireSent]

	mu sync.Mutex // guards followers
	// Task followers, by owner and task id (taskNotice), and what the
	// reader saw of each task handle, by the task-augmented request's
	// envelope id (taskCreated).
	followers map[string]*taskFollower
	handles   *lru.Cache[string, wireTaskHandle]
}

// wireConfig is what the wire needs of the Fulfiller's Config.
type wireConfig struct {
	// FulfillTimeout bounds one task request (tasks/get, tasks/result).
	FulfillTimeout time.Duration
	// Tracked bounds what the wire remembers per proposal (task
	// handles) and per envelope (refusals); 0: rejectsTracked.
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
	// method is the JSON-RPC method of proposal id's call (its
	// Proposal.Method), which SendRequest does not carry.
	method func(proposalID string) string
}

// wireSent is a reject or fulfilment request handed to the link.
type wireSent struct {
	proposalID, kind string
	written          chan struct{} // closed once the write's outcome has been reported
}

// newWire makes the wire; its hooks are set before it sends anything.
func newWire(space Space, cfg wireConfig, log *slog.Logger) *wire {
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
	handles, _ := lru.New[string, wireTaskHandle](cfg.Tracked)
	return &wire{space: space, cfg: cfg, log: log,
		sent: sent, followers: map[string]*taskFollower{}, handles: handles}
}

var (
	_ lifecycle.Wire = (*wire)(nil)
	_ PromptSender   = (*wire)(nil)
	_ selfReporting  = (*wire)(nil)
)

// reportsDeliveries: the wire tells the journal of its answers itself
// (hooks), a refusal after the write included.
func (w *wire) reportsDeliveries() {}

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
	close(sent.written)
	// The reject is told written once its explanation went too: a
	// shutdown waits for the answers it owes to be written, and would
	// otherwise end the link between the reject and its chat.
	defer w.hooks.events.written(r.ID, r.EnvelopeID)
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

// SendRequest writes the fulfilment mcp/request: to the route, correlated to the proposal unless
// task-augmented, the proposal's method with its final params (a
// tools/call's through requestParams). A write the link lost midway
// (agent.ErrSessionLost) may have reached the owner: it counts as
// written, and its response or the deadline ends the proposal.
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
	sent := w.track(env.ID, r.ID, agent.KindRequest)
	err := w.send(ctx, env)
	if err != nil && !errors.Is(err, agent.ErrSessionLost) {
		w.sent.Remove(env.ID)
		close(sent.written)
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

// Status writes a status chat (status.go): a chat to the
// proposer, correlated to the proposal, its text for people and
// _meta[StatusMetaKey] for programs. Best effort.
func (w *wire) Status(ctx context.Context, s lifecycle.Status) {
	st := ProposalStatus{Version: 1, Proposal: s.ID}
	var text string
	switch s.Stage {
	case lifecycle.StatusEscalated:
		st.Stage, st.Approvers, st.Deadline, st.Quorum = StatusEscalated, s.Approvers, s.Deadline.UTC(), max(s.Quorum, 1)
		if sd, ok := policyDecision(s.Decision); ok && sd.DeadlineByProposer {
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

// CancelAsk ends the proposal's escalation: its open prompts are
// withdrawn from their approvers (cancelPrompts).
func (w *wire) CancelAsk(ctx context.Context, c lifecycle.CancelAsk) { w.cancelPrompts(ctx, c) }

// noEscalationMessage is the reject message of an escalation on a
// fulfiller without Config.Approvals, new (the policy step's) or resumed
// (the core's).
const noEscalationMessage = lifecycle.NoApprovalsMessage

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
