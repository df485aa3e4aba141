package fulfill

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// Status chats (Config.StatusChats). A proposer waiting on a human, on a
// fulfilment slot or on a long task cannot tell these apart from a dead
// fulfiller, and an SDK proposer withdraws on its own timeout while the
// approver is still reading the card. So when its proposal reaches one of
// those stages — and again when the stage changes — the proposer gets a
// chat, addressed to it and correlated to the proposal, whose text is for
// people and whose payload._meta[StatusMetaKey] is for programs
// (docs/tasks.md#status-chats). It is additive: a proposer that ignores chats loses
// nothing, and the reference SDK does nothing with a chat but count it.
// A status chat is never an answer: rule 2's one answer is unchanged.

// StatusMetaKey is the _meta key of a status chat's machine-readable part.
const StatusMetaKey = "fulfiller/status"

// Status stages a status chat reports.
const (
	StatusEscalated = "escalated" // waiting for humans (Approvers, Quorum, Deadline)
	StatusQueued    = "queued"    // approved or allowed, waiting for a fulfilment slot
	StatusTask      = "task"      // the tool owner runs the call as an MCP task (Task, Deadline)
	// StatusImpersonated: an envelope in fulfiller's name about the
	// proposal (Forged, ForgedKind) was not fulfiller's; the proposal is
	// still pending and its real answer follows (docs/design.md rule 14).
	StatusImpersonated = "impersonated"
)

// ProposalStatus is the machine-readable part of a status chat. New
// fields may be added; none is ever removed or changes meaning.
type ProposalStatus struct {
	Version   int       `json:"v"`
	Proposal  string    `json:"proposal"`
	Stage     string    `json:"stage"`
	Approvers []string  `json:"approvers,omitempty"`
	Quorum    int       `json:"quorum,omitempty"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// DeadlineBy is "proposer" when the proposal's own deadline hint set
	// the deadline (it was sooner than the policy's).
	DeadlineBy string    `json:"deadline_by,omitempty"`
	Task       *TaskInfo `json:"task,omitempty"`
	// Forged and ForgedKind: StatusImpersonated, the envelope id and
	// kind that were not fulfiller's.
	Forged     string `json:"forged,omitempty"`
	ForgedKind string `json:"forged_kind,omitempty"`
}

type statusChat struct {
	Text   string                    `json:"text"`
	Format string                    `json:"format"`
	Meta   map[string]ProposalStatus `json:"_meta"`
}

// sendStatus tells p's proposer the stage ev reports, when status chats
// are on. Best effort: a status chat that cannot be written is logged,
// never retried, and changes nothing about the proposal.
func (f *Fulfiller) sendStatus(p *proposal, ev Event) {
	if !f.cfg.StatusChats || p.fenced.Load() {
		return
	}
	st := ProposalStatus{Version: 1, Proposal: p.env.ID}
	var text string
	switch ev.Stage {
	case StageEscalated:
		st.Stage, st.Approvers, st.Deadline = StatusEscalated, ev.By, ev.Deadline.UTC()
		f.mu.Lock()
		st.Quorum = max(p.decision.Quorum, 1)
		if p.deadlineHint {
			st.DeadlineBy = "proposer"
		}
		f.mu.Unlock()
		if len(st.Approvers) == 0 {
			st.Approvers = f.cfg.Approvers
		}
		text = fmt.Sprintf("Waiting for approval by %s (%d needed) until %s.", strings.Join(st.Approvers, ", "), st.Quorum, st.Deadline.Format(time.RFC3339))
	case StageQueued:
		st.Stage = StatusQueued
		text = "Allowed; waiting for a free fulfilment slot."
	case StageTask:
		if ev.Task == nil {
			return
		}
		st.Stage, st.Task, st.Deadline = StatusTask, ev.Task, ev.Task.Deadline.UTC()
		text = fmt.Sprintf("Running as task %s at %s (%s) until %s.", ev.Task.ID, ev.Target, ev.Task.Status, st.Deadline.Format(time.RFC3339))
	default:
		return
	}
	env := agent.Envelope{
		To:            []string{p.env.From},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(statusChat{Text: text, Format: "plain", Meta: map[string]ProposalStatus{StatusMetaKey: st}}),
	}
	if err := f.send(env); err != nil {
		f.log.Warn("status chat not sent", "proposal", p.env.ID, "stage", st.Stage, "err", err)
	}
}

// sendImpersonated tells p's proposer that env, in this fulfiller's name,
// was not sent by it. Sent whether or not status chats are on: rule 14
// wants the proposer told, and a proposer that believed a forged reject
// would otherwise take the real answer that follows for a second one.
// Best effort, like every status chat.
func (f *Fulfiller) sendImpersonated(p *proposal, env agent.Envelope) {
	if p.fenced.Load() {
		return
	}
	st := ProposalStatus{Version: 1, Proposal: p.env.ID, Stage: StatusImpersonated, Forged: env.ID, ForgedKind: env.Kind}
	text := fmt.Sprintf("The %s in %s's name (envelope %s) was not sent by %s: someone else wrote it. Your proposal is still pending; %s's answer follows.",
		env.Kind, f.space.ID(), env.ID, f.space.ID(), f.space.ID())
	chat := agent.Envelope{
		To:            []string{p.env.From},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(statusChat{Text: text, Format: "plain", Meta: map[string]ProposalStatus{StatusMetaKey: st}}),
	}
	if err := f.send(chat); err != nil {
		f.log.Warn("status chat not sent", "proposal", p.env.ID, "stage", st.Stage, "err", err)
	}
}

// deadlineHint reads the proposer's own deadline from the proposal's
// params._meta: "deadline" (RFC 3339) or "timeout_ms" (counted from when
// the proposal arrived); the sooner when both are given. It only ever
// shortens what the policy allows (see escalate): a proposer can make
// itself be answered sooner, never make a human wait longer.
func deadlineHint(p *proposal) (time.Time, bool) {
	var params struct {
		Meta struct {
			Deadline  string   `json:"deadline"`
			TimeoutMS *float64 `json:"timeout_ms"`
		} `json:"_meta"`
	}
	if len(p.params) == 0 || json.Unmarshal(p.params, &params) != nil {
		return time.Time{}, false
	}
	var hint time.Time
	if params.Meta.Deadline != "" {
		if t, err := time.Parse(time.RFC3339Nano, params.Meta.Deadline); err == nil {
			hint = t
		}
	}
	if ms := params.Meta.TimeoutMS; ms != nil && *ms >= 0 && *ms < float64(365*24*time.Hour/time.Millisecond) {
		t := p.received.Add(time.Duration(*ms) * time.Millisecond)
		if hint.IsZero() || t.Before(hint) {
			hint = t
		}
	}
	return hint, !hint.IsZero()
}
