package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

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

func reasonOf(payload json.RawMessage) string {
	var r struct {
		Reason string `json:"reason"`
	}
	_ = agent.Unmarshal(payload, &r)
	return r.Reason
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
