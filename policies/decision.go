package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
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
// Action Reject and Reason "policy".
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
}

// decisionFields are the decision keys the policy contract defines; any
// other key is kept in Extra.
var decisionFields = []string{"action", "reason", "message", "target", "approvers", "quorum", "timeout", "editable", "grantable", "task", "task_timeout", "notify_arguments", "reminders", "escalate_to"}

// MalformedDecisionError says how a policy's decision breaks the contract.
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

func malformed(field, format string, args ...any) error {
	return &MalformedDecisionError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ErrUndefinedDecision means no rule produced data.fulfiller.decision for
// the input.
var ErrUndefinedDecision = errors.New("undefined decision: no rule produced data.fulfiller.decision for this input")

// failClosed is the reject every broken evaluation turns into.
func failClosed(revision string, err error) Decision {
	return Decision{
		Action:   Reject,
		Reason:   ReasonPolicy,
		Message:  "the policy could not decide this proposal",
		Revision: revision,
		Err:      err,
	}
}

// ParseDecision reads a decision document (JSON) with the same strict rules
// the engine applies to what a policy returns.
func ParseDecision(doc []byte) (Decision, error) {
	v, err := jsonToValue(doc)
	if err != nil {
		return Decision{}, fmt.Errorf("decision: %w", err)
	}
	return parseDecision(v)
}

// parseDecision validates what data.fulfiller.decision evaluated to.
// Everything the contract names is checked strictly, because the sidecar
// acts on it without a human in the loop: a typo must become a visible,
// fail-closed reject, not a silently different action.
func parseDecision(v ast.Value) (Decision, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return Decision{}, malformed("", "must be an object, got %s", ast.ValueName(v))
	}
	var d Decision
	var errs []error
	var quorumSet bool
	obj.Foreach(func(k, val *ast.Term) {
		key, ok := k.Value.(ast.String)
		if !ok {
			errs = append(errs, malformed("", "key %v is not a string", k))
			return
		}
		name := string(key)
		var err error
		switch name {
		case "action":
			var s string
			if s, err = stringField(name, val.Value); err == nil {
				switch Action(s) {
				case Fulfill, Reject, Escalate:
					d.Action = Action(s)
				default:
					err = malformed(name, "%q is not fulfill, reject or escalate", s)
				}
			}
		case "reason":
			d.Reason, err = stringField(name, val.Value)
		case "message":
			d.Message, err = stringField(name, val.Value)
		case "target":
			if d.Target, err = stringField(name, val.Value); err == nil && d.Target == "" {
				err = malformed(name, "must not be empty")
			}
		case "approvers":
			d.Approvers, err = stringList(name, val.Value)
			if err == nil {
				err = distinct(name, d.Approvers)
			}
		case "editable":
			d.Editable, err = stringList(name, val.Value)
		case "grantable":
			d.Grantable, err = parseGrantable(val.Value)
		case "quorum":
			d.Quorum, err = intField(name, val.Value)
			if err == nil && d.Quorum < 1 {
				err = malformed(name, "must be at least 1, got %d", d.Quorum)
			}
			quorumSet = true
		case "timeout":
			d.Timeout, err = durationField(name, val.Value)
		case "task":
			b, ok := val.Value.(ast.Boolean)
			if !ok {
				err = malformed(name, "must be true or false, got %s", ast.ValueName(val.Value))
			}
			d.Task = bool(b)
		case "task_timeout":
			d.TaskTimeout, err = durationField(name, val.Value)
		case "notify_arguments":
			b, ok := val.Value.(ast.Boolean)
			if !ok {
				err = malformed(name, "must be true or false, got %s", ast.ValueName(val.Value))
			}
			d.NotifyArguments = bool(b)
		case "reminders":
			d.Reminders, err = parseReminders(val.Value)
		case "escalate_to":
			d.EscalateTo, err = parseEscalateTo(val.Value)
		default:
			var x any
			if x, err = ast.JSON(val.Value); err != nil {
				err = malformed(name, "not representable as JSON: %v", err)
			} else {
				if d.Extra == nil {
					d.Extra = map[string]any{}
				}
				d.Extra[name] = x
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		// Report the first problem in key order, so that the message is the
		// same every time for the same decision.
		return Decision{}, errs[0]
	}
	if (d.Task || d.TaskTimeout != 0) && d.Action == Reject {
		field := "task"
		if !d.Task {
			field = "task_timeout"
		}
		return Decision{}, malformed(field, "only a fulfill or escalate decision may ask for a task, this one is reject")
	}
	if d.Grantable != nil && d.Action != Escalate {
		return Decision{}, malformed("grantable", "only an escalate decision may offer a grant, this one is %s", d.Action)
	}
	if d.NotifyArguments && d.Action != Escalate {
		// Only an escalation is announced to approvers; elsewhere the key
		// would promise something nothing does.
		return Decision{}, malformed("notify_arguments", "only an escalate decision notifies approvers, this one is %s", d.Action)
	}
	if d.Reminders != nil && d.Action != Escalate && d.Action != "" {
		return Decision{}, malformed("reminders", "only an escalate decision has prompts to remind of, this one is %s", d.Action)
	}
	if d.EscalateTo != nil && d.Action != Escalate && d.Action != "" {
		return Decision{}, malformed("escalate_to", "only an escalate decision has approvers to escalate to, this one is %s", d.Action)
	}
	if err := checkReaching(d); err != nil {
		return Decision{}, err
	}
	switch d.Action {
	case "":
		return Decision{}, malformed("action", "missing")
	case Reject:
		if d.Reason == "" {
			return Decision{}, malformed("reason", "a reject needs a reason code")
		}
		if !ValidReason(d.Reason) {
			return Decision{}, malformed("reason", "%q is not a reason code (policy, busy, incapable, timeout, invalid, duplicate, resource_limit, unsafe, disagree, other, inappropriate, no_longer_needed)", d.Reason)
		}
	case Escalate:
		if !quorumSet {
			d.Quorum = 1
		}
		if len(d.Approvers) > 0 && d.Quorum > len(d.Approvers) {
			return Decision{}, malformed("quorum", "%d approvals needed but only %d approvers named", d.Quorum, len(d.Approvers))
		}
	}
	return d, nil
}

// durationField reads a positive duration written as Go and OPA write
// them ("5m", "90s", "1h30m").
func durationField(name string, v ast.Value) (time.Duration, error) {
	s, err := stringField(name, v)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, malformed(name, "%q is not a duration such as \"5m\" or \"90s\"", s)
	}
	if d <= 0 {
		return 0, malformed(name, "must be positive, got %q", s)
	}
	return d, nil
}

func stringField(name string, v ast.Value) (string, error) {
	s, ok := v.(ast.String)
	if !ok {
		return "", malformed(name, "must be a string, got %s", ast.ValueName(v))
	}
	return string(s), nil
}

// stringList accepts an array or a set of strings: Rego policies naturally
// build approver lists as sets, which arrive sorted.
func stringList(name string, v ast.Value) ([]string, error) {
	var out []string
	var bad ast.Value
	add := func(t *ast.Term) {
		s, ok := t.Value.(ast.String)
		if !ok || s == "" {
			if bad == nil {
				bad = t.Value
			}
			return
		}
		out = append(out, string(s))
	}
	switch x := v.(type) {
	case *ast.Array:
		x.Foreach(add)
	case ast.Set:
		x.Foreach(add)
	default:
		return nil, malformed(name, "must be a list of strings, got %s", ast.ValueName(v))
	}
	if bad != nil {
		return nil, malformed(name, "must be a list of non-empty strings, found %v", bad)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

func distinct(name string, list []string) error {
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if seen[s] {
			return malformed(name, "%q is listed twice", s)
		}
		seen[s] = true
	}
	return nil
}

func intField(name string, v ast.Value) (int, error) {
	n, ok := v.(ast.Number)
	if !ok {
		return 0, malformed(name, "must be an integer, got %s", ast.ValueName(v))
	}
	if i, ok := n.Int(); ok {
		return i, nil
	}
	// Rego arithmetic can produce 2.0 for 2; accept whole numbers.
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		return 0, malformed(name, "must be an integer, got %s", n)
	}
	return int(f), nil
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
	add("timeout", formatDuration(d.Timeout), d.Timeout != 0)
	add("editable", d.Editable, d.Editable != nil)
	add("grantable", d.Grantable, d.Grantable != nil)
	add("task", d.Task, d.Task)
	add("task_timeout", formatDuration(d.TaskTimeout), d.TaskTimeout != 0)
	add("notify_arguments", d.NotifyArguments, d.NotifyArguments)
	if d.Reminders != nil {
		rs := make([]string, len(d.Reminders))
		for i, r := range d.Reminders {
			rs[i] = formatDuration(r)
		}
		add("reminders", rs, true)
	}
	add("escalate_to", d.EscalateTo, d.EscalateTo != nil)
	for _, k := range slices.Sorted(maps.Keys(d.Extra)) {
		if k == "revision" || k == "error" || slices.Contains(decisionFields, k) {
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

// formatDuration prints durations the way people write them in policies:
// "5m" rather than Go's "5m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
