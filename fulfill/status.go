package fulfill

import (
	"time"
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
