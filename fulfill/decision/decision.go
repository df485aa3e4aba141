// Package decision holds what a policy decides about a proposal — the
// action, the wire reject reasons, the escalation's terms and the grant it
// may offer — as plain Go values with their JSON forms (the decision log's,
// the pending-work store's, an elicitation's grant offer), without the
// policy engine. Package policies evaluates Rego into these values; the
// approver's client, replay and suggest read them without linking OPA.
package decision

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Action is what the policy decided to do with a proposal.
type Action string

// The three actions a policy may decide.
const (
	Fulfill  Action = "fulfill"
	Reject   Action = "reject"
	Escalate Action = "escalate"
)

// Reason codes a reject may carry on the wire (MEW v0.4 mcp/reject).
const (
	ReasonPolicy         = "policy"
	ReasonBusy           = "busy"
	ReasonIncapable      = "incapable"
	ReasonTimeout        = "timeout"
	ReasonInvalid        = "invalid"
	ReasonDuplicate      = "duplicate"
	ReasonResourceLimit  = "resource_limit"
	ReasonUnsafe         = "unsafe"
	ReasonDisagree       = "disagree"
	ReasonOther          = "other"
	ReasonInappropriate  = "inappropriate"
	ReasonNoLongerNeeded = "no_longer_needed"
)

// ValidReason reports whether code is a reject reason fulfiller may send.
// Receivers tolerate unknown reasons, but a policy that invents one is far
// more likely to contain a typo than a new protocol feature.
func ValidReason(code string) bool {
	switch code {
	case ReasonPolicy, ReasonBusy, ReasonIncapable, ReasonTimeout, ReasonInvalid,
		ReasonDuplicate, ReasonResourceLimit, ReasonUnsafe, ReasonDisagree,
		ReasonOther, ReasonInappropriate, ReasonNoLongerNeeded:
		return true
	}
	return false
}

// Decision is the outcome of evaluating the policy for one input.
//
// A Decision with a non-nil Err is a fail-closed reject: the policy did not
// produce a usable decision, and Err says why. Such decisions always have
// Action Reject and Reason "policy", except when the evaluation timed out
// twice (Retried): load is not a policy verdict, and the reason is then
// "busy", which a proposer may retry.
type Decision struct {
	Action    Action
	Reason    string        // reject: wire reason code
	Message   string        // for humans: the chat explanation or the approval card
	Target    string        // optional override of the participant that gets the request
	Approvers []string      // escalate: who may answer; empty means the sidecar's default
	Quorum    int           // escalate: approvals needed; default 1
	Timeout   time.Duration // escalate: how long to wait; 0 = use the sidecar's default
	Editable  []string      // escalate: argument names the approver may change
	Grantable *Grantable    // escalate: the grant an approver may create; nil: none
	// Task asks for a task-augmented call to a tool whose taskSupport is
	// "optional" (a "required" one is always called as a task).
	Task bool
	// TaskTimeout bounds the task once the tool owner created it; 0: the
	// sidecar's --task-timeout.
	TaskTimeout time.Duration
	// NotifyArguments (escalate only) lets the notifications sent to
	// approvers' channels (run --notify) carry the call's arguments. Off
	// by default: arguments may hold secrets, and a webhook, a chat
	// channel or a mailbox keeps them beyond fulfiller's reach.
	NotifyArguments bool
	// Reminders (escalate only) are the times after the escalation
	// started at which a prompt still open is announced again
	// (prompt.reminder), shortest first.
	Reminders []time.Duration
	// EscalateTo (escalate only) are the tiers asked too while the
	// escalation is still open, in increasing After; the deadline does
	// not change.
	EscalateTo []Tier
	Extra      map[string]any // unknown decision fields, kept for the decision log
	Revision   string         // revision of the policy set that decided
	Err        error          // why this is a fail-closed reject; nil for a policy's own decision
	// Retried: the first evaluation ran past the policy timeout and this
	// is the second's decision (or, with Err, its busy reject); the
	// decision log says which (policy_timeout).
	Retried bool
}

// Fields are the decision keys the policy contract defines; any other key
// is kept in Extra.
var Fields = []string{"action", "reason", "message", "target", "approvers", "quorum", "timeout", "editable", "grantable", "task", "task_timeout", "notify_arguments", "reminders", "escalate_to"}

// MalformedDecisionError says how a policy's decision, or a stored one read
// back, breaks the contract.
type MalformedDecisionError struct {
	Field string // the offending key, or "" for the decision as a whole
	Msg   string
}

// Error names the field and the problem.
func (e *MalformedDecisionError) Error() string {
	if e.Field == "" {
		return "malformed decision: " + e.Msg
	}
	return fmt.Sprintf("malformed decision: %s: %s", e.Field, e.Msg)
}

// malformed is a MalformedDecisionError naming field.
func malformed(field, format string, args ...any) error {
	return &MalformedDecisionError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// MarshalJSON writes the decision as the eval output and decision log show
// it: the contract's fields in a fixed order, then unknown fields sorted by
// name, then revision and error. Empty fields are left out, as in the
// policy contract. Unknown fields named revision or error cannot shadow the
// engine's own.
func (d Decision) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	field := func(name string, v any) error {
		val, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("decision field %s: %w", name, err)
		}
		// The name is JSON-encoded, not strconv.Quote'd: Go quoting writes
		// escapes such as \x7f that are not JSON, and unknown field names
		// come from the policy.
		key, err := json.Marshal(name)
		if err != nil {
			return fmt.Errorf("decision field name %q: %w", name, err)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
		return nil
	}
	var err error
	add := func(name string, v any, present bool) {
		if present && err == nil {
			err = field(name, v)
		}
	}
	add("action", d.Action, true)
	add("reason", d.Reason, d.Reason != "")
	add("message", d.Message, d.Message != "")
	add("target", d.Target, d.Target != "")
	add("approvers", d.Approvers, d.Approvers != nil)
	add("quorum", d.Quorum, d.Quorum != 0)
	add("timeout", FormatDuration(d.Timeout), d.Timeout != 0)
	add("editable", d.Editable, d.Editable != nil)
	add("grantable", d.Grantable, d.Grantable != nil)
	add("task", d.Task, d.Task)
	add("task_timeout", FormatDuration(d.TaskTimeout), d.TaskTimeout != 0)
	add("notify_arguments", d.NotifyArguments, d.NotifyArguments)
	if d.Reminders != nil {
		rs := make([]string, len(d.Reminders))
		for i, r := range d.Reminders {
			rs[i] = FormatDuration(r)
		}
		add("reminders", rs, true)
	}
	add("escalate_to", d.EscalateTo, d.EscalateTo != nil)
	for _, k := range slices.Sorted(maps.Keys(d.Extra)) {
		if k == "revision" || k == "error" || slices.Contains(Fields, k) {
			continue
		}
		add(k, d.Extra[k], true)
	}
	add("revision", d.Revision, d.Revision != "")
	if d.Err != nil {
		add("error", d.Err.Error(), true)
	}
	if err != nil {
		return nil, err
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// FormatDuration prints durations the way people write them in policies:
// "5m" rather than Go's "5m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
