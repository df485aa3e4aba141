package replay

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/mewkit/fulfiller/fulfill/decisionlog/logrecord"
)

// Record is a decision-log line as read back. Result is kept raw: the
// logged decision is decision.Decision's JSON form (timeout "5m", error),
// which Decision does not decode, and only parts of it matter to readers.
type Record struct {
	logrecord.Record
	Result json.RawMessage `json:"result,omitempty"`
}

// DecodeRecord reads one line of a decision log. A blank line is no
// record: it returns nil and no error. A line that is not a record
// (invalid JSON, no "type") is an error.
func DecodeRecord(b []byte) (*Record, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Type == "" {
		return nil, errors.New(`no "type"`)
	}
	return &rec, nil
}

// HumanDeclined reports whether rec is a human's decline: an approval
// record whose answer did not approve (decline, or accept without
// approve), and not a cancel, which only withdraws that approver's
// attention.
func HumanDeclined(rec *Record) bool {
	return rec.Type == logrecord.TypeApproval && rec.Approve != nil && !*rec.Approve && rec.Action != "cancel"
}

// Ends reports whether an outcome stage ends the human part of a
// proposal, and whether humans approved it: they approve only through
// "approved"; any other end is a decline if one was recorded, and
// otherwise no human verdict (a timeout, a withdrawal). "escalated" is
// still waiting.
func Ends(stage string) (ended, approved bool) {
	switch stage {
	case "approved":
		return true, true
	case "fulfilling", "fulfilled", "rejected", "withdrawn", "superseded", "undelivered":
		return true, false
	}
	return false, false
}
